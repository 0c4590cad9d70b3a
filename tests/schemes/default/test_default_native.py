"""The native default-profile publication guard (``pubguard._native``, native/src/guard/)
against the Python guard, its spec: for well-formed, generated and mutated publications the
verdict of ``broker_check`` is the same, and so is the state after each: signatures verified,
authenticated Merkle nodes and trees, and the per-publisher replay state (narada §V-B), which
the native guard keeps in the scheme's own :class:`ReplayState` so that it still commits with
the broker's batch."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings

from pubguard import native
from pubguard.crypto import SigningKey
from pubguard.schemes.default.broker import DEFAULT, DefaultBroker
from pubguard.schemes.default.client import DefaultClient
from pubguard.schemes.psguard.wire import signed_from_wire
from pubguard.store import Database
from pubguard.wire.messages import Publish, decode_publish
from tests.native_backends import requires_native
from tests.schemes.default.test_default import NOW, authority
from tests.schemes.native_diff import (
    assert_decided_natively,
    backend_pair,
    check_same,
    counted_pair,
    mutated,
    with_meta,
)
from tests.schemes.psguard.test_psguard_net import ev

pytestmark = requires_native

META_KEYS = ("p", "ts", "e", "h", "s", "sig", "q", "pm", "mi", "mn", "mp")
PUB_KEY = SigningKey.from_seed(b"h" * 32)
AUTH = authority()


def _wires() -> list[dict[str, Any]]:
    c = DefaultClient("hospital", AUTH, signing_key=PUB_KEY)
    pes = []
    for n in (1, 3, 8):
        pes += c.protect_events([ev(20 + i, eid=f"e{n}-{i}") for i in range(n)], now=NOW)
    return [Publish(p.event_id, DEFAULT, p.routing, p.body, p.meta).to_wire() for p in pes]


WIRES = _wires()


def _pair(**kw: Any) -> tuple[DefaultBroker, DefaultBroker]:
    return backend_pair(lambda: DefaultBroker(AUTH.public_key, **kw))


def state(s: DefaultBroker) -> tuple[Any, ...]:
    last = s.replay.last("b0", PUB_KEY.public.to_bytes())
    return (s.roots.verifications, s.roots.cached_nodes, s.roots.cached_trees, last)


def same(pair: tuple[DefaultBroker, DefaultBroker], wire: dict, now: float) -> str:
    return check_same(*pair, wire, now, state)


def test_well_formed_pass_once_then_are_replays_and_the_state_commits(tmp_path) -> None:
    dbs = [Database(tmp_path / f"{b}.db") for b in ("py", "nat")]
    with native.use("python"):
        py = DefaultBroker(AUTH.public_key, db=dbs[0])
    nat = DefaultBroker(AUTH.public_key, db=dbs[1])
    pair = (py, nat)
    assert [same(pair, w, NOW) for w in WIRES] == ["pass"] * len(WIRES)
    assert state(nat)[0] == 3  # one signature per batch
    assert same(pair, WIRES[2], NOW + 1) == "replayed"
    assert same(pair, WIRES[0], NOW + 61) == "stale"
    rows = []
    for s, db in zip(pair, dbs, strict=True):
        s.replay.flush()
        rows.append(db.query("SELECT scope, entity, ts, seq FROM replay_state"))
        db.close()
    assert [tuple(r) for r in rows[0]] == [tuple(r) for r in rows[1]] and rows[0]


PAIR, COUNT = counted_pair(lambda: DefaultBroker(AUTH.public_key))


def _with(i: int, **meta: Any) -> tuple[dict[str, Any], float]:
    return with_meta(WIRES[i], NOW, **meta)


@given(mutated(WIRES, META_KEYS, ("m", "n", "t"), NOW))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(_with(4, mp=bytes(32 * 17)))  # a path longer than MAX_PATH
@example(_with(4, mn=65_537))  # a batch larger than MAX_BATCH
@example(_with(4, q=2**63))  # a sequence number past int64
@example(_with(4, pm=None))  # no permit
@example(_with(0, s=b"\x00"))  # sealed secrets: the Python guard decides (canonical form)
def test_mutated_publications_get_the_same_verdict(case: tuple[dict[str, Any], float]) -> None:
    assert PAIR is not None
    same(PAIR, *case)


def test_the_native_guard_decided_the_mutated_frames_itself() -> None:
    """Run after the property (see ``assert_decided_natively``)."""
    assert_decided_natively(COUNT)


def test_revocations_are_read_live() -> None:
    pair = _pair()
    assert same(pair, WIRES[1], NOW) == "pass"
    for s in pair:
        s.revoke(PUB_KEY.public)
    assert same(pair, WIRES[2], NOW) == "revoked"


def test_the_native_guard_signs_off_the_same_message_as_the_reference() -> None:
    """The signed bytes the port builds are psguard/wire.py's: a publication passes natively
    only if its leaf, built from them, is under the signed root (checked on a fresh pair)."""
    msg = decode_publish(WIRES[0])
    assert msg is not None
    py, nat = _pair()
    te = py.decode_event(msg.routing)
    pub, ts, epoch, signed, sig = signed_from_wire(
        msg.event_id, te, msg.routing, msg.body, msg.meta
    )
    assert (pub, epoch) == ("hospital", msg.meta["e"]) and signed.startswith(b"psguard-record")
    got = nat._fast.check_publish(
        msg.event_id, te.mode, te.nonce, msg.routing["t"], msg.body, msg.meta, NOW, "b0"
    )
    assert got == ""
