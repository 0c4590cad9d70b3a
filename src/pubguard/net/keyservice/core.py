"""The key service's sans-IO core: one decoded request in, one response map out.

Theory of operation
-------------------
eventguard.txt §3.2 has subscribers and publishers obtain permits, tokens and keys from the
meta-service (MS); it is reachable over the network. This module is the service's request
handling, in the house split (as :class:`~pubguard.keys.discovery.KmcEndpoint` is to
:mod:`pubguard.net.keyservice.kmc_node`): no sockets, no asyncio; the caller, the time and the
randomness come in as arguments, so tests drive it directly.
:class:`~pubguard.net.keyservice.server.KeyServiceServer` is its asyncio shell.

:class:`KeyServiceCore` owns the services it hosts, each a set of ops ``(req, caller, now, rng)
-> result map`` that raise :class:`~pubguard.net.keyservice.protocol.Refused`:

- :class:`MetaServiceOps`: EventGuard's MS (:class:`~pubguard.keys.ms.MetaService`):
  ``subscribe``, ``advertise``, ``unsubscribe``, ``unadvertise`` and the two renewals.
- :class:`DiscoveryOps`: narada §II-A secure topic discovery
  (:class:`~pubguard.keys.discovery.TopicDiscoveryNode`): ``tdn_advertise`` and ``discover``.
- the PSGuard KDC and the default profile's authority
  (:class:`~pubguard.net.keyservice.kdc.KdcService`, psguard.txt §3: the ``kdc_*`` and
  ``authority_*`` ops); :mod:`pubguard.net.keyservice.kdc_client` has their proxies.

The core itself answers ``info``, translates every failure into one error frame and keeps the
counts.

Identity. The caller's identity is the common name of its verified TLS certificate, never a
field of the request: ``subscribe`` / ``advertise`` for a subject other than the peer, and
``unsubscribe`` / ``unadvertise`` / renewals of a permit whose subject is not the peer, are
refused with ``unauthorised`` (eventguard.txt §4.2-4.3: the MS authenticates S and P before
issuing permits in their names). The MS itself stays stateless (§3.2), so replicas behind
several endpoints remain interchangeable.

Revocation. With a KDC hosted, an identity the authority revoked (``authority_revoke``,
:mod:`pubguard.net.keyservice.kdc`) is refused every op but ``info`` and
``authority_revocations`` with ``revoked``: no more permits, tokens or keys, whatever the
profile; the public keys eventguard publishers advertise are noted for the revocation list.

Frames (:mod:`pubguard.net.keyservice.protocol`). Fields are checked strictly (types,
lengths). Every refusal is logged with the peer, the op and the code -- never with a field
value, so no key, UST or UAT reaches a log.
"""

from __future__ import annotations

import logging
import random as _random
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from pubguard.crypto import VerifyKey
from pubguard.crypto.x509 import Certificate
from pubguard.errors import (
    DropError,
    DropReason,
    InvalidToken,
    PubguardError,
    RevokedError,
    StateError,
    ValidationError,
)
from pubguard.keys.discovery import DiscoveryRequest, TopicAdvertisement, TopicDiscoveryNode
from pubguard.keys.ms import (
    AdvertisementGrant,
    AdvertisementPermit,
    MetaService,
    Permit,
    SubscriptionGrant,
    SubscriptionPermit,
    decode_permit,
)
from pubguard.net.keyservice.protocol import Caller, Op, Refused, field

if TYPE_CHECKING:
    from pubguard.net.keyservice.kdc import KdcService
    from pubguard.net.keyservice.kmc_service import KmcService

__all__ = ["OPEN_TO_REVOKED", "DiscoveryOps", "KeyServiceCore", "MetaServiceOps"]

# the key service logs under one name, its server's, whichever part of it speaks
log = logging.getLogger("pubguard.net.keyservice.server")

#: what a revoked identity may still ask for
OPEN_TO_REVOKED: Final = frozenset({"info", "authority_revocations"})


# -- the sans-IO core ---------------------------------------------------------------------------


