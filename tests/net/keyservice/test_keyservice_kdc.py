"""The PSGuard KDC and the default authority behind the key service (net/keyservice/kdc.py,
net/keyservice/kdc_client.py): a real server on 127.0.0.1 port 0 with certificates from the
project CA, clients through the blocking proxies, used unchanged by PSGuardClient and
DefaultClient. Identities come from certificates only, the policy is enforced server side, a
publisher gets the keys of its own scopes only, and the master never crosses the wire or
reaches a log."""

from __future__ import annotations

import base64
import logging
import random
import tomllib

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.crypto import SecretBytes, SigningKey
from pubguard.crypto.x509 import Role, server_ssl_context
from pubguard.errors import DropError, DropReason, InvalidToken, ValidationError
from pubguard.keys.kdc import KDC
from pubguard.model import Event, Filter
from pubguard.net.keyservice.client import KeyServiceClient
from pubguard.net.keyservice.core import KeyServiceCore
from pubguard.net.keyservice.kdc import KdcConfig, KdcService
from pubguard.net.keyservice.kdc_client import RemoteAuthority, RemoteKdc
from pubguard.net.keyservice.protocol import ERROR_CODES
from pubguard.net.keyservice.server import KeyServiceServer
from pubguard.ops.pki import ClusterPki
from pubguard.schemes.default.broker import AuthorityPermit
from pubguard.schemes.default.client import DefaultClient
from pubguard.schemes.psguard.client import PSGuardClient
from pubguard.schemes.registry import HOSPITAL

MASTER = random.Random(2026).randbytes(32)  # the canary master secret
CANARY = "CANARY-kdc-patient-7f3a"
EPOCH = 1000.0
NOW = 5.5  # epoch 0
CARDIO_20_30 = 'topic = "cardiology" && age >= 20 && age <= 30'
CARDIO_ALL = 'topic = "cardiology" && age >= 0 && age <= 127'
POLICY = {"young-unit": [CARDIO_20_30], "chief": [CARDIO_ALL]}
PUBLISHERS = {"hospital": ["cardiology"]}


def _config() -> KdcConfig:
    return KdcConfig(
        SecretBytes(MASTER),
        (HOSPITAL,),
        subscribers=POLICY,
        publishers=PUBLISHERS,
        epoch_length=EPOCH,
    )


