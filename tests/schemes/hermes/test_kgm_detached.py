"""A detached ``pubguard cluster up`` of a ``[hermes]`` cluster (hermes-encrypted-access-
control.txt §4, Fig. 4) over real processes: the key-group manager runs as its own process,
``cluster status`` shows its groups, members and epochs, deliveries follow the reference
matcher cut to each capability, and after ``kill -9`` of the manager and ``cluster up`` its
groups are intact: a member follows the next rekey, a revoked broker stays out. Canary: no
group key in the manager's SQLite, its log, the brokers' files or the status output."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pubguard.cli.main import cli
from pubguard.crypto import SigningKey
from pubguard.crypto.x509 import client_ssl_context
from pubguard.errors import PubguardError
from pubguard.matching import ReferenceMatcher
from pubguard.model import Event, Filter
from pubguard.net.client.client import Client, connect
from pubguard.net.keyservice.client import KeyServiceClient
from pubguard.net.keyservice.hermes_kgm_store import KgmStore
from pubguard.net.server.hermes_node import wire_secret_storage_key
from pubguard.net.tls import tls_password
from pubguard.ops.cluster import cluster_status
from pubguard.ops.hermes_kgm_proc import kgm_dir, running_kgm, storage_key
from pubguard.ops.pki import ClusterPki
from pubguard.schemes.hermes import (
    Capability,
    HermesClient,
    SecureEventType,
)
from pubguard.schemes.hermes.wire_secret import load_wire_secret
from pubguard.store import Database
from tests.loopback import LoopThread, until, wait_until

PROFILE = "hermes-attribute"
SEED = bytes(range(32))
OWNER = SigningKey.from_seed(SEED)
CONFIG = """
[topology]
kind = "edges"
edges = [["met1", "ccs1"]]
[broker]
profiles = ["hermes-attribute"]
[brokers.met1]
domain = "met"
[brokers.ccs1]
domain = "ccs"
[hermes]
owner = "PITO"
type = "Numberplate"
attributes = [["numberplate", "str"], ["location", "str"]]
kgm_domain = "pito"
poll = 0.1
[hermes.grants]
met1 = ["*"]
ccs1 = ["numberplate"]
"""
CANARY = "CANARY-Soho-Street-7"
ENV = {
    "PUBGUARD_HERMES_OWNER": base64.b64encode(SEED).decode(),
    "PUBGUARD_CA_PASSPHRASE": "kgm-detached-test",  # clients' identities issued after `up`
}


def run(*args: str) -> Any:
    r = CliRunner(env=ENV).invoke(cli, list(args))
    assert r.exit_code == 0, r.output
    return r


def kgm_view(state: Path) -> dict[str, Any]:
    out = json.loads(run("cluster", "status", "--json", "--state", str(state)).output)
    return out["hermes-kgm"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("kgm-detached")
    (root / "cluster.toml").write_text(CONFIG)
    st = root / "net"
    with pytest.MonkeyPatch.context() as mp:
        for k, v in ENV.items():
            mp.setenv(k, v)
        try:
            up = run("cluster", "up", "--config", str(root / "cluster.toml"), "--state", str(st))
            assert "2 brokers up" in up.output
            yield st
        finally:
            CliRunner(env=ENV).invoke(cli, ["cluster", "down", "--state", str(st)])


def cap(holder: str, action: str, attrs: tuple[str, ...], stype: SecureEventType) -> Capability:
    """What the type owner (its seed in the environment) signs for a client."""
    return Capability.issue(
        OWNER,
        holder=holder,
        type_id=stype.type_id,
        action=action,
        attributes=attrs,
        not_before=time.time() - 60,
        not_after=time.time() + 3600,
        serial=int.from_bytes(os.urandom(7), "big"),
    )


async def client(state: Path, broker: str, who: str, scheme: HermesClient) -> Client:
    port = json.loads((state / "cluster.json").read_text())[broker]["port"]
    pki = ClusterPki(state / "pki")
    return await connect(
        f"tls://127.0.0.1:{port}", identity=who, ssl=pki.client_context(who), scheme=scheme
    )


async def drain_until(sub: Any, marker: str) -> list[dict[str, Any]]:
    """Deliveries up to the marker event (links are FIFO: all before it have arrived)."""
    out = []
    while True:
        e = (await sub.next(timeout=30)).event
        if e.attrs.get("numberplate") == marker:
            return out
        out.append(dict(e.attrs))


def _ro(db: Path, sql: str) -> list[Any]:
    """Rows of a running broker's SQLite file, read only (another process writes it)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _wire_secret(state: Path, broker: str) -> bytes:
    """``S`` as kept in the broker's ``hermes.db``, opened with its TLS identity key."""
    ident = ClusterPki(state / "pki").identity(broker)
    key = wire_secret_storage_key(ident.key_path, broker)
    db = Database(state / broker / "hermes.db")
    try:
        s, how = load_wire_secret(db, broker, key, now=time.time())
    finally:
        db.close()
    assert how == "restored"  # never created here: the broker process made and sealed it
    return s.reveal()


