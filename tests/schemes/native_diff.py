"""What the differential tests of the native publication guards share (the eventguard and
default profiles' ``test_*_native.py``): the verdict the broker core reaches on a wire
publication up to and including the guard, and generators of mutated wire publications."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import msgpack
from hypothesis import strategies as st

from pubguard import native
from pubguard.broker.profiles import DECODE_ERRORS
from pubguard.errors import DropError, FrameError, InvalidToken, RevokedError
from pubguard.schemes.base import BrokerScheme, CheckContext, LinkInfo, LinkKind
from pubguard.wire.messages import Publish, decode_message, decode_publish
from tests.native_backends import NATIVE_SKIP

__all__ = [
    "WIRE_VALUES",
    "Counting",
    "assert_decided_natively",
    "backend_pair",
    "check_same",
    "counted_pair",
    "mutated",
    "roots_state",
    "verdict",
    "with_meta",
]

_LINKS = itertools.count()

#: every value msgpack carries, with the limits the guards check
WIRE_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([0, 1, 2, 3, 8, 65_535, 65_536, 65_537, 2**63 - 1, 2**63, 2**64 - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.binary(max_size=600),
    st.lists(st.integers(0, 3), max_size=3),
)


class Counting:
    """Stands between a scheme and its native guard (``scheme._fast``) and counts the verdicts
    the guard gave, so a test can check the port decided most frames itself (a guard that
    handed everything back to the Python one would agree trivially)."""

    def __init__(self, fast: Any) -> None:
        self.fast = fast
        self.seen: dict[str, int] = {}

    @property
    def roots(self) -> Any:
        """The guard's verifier (the schemes that share one check it is theirs)."""
        return self.fast.roots

    def check_publish(self, *args: Any) -> str:
        v: str = self.fast.check_publish(*args)
        self.seen[v] = self.seen.get(v, 0) + 1
        return v


def backend_pair(make: Callable[[], Any]) -> tuple[Any, Any]:
    """The scheme ``make()`` builds on each backend: (the Python reference, the native one)."""
    with native.use("python"):
        py = make()
    nat = make()
    assert py._fast is None and nat._fast is not None
    return py, nat


def counted_pair(make: Callable[[], Any]) -> tuple[tuple[Any, Any] | None, Counting | None]:
    """One pair for a whole property (their caches see the same sequence), the native one's
    guard behind :class:`Counting`; ``(None, None)`` when the native backend is not there
    (the module is skipped then)."""
    if NATIVE_SKIP is not None:
        return None, None
    pair = backend_pair(make)
    count = pair[1]._fast = Counting(pair[1]._fast)
    return pair, count


def roots_state(s: Any) -> tuple[int, int, int]:
    """A scheme's verifier state: signatures verified, authenticated nodes and trees kept."""
    return (s.roots.verifications, s.roots.cached_nodes, s.roots.cached_trees)


def assert_decided_natively(count: Counting | None) -> None:
    """Run after a property: nearly every frame that reached the guard was decided by the
    port, not handed back (``fallback``) to the Python guard."""
    assert count is not None
    seen = count.seen
    assert sum(seen.values()) >= 50, seen
    assert seen.get("fallback", 0) <= 0.1 * sum(seen.values()), seen


def with_meta(wire: dict[str, Any], now: float, **meta: Any) -> tuple[dict[str, Any], float]:
    """``wire`` with ``meta`` fields replaced, checked at ``now`` (a property's example)."""
    return ({**wire, "meta": {**wire["meta"], **meta}}, now)


def verdict(scheme: BrokerScheme, wire: dict[str, Any], now: float, link: str) -> str:
    """What the broker core makes of ``wire`` up to and including the guard (core.py
    ``_decode``, ``_admit`` and ``_check``): the drop reason, or "pass"."""
    msg = decode_publish(wire)
    if msg is None:
        try:
            msg = decode_message(wire)
        except FrameError:
            return "frame malformed"
    if not isinstance(msg, Publish):
        return "not a publication"
    try:
        scheme.decode_event(msg.routing)
    except DECODE_ERRORS:
        return "routing malformed"
    ctx = CheckContext(now, LinkInfo(link, LinkKind.CLIENT), "b0")
    try:
        r = scheme.broker_check(msg, ctx)
    except DropError as exc:
        return f"raised {exc.reason}"
    except InvalidToken:
        return "raised forged"
    except RevokedError:
        return "raised revoked"
    except DECODE_ERRORS as exc:
        return f"raised malformed ({type(exc).__name__})"
    return "pass" if r is None else str(r)


