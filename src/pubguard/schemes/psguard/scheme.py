"""The PSGuard profile: key-tree authorisation, tokenised routing, sealed secret attributes.

Theory of operation (psguard.txt §3-§4.1). Three parties, three sets of functions, all pure
(time and randomness come in as arguments) so the Spark pipeline and the broker network share
them:

* **Publisher** (:class:`~pubguard.schemes.psguard.publisher.Publisher`, holds the KDC's topic
  keys): an event of a type whose ``topic`` attribute is ``w`` lives in *scope* ``w`` (types
  without a topic attribute form one scope per type). Each routable attribute becomes tokens
  (:mod:`pubguard.schemes.psguard.tokens`); the encryption key is
  ``K(e) = H(S(w) || K^{a1}_{leaf} || K^{a2}_{leaf} ...)`` over the key-tree leaves of the
  event's routable attributes (NAKT ``K_{ktid(v)}``, category node, prefix/suffix chain,
  equality leaf), with ``S(w)`` the scope key every subscriber of ``w`` holds. Secret
  attributes and the payload are AEAD-sealed under ``K(e)`` with associated data
  ``aad_for(type_id, attribute, epoch, event_id)``; the routable values travel in a *hint*
  sealed under ``KH(S(w), "psguard-hint")`` (psguard.txt sends ``ktid`` in the clear; we hide
  it from brokers and show it only to the scope's subscribers). The record is signed with the
  publisher's Ed25519 key (eventguard.txt §4.4 publish guard, ARCHITECTURE.md modern choices).
* **KDC / authority** (:class:`~pubguard.schemes.psguard.authority.Authority`): turns a filter
  into token groups (what brokers match) and into authorisation keys
  :class:`~pubguard.schemes.psguard.authority.FilterKeys` (psguard.txt §3.1 minimal covers).
  Roots of attributes a filter leaves unconstrained are issued on demand (stateless KDC,
  §3.2.1); a root of a constrained attribute is refused.
* **Broker** (no keys): :func:`~pubguard.schemes.psguard.record.verify_record` (signature),
  :func:`~pubguard.schemes.psguard.record.check_record` (signature, timestamp window), and
  matching: a filter of ``n`` token groups matches an event that meets ``n`` of its tokens
  (:func:`~pubguard.schemes.psguard.record.broker_match`).

A subscriber opens a delivery with :meth:`~pubguard.schemes.psguard.authority.FilterKeys.open`,
which derives ``K(e)`` only when every routable attribute's leaf lies below one of its
authorisation nodes, and re-checks its plaintext filter (exactness under least-count snapping,
psguard.txt §3.1).

Layout: :mod:`~pubguard.schemes.psguard.record` (schema, record, signed form, broker checks,
reference match), :mod:`~pubguard.schemes.psguard.keytree` (``K(e)`` and its leaves),
:mod:`~pubguard.schemes.psguard.publisher` and :mod:`~pubguard.schemes.psguard.authority`
(KDC side and its :class:`~pubguard.schemes.psguard.authority.FilterKeys`); the package face
:mod:`pubguard.schemes.psguard` exports their public names. This module holds only
:class:`PSGuardScheme`, the profile through the generic Scheme protocol.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Mapping
from typing import Any

from pubguard.crypto import SigningKey, VerifyKey
from pubguard.errors import DropReason, InvalidToken, ValidationError
from pubguard.keys.kdc import KDC
from pubguard.model import Event, Filter
from pubguard.schemes.base import BrokerScheme, ClientScheme
from pubguard.schemes.psguard.authority import Authority, FilterKeys
from pubguard.schemes.psguard.publisher import Publisher
from pubguard.schemes.psguard.record import (
    DEFAULT_MAX_DELAY_MS,
    PROFILE,
    ProtectedFilterRows,
    ProtectedRecord,
    Schema,
    broker_match,
    check_mode,
    check_record,
    decode_secrets,
    encode_secrets,
    length_prefixed,
)

__all__ = ["PSGuardScheme"]


# -- the Scheme protocol face (pubguard.schemes.base), for the broker network ------------------


def _unpack_body(body: bytes) -> tuple[bytes, bytes, bytes]:
    parts = []
    i = 0
    try:
        for _ in range(3):
            (n,) = struct.unpack_from(">I", body, i)
            parts.append(body[i + 4 : i + 4 + n])
            i += 4 + n
    except struct.error:
        raise ValidationError("malformed psguard body") from None
    if i != len(body):
        raise ValidationError("malformed psguard body")
    return parts[0], parts[1], parts[2]


class PSGuardScheme(BrokerScheme, ClientScheme):
    """PSGuard through the :class:`~pubguard.schemes.base.Scheme` protocol.

    Client side needs the key holders it plays: ``kdc`` (publishers protect events; the KDC
    tokenises a subscriber's filters and issues its keys, remembered for ``open_event``) and
    ``signing_key`` + ``publisher``. Broker side needs only ``verify_keys`` (public).
    Wire: ``routing = {"mode", "nonce", "tokens"}``; ``body`` = hint, sealed secrets and
    sealed payload (length-prefixed); ``meta = {"publisher", "ts", "epoch", "sig"}``."""

    profile = PROFILE

    def __init__(
        self,
        schema: Schema,
        *,
        verify_keys: Mapping[str, VerifyKey] | None = None,
        kdc: KDC | None = None,
        publisher: str | None = None,
        signing_key: SigningKey | None = None,
        mode: str = "randomized",
        epoch: int = 0,
        max_delay_ms: int = DEFAULT_MAX_DELAY_MS,
    ) -> None:
        self.schema, self.mode, self.epoch = schema, check_mode(mode), epoch
        self.verify_keys = dict(verify_keys or {})
        self.max_delay_ms = max_delay_ms
        self._pub = (
            Publisher(kdc, schema, name=publisher, signing_key=signing_key, epoch=epoch, mode=mode)
            if kdc is not None and publisher and signing_key is not None
            else None
        )
        self._auth = Authority(kdc, schema, epoch=epoch) if kdc is not None else None
        self._keys: dict[str, FilterKeys] = {}

    def __repr__(self) -> str:
        return f"PSGuardScheme(mode={self.mode!r}, epoch={self.epoch})"

    # -- client side ------------------------------------------------------------------------
    def protect_filter(self, f: Filter, *, now: float, rng: random.Random | None = None) -> Any:
        from pubguard.schemes.base import ProtectedFilter

        if self._auth is None:
            raise ValidationError("psguard: protecting a filter needs the KDC")
        fid = f.id or f"f{len(self._keys) + 1}"
        f = f.with_id(fid)
        pf = self._auth.protect_filter(f)
        self._keys[fid] = self._auth.authorise(f)
        groups = [[list(g) for g in scope] for scope in pf.groups]
        return ProtectedFilter({"id": fid, "groups": groups})

    protect_advertisement = protect_filter

    def protect_event(self, event: Event, *, now: float, rng: random.Random | None = None) -> Any:
        from pubguard.schemes.base import ProtectedEvent

        if self._pub is None:
            raise ValidationError("psguard: publishing needs the KDC and a signing key")
        r = self._pub.protect(event, now_ms=int(now * 1000), rng=rng)
        body = (
            length_prefixed(r.hint)
            + length_prefixed(encode_secrets(r.secrets))
            + length_prefixed(r.payload)
        )
        routing = {"mode": r.mode, "nonce": r.nonce, "tokens": list(r.tokens)}
        meta = {"publisher": r.publisher, "ts": r.ts, "epoch": r.epoch, "sig": r.sig}
        return ProtectedEvent(r.event_id, routing, body, meta)

    def _record(
        self, event_id: str, routing: Mapping[str, Any], body: bytes, meta: Mapping[str, Any]
    ) -> ProtectedRecord:
        try:
            hint, sec, payload = _unpack_body(bytes(body))
            return ProtectedRecord(
                str(event_id),
                str(meta["publisher"]),
                int(meta["ts"]),
                int(meta["epoch"]),
                str(routing["mode"]),
                bytes(routing["nonce"]),
                tuple(int(t) for t in routing["tokens"]),
                hint,
                decode_secrets(sec),
                payload,
                bytes(meta["sig"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValidationError(f"malformed psguard publication: {exc}") from None

    def open_event(
        self,
        event_id: str,
        routing: Mapping[str, Any],
        body: bytes,
        meta: Mapping[str, Any],
        *,
        now: float,
    ) -> Event:
        rec = self._record(event_id, routing, body, meta)
        for fk in self._keys.values():
            try:
                return fk.open(rec)
            except InvalidToken:
                continue
        raise InvalidToken()

    # -- broker side ------------------------------------------------------------------------
    def decode_filter(self, wire: Mapping[str, Any]) -> ProtectedFilterRows:
        try:
            groups = tuple(
                tuple(tuple(bytes(t) for t in g) for g in scope) for scope in wire["groups"]
            )
            return ProtectedFilterRows(str(wire["id"]), groups)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValidationError(f"malformed psguard filter: {exc}") from None

    def decode_event(self, routing: Mapping[str, Any]) -> ProtectedRecord:
        try:
            nonce = bytes(routing["nonce"])
            return ProtectedRecord(
                "",
                "",
                0,
                self.epoch,
                str(routing["mode"]),
                nonce,
                tuple(int(t) for t in routing["tokens"]),
                b"",
                (),
                b"",
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValidationError(f"malformed psguard routing: {exc}") from None

    def broker_check(self, message: Any, ctx: Any) -> DropReason | None:
        routing = getattr(message, "routing", None)
        if routing is None:
            return None  # subscriptions carry tokens only; nothing to verify
        try:
            rec = self._record(message.event_id, routing, message.body, message.meta)
        except ValidationError:
            return DropReason.MALFORMED
        return check_record(
            rec, self.verify_keys, now_ms=int(ctx.now * 1000), max_delay_ms=self.max_delay_ms
        )

    def covers(self, f1: ProtectedFilterRows, f2: ProtectedFilterRows) -> bool:
        return f1.groups == f2.groups  # sound: tokens reveal no order between filters

    def broker_match(self, pf: ProtectedFilterRows, pe: ProtectedRecord) -> bool:
        return broker_match(pf, pe)

    def new_matcher(self) -> Any:
        from pubguard.schemes.base import LinearMatcher

        return LinearMatcher(self.broker_match)

    def outgoing(self, message: Any, ctx: Any) -> Any:
        return message