def test_a_brokers_wire_ids_survive_its_kill_9_and_its_wire_id_secret_is_sealed(
    aloop: LoopThread, state: Path
) -> None:
    """The PHB's wire-id secret ``S`` is sealed in its hermes.db and restored after kill -9,
    so the same event gets the same wire id: the camera's re-send after met1's crash (met1's
    duplicate window died with it, so met1 seals it again) is dropped downstream as a
    duplicate, not delivered twice. The nonce counter resumes above what it reserved, and
    ``S`` is in no file or log in any form."""
    stype = SecureEventType.from_json(json.loads((kgm_dir(state) / "type.json").read_text()))
    camera = HermesClient(PROFILE, "Numberplate", publish=cap("camera", "publish", ("*",), stype))
    ccs_scheme = HermesClient(
        PROFILE, "Numberplate", subscribe=cap("ccs", "subscribe", ("numberplate",), stype)
    )

    async def subscribe() -> tuple[Client, Any]:
        ccs = await client(state, "ccs1", "ccs", ccs_scheme)
        sub = await ccs.subscribe(Filter.parse('numberplate prefix "WIRE"'))
        await ccs.flush()
        return ccs, sub

    async def publish(*ids: str) -> None:
        await until(lambda: _subs_at(state, "met1", 1), "the subscription at met1")
        cam = await client(state, "met1", "camera", camera)
        try:
            for i in ids:
                await cam.publish(Event({"numberplate": f"WIRE-{i}", "location": "x"}, id=i))
            await cam.flush()
        finally:
            await cam.close()

    async def drops(name: str) -> int:
        return int((await cluster_status(state))["ccs1"]["drops"].get(name, 0))

    s1 = _wire_secret(state, "met1")
    ccs, sub = aloop.run(subscribe(), timeout=60)
    try:
        aloop.run(publish("wire-1"), timeout=60)
        assert aloop.run(sub.next(timeout=30)).event.id == "wire-1"  # the application's id
        marks = _ro(state / "met1" / "hermes.db", "SELECT high_water FROM hermes_nonces")
        dups = aloop.run(drops("duplicate"))

        info = json.loads((state / "cluster.json").read_text())["met1"]
        os.kill(int(info["pid"]), signal.SIGKILL)
        wait_until(lambda: not _alive(int(info["pid"])), "met1 gone")
        assert "restarted met1" in run("cluster", "up", "--state", str(state)).output
        assert _wire_secret(state, "met1") == s1  # restored, not drawn again

        aloop.run(publish("wire-1", "wire-2"), timeout=60)  # the re-send, then a marker
        assert aloop.run(sub.next(timeout=30)).event.id == "wire-2"  # wire-1 not twice
        assert aloop.run(drops("duplicate")) == dups + 1  # the same wire id as before
    finally:
        aloop.run(ccs.close())
    after = _ro(state / "met1" / "hermes.db", "SELECT high_water FROM hermes_nonces")
    assert after[0][0] > marks[0][0]  # the nonce counter resumed above its reservation

    files = [p.read_bytes() for p in state.rglob("*") if p.is_file()]
    for form in (s1, s1.hex().encode(), base64.b64encode(s1)):
        assert not any(form in f for f in files)  # sealed: hermes.db, logs, WAL, everywhere


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie of ours: reaped, gone
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    return True


