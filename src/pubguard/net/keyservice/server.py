"""Key services over mutual TLS: EventGuard's meta-service and Narada's topic discovery node.

Theory of operation
-------------------
eventguard.txt §3.2 has subscribers and publishers obtain permits, tokens and keys from the
meta-service (MS); issue 5 asks for it to be reachable over the network. This module is that
service's network face, in the house split:

- :class:`KeyServiceCore` is sans-IO: ``handle(request, peer=..., peer_role=..., now=...,
  rng=...)`` takes one decoded request map and returns one response map. It wraps a
  :class:`~pubguard.keys.ms.MetaService` and, optionally, a
  :class:`~pubguard.keys.discovery.TopicDiscoveryNode` (narada §II-A secure topic discovery).
- :class:`KeyServiceServer` is the asyncio shell: one listening socket, mutual TLS 1.3 (the
  client certificate must be issued by the project CA), length-prefixed msgpack frames
  (:mod:`pubguard.wire.framing`), one response per request, in order.
- :class:`~pubguard.net.keyservice.client.KeyServiceClient` is a blocking proxy that implements
  :class:`~pubguard.schemes.eventguard.client.MetaServiceLike`, so an
  :class:`~pubguard.schemes.eventguard.client.EventGuardClient` gets its permits over the
  network exactly as it would from the in-process MS.
- Optionally the core also hosts the PSGuard KDC and the default profile's authority
  (:class:`~pubguard.net.keyservice.kdc.KdcService`, psguard.txt §3: the ``kdc_*`` and
  ``authority_*`` ops); :mod:`pubguard.net.keyservice.kdc_client` has their proxies.

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

Frames. A request is ``{"op": str, "id": int, ...fields}``; a response is ``{"id", "ok": {...}}``
or ``{"id", "error": code, "message": str}`` with ``code`` one of :data:`ERROR_CODES`. Fields
are checked strictly (types, lengths); a frame that cannot be decoded at all gets one
``malformed`` error frame and its connection is closed, while the server keeps serving every
other connection. Every refusal is logged with the peer, the op and the code -- never with a
field value, so no key, UST or UAT reaches a log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random as _random
import ssl as _ssl
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from pubguard.crypto import VerifyKey
from pubguard.crypto.x509 import Certificate
from pubguard.errors import (
    DropError,
    DropReason,
    FrameError,
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
from pubguard.net.tls import peer_identity
from pubguard.wire.framing import FrameDecoder, encode_frame

if TYPE_CHECKING:
    from pubguard.net.keyservice.kdc import KdcService

__all__ = [
    "ERROR_CODES",
    "MAX_REQUEST_SIZE",
    "KeyServiceCore",
    "KeyServiceServer",
]

log = logging.getLogger(__name__)

MAX_REQUEST_SIZE: Final = 64 * 1024  # a request carries a permit, a key and a certificate at most
MAX_FIELD: Final = 16 * 1024
IDLE_TIMEOUT: Final = 300.0
CALL_TIMEOUT: Final = 10.0
ERROR_CODES: Final = (
    "malformed",
    "unknown_op",
    "invalid",
    "invalid_token",
    "unauthorised",
    "revoked",
    "unavailable",
)


#: what a revoked identity may still ask for
_OPEN_TO_REVOKED: Final = frozenset({"info", "authority_revocations"})


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        self.code, self.message = code, message


# -- strict field access ------------------------------------------------------------------------


def _field(req: dict[str, Any], name: str, kind: type) -> Any:
    v: Any = req.get(name)
    if type(v) is not kind:
        raise _Refused("malformed", f"field {name!r} must be {kind.__name__}")
    if isinstance(v, str | bytes) and len(v) > MAX_FIELD:
        raise _Refused("malformed", f"field {name!r} is too long")
    if isinstance(v, str | bytes) and not v:
        raise _Refused("invalid", f"field {name!r} must not be empty")
    return v


def _permit(req: dict[str, Any], cls: type[Permit]) -> Any:
    p = decode_permit(_field(req, "permit", bytes))  # InvalidToken if malformed
    if not isinstance(p, cls):
        raise _Refused("invalid_token", "wrong permit kind")
    return p


def _own(permit: Permit, peer: str) -> None:
    if permit.subject != peer:
        raise _Refused("unauthorised", "the permit is not the caller's")


def _sub_grant(g: SubscriptionGrant) -> dict[str, Any]:
    return {"permit": g.permit.to_bytes(), "key": g.key.reveal(), "ust": g.ust.reveal()}


def _ad_grant(g: AdvertisementGrant) -> dict[str, Any]:
    return {"permit": g.permit.to_bytes(), "key": g.key.reveal(), "uat": g.uat.reveal()}


# -- the sans-IO core ---------------------------------------------------------------------------


class KeyServiceCore:
    """Requests in, responses out. ``ms``, ``tdn`` and/or ``kdc``: the services hosted."""

    def __init__(
        self,
        ms: MetaService | None = None,
        *,
        tdn: TopicDiscoveryNode | None = None,
        kdc: KdcService | None = None,
    ) -> None:
        if ms is None and tdn is None and kdc is None:
            raise ValidationError("a key service hosts an MS, a TDN, a KDC or several")
        self.ms, self.tdn, self.kdc = ms, tdn, kdc
        self.stats: Counter[str] = Counter()
        self._serial: int | None = None
        self._ops: dict[str, Callable[..., dict[str, Any]]] = {"info": self._info}
        if ms is not None:
            self._ops.update(
                subscribe=self._subscribe,
                advertise=self._advertise,
                unsubscribe=self._unsubscribe,
                unadvertise=self._unadvertise,
                renew_subscription=self._renew_sub,
                renew_advertisement=self._renew_ad,
            )
        if tdn is not None:
            self._ops.update(tdn_advertise=self._tdn_advertise, discover=self._discover)
        if kdc is not None:
            for name, fn in kdc.ops().items():
                self._ops[name] = self._with_serial(fn)

    def _with_serial(self, fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def op(req: dict[str, Any], peer: str, role: Any, now: float, rng: Any) -> dict[str, Any]:
            return fn(req, peer, role, now, rng, self._serial)

        return op

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
        self._serial = peer_serial
        rid = req.get("id")
        if type(rid) is not int:
            rid = None
        op = req.get("op")
        try:
            if rid is None or type(op) is not str:
                raise _Refused("malformed", "a request needs an int 'id' and a str 'op'")
            fn = self._ops.get(op)
            if fn is None:
                raise _Refused("unknown_op", f"unknown op {op[:40]!r}")
            if op not in _OPEN_TO_REVOKED and self.kdc is not None and self.kdc.is_revoked(peer):
                raise _Refused("revoked", "the caller's identity is revoked")
            out = fn(req, peer, peer_role, now, rng)
        except _Refused as exc:
            return self._refuse(rid, op, peer, exc.code, exc.message)
        except InvalidToken:
            return self._refuse(rid, op, peer, "invalid_token", "invalid token")
        except RevokedError:
            return self._refuse(rid, op, peer, "revoked", "certificate revoked")
        except DropError as exc:
            code = "unauthorised" if exc.reason is DropReason.UNAUTHORISED else "invalid_token"
            return self._refuse(rid, op, peer, code, exc.reason.value)
        except (ValidationError, StateError) as exc:
            return self._refuse(rid, op, peer, "invalid", str(exc))
        except PubguardError as exc:
            return self._refuse(rid, op, peer, "invalid", type(exc).__name__)
        except Exception:  # a bug must cost one request, not the connection or the server
            log.exception("keyservice: internal error on %s", op if isinstance(op, str) else "?")
            return self._refuse(rid, op, peer, "unavailable", "internal error")
        self.stats[f"ok:{op}"] += 1
        return {"id": rid, "ok": out}

    def _refuse(self, rid: int | None, op: Any, peer: str, code: str, msg: str) -> dict[str, Any]:
        self.stats[code] += 1
        shown = op[:40] if isinstance(op, str) else "?"
        log.warning("keyservice: refused %s from %s: %s", shown, peer, code)
        return {"id": rid, "error": code, "message": msg}

    # -- ops (req, peer, role, now, rng) -> result map ---------------------------------------

    def _info(
        self, req: dict[str, Any], peer: str, role: Any, now: float, rng: Any
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"identity": peer, "ops": sorted(self._ops)}
        if self.ms is not None:
            out["ms_key"] = self.ms.public_key.to_bytes()
        if self.kdc is not None:
            out["kdc"] = self.kdc.info()
        return out

    def _mine(self) -> MetaService:
        assert self.ms is not None
        return self.ms

    def _subject(self, req: dict[str, Any], peer: str) -> None:
        # eventguard.txt §4.2-4.3: the MS issues a permit only in the authenticated caller's name
        if _field(req, "subject", str) != peer:
            raise _Refused("unauthorised", "a permit can be requested only in one's own name")

    def _subscribe(
        self, req: dict[str, Any], peer: str, role: Any, now: float, rng: Any
    ) -> dict[str, Any]:
        self._subject(req, peer)
        return _sub_grant(self._mine().subscribe(peer, _field(req, "w", str), now=now, rng=rng))

    def _advertise(
        self, req: dict[str, Any], peer: str, role: Any, now: float, rng: Any
    ) -> dict[str, Any]:
        self._subject(req, peer)
        pk = VerifyKey.from_bytes(_field(req, "pk", bytes))
        if self.kdc is not None:  # revoking the identity revokes this key at eventguard brokers
            self.kdc.note_key(peer, pk.to_bytes(), now)
        return _ad_grant(self._mine().advertise(peer, pk, _field(req, "w", str), now=now, rng=rng))

    def _unsubscribe(
        self, req: dict[str, Any], peer: str, role: Any, now: float, rng: Any
    ) -> dict[str, Any]:
        p = _permit(req, SubscriptionPermit)
        _own(p, peer)
        usb = self._mine().unsubscribe(p, _field(req, "ust", bytes), now=now, rng=rng)
        return {"permit": usb.to_bytes()}

    def _unadvertise(
        self, req: dict[str, Any], peer: str, role: Any, now: float, rng: Any
    ) -> dict[str, Any]:
        p = _permit(req, AdvertisementPermit)
        _own(p, peer)
        uad = self._mine().unadvertise(p, _field(req, "uat", bytes), now=now, rng=rng)
        return {"permit": uad.to_bytes()}

    def _renew_sub(
        self, req: dict[str, Any], peer: str, role: Any, now: float, rng: Any
    ) -> dict[str, Any]:
        p = _permit(req, SubscriptionPermit)
        _own(p, peer)
        ms = self._mine()
        return _sub_grant(
            ms.renew_subscription(p, _field(req, "ust", bytes), _field(req, "w", str), now=now)
        )

    def _renew_ad(
        self, req: dict[str, Any], peer: str, role: Any, now: float, rng: Any
    ) -> dict[str, Any]:
        p = _permit(req, AdvertisementPermit)
        _own(p, peer)
        ms = self._mine()
        return _ad_grant(
            ms.renew_advertisement(p, _field(req, "uat", bytes), _field(req, "w", str), now=now)
        )

    # -- narada §II-A: the topic discovery node ---------------------------------------------

    def _tdn_advertise(
        self, req: dict[str, Any], peer: str, role: Any, now: float, rng: Any
    ) -> dict[str, Any]:
        assert self.tdn is not None
        if role != "kmc":  # only a KMC (certificate role) may place its advertisement
            raise _Refused("unauthorised", "only a KMC may advertise its topic")
        adv = TopicAdvertisement.from_bytes(_field(req, "adv", bytes))
        if Certificate.from_der(adv.kmc_cert).name != peer:
            raise _Refused("unauthorised", "a KMC advertises only its own topic")
        self.tdn.advertise(adv, now=now)
        return {"version": adv.version}

    def _discover(
        self, req: dict[str, Any], peer: str, role: Any, now: float, rng: Any
    ) -> dict[str, Any]:
        assert self.tdn is not None
        try:
            kmc = _field(req, "kmc", str) if req.get("kmc") else ""
            r = DiscoveryRequest(
                _field(req, "cert", bytes),
                kmc,
                _field(req, "kem", bytes),
                _field(req, "ts", int),
                _field(req, "nonce", bytes),
                _field(req, "sig", bytes),
            )
        except (TypeError, ValueError):
            raise _Refused("malformed", "bad discovery request") from None
        # the requester's credentials must be its own TLS identity (no relaying of others')
        if Certificate.from_der(r.cert).name != peer:
            raise _Refused("unauthorised", "credentials of another identity")
        return {"reply": self.tdn.discover(r, now=now, rng=rng)}


# -- the asyncio shell ----------------------------------------------------------------------------


class KeyServiceServer:
    """Serve a :class:`KeyServiceCore` on ``host:port`` behind mutual TLS (``ssl_context``
    from :func:`~pubguard.crypto.x509.server_ssl_context`: client certificates required).
    ``clock`` and ``rng`` feed the core (real time and OS randomness by default)."""

    def __init__(
        self,
        core: KeyServiceCore,
        ssl_context: _ssl.SSLContext,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], float] = time.time,
        rng: _random.Random | None = None,
    ) -> None:
        if ssl_context.verify_mode != _ssl.CERT_REQUIRED:
            raise ValidationError("the key service requires client certificates (mutual TLS)")
        self.core, self.ssl, self.host, self.port = core, ssl_context, host, port
        self.clock, self.rng = clock, rng
        self.stats: Counter[str] = Counter()
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        """Listen; returns the bound port."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port, ssl=self.ssl)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("keyservice: listening on %s:%d", self.host, self.port)
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

    async def serve_forever(self) -> None:
        if self._server is None:
            await self.start()
        assert self._server is not None
        await self._server.serve_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sslobj = writer.get_extra_info("ssl_object")
        cn, role = peer_identity(sslobj)
        if cn is None:  # pragma: no cover - the TLS context requires a certificate
            writer.close()
            return
        serial = _peer_serial(sslobj)
        self.stats["connections"] += 1
        dec = FrameDecoder(MAX_REQUEST_SIZE)
        try:
            while True:
                data = await asyncio.wait_for(reader.read(65536), IDLE_TIMEOUT)
                if not data:
                    break
                try:
                    frames = dec.feed(data)
                except FrameError as exc:
                    frames = []
                    bad: FrameError | None = exc
                else:
                    bad = dec.error
                for f in frames:
                    resp = self.core.handle(
                        f,
                        peer=cn,
                        peer_role=role,
                        now=self.clock(),
                        rng=self.rng,
                        peer_serial=serial,
                    )
                    writer.write(encode_frame(resp))
                if bad is not None:
                    self.stats["malformed"] += 1
                    log.warning("keyservice: closing link of %s: malformed frame (%s)", cn, bad)
                    writer.write(
                        encode_frame({"id": None, "error": "malformed", "message": str(bad)})
                    )
                    await writer.drain()
                    break
                await writer.drain()
        except (TimeoutError, ConnectionError, _ssl.SSLError, OSError) as exc:
            log.info("keyservice: link of %s ended: %s", cn, type(exc).__name__)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def _peer_serial(sslobj: Any) -> int | None:
    der = sslobj.getpeercert(binary_form=True) if sslobj is not None else None
    return Certificate.from_der(der).serial if der else None