def check_same(
    py: BrokerScheme,
    nat: BrokerScheme,
    wire: dict[str, Any],
    now: float,
    state: Callable[[Any], object],
) -> str:
    """Both schemes' verdicts on ``wire`` (equal, asserted) and their ``state`` after it
    (equal, asserted); a fresh link each time, so strikes never ban the generator."""
    link = f"c{next(_LINKS)}"
    a, b = verdict(py, wire, now, link), verdict(nat, wire, now, link)
    assert a == b, (a, b)
    assert state(py) == state(nat)
    return a


def _mutate_bytes(draw: st.DrawFn, b: bytes) -> bytes:
    how = draw(st.sampled_from(["flip", "cut", "grow", "len", "empty", "hashes"]))
    if how == "flip" and b:
        i = draw(st.integers(0, len(b) - 1))
        return b[:i] + bytes([b[i] ^ (1 << draw(st.integers(0, 7)))]) + b[i + 1 :]
    if how == "cut":
        return b[: draw(st.integers(0, len(b)))]
    if how == "grow":
        return b + draw(st.binary(min_size=1, max_size=64))
    if how == "len" and len(b) >= 4:  # a length prefix pointing past the end
        i = draw(st.integers(0, len(b) - 4))
        return b[:i] + b"\xff\xff\xff\xff" + b[i + 4 :]
    if how == "hashes":  # whole 32-byte units, up to past MAX_PATH
        return bytes(32 * draw(st.integers(0, 18)))
    return b""


def mutated(
    wires: Sequence[dict[str, Any]],
    meta_keys: Sequence[str],
    routing_keys: Sequence[str],
    now: float,
    values: st.SearchStrategy[Any] = WIRE_VALUES,
) -> st.SearchStrategy[tuple[dict[str, Any], float]]:
    """One of ``wires`` with one to three mutations (a ``meta`` field replaced by any wire
    value, dropped, or its bytes mutated; a field spliced from another publication; the
    routing part's, the body's or the id's bytes mutated), through msgpack as a broker
    receives it, and a time near ``now`` (in and out of the timestamp window)."""

    @st.composite
    def build(draw: st.DrawFn) -> tuple[dict[str, Any], float]:
        w = dict(wires[draw(st.integers(0, len(wires) - 1))])
        meta, routing = dict(w["meta"]), dict(w["routing"])
        for _ in range(draw(st.integers(1, 3))):
            what = draw(st.sampled_from(["meta", "meta", "meta", "splice", "route", "body", "id"]))
            k = draw(st.sampled_from(meta_keys))
            if what == "meta":
                cur = meta.get(k)
                how = draw(st.sampled_from(["value", "drop", "bytes"]))
                if how == "drop":
                    meta.pop(k, None)
                elif how == "bytes" and isinstance(cur, bytes):
                    meta[k] = _mutate_bytes(draw, cur)
                else:
                    meta[k] = draw(values)
            elif what == "splice":  # the same field of another publication
                other = wires[draw(st.integers(0, len(wires) - 1))]["meta"]
                if k in other:
                    meta[k] = other[k]
            elif what == "route":
                r = draw(st.sampled_from(routing_keys))
                if isinstance(routing.get(r), bytes):
                    routing[r] = _mutate_bytes(draw, routing[r])
                else:
                    routing[r] = draw(values)
            elif what == "body":
                w["body"] = _mutate_bytes(draw, w["body"])
            else:
                w["event_id"] = draw(st.text(min_size=1, max_size=12))
        w["meta"], w["routing"] = meta, routing
        t = now + draw(st.sampled_from([0.0, 0.0, 0.0, 59.0, 61.0, -61.0, 10_000.0]))
        return msgpack.unpackb(msgpack.packb(w, use_bin_type=True), raw=False), t

    return build()