def test_detached_hermes_cluster_survives_kill_9_of_its_key_group_manager(
    aloop: LoopThread, state: Path
) -> None:
    stype = SecureEventType.from_json(json.loads((kgm_dir(state) / "type.json").read_text()))
    view = kgm_view(state)
    groups = view["profiles"][PROFILE]["groups"]
    assert groups["numberplate"]["members"] == ["ccs1", "met1"]
    assert groups["location"]["members"] == ["met1"]
    assert view["type"] == "Numberplate" and view["owner"] == "PITO"
    filters = {
        "smith": Filter.parse('numberplate prefix "AB"'),
        "ccs": Filter.parse("numberplate exists"),
    }
    views = {"smith": {"numberplate", "location"}, "ccs": {"numberplate"}}
    events = [
        {"numberplate": "AB12CDE", "location": CANARY},
        {"numberplate": "XY00ZZZ", "location": "Mayfair"},
    ]

    async def open_clients() -> tuple[list[Client], dict[str, Any]]:
        def scheme(who: str, action: str, attrs: tuple[str, ...]) -> HermesClient:
            c = cap(who, action, attrs, stype)
            if action == "publish":
                return HermesClient(PROFILE, "Numberplate", publish=c)
            return HermesClient(PROFILE, "Numberplate", subscribe=c)

        cam = await client(state, "met1", "camera", scheme("camera", "publish", ("*",)))
        smith = await client(state, "met1", "smith", scheme("smith", "subscribe", ("*",)))
        ccs = await client(state, "ccs1", "ccs", scheme("ccs", "subscribe", ("numberplate",)))
        subs = {
            "smith": await smith.subscribe(filters["smith"]),
            "ccs": await ccs.subscribe(filters["ccs"]),
        }
        await smith.flush()
        await ccs.flush()
        await until(lambda: _subs_at(state, "met1", 2), "both subscriptions at met1")
        return [cam, smith, ccs], subs

    async def publish(cam: Client, batch: list[dict[str, Any]], tag: str) -> None:
        for e in [*batch, {"numberplate": tag, "location": tag}]:
            await cam.publish(Event(e))
        await cam.flush()

    clients, subs = aloop.run(open_clients(), timeout=300)
    try:
        aloop.run(publish(clients[0], events, "AB-marker-1"))
        got = {c: aloop.run(drain_until(s, "AB-marker-1"), timeout=60) for c, s in subs.items()}
        for c, f in filters.items():  # the reference matcher, cut to the capability's grant
            match = ReferenceMatcher([(0, f)]).match
            want = [{k: v for k, v in e.items() if k in views[c]} for e in events if match(e)]
            assert got[c] == want, c

        # kill -9 of the manager; `cluster up` on the running cluster brings it back in place
        pid = running_kgm(state)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: kgm_view(state).get("down"), "the manager shown down")
        again = run("cluster", "up", "--state", str(state)).output
        assert f"restarted the key-group manager on port {view['url'].rsplit(':', 1)[1]}" in again
        back = kgm_view(state)["profiles"][PROFILE]["groups"]
        assert back["numberplate"]["members"] == ["ccs1", "met1"]  # its groups intact
        assert back["numberplate"]["epoch"] == groups["numberplate"]["epoch"]

        # a rekey after the restart: the owner revokes ccs1; met1 follows it, ccs1 is out
        assert (
            "revoked ccs1"
            in run("hermes", "revoke", "--state", str(state), "--broker", "ccs1").output
        )

        def followed() -> bool:
            g = kgm_view(state)["profiles"][PROFILE]["groups"]["numberplate"]
            return g["members"] == ["met1"] and g["acked"]["met1"] == g["seq"]

        wait_until(followed, "met1 applied the rekey issued after the restart")
        after = kgm_view(state)["profiles"][PROFILE]["groups"]
        assert after["numberplate"]["epoch"] > groups["numberplate"]["epoch"]
        before = aloop.run(_counter(state, "ccs1", "in.publish"))
        aloop.run(publish(clients[0], [{"numberplate": "AB77RVK", "location": "Soho"}], "AB-m2"))
        smith2 = aloop.run(drain_until(subs["smith"], "AB-m2"), timeout=60)
        assert smith2 == [{"numberplate": "AB77RVK", "location": "Soho"}]
        aloop.run(
            until(
                lambda: _counter(state, "ccs1", "in.publish", at_least=before + 2),
                "ccs1 received both publications",
            )
        )
        # revoked: ccs1 could open neither; a request on the subscriber's own link is
        # answered after anything ccs1 sent it for those publications (one FIFO link)
        aloop.run(clients[2].status())
        assert subs["ccs"].pending == 0
    finally:
        for cl in clients:
            aloop.run(cl.close())

    # canary: the manager's keys (opened here with the owner's seed) are in no file or output
    status_text = run("cluster", "status", "--state", str(state)).output
    status_text += run("cluster", "status", "--json", "--state", str(state)).output
    store = KgmStore(kgm_dir(state) / "kgm.db", storage_key(SEED, stype.type_id), stype)
    try:
        mgr = store.load_manager(PROFILE)
    finally:
        store.close()
    assert mgr is not None and mgr.members() == ["met1"]
    secrets_ = [storage_key(SEED, stype.type_id).reveal(), SEED]
    for g in mgr.export_state()["groups"].values():
        secrets_ += [bytes(n[1]) for n in g["nodes"]] + [bytes(k[2]) for k in g["ring"]]
    files = [p.read_bytes() for p in state.rglob("*") if p.is_file() and "pki" not in p.parts]
    assert any(b"joined" in f for f in files)  # the manager's log is among them
    for s in secrets_:
        for form in (s, s.hex().encode(), base64.b64encode(s)):
            assert form not in status_text.encode()
            assert not any(form in f for f in files)
    unauthorised = [p.read_bytes() for p in (state / "ccs1").rglob("*") if p.is_file()]
    unauthorised += [p.read_bytes() for p in kgm_dir(state).rglob("*") if p.is_file()]
    assert not any(CANARY.encode() in f for f in unauthorised)  # ccs1 may not read location


