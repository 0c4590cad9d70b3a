"""Stage I registration and §8 recovery as requests to the publisher (sans-IO).

Theory of operation
-------------------
vcaps.txt §4.1 Stage I: "the subscriber sends its filter F to the publisher over an
authenticated channel"; the publisher answers with ``T_sub`` and admits the subscriber to
its notification group (``K_N``). §8: after a failure the publisher rebuilds its PFPoset
from the ``E_ks(F)`` the brokers hold. :class:`VcapsRegistrar` is the publisher's side of
those exchanges, one decoded request in, one response map out, in the key services' frame
contract (``pubguard.net.keyservice.protocol``, restated here: this layer is below ``net``): ``{"op", "id", ...}`` ->
``{"id", "ok": {...}}`` or ``{"id", "error": code, "message"}``. Its asyncio shell is
:mod:`pubguard.net.vcaps_registrar` (mutual TLS: the caller is the verified certificate's
common name and role, never a field of the request).

Ops:

- ``vcaps_register`` ``{profile, constraints}`` from a ``client``: Stage I for the caller, who
  becomes the subscriber of record; ``{"token": <wire filter>}``.
- ``vcaps_key`` ``{epoch}`` from the publisher's group: ``{"key": K_N}`` of this publisher
  and epoch (the channel is mutual TLS, so the key never travels in clear).
- ``vcaps_recover`` ``{profile, efs}`` from a ``broker``: §8, the ``E_ks(F)`` it holds;
  ``{"added": n}``. A ciphertext that does not open under ``k_s`` is skipped.

Refusals are logged with the peer, the op and the code, never a field value, so no filter
reaches a log.
"""

from __future__ import annotations

import logging
import random as _random
from collections.abc import Iterable, Mapping
from typing import Any, Final

from pubguard.errors import DropError, PubguardError, ValidationError
from pubguard.model.codec import constraint_from_json
from pubguard.model.filters import Filter
from pubguard.schemes.vcaps.publisher import VcapsPublisher
from pubguard.schemes.vcaps.tokens import MAX_LIST, decode_token

__all__ = ["MAX_CONSTRAINTS", "Refused", "VcapsRegistrar", "stored_ciphertexts"]

log = logging.getLogger("pubguard.net.vcaps_registrar")

#: the most constraints a registered filter may have (a bound on one request's work)
MAX_CONSTRAINTS: Final = 64
CLIENT_ROLE: Final = "client"
BROKER_ROLE: Final = "broker"


class Refused(Exception):
    """A request is refused: ``code`` (a key-service error code) and a message that names
    no field value."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code, self.message = code, message


def field(req: Mapping[str, Any], name: str, kind: type) -> Any:
    """``req[name]`` if it is exactly of type ``kind`` (a bool is no int), else Refused."""
    v: Any = req.get(name)
    if type(v) is not kind or (isinstance(v, str) and not 0 < len(v) <= 256):
        raise Refused("malformed", f"field {name!r} must be {kind.__name__}")
    return v


class VcapsRegistrar:
    """The publisher ``publishers``' Stage I and §8 endpoint (one core per profile, all of
    one publisher name)."""

    def __init__(self, publishers: Iterable[VcapsPublisher]) -> None:
        self.publishers = {p.profile: p for p in publishers}
        names = {p.name for p in self.publishers.values()}
        if len(names) != 1:
            raise ValidationError("a registrar serves one publisher (one name, any profiles)")
        self.name = names.pop()
        self.counts: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"VcapsRegistrar({self.name!r}, {sorted(self.publishers)})"

    def handle(
        self,
        req: Any,
        *,
        peer: str,
        peer_role: str | None,
        now: float,
        rng: _random.Random | None = None,
        peer_serial: int | None = None,
    ) -> dict[str, Any]:
        rid = req.get("id") if isinstance(req, Mapping) else None
        op = req.get("op") if isinstance(req, Mapping) else None
        try:
            if not isinstance(req, dict) or type(op) is not str:
                raise Refused("malformed", "a request is a map with an op")
            match op:
                case "vcaps_register":
                    ok = self._register(req, peer, peer_role)
                case "vcaps_key":
                    ok = self._key(req, peer)
                case "vcaps_recover":
                    ok = self._recover(req, peer_role)
                case "info":
                    ok = {"publisher": self.name, "profiles": sorted(self.publishers)}
                case _:
                    raise Refused("unknown_op", "unknown op")
        except Refused as exc:
            log.warning("vcaps registrar: refused %s from %s: %s", op, peer, exc.code)
            self.counts[exc.code] = self.counts.get(exc.code, 0) + 1
            return {"id": rid, "error": exc.code, "message": exc.message}
        self.counts[str(op)] = self.counts.get(str(op), 0) + 1
        return {"id": rid, "ok": ok}

    def _publisher(self, req: dict[str, Any]) -> VcapsPublisher:
        p = self.publishers.get(field(req, "profile", str))
        if p is None:
            raise Refused("invalid", "this publisher does not serve that profile")
        return p

    def _register(self, req: dict[str, Any], peer: str, role: str | None) -> dict[str, Any]:
        if role != CLIENT_ROLE:
            raise Refused("unauthorised", "only a client registers filters")
        pub = self._publisher(req)
        cs = req.get("constraints")
        if not isinstance(cs, list) or not 0 < len(cs) <= MAX_CONSTRAINTS:
            raise Refused("malformed", f"constraints: a list of 1..{MAX_CONSTRAINTS}")
        try:
            f = Filter(tuple(constraint_from_json(c) for c in cs))
        except (PubguardError, ValueError, TypeError, KeyError):
            raise Refused("invalid", "not a filter") from None
        return {"token": pub.register(f, subscriber=peer)}

    def _key(self, req: dict[str, Any], peer: str) -> dict[str, Any]:
        epoch = field(req, "epoch", int)
        keys = next(iter(self.publishers.values())).keys
        try:
            kn = keys.notification_key(self.name, epoch, requester=peer)
        except DropError:
            raise Refused("unauthorised", "not in this publisher's group") from None
        return {"key": kn.reveal()}

    def _recover(self, req: dict[str, Any], role: str | None) -> dict[str, Any]:
        if role != BROKER_ROLE:
            raise Refused("unauthorised", "only a broker returns E_ks(F)")
        pub = self._publisher(req)
        efs = req.get("efs")
        if not isinstance(efs, list) or len(efs) > MAX_LIST:
            raise Refused("malformed", f"efs: a list of at most {MAX_LIST} ciphertexts")
        if not all(type(e) is bytes for e in efs):
            raise Refused("malformed", "efs holds bytes only")
        return {"added": pub.recover(efs)}


def stored_ciphertexts(
    subscriptions: Iterable[Mapping[str, Any]], profile: str, publisher: str
) -> list[bytes]:
    """§8: the ``E_ks(F)`` of ``publisher``'s tokens among a broker's stored subscription
    messages (``BrokerStore.items("subscriptions")`` values' ``message``); anything else, or
    a token that does not decode, is skipped."""
    out: dict[bytes, None] = {}
    for msg in subscriptions:
        f = msg.get("filter")
        if msg.get("profile") != profile or not isinstance(f, Mapping):
            continue
        if f.get("pub") != publisher or "tok" not in f:
            continue
        try:
            out[decode_token(profile, f).ef] = None
        except ValidationError:
            continue
    return list(out)