class KeyServiceCore:
    """Requests in, responses out. ``ms``, ``tdn`` and/or ``kdc``: the services hosted."""

    def __init__(
        self,
        ms: MetaService | None = None,
        *,
        tdn: TopicDiscoveryNode | None = None,
        kdc: KdcService | None = None,
        kmc: KmcService | None = None,
        health: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        """``health``: the shell's health report (its CRL), answered in ``info``. ``kmc``:
        narada's KMC (:mod:`pubguard.net.keyservice.kmc_service`: the ``kmc_key`` op)."""
        if ms is None and tdn is None and kdc is None and kmc is None:
            raise ValidationError("a key service hosts an MS, a TDN, a KDC, a KMC or several")
        self.ms, self.tdn, self.kdc, self.kmc = ms, tdn, kdc, kmc
        self.health = health
        self.stats: Counter[str] = Counter()
        self._ops: dict[str, Op] = {"info": self._info}
        if ms is not None:
            # revoking an identity revokes the keys it advertised at eventguard brokers
            on_key = kdc.note_key if kdc is not None else None
            self._ops.update(MetaServiceOps(ms, on_key=on_key).ops())
        if tdn is not None:
            self._ops.update(DiscoveryOps(tdn).ops())
        if kdc is not None:
            self._ops.update(kdc.ops())
        if kmc is not None:
            self._ops.update(kmc.ops())

    def __repr__(self) -> str:
        return f"KeyServiceCore(ops={sorted(self._ops)})"

    def handle(
        self,
        req: dict[str, Any],
        *,
        peer: str,
        peer_role: str | None = None,
        now: float,
        rng: _random.Random | None = None,
        peer_serial: int | None = None,
    ) -> dict[str, Any]:
        """One request from the authenticated ``peer`` (``peer_serial``: its certificate's
        serial, bound into the default profile's publish permits); always one response."""
        rid = req.get("id")
        if type(rid) is not int:
            rid = None
        op = req.get("op")
        try:
            out = self.answer(req, Caller(peer, peer_role, peer_serial), now=now, rng=rng)
        except Refused as exc:
            self.stats[exc.code] += 1
            shown = op[:40] if isinstance(op, str) else "?"
            log.warning("keyservice: refused %s from %s: %s", shown, peer, exc.code)
            return {"id": rid, "error": exc.code, "message": exc.message}
        self.stats[f"ok:{op}"] += 1
        return {"id": rid, "ok": out}

    def answer(
        self, req: dict[str, Any], caller: Caller, *, now: float, rng: _random.Random | None
    ) -> dict[str, Any]:
        """The result map of one request, or :class:`Refused`: every failure of an op becomes
        that one typed refusal (an internal error too, after it is logged)."""
        rid, op = req.get("id"), req.get("op")
        try:
            if type(rid) is not int or type(op) is not str:
                raise Refused("malformed", "a request needs an int 'id' and a str 'op'")
            fn = self._ops.get(op)
            if fn is None:
                raise Refused("unknown_op", f"unknown op {op[:40]!r}")
            if op not in OPEN_TO_REVOKED and self.kdc is not None:
                if self.kdc.is_revoked(caller.name):
                    raise Refused("revoked", "the caller's identity is revoked")
            return fn(req, caller, now, rng)
        except Refused:
            raise
        except InvalidToken:
            raise Refused("invalid_token", "invalid token") from None
        except RevokedError:
            raise Refused("revoked", "certificate revoked") from None
        except DropError as exc:
            code = "unauthorised" if exc.reason is DropReason.UNAUTHORISED else "invalid_token"
            raise Refused(code, exc.reason.value) from None
        except (ValidationError, StateError) as exc:
            raise Refused("invalid", str(exc)) from None
        except PubguardError as exc:
            raise Refused("invalid", type(exc).__name__) from None
        except Exception:  # a bug must cost one request, not the connection or the server
            log.exception("keyservice: internal error on %s", op if isinstance(op, str) else "?")
            raise Refused("unavailable", "internal error") from None

    def _info(
        self, req: dict[str, Any], caller: Caller, now: float, rng: _random.Random | None
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"identity": caller.name, "ops": sorted(self._ops)}
        if self.ms is not None:
            out["ms_key"] = self.ms.public_key.to_bytes()
        if self.kdc is not None:
            out["kdc"] = self.kdc.info()
        if self.kmc is not None:
            out.update(self.kmc.info())
        if self.health is not None:
            out["health"] = self.health()
        return out


# -- eventguard.txt §3.2: the meta-service ------------------------------------------------------


def _permit(req: dict[str, Any], cls: type[Permit]) -> Any:
    p = decode_permit(field(req, "permit", bytes))  # InvalidToken if malformed
    if not isinstance(p, cls):
        raise Refused("invalid_token", "wrong permit kind")
    return p


def _own(permit: Permit, caller: Caller) -> None:
    if permit.subject != caller.name:
        raise Refused("unauthorised", "the permit is not the caller's")


def _subject(req: dict[str, Any], caller: Caller) -> None:
    # eventguard.txt §4.2-4.3: the MS issues a permit only in the authenticated caller's name
    if field(req, "subject", str) != caller.name:
        raise Refused("unauthorised", "a permit can be requested only in one's own name")


def _sub_grant(g: SubscriptionGrant) -> dict[str, Any]:
    return {"permit": g.permit.to_bytes(), "key": g.key.reveal(), "ust": g.ust.reveal()}


def _ad_grant(g: AdvertisementGrant) -> dict[str, Any]:
    return {"permit": g.permit.to_bytes(), "key": g.key.reveal(), "uat": g.uat.reveal()}


class MetaServiceOps:
    """EventGuard's MS as key-service ops. ``on_key(identity, public key, now)``: told of every
    public key a publisher advertises (the KDC notes it for the revocation list)."""

    def __init__(
        self,
        ms: MetaService,
        *,
        on_key: Callable[[str, bytes, float], None] | None = None,
    ) -> None:
        self.ms, self.on_key = ms, on_key

    def __repr__(self) -> str:
        return "MetaServiceOps()"

    def ops(self) -> dict[str, Op]:
        return {
            "subscribe": self.subscribe,
            "advertise": self.advertise,
            "unsubscribe": self.unsubscribe,
            "unadvertise": self.unadvertise,
            "renew_subscription": self.renew_subscription,
            "renew_advertisement": self.renew_advertisement,
        }

    def subscribe(
        self, req: dict[str, Any], caller: Caller, now: float, rng: _random.Random | None
    ) -> dict[str, Any]:
        _subject(req, caller)
        return _sub_grant(self.ms.subscribe(caller.name, field(req, "w", str), now=now, rng=rng))

    def advertise(
        self, req: dict[str, Any], caller: Caller, now: float, rng: _random.Random | None
    ) -> dict[str, Any]:
        _subject(req, caller)
        pk = VerifyKey.from_bytes(field(req, "pk", bytes))
        if self.on_key is not None:
            self.on_key(caller.name, pk.to_bytes(), now)
        w = field(req, "w", str)
        return _ad_grant(self.ms.advertise(caller.name, pk, w, now=now, rng=rng))

    def unsubscribe(
        self, req: dict[str, Any], caller: Caller, now: float, rng: _random.Random | None
    ) -> dict[str, Any]:
        p = _permit(req, SubscriptionPermit)
        _own(p, caller)
        usb = self.ms.unsubscribe(p, field(req, "ust", bytes), now=now, rng=rng)
        return {"permit": usb.to_bytes()}

    def unadvertise(
        self, req: dict[str, Any], caller: Caller, now: float, rng: _random.Random | None
    ) -> dict[str, Any]:
        p = _permit(req, AdvertisementPermit)
        _own(p, caller)
        uad = self.ms.unadvertise(p, field(req, "uat", bytes), now=now, rng=rng)
        return {"permit": uad.to_bytes()}

    def renew_subscription(
        self, req: dict[str, Any], caller: Caller, now: float, rng: _random.Random | None
    ) -> dict[str, Any]:
        p = _permit(req, SubscriptionPermit)
        _own(p, caller)
        ust, w = field(req, "ust", bytes), field(req, "w", str)
        return _sub_grant(self.ms.renew_subscription(p, ust, w, now=now))

    def renew_advertisement(
        self, req: dict[str, Any], caller: Caller, now: float, rng: _random.Random | None
    ) -> dict[str, Any]:
        p = _permit(req, AdvertisementPermit)
        _own(p, caller)
        uat, w = field(req, "uat", bytes), field(req, "w", str)
        return _ad_grant(self.ms.renew_advertisement(p, uat, w, now=now))


# -- narada §II-A: the topic discovery node -----------------------------------------------------


class DiscoveryOps:
    """Narada's topic discovery node (TDN) as key-service ops: KMCs place their signed
    advertisements, entities discover a KMC's topic with their own credentials."""

    def __init__(self, tdn: TopicDiscoveryNode) -> None:
        self.tdn = tdn

    def __repr__(self) -> str:
        return "DiscoveryOps()"

    def ops(self) -> dict[str, Op]:
        return {"tdn_advertise": self.advertise, "discover": self.discover}

    def advertise(
        self, req: dict[str, Any], caller: Caller, now: float, rng: _random.Random | None
    ) -> dict[str, Any]:
        if caller.role != "kmc":  # only a KMC (certificate role) may place its advertisement
            raise Refused("unauthorised", "only a KMC may advertise its topic")
        adv = TopicAdvertisement.from_bytes(field(req, "adv", bytes))
        if Certificate.from_der(adv.kmc_cert).name != caller.name:
            raise Refused("unauthorised", "a KMC advertises only its own topic")
        self.tdn.advertise(adv, now=now)
        return {"version": adv.version}

    def discover(
        self, req: dict[str, Any], caller: Caller, now: float, rng: _random.Random | None
    ) -> dict[str, Any]:
        try:
            kmc = field(req, "kmc", str) if req.get("kmc") else ""
            r = DiscoveryRequest(
                field(req, "cert", bytes),
                kmc,
                field(req, "kem", bytes),
                field(req, "ts", int),
                field(req, "nonce", bytes),
                field(req, "sig", bytes),
            )
        except (TypeError, ValueError):
            raise Refused("malformed", "bad discovery request") from None
        # the requester's credentials must be its own TLS identity (no relaying of others')
        if Certificate.from_der(r.cert).name != caller.name:
            raise Refused("unauthorised", "credentials of another identity")
        return {"reply": self.tdn.discover(r, now=now, rng=rng)}