def test_a_revoked_broker_stays_out_after_cluster_down_and_a_re_issue(
    aloop: LoopThread, state: Path
) -> None:
    """The owner's revocation outlives ``cluster down`` / ``up``, which issues every broker
    new capabilities: the signed list keeps ccs1 out of the new hermes.json, the manager
    refuses its join even with a capability the owner signed after, and status shows it."""
    out = run("hermes", "revoke", "--state", str(state), "--broker", "ccs1").output
    assert "revoked ccs1" in out and "stays out after a re-issue" in out
    run("cluster", "down", "--state", str(state))
    config = state.parent / "cluster.toml"
    assert (
        "2 brokers up"
        in run("cluster", "up", "--config", str(config), "--state", str(state)).output
    )

    stype = SecureEventType.from_json(json.loads((kgm_dir(state) / "type.json").read_text()))
    written = json.loads((state / "ccs1" / "hermes.json").read_text())
    assert written["capabilities"] == [] and written["type"] is None  # nothing re-issued
    assert json.loads((state / "met1" / "hermes.json").read_text())["capabilities"]
    view = kgm_view(state)["profiles"][PROFILE]
    assert view["revoked"] == ["ccs1"] and view["groups"]["numberplate"]["members"] == ["met1"]
    assert "revoked by the type owner" in run("cluster", "status", "--state", str(state)).output

    # a capability the owner signs now (a new serial) does not readmit it at the manager
    fresh = cap("ccs1", "subscribe", ("numberplate",), stype)
    ep = json.loads((kgm_dir(state) / "endpoint.json").read_text())
    ident = ClusterPki(state / "pki").identity("ccs1")
    ctx = client_ssl_context(
        ident.cert_path, ident.key_path, ident.ca_path, password=tls_password()
    )
    with KeyServiceClient(ep["host"], int(ep["port"]), ctx, server_role="kdc") as kc:
        with pytest.raises(PubguardError) as refused:
            kc.call("hermes_join", profile=PROFILE, cap=fresh.to_wire())
    assert "revoked" in str(refused.value)


async def _counter(state: Path, broker: str, name: str, at_least: int | None = None) -> Any:
    """A broker's counter (``at_least``: whether it reached that)."""
    n = int((await cluster_status(state))[broker]["counters"].get(name, 0))
    return n if at_least is None else n >= at_least


def _subs_at(state: Path, broker: str, n: int) -> Any:
    async def probe() -> Any:
        st = await cluster_status(state)
        subs = {b: s.get("subscriptions", s) for b, s in st.items()}
        return subs if subs[broker] >= n else None  # the last value names every broker's

    return probe()


def test_a_detached_hermes_cluster_without_the_owner_seed_is_one_line_and_starts_nothing(
    tmp_path: Path,
) -> None:
    (tmp_path / "cluster.toml").write_text(CONFIG)
    st = tmp_path / "net"
    r = CliRunner(env={"PUBGUARD_HERMES_OWNER": None}).invoke(
        cli, ["cluster", "up", "--config", str(tmp_path / "cluster.toml"), "--state", str(st)]
    )
    assert r.exit_code != 0
    assert r.output.count("\n") == 1 and "PUBGUARD_HERMES_OWNER is not set" in r.output
    assert "Traceback" not in r.output and not st.exists()
