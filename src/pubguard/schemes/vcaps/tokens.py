"""Subscription tokens ``T_sub`` and notification routing headers of the three v-CAPS profiles.

Theory of operation
-------------------
vcaps.txt §4.1 step 2: ``T_sub := <parents> F_pred <children> F_succ <filter> ID_F | E_ks(F)``.
Brokers build their BFPoset from it (Stage II) and keep ``E_ks(F)`` for publisher recovery
(§8). We add the publisher's Ed25519 signature over the token (the paper's brokers are honest
but curious and check nothing; ours refuse a forged token at the first broker). The wire
filter of a subscription is ``{"pub": <publisher>, "tok": <bytes>, "sig": <bytes>}``; ``tok``
is a msgpack list whose first item names the kind:

- ``["rv", ID, [pred IDs], [succ IDs], E_ks(F)]`` (§4.1);
- ``["srv", x_ID, k_ID, [𝓔(F_pred)], [𝓔(F_succ)], E_ks(F)]`` (§5.3: ``T'_sub``);
- ``["fast", h_ID, k_f, n, [PRF(k_p, n)], [PRF(k_s, n)], E_ks(F)]`` (SRV-fast: the pred/succ
  lists as codewords under the token's own fresh nonce ``n``).

``F_pred`` / ``F_succ`` are *transitive*: every PFPoset filter that covers F (is covered by F),
not only the immediate parents (children). docs/vcaps.md says why; routing is correct either
way (a broker suppresses only on a covering it was told of, and the routing vector lists every
matching ID), transitive lists just let a broker see every covering among the filters it holds.

Each token kind answers ``a.covers(b)`` from what the two tokens say: ``a`` covers ``b`` when
``a`` is in ``b``'s predecessor list or ``b`` in ``a``'s successor list. Whichever of the two
was issued later knows the relation (its lists were computed with the other in the PFPoset).

A publication's ``routing`` is ``{"pub", "rv": [IDs]}``, ``{"pub", "srv": [cipher IDs]}`` or
``{"pub", "n": nonce, "v": [codewords]}``; its ``meta`` carries the key ``epoch`` of ``K_N`` and
the publisher's signature over event id, profile, routing, epoch and ``H(body)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import msgpack

from pubguard import native as nb
from pubguard.crypto import AesPrf, H, KeyedHash, SigningKey
from pubguard.errors import ValidationError
from pubguard.schemes.vcaps.swp import ID_BYTES, swp_match_any

__all__ = [
    "ADVERT",
    "FAST",
    "MAX_LIST",
    "RV",
    "SRV",
    "FastRouting",
    "FastToken",
    "RvToken",
    "SrvToken",
    "Token",
    "decode_routing",
    "decode_token",
    "native_vcaps",
    "notification_message",
    "codeword_set",
    "sign_token",
    "token_message",
]

RV: Final = "vcaps-rv"
SRV: Final = "vcaps-srv"
FAST: Final = "vcaps-srv-fast"
_KIND: Final = {RV: "rv", SRV: "srv", FAST: "fast"}
#: the longest predecessor / successor list or routing vector a broker accepts (a bound on
#: the work one message can ask for; the paper's largest PFPoset has 9,400 filters)
MAX_LIST: Final = 1 << 16
#: an advertisement's signed body starts with this (then the profile name)
ADVERT: Final = b"advertise:"
_TOKEN_CTX: Final = b"pubguard/vcaps/token\x00"
_NOTE_CTX: Final = b"pubguard/vcaps/notification\x00"


def _ids(v: Any, what: str) -> tuple[bytes, ...]:
    if not isinstance(v, list | tuple) or len(v) > MAX_LIST:
        raise ValidationError(f"v-CAPS {what} must be a list of at most {MAX_LIST} IDs")
    for b in v:
        if type(b) is not bytes or len(b) != ID_BYTES:
            raise ValidationError(f"v-CAPS {what} holds 16-byte values only")
    return tuple(v)


def _b16(v: Any, what: str) -> bytes:
    if type(v) is not bytes or len(v) != ID_BYTES:
        raise ValidationError(f"v-CAPS {what} must be 16 bytes")
    return v


@dataclass(frozen=True, slots=True)
class RvToken:
    """RV's ``T_sub`` as a broker holds it: ``ID_F``, transitive ``F_pred`` / ``F_succ``."""

    handle: bytes  # ID_F
    pred: frozenset[bytes]
    succ: frozenset[bytes]
    ef: bytes = field(repr=False)  # E_ks(F), for publisher recovery (§8)

    def covers(self, other: Token) -> bool:
        assert isinstance(other, RvToken)
        return self.handle == other.handle or self.handle in other.pred or other.handle in self.succ


