"""The link envelope: what travels in a frame around the broker messages.

Theory of operation
-------------------
Every frame (``framing.py``) carries one envelope map tagged by ``t``; pure functions here
build and check them, and import nothing from the server or client (nats-py's ``protocol/``).

==========  ===============================================  =====================================
``t``       fields                                           meaning
==========  ===============================================  =====================================
``hello``   ``v name role session durable rx [resumed]``     first frame each way; ``rx`` is the
            ``[profiles] [creds]``                           highest sequence already processed
                                                             from the peer (resend what follows);
                                                             a broker tells a client the profiles
                                                             it serves in ``profiles``; a Hermes
                                                             broker its capabilities in ``creds``
``m``       ``s m``                                          reliable message number ``s`` (>= 1)
                                                             carrying broker message ``m``
``mb``      ``s m``                                          a batch: messages ``s``, ``s+1``, ...
                                                             in the list ``m`` (1..``MAX_BATCH``)
``a``       ``u``                                            cumulative ack: all ``s <= u`` done
``hb``      (none)                                           heartbeat; any frame proves liveness
``st?``     ``q``                                            status request (operators, bench)
``st``      ``q data``                                       status reply
``bye``     ``reason``                                       the sender closes the link, and why
==========  ===============================================  =====================================

``profiles`` is optional: a client that gets no list (an older broker) sends as before; with a
list it refuses locally to send a profile the broker does not serve (its broker would drop the
message as ``unknown profile``). A broker sends it only in reply to a client (``role`` client),
so links between brokers look as they always did. A ``bye`` whose reason starts with
:data:`BYE_REPLACED` tells a client that a newer connection with its identity took its place
(:func:`bye_replaced`, :func:`is_replaced`): the client stops instead of reconnecting, which
would knock the other one off in turn.

A batch frame is exactly its messages sent one ``m`` frame each (sequence numbers, acks,
duplicates and gaps apply per message, :func:`reliable`); a sender coalesces what it has
queued in one loop iteration into one frame, so a receiver decodes one msgpack body per burst
instead of one per message. It is new in protocol version 2.

Reliability is per hop (eventguard.txt §2.1 assumes reliable links between neighbours; here
they are made reliable across reconnections): a receiver acknowledges a sequence number only
after it has processed and, for durable links, persisted its effects, and a sender keeps every
unacknowledged message until the ack arrives, resending after a reconnection from the peer's
``rx``. Duplicates (``s <= rx``) are dropped by the receiver, so each hop passes each message
on once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from pubguard.errors import FrameError

__all__ = [
    "PROTOCOL_VERSION",
    "ROLES",
    "MAX_BATCH",
    "BYE_REPLACED",
    "MAX_PROFILES",
    "ack",
    "batch",
    "bye",
    "bye_replaced",
    "check_envelope",
    "heartbeat",
    "hello",
    "is_replaced",
    "message",
    "reliable",
    "status_reply",
    "status_request",
]

PROTOCOL_VERSION: Final = 2  # 2: batch frames (``mb``)
MAX_BATCH: Final = 4096  # messages in one batch frame (a link's window)
ROLES: Final = ("broker", "client")
MAX_NAME: Final = 200
MAX_PROFILES: Final = 32  # profile names in a broker's hello
MAX_CREDS: Final = 16  # credentials a broker presents in its hello (hermes §3.4)
MAX_CRED_BYTES: Final = 4096  # bytes of one presented credential
#: how a ``bye`` reason starts when a newer connection with the same identity took over
BYE_REPLACED: Final = "replaced:"
_SEQ_MAX: Final = 2**63 - 1


def hello(
    name: str,
    role: str,
    session: str,
    *,
    durable: bool,
    rx: int,
    resumed: bool | None = None,
    profiles: Sequence[str] | None = None,
    creds: Sequence[bytes] | None = None,
) -> dict[str, Any]:
    d: dict[str, Any] = {
        "t": "hello",
        "v": PROTOCOL_VERSION,
        "name": name,
        "role": role,
        "session": session,
        "durable": durable,
        "rx": rx,
    }
    if resumed is not None:
        d["resumed"] = resumed
    if profiles is not None:
        d["profiles"] = list(profiles)
    if creds:  # a broker's credentials for its neighbour (hermes §3.4's handshake)
        d["creds"] = list(creds)
    return d


def message(seq: int, msg: dict[str, Any]) -> dict[str, Any]:
    return {"t": "m", "s": seq, "m": msg}


def batch(first: int, msgs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"t": "mb", "s": first, "m": msgs}


def reliable(env: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """The ``(sequence, message)`` pairs of a checked ``m`` or ``mb`` envelope."""
    s, m = env["s"], env["m"]
    if env["t"] == "m":
        return [(s, m)]
    return [(s + i, x) for i, x in enumerate(m)]


def ack(upto: int) -> dict[str, Any]:
    return {"t": "a", "u": upto}


def heartbeat() -> dict[str, Any]:
    return {"t": "hb"}


def status_request(q: int) -> dict[str, Any]:
    return {"t": "st?", "q": q}


def status_reply(q: int, data: dict[str, Any]) -> dict[str, Any]:
    return {"t": "st", "q": q, "data": data}


def bye(reason: str) -> dict[str, Any]:
    return {"t": "bye", "reason": reason[:500]}


def bye_replaced(identity: str) -> dict[str, Any]:
    """The ``bye`` a broker sends a connection that a newer one with its identity replaced."""
    return bye(f"{BYE_REPLACED} a newer connection with identity {identity!r} took over")


def is_replaced(reason: str) -> bool:
    """Whether a ``bye`` reason says that a newer connection replaced this one."""
    return reason.startswith(BYE_REPLACED)


def _int(d: dict[str, Any], k: str, lo: int = 0) -> int:
    v = d.get(k)
    if type(v) is not int or not lo <= v <= _SEQ_MAX:
        raise FrameError(f"envelope field {k!r} must be an integer >= {lo}")
    return v


def _str(d: dict[str, Any], k: str, max_len: int = MAX_NAME, empty: bool = False) -> str:
    v = d.get(k)
    if type(v) is not str or (not v and not empty) or len(v) > max_len:
        raise FrameError(f"envelope field {k!r} must be a string of at most {max_len} chars")
    return v


_FIELDS: Final[dict[str, tuple[frozenset[str], frozenset[str]]]] = {
    "hello": (
        frozenset({"v", "name", "role", "session", "durable", "rx"}),
        frozenset({"resumed", "profiles", "creds"}),
    ),
    "m": (frozenset({"s", "m"}), frozenset()),
    "mb": (frozenset({"s", "m"}), frozenset()),
    "a": (frozenset({"u"}), frozenset()),
    "hb": (frozenset(), frozenset()),
    "st?": (frozenset({"q"}), frozenset()),
    "st": (frozenset({"q", "data"}), frozenset()),
    "bye": (frozenset({"reason"}), frozenset()),
}


def check_envelope(d: dict[str, Any]) -> str:
    """Check an envelope's shape and field types; return its tag. FrameError otherwise."""
    if len(d) == 3 and d.get("t") == "m":  # the hot path: one reliable message
        s, m = d.get("s"), d.get("m")
        if type(s) is int and 1 <= s <= _SEQ_MAX and type(m) is dict:
            return "m"
    t = d.get("t")
    spec = _FIELDS.get(t) if type(t) is str else None
    if spec is None:
        raise FrameError(f"unknown envelope tag {str(t)[:20]!r}")
    req, opt = spec
    keys = d.keys() - {"t"}
    if not req <= keys or not keys <= req | opt:
        raise FrameError(f"envelope {t!r} has wrong fields")
    if t == "m":
        _int(d, "s", 1)
        if type(d["m"]) is not dict:
            raise FrameError("envelope 'm' must carry a map")
    elif t == "mb":
        first = _int(d, "s", 1)
        ms = d["m"]
        if type(ms) is not list or not 0 < len(ms) <= MAX_BATCH:
            raise FrameError(f"envelope 'mb' must carry a list of 1..{MAX_BATCH} messages")
        if first + len(ms) - 1 > _SEQ_MAX:
            raise FrameError("envelope 'mb' runs past the largest sequence number")
        for x in ms:
            if type(x) is not dict:
                raise FrameError("envelope 'mb' must carry maps")
    elif t == "a":
        _int(d, "u")
    elif t in ("st?", "st"):
        _int(d, "q")
        if t == "st" and type(d["data"]) is not dict:
            raise FrameError("status data must be a map")
    elif t == "bye":
        _str(d, "reason", 500, empty=True)
    elif t == "hello":
        if d["v"] != PROTOCOL_VERSION:
            raise FrameError(f"unsupported protocol version {d['v']!r}")
        _str(d, "name")
        _str(d, "session", empty=True)
        if d["role"] not in ROLES:
            raise FrameError("hello role must be 'broker' or 'client'")
        if type(d["durable"]) is not bool or type(d.get("resumed", False)) is not bool:
            raise FrameError("hello flags must be booleans")
        _int(d, "rx")
        if "profiles" in d:
            ps = d["profiles"]
            if type(ps) is not list or len(ps) > MAX_PROFILES:
                raise FrameError(f"hello profiles must be a list of at most {MAX_PROFILES}")
            for p in ps:
                if type(p) is not str or not 0 < len(p) <= MAX_NAME:
                    raise FrameError("hello profiles must be non-empty strings")
        if "creds" in d:
            cs = d["creds"]
            if type(cs) is not list or len(cs) > MAX_CREDS:
                raise FrameError(f"hello creds must be a list of at most {MAX_CREDS}")
            if not all(type(c) is bytes and 0 < len(c) <= MAX_CRED_BYTES for c in cs):
                raise FrameError(f"hello creds must be 1..{MAX_CRED_BYTES} bytes each")
    return t  # type: ignore[return-value]
