"""The routing parts a broker decodes per publication, on both backends: PSGuard's and the
default profile's ``{m, n, t}`` (``psguard.wire.parse_routing``, psguard.txt §3.1) and
EventGuard's ``{tokens}`` (``eventguard.wire.parse_tokens``, eventguard.txt §4.4). The native
decoder (``native/src/guard/routing.rs``) must give exactly the reference's value, or leave
the part to it, so a refused part is the same ``ValidationError`` with the same words; and a
guard's run over the core's messages (``check_msgs``) gives the verdicts and state of the
same run as tuples (``check_run``), its replay state committed with its batch."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard import native
from pubguard.broker import Broker
from pubguard.errors import DropReason, ValidationError
from pubguard.schemes.base import LinkKind
from pubguard.schemes.common.replay import ReplayState
from pubguard.schemes.default.broker import DefaultBroker
from pubguard.schemes.eventguard.broker import EventGuardBroker
from pubguard.schemes.eventguard.wire import parse_tokens
from pubguard.schemes.psguard.wire import TokenEvent, parse_routing
from pubguard.store import Database
from pubguard.wire.messages import decode_publish
from tests.native_backends import requires_native
from tests.schemes.default import test_default_native as df
from tests.schemes.eventguard import test_eventguard_native as eg


class _Str(str):
    pass


class _Bytes(bytes):
    pass


def _sized_bytes(unit: int) -> st.SearchStrategy[bytes]:
    """Bytes at and around whole multiples of ``unit``, and empty."""
    return st.one_of(
        st.integers(0, 4).map(lambda k: bytes(k * unit)),
        st.binary(max_size=3 * unit + 3),
    )


VALUES = st.one_of(
    st.sampled_from(["r", "d", "x", "", "rr", _Str("r"), _Str("d"), None, 1, 1.5, True]),
    st.binary(max_size=40),
    _sized_bytes(8),
    _sized_bytes(16),
    _sized_bytes(32),
    st.integers(0, 70).map(lambda k: bytes(32 * k)),
    st.binary(max_size=40).map(_Bytes),
    st.binary(max_size=40).map(bytearray),
)
KEYS = st.sampled_from(["m", "n", "t", "tokens", "x", _Str("m")])
ROUTINGS = st.one_of(
    st.dictionaries(KEYS, VALUES, max_size=4),
    st.fixed_dictionaries(
        {"m": st.sampled_from(["r", "d"]), "n": _sized_bytes(16), "t": _sized_bytes(8)}
    ),
    st.fixed_dictionaries({"tokens": _sized_bytes(32)}),
)


def _outcome(parse: Any, routing: Any, backend: str) -> tuple[str, Any]:
    with native.use(backend):  # type: ignore[arg-type]
        try:
            got = parse(routing)
        except ValidationError as exc:
            return ("refused", str(exc))
    return ("value", (type(got), tuple(got), [type(x) for x in got]))


@requires_native
@settings(max_examples=200, deadline=None)
@given(routing=ROUTINGS, frozen=st.booleans())
def test_the_native_decoders_agree_with_the_reference(
    routing: dict[Any, Any], frozen: bool
) -> None:
    r: Any = MappingProxyType(dict(routing)) if frozen else routing
    for parse in (parse_routing, parse_tokens):
        assert _outcome(parse, r, "native") == _outcome(parse, r, "python")


@requires_native
def test_the_native_decoders_take_the_common_parts() -> None:
    mod = native.NATIVE
    assert mod is not None
    tags = (7).to_bytes(8, "big") + (-2).to_bytes(8, "big", signed=True)
    got = mod.token_routing(MappingProxyType({"m": "r", "n": bytes(16), "t": tags}))
    assert TokenEvent(*got) == TokenEvent("randomized", bytes(16), (7, -2))
    assert mod.token_routing({"m": "d", "n": b"", "t": b""}) == ("deterministic", b"", ())
    blob = bytes(range(64))
    assert mod.eg_tokens(MappingProxyType({"tokens": blob})) == (blob[:32], blob[32:])
    one = bytes(32)
    assert mod.eg_tokens({"tokens": one})[0] is one  # the blob itself, as the reference
    # left to the reference: a subclass, a wrong length, another key
    assert mod.token_routing({"m": _Str("r"), "n": bytes(16), "t": b""}) is None
    assert mod.token_routing({"m": "r", "n": bytes(15), "t": b""}) is None
    assert mod.eg_tokens({"tokens": one, "x": 1}) is None
    assert mod.eg_tokens({"tokens": _Bytes(one)}) is None


def _verdicts_and_state(scheme: Any, run: str, msgs: list[Any], events: list[Any]) -> Any:
    fast = scheme._fast
    now, bid = df.NOW, "b0"
    if isinstance(scheme, EventGuardBroker):
        now = eg.NOW
        if run == "msgs":
            got = fast.check_msgs(msgs, now, stop_on_strike=False)
        else:
            frames = [(m.event_id, m.profile, m.routing, m.body, m.meta) for m in msgs]
            got = fast.check_run(frames, now, stop_on_strike=False)
    elif run == "msgs":
        got = fast.check_msgs(msgs, events, now, bid, stop_on_strike=False)
    else:
        frames = [
            (m.event_id, te.mode, te.nonce, m.routing.get("t"), m.body, m.meta)
            for m, te in zip(msgs, events, strict=True)
        ]
        got = fast.check_run(frames, now, bid, stop_on_strike=False)
    verdicts, exc = got
    replay = None
    if isinstance(scheme, DefaultBroker):
        replay = scheme.replay.last(bid, df.PUB_KEY.public.to_bytes())
    roots = scheme.roots
    return (
        verdicts,
        type(exc),
        (roots.verifications, roots.cached_nodes, roots.cached_trees),
        replay,
    )


@requires_native
@pytest.mark.parametrize("profile", ["default", "eventguard"])
def test_check_msgs_equals_check_run_on_the_same_frames(profile: str) -> None:
    """The run over the core's messages reads the same fields the tuples carry: the same
    verdicts (passes, then replays of the same publications) and the same guard state."""
    wires = df.WIRES if profile == "default" else eg.WIRES
    msgs = [decode_publish(w) for w in wires]
    assert all(m is not None for m in msgs)
    msgs = msgs + msgs  # the second time round: replays (default), or passes (eventguard)
    out = []
    for run in ("msgs", "run"):
        with native.use("native"):
            if profile == "default":
                scheme: Any = DefaultBroker(df.AUTH.public_key)
            else:
                scheme = EventGuardBroker(eg.MS.public_key, revoked=[eg.MALLORY])
        events = [scheme.decode_event(m.routing) for m in msgs]
        out.append(_verdicts_and_state(scheme, run, msgs, events))
    assert out[0] == out[1]
    assert "" in out[0][0]  # some passed


@requires_native
def test_check_msgs_refuses_unequal_runs() -> None:
    with native.use("native"):
        scheme = DefaultBroker(df.AUTH.public_key)
    msgs = [decode_publish(w) for w in df.WIRES[:2]]
    with pytest.raises(ValueError, match="differ in length"):
        scheme._fast.check_msgs(msgs, [], df.NOW, "b0", stop_on_strike=False)


class _Crash(Exception):
    pass


def _replay_run(tmp_path: Any, backend: str) -> list[Any]:
    """Two batches of one link's publications through a core whose default scheme keeps
    its replay state in the broker's database (deferred: flushed in the batch's
    transaction), the second lost to a crash before its commit; then a restarted broker on
    that database gets both batches again."""
    path = tmp_path / f"{backend}.db"
    db = Database(path)
    with native.use(backend):  # type: ignore[arg-type]
        scheme = DefaultBroker(df.AUTH.public_key, replay=ReplayState(db, deferred=True))
    core = Broker("b0", [scheme])
    core.add_link("c", LinkKind.CLIENT)
    first, second = df.WIRES[:6], df.WIRES[6:]
    out: list[Any] = []
    with db.transaction():
        out.append(core.handle_batch(first, "c", df.NOW))
        core.before_commit()
    with pytest.raises(_Crash), db.transaction():  # kill -9 before the commit
        out.append(core.handle_batch(second, "c", df.NOW))
        core.before_commit()
        raise _Crash
    db.close()
    db = Database(path)
    with native.use(backend):  # type: ignore[arg-type]
        scheme = DefaultBroker(df.AUTH.public_key, replay=ReplayState(db, deferred=True))
    again = Broker("b0", [scheme])
    again.add_link("c", LinkKind.CLIENT)
    with db.transaction():
        out.append(again.handle_batch(second + first, "c", df.NOW + 5))  # the window: gone
        again.before_commit()
    out.append(dict(again.drops))
    out.append([tuple(r) for r in db.query("SELECT scope, entity, ts, seq FROM replay_state")])
    db.close()
    return out


@requires_native
def test_a_run_commits_its_replay_state_with_its_batch(tmp_path: Any) -> None:
    """The native run updates the replay state's own containers (``run_state``), so what
    a batch accepted is written in that batch's transaction and nothing else: after a crash
    before the commit the lost batch is accepted again and the committed one is a replay,
    on both backends alike (narada §V-B)."""
    got = [_replay_run(tmp_path, b) for b in ("python", "native")]
    assert got[0] == got[1]
    assert got[1][3] == {DropReason.REPLAYED: 6}
    assert got[1][4]  # the state was written