@dataclass(frozen=True, slots=True)
class SrvToken:
    """SRV's ``T'_sub``: ``Q_{ID_F} = {x_ID, k_ID}`` and the SWP-encrypted pred / succ lists."""

    handle: bytes  # x_ID
    k: bytes = field(repr=False)
    pred: tuple[bytes, ...] = field(repr=False)  # 𝓔(F_pred)
    succ: tuple[bytes, ...] = field(repr=False)  # 𝓔(F_succ)
    ef: bytes = field(repr=False)
    xi: int = field(init=False, repr=False, compare=False)
    fk: KeyedHash = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "xi", int.from_bytes(self.handle, "big"))
        object.__setattr__(self, "fk", KeyedHash(self.k))

    def covers(self, other: Token) -> bool:
        """𝓜(other.F'_pred, Q_self) or 𝓜(self.F'_succ, Q_other) (vcaps.txt §5.3 Stage II)."""
        assert isinstance(other, SrvToken)
        return (
            self.handle == other.handle
            or swp_match_any(other.pred, self.xi, self.fk)
            or swp_match_any(self.succ, other.xi, other.fk)
        )


@dataclass(frozen=True, slots=True)
class FastToken:
    """SRV-fast's token: handle ``h_ID``, codeword key ``k_f``, pred / succ codewords under ``n``."""

    handle: bytes
    k: bytes = field(repr=False)
    nonce: bytes = field(repr=False)
    pred: frozenset[bytes] = field(repr=False)
    succ: frozenset[bytes] = field(repr=False)
    ef: bytes = field(repr=False)
    prf: AesPrf = field(init=False, repr=False, compare=False)
    #: the pred / succ codewords as native sets (:func:`codeword_set`; None on the Python
    #: backend), for Stage II's native tests
    pred_cw: Any = field(init=False, repr=False, compare=False)
    succ_cw: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prf", AesPrf(self.k))
        object.__setattr__(self, "pred_cw", codeword_set(self.pred))
        object.__setattr__(self, "succ_cw", codeword_set(self.succ))

    def covers(self, other: Token) -> bool:
        assert isinstance(other, FastToken)
        return (
            self.handle == other.handle
            or self.prf(other.nonce) in other.pred
            or other.prf(self.nonce) in self.succ
        )


Token = RvToken | SrvToken | FastToken


@dataclass(frozen=True, slots=True)
class FastRouting:
    """A decoded SRV-fast routing header: the nonce and the (padded) codeword set ``V``.
    ``cw``: ``V`` as the native matcher's set (:func:`codeword_set`), built once per
    notification as RV's ``frozenset`` of IDs is; None on the Python backend."""

    nonce: bytes
    v: frozenset[bytes]
    cw: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cw", codeword_set(self.v))


def native_vcaps() -> Any:
    """The native module when it is active and has the SRV-fast kernel
    (``native/src/vcaps.rs``), else None (the Python reference runs)."""
    m = nb.NATIVE
    return m if m is not None and hasattr(m, "VcapsKeys") else None


