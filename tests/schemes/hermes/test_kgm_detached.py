"""A detached ``pubguard cluster up`` of a ``[hermes]`` cluster (hermes-encrypted-access-
control.txt §4, Fig. 4) over real processes: the key-group manager runs as its own process,
``cluster status`` shows its groups, members and epochs, deliveries follow the reference
matcher cut to each capability, and after ``kill -9`` of the manager and ``cluster up`` its
groups are intact: a member follows the next rekey, a revoked broker stays out. Canary: no
group key in the manager's SQLite, its log, the brokers' files or the status output."""

from __future__ import annotations

import base64
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pubguard.cli.main import cli
from pubguard.crypto import SigningKey
from pubguard.matching import ReferenceMatcher
from pubguard.model import Event, Filter
from pubguard.net.client.client import Client, connect
from pubguard.net.keyservice.hermes_kgm_store import KgmStore
from pubguard.ops.cluster import cluster_status
from pubguard.ops.hermes_kgm_proc import kgm_dir, running_kgm, storage_key
from pubguard.ops.pki import ClusterPki
from pubguard.schemes.hermes import Capability, HermesClient, SecureEventType
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