class RecordingCore(KeyServiceCore):
    """The real core; every request and response map it handled, packed as on the wire."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.frames: list[tuple[str, bytes, bytes]] = []

    def handle(self, req, **kw):
        resp = super().handle(req, **kw)
        self.frames.append((kw["peer"], msgpack.packb(req), msgpack.packb(resp)))
        return resp


class Clock:
    t = NOW

    def __call__(self) -> float:
        return self.t


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> ClusterPki:
    return ClusterPki(tmp_path_factory.mktemp("kdcpki") / "pki")


@pytest.fixture(scope="module")
def service(aloop, pki):
    i = pki.identity("keyservice", Role.MS)
    ctx = server_ssl_context(i.cert_path, i.key_path, i.ca_path)
    kdc = KdcService(_config())
    core = RecordingCore(kdc=kdc)
    server = KeyServiceServer(core, ctx, clock=Clock(), rng=random.Random(5))
    port = aloop.run(server.start())
    yield kdc, core, port
    aloop.run(server.stop())


def ks(pki: ClusterPki, name: str, port: int) -> KeyServiceClient:
    return KeyServiceClient("127.0.0.1", port, pki.client_context(name))


def patient(age: int, topic: str = "cardiology", i: int = 0) -> Event:
    return Event(
        {"topic": topic, "age": age, "patientRecord": f"{CANARY} #{i}"},
        id=f"e{topic[:3]}{age}-{i}",
        type="patient",
        payload=CANARY.encode(),
    )


def test_psguard_clients_over_the_network_publish_and_open_as_in_process(pki, service):
    kdc, _, port = service
    local = kdc.keys  # the in-process PSGuardKeyService of the same master and policy
    f = Filter.parse(CARDIO_20_30, id="f1")
    with ks(pki, "young-unit", port) as c:
        rows, keys = RemoteKdc(c).authorise("young-unit", f, epoch=0)
    lrows, _ = local.authorise("young-unit", f, epoch=0)
    assert rows == lrows  # the same routing tokens as the in-process KDC
    with ks(pki, "hospital", port) as hc, ks(pki, "young-unit", port) as sc:
        sk = SigningKey.from_seed(bytes(32))
        pub = PSGuardClient("hospital", RemoteKdc(hc), signing_key=sk)
        sub = PSGuardClient("young-unit", RemoteKdc(sc), publisher_keys={"hospital": sk.public})
        sub.protect_filter(f, now=NOW)
        rng = random.Random(1)
        inside = pub.protect_event(patient(25), now=NOW, rng=rng)
        outside = pub.protect_event(patient(35), now=NOW, rng=rng)
        got = sub.open_event(inside.event_id, inside.routing, inside.body, inside.meta, now=NOW)
        assert got["patientRecord"].startswith(CANARY) and got.payload == CANARY.encode()
        # an age-35 event handed over by a malicious broker stays closed (psguard.txt §3.1)
        with pytest.raises(InvalidToken):
            sub.open_event(outside.event_id, outside.routing, outside.body, outside.meta, now=NOW)
        # what the network publisher protects, the in-process subscriber opens: same keys
        lsub = PSGuardClient("chief", local)
        lsub.protect_filter(Filter.parse(CARDIO_ALL, id="f2"), now=NOW)
        ev = lsub.open_event(outside.event_id, outside.routing, outside.body, outside.meta, now=NOW)
        assert ev["age"] == 35


def test_a_filter_outside_the_subscribers_policy_is_refused(pki, service):
    _, core, port = service
    before = core.stats["unauthorised"]
    with ks(pki, "young-unit", port) as c:
        kdc = RemoteKdc(c)
        for text in (CARDIO_ALL, 'topic = "cancerTrail" && age >= 20 && age <= 30'):
            with pytest.raises(DropError) as ei:
                kdc.authorise("young-unit", Filter.parse(text, id="x"), epoch=0)
            assert ei.value.reason is DropReason.UNAUTHORISED
        # a filter the policy covers (a narrower range) is granted
        kdc.authorise("young-unit", Filter.parse(CARDIO_20_30.replace("20", "22"), id="y"), epoch=0)
    with ks(pki, "stranger", port) as c, pytest.raises(DropError):
        RemoteKdc(c).authorise("stranger", Filter.parse(CARDIO_20_30, id="z"), epoch=0)
    assert core.stats["unauthorised"] == before + 3


def test_no_keys_or_permits_in_another_identitys_name(pki, service):
    _, _, port = service
    f = Filter.parse(CARDIO_ALL, id="f")
    with ks(pki, "young-unit", port) as c:
        kdc, auth = RemoteKdc(c), RemoteAuthority(c)
        sk = SigningKey.from_seed(bytes(range(32)))
        with pytest.raises(DropError, match="own name"):  # chief may; young-unit is not chief
            kdc.authorise("chief", f, epoch=0)
        with pytest.raises(DropError, match="own name"):
            kdc.publisher("hospital", sk, epoch=0)
        with pytest.raises(DropError, match="own name"):
            c.call("kdc_scope", subject="hospital", scope="cardiology", epoch=0)
        with pytest.raises(DropError, match="own name"):
            auth.publish_permit("hospital", sk.public, now=NOW)
        with pytest.raises(DropError):  # a digest of tokens the caller was never issued
            auth.subscribe_permit("young-unit", sk.public, bytes(32), now=NOW)
        with pytest.raises(DropError):  # its own name, but it has no publish right
            kdc.publisher("young-unit", sk, epoch=0)


def test_a_publisher_gets_exactly_its_scopes_keys(pki, service):
    kdc, core, port = service
    sk = SigningKey.from_seed(bytes(32))
    core.frames.clear()
    with ks(pki, "hospital", port) as c:
        remote = RemoteKdc(c)
        pub = PSGuardClient("hospital", remote, signing_key=sk)
        for i in range(3):
            pub.protect_event(patient(20 + i, i=i), now=NOW, rng=random.Random(i))
        with pytest.raises(DropError) as ei:  # a topic outside its scope
            pub.protect_event(patient(20, topic="cancerTrail"), now=NOW)
        assert ei.value.reason is DropReason.UNAUTHORISED
        with pytest.raises(ValidationError):  # the next epoch has not begun (psguard.txt §3.2)
            c.call("kdc_scope", subject="hospital", scope="cardiology", epoch=3)
    e0 = KDC(MASTER).for_epoch(0)
    allowed = {e0.topic_key("cardiology").reveal(), e0.topic_token("cardiology")}
    crossed = set()
    for peer, _, resp in core.frames:
        assert peer == "hospital"
        ok = msgpack.unpackb(resp).get("ok") or {}
        crossed |= {v for v in ok.values() if isinstance(v, bytes) and len(v) == 32}
    assert crossed == allowed  # K_0(cardiology) and T_0(cardiology): nothing else
    assert sum(b"kdc_scope" in req for _, req, _ in core.frames) == 3  # memoised per scope


def test_default_clients_over_the_network(pki, service):
    kdc, _, port = service
    auth_local = kdc.authority
    with ks(pki, "hospital", port) as hc, ks(pki, "young-unit", port) as sc:
        ha, sa = RemoteAuthority(hc, authority_key=auth_local.public_key), RemoteAuthority(sc)
        assert sa.public_key == auth_local.public_key and sa.revoked == set()
        pub = DefaultClient("hospital", ha, signing_key=SigningKey.from_seed(bytes(32)))
        sub = DefaultClient("young-unit", sa)
        pf = sub.protect_filter(Filter.parse(CARDIO_20_30, id="d1"), now=NOW)
        p = AuthorityPermit.decode(pf.meta["pm"])
        assert p.subject == "young-unit" and p.verify(auth_local.public_key) is None
        pes = pub.protect_events(
            [patient(21, i=1), patient(36, i=2)], now=NOW, rng=random.Random(4)
        )
        ev = sub.open_event(pes[0].event_id, pes[0].routing, pes[0].body, pes[0].meta, now=NOW)
        assert ev["patientRecord"] == f"{CANARY} #1"
        with pytest.raises(InvalidToken):
            sub.open_event(pes[1].event_id, pes[1].routing, pes[1].body, pes[1].meta, now=NOW)
        # the publish permit carries the serial of the caller's certificate, not the body's
        pm = AuthorityPermit.decode(pes[0].meta["pm"])
        assert pm.serial == pki_serial(pki, "hospital") and pm.subject == "hospital"
        with pytest.raises(DropError):
            hc.call(
                "authority_publish_permit",
                subject="hospital",
                key=pub.verify_key.to_bytes(),
                serial=12345,
            )


def pki_serial(pki: ClusterPki, name: str) -> int:
    from pubguard.crypto.x509 import load_certificate

    return load_certificate(pki.identity(name).cert_path).serial


def test_the_master_never_crosses_the_wire_nor_reaches_the_log(pki, service, caplog):
    kdc, core, port = service
    caplog.set_level(logging.DEBUG)
    core.frames.clear()
    with ks(pki, "chief", port) as c:
        sub = DefaultClient("chief", RemoteAuthority(c))
        sub.protect_filter(Filter.parse(CARDIO_ALL, id="m1"), now=NOW)
        for bad in (
            {"op": "kdc_authorise", "subject": "chief", "filter": "age >", "fid": "q", "epoch": 0},
            {"op": "kdc_scope", "subject": "chief", "scope": "x", "epoch": 0},
        ):
            with pytest.raises(Exception):  # noqa: B017,PT011 - refused, typed
                c.call(**bad)
    wire = b"".join(q + r for _, q, r in core.frames)
    assert core.frames and b"kdc_authorise" in wire
    for needle in (MASTER, MASTER.hex().encode(), base64.b64encode(MASTER)):
        assert needle not in wire
        assert needle.decode("latin-1") not in caplog.text
    # only derived keys crossed: the chief's scope key is there, its epoch master is not
    e0 = KDC(MASTER).for_epoch(0)
    assert e0.topic_key("cardiology").reveal() not in wire  # subscribers get no topic key
    assert "refused" in caplog.text and "kdc_scope" in caplog.text
    for obj in (c, sub, sub.authority, sub.authority.keys):
        assert MASTER.hex()[:16] not in repr(obj) and e0.topic_key("x").reveal().hex()[
            :16
        ] not in repr(obj)


@given(
    op=st.sampled_from(
        [
            "kdc_authorise",
            "kdc_publisher",
            "kdc_scope",
            "authority_publish_permit",
            "authority_subscribe_permit",
            "authority_revoked",
            "info",
        ]
    ),
    fields=st.dictionaries(
        st.sampled_from(["subject", "filter", "fid", "epoch", "scope", "key", "digest", "serial"]),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(-3, 2**70),
            st.text(max_size=30),
            st.binary(max_size=40),
            st.sampled_from(["p", "cardiology", CARDIO_ALL]),
        ),
        max_size=6,
    ),
)
@settings(max_examples=120, deadline=None)
def test_every_kdc_request_gets_one_typed_response(op, fields):
    core = KeyServiceCore(kdc=_SHARED)
    resp = core.handle(
        {**fields, "op": op, "id": 1}, peer="p", peer_role="client", now=NOW, rng=random.Random(0)
    )
    assert resp["id"] == 1 and ("ok" in resp) != ("error" in resp)
    if "error" in resp:
        assert resp["error"] in ERROR_CODES and isinstance(resp["message"], str)
    else:  # "p" is in no policy: only the public ops succeed
        assert op in ("info", "authority_revoked")


_SHARED = KdcService(_config())


def test_only_client_certificates_get_keys_even_under_an_open_policy(pki, aloop):
    """A broker (or MS, KMC) certificate of the same CA gets no K(f), K(w) or permit: brokers
    route on tokens only. Over real TLS, with the role taken from the certificate."""
    from pubguard.crypto.x509 import client_ssl_context

    open_cfg = KdcConfig(SecretBytes(MASTER), (HOSPITAL,), epoch_length=EPOCH)  # allow all
    i = pki.identity("keyservice", Role.MS)
    server = KeyServiceServer(
        KeyServiceCore(kdc=KdcService(open_cfg)),
        server_ssl_context(i.cert_path, i.key_path, i.ca_path),
        clock=Clock(),
    )
    port = aloop.run(server.start())
    try:
        b = pki.identity("b3", Role.BROKER)
        ctx = client_ssl_context(b.cert_path, b.key_path, b.ca_path)
        f = Filter.parse(CARDIO_ALL, id="b")
        with KeyServiceClient("127.0.0.1", port, ctx, server_role="ms") as c:
            with pytest.raises(DropError, match="client certificates only"):
                RemoteKdc(c).authorise("b3", f, epoch=0)
            with pytest.raises(DropError, match="client certificates only"):
                c.call("kdc_scope", subject="b3", scope="cardiology", epoch=0)
            assert RemoteKdc(c).schema.types.keys() == {"patient"}  # public info is served
        with ks(pki, "anyone", port) as c:  # a client certificate: the open policy grants it
            rows, _ = RemoteKdc(c).authorise("anyone", f, epoch=0)
            assert rows.groups
    finally:
        aloop.run(server.stop())


CLUSTER = """
publishers = ["hospital"]
[topology]
kind = "edges"
edges = [["b0", "b1"]]
[broker]
profiles = ["psguard", "default"]
"""


@pytest.mark.slow
def test_a_cluster_whose_clients_got_every_key_over_the_network(aloop, tmp_path):
    from pubguard.net.config import parse_cluster_config
    from pubguard.ops.cluster import LocalCluster

    cfg = parse_cluster_config(tomllib.loads(CLUSTER), base=tmp_path / "c")
    cluster = LocalCluster(cfg, in_process=True, keyservice=True, kdc=_config())

    async def scenario() -> dict[str, object]:
        await cluster.start()
        out: dict[str, object] = {}
        try:
            for k, prof in enumerate(("psguard", "default")):
                pub = await cluster.connect("b0", "hospital", profile=prof)
                sub = await cluster.connect("b1", "young-unit", profile=prof)
                s = await sub.subscribe(CARDIO_20_30)
                try:
                    await sub.subscribe(CARDIO_ALL)
                    out[f"{prof}-overreach"] = "granted"
                except DropError as exc:
                    out[f"{prof}-overreach"] = exc.reason
                await sub.flush()
                await cluster.wait_quiescent()
                # distinct ids per profile: brokers drop a repeated id as a duplicate
                await pub.publish_batch([patient(24, i=10 * k + 1), patient(40, i=10 * k + 2)])
                await pub.flush()
                out[prof] = (await s.next(timeout=20)).event
                await cluster.wait_quiescent()
                out[f"{prof}-pending"] = s.pending
                out[f"{prof}-services"] = (
                    type(pub.scheme).__name__,
                    _service(pub.scheme),
                    _service(sub.scheme),
                )
                for c in (pub, sub):
                    await c.close()
            return out
        finally:
            await cluster.stop()

    out = aloop.run(scenario(), timeout=150)
    for k, prof in enumerate(("psguard", "default")):
        ev = out[prof]
        assert ev["patientRecord"] == f"{CANARY} #{10 * k + 1}"  # type: ignore[index]
        assert out[f"{prof}-pending"] == 0  # the age-40 event did not reach the 20-30 unit
        assert out[f"{prof}-overreach"] is DropReason.UNAUTHORISED
        _, ps, ss = out[f"{prof}-services"]  # type: ignore[misc]
        assert ps == ss == ("RemoteKdc" if prof == "psguard" else "RemoteAuthority")
    log = (cluster.state_dir / "keyservice.log").read_bytes()
    assert b"refused kdc_authorise from young-unit: unauthorised" in log
    files = [p.read_bytes() for p in (tmp_path / "c").rglob("*") if p.is_file()]
    for needle in (MASTER, MASTER.hex().encode(), base64.b64encode(MASTER)):
        assert not any(needle in f for f in files)


def _service(scheme: object) -> str:
    svc = getattr(scheme, "service", None) or getattr(scheme, "authority", None)
    return type(svc).__name__


def test_the_policy_file_round_trips_without_the_master(tmp_path):
    cfg = _config()
    path = tmp_path / "policy.json"
    cfg.save_policy(path)
    text = path.read_bytes()
    assert MASTER not in text and MASTER.hex().encode() not in text
    assert base64.b64encode(MASTER) not in text and "<secret>" in repr(cfg)
    back = KdcConfig.load_policy(path, MASTER)
    assert back.types == cfg.types and back.publishers == cfg.publishers
    assert back.subscribers == cfg.subscribers and back.epoch_length == EPOCH
    assert KdcService(back).authority.public_key == _SHARED.authority.public_key


def test_serve_with_a_bad_kdc_policy_or_master_is_a_one_line_error(tmp_path):
    import os
    import subprocess
    import sys

    bad = tmp_path / "policy.json"
    bad.write_text("{not json")
    good = tmp_path / "good.json"
    _config().save_policy(good)
    cases = [
        (bad, base64.b64encode(MASTER).decode(), "not JSON"),
        (tmp_path / "missing.json", base64.b64encode(MASTER).decode(), "cannot read"),
        (good, base64.b64encode(b"short").decode(), "PUBGUARD_KDC_MASTER"),
    ]
    for i, (policy, master, why) in enumerate(cases):
        env = {**os.environ, "PUBGUARD_KDC_MASTER": master}
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "pubguard.cli.main",
                "keyservice",
                "serve",
                "--state",
                str(tmp_path / f"ks{i}"),
                "--kdc-policy",
                str(policy),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert r.returncode == 1 and r.stderr.count("\n") == 1 and why in r.stderr, r.stderr
        assert not (tmp_path / f"ks{i}").exists()  # nothing created
        assert master not in r.stderr


def test_the_next_epochs_subscribe_permit_is_served_shortly_before_it_begins(pki, service):
    """A subscription is renewed ahead of an epoch change (net/client/renewal.py): within
    EPOCH_SKEW of the next epoch the service issues its tokens, keys and subscribe permit;
    earlier it refuses them (no stocking up on a right that may be withdrawn)."""
    f = Filter.parse(CARDIO_ALL, id="next")
    _, _, port = service
    try:
        Clock.t = EPOCH - 30.0  # the server's clock: 30 s before epoch 1 begins
        with ks(pki, "chief", port) as c:
            sub = DefaultClient("chief", RemoteAuthority(c))
            nxt = AuthorityPermit.decode(sub.protect_filter(f, now=EPOCH + 0.001).meta["pm"])
            cur = AuthorityPermit.decode(sub.protect_filter(f, now=EPOCH - 30.0).meta["pm"])
        assert (nxt.epoch, nxt.not_before, nxt.not_after) == (1, EPOCH, 2 * EPOCH)
        assert (cur.epoch, cur.not_after) == (0, EPOCH)
        Clock.t = EPOCH - 100.0  # too early for epoch 1
        with ks(pki, "chief", port) as c, pytest.raises(ValidationError, match="not served"):
            DefaultClient("chief", RemoteAuthority(c)).protect_filter(f, now=EPOCH + 0.001)
    finally:
        Clock.t = NOW