def codeword_set(codewords: frozenset[bytes]) -> Any:
    """16-byte codewords as the native backend's ``VcapsCodewords`` (sorted, bucketed, raw
    bytes), or None on the Python backend."""
    m = native_vcaps()
    return None if m is None else m.VcapsCodewords(b"".join(codewords))


def token_message(publisher: str, tok: bytes) -> bytes:
    """What the publisher signs for a token (domain-separated)."""
    return _TOKEN_CTX + publisher.encode() + b"\x00" + tok


def sign_token(sk: SigningKey, publisher: str, body: list[Any]) -> dict[str, Any]:
    """The wire filter of a subscription: the packed token and its signature."""
    tok = msgpack.packb(body, use_bin_type=True)
    return {"pub": publisher, "tok": tok, "sig": sk.sign(token_message(publisher, tok))}


def decode_token(profile: str, wire: Mapping[str, Any]) -> Token:
    """The broker's view of a ``T_sub`` (ValidationError when malformed; no signature check:
    that is the guard's, ``VcapsBroker.broker_check``)."""
    if not isinstance(wire, Mapping) or set(wire) != {"pub", "tok", "sig"}:
        raise ValidationError("a v-CAPS token is {pub, tok, sig}")
    tok = wire["tok"]
    if type(tok) is not bytes or len(tok) > 64 * MAX_LIST:
        raise ValidationError("v-CAPS token body must be bytes")
    try:
        body = msgpack.unpackb(tok, raw=False, use_list=True, max_bin_len=len(tok))
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise ValidationError("v-CAPS token body is not msgpack") from exc
    if not isinstance(body, list) or not body or body[0] != _KIND.get(profile):
        raise ValidationError(f"not a {profile} token")
    ef = body[-1]
    if type(ef) is not bytes or not ef:
        raise ValidationError("v-CAPS token lacks E_ks(F)")
    match body:
        case ["rv", fid, pred, succ, _]:
            return RvToken(
                _b16(fid, "ID"),
                frozenset(_ids(pred, "F_pred")),
                frozenset(_ids(succ, "F_succ")),
                ef,
            )
        case ["srv", x, k, pred, succ, _]:
            return SrvToken(
                _b16(x, "x_ID"), _b16(k, "k_ID"), _ids(pred, "F'_pred"), _ids(succ, "F'_succ"), ef
            )
        case ["fast", h, k, n, pred, succ, _]:
            return FastToken(
                _b16(h, "h_ID"),
                _b16(k, "k_f"),
                _b16(n, "nonce"),
                frozenset(_ids(pred, "pred codewords")),
                frozenset(_ids(succ, "succ codewords")),
                ef,
            )
    raise ValidationError(f"malformed {profile} token")


def decode_routing(profile: str, routing: Mapping[str, Any]) -> Any:
    """The broker's view of a routing header: RV -> frozenset of IDs, SRV -> tuple of cipher
    IDs, SRV-fast -> :class:`FastRouting`."""
    if not isinstance(routing, Mapping) or type(routing.get("pub")) is not str:
        raise ValidationError("v-CAPS routing names its publisher")
    if profile == RV and len(routing) == 2 and "rv" in routing:
        return frozenset(_ids(routing["rv"], "RV"))
    if profile == SRV and len(routing) == 2 and "srv" in routing:
        return _ids(routing["srv"], "SRV")
    if profile == FAST and len(routing) == 3 and "v" in routing and "n" in routing:
        return FastRouting(_b16(routing["n"], "nonce"), frozenset(_ids(routing["v"], "V")))
    raise ValidationError(f"malformed {profile} routing")


def notification_message(
    event_id: str, profile: str, routing: Mapping[str, Any], epoch: int, body: bytes
) -> bytes:
    """What the publisher signs for a notification ``<RV, E_KN(N)>``."""
    r = {k: routing[k] for k in sorted(routing)}
    return _NOTE_CTX + msgpack.packb([event_id, profile, r, epoch, H(body)], use_bin_type=True)
