"""The blocking client of the key services (:mod:`pubguard.net.keyservice.core` behind
:mod:`pubguard.net.keyservice.server`): a remote EventGuard meta-service behind the
``MetaServiceLike`` protocol, and a narada topic discovery node.

Theory of operation
-------------------
One TLS 1.3 connection (our CA-issued certificate; the server's certificate must chain to the
CA, match the host and carry the expected role), one request at a time, one response per
request. Error frames become the typed errors of :mod:`pubguard.errors` (``invalid_token`` ->
InvalidToken, ``unauthorised`` -> DropError, ``revoked`` -> RevokedError, ``invalid`` ->
ValidationError, anything else -> FrameError); a lost connection is re-dialled once. Permits
that come back are checked against the MS public key and the expected subject before an
:class:`~pubguard.schemes.eventguard.client.EventGuardClient` ever uses them; keys, USTs and
UATs are held as :class:`~pubguard.crypto.SecretBytes`.
"""

from __future__ import annotations

import contextlib
import socket
import ssl as _ssl
import threading
from collections.abc import Callable
from typing import Any, Final

from pubguard.crypto import SecretBytes, VerifyKey
from pubguard.errors import (
    DropError,
    DropReason,
    FrameError,
    InvalidToken,
    PubguardError,
    RevokedError,
    StateError,
    TransportError,
    ValidationError,
)
from pubguard.keys.discovery import DiscoveryRequest, TopicAdvertisement
from pubguard.keys.ms import (
    AdvertisementGrant,
    AdvertisementPermit,
    Permit,
    SubscriptionGrant,
    SubscriptionPermit,
    UnadvertisementPermit,
    UnsubscriptionPermit,
    decode_permit,
)
from pubguard.net.tls import peer_identity
from pubguard.wire.framing import FrameDecoder, encode_frame

__all__ = ["CALL_TIMEOUT", "KeyServiceClient"]

CALL_TIMEOUT: Final = 10.0  # seconds a connect, send or receive of one call may block

_ERRORS: Final[dict[str, Callable[[str], PubguardError]]] = {
    "invalid_token": lambda m: InvalidToken(),
    "unauthorised": lambda m: DropError(DropReason.UNAUTHORISED, m),
    "revoked": lambda m: RevokedError(m),
    "invalid": lambda m: ValidationError(m),
}


class KeyServiceClient:
    """A blocking proxy for a remote MS (implements ``MetaServiceLike``) and TDN.

    ``ssl_context``: from :func:`~pubguard.crypto.x509.client_ssl_context` (our certificate;
    the server's is checked against the CA and must carry ``server_role``). ``ms_key``: pin the
    MS public key; otherwise it is taken from the authenticated server. Thread-safe (one
    request at a time); reconnects once if the connection was lost."""

    def __init__(
        self,
        host: str,
        port: int,
        ssl_context: _ssl.SSLContext,
        *,
        timeout: float = CALL_TIMEOUT,
        server_role: str | None = "ms",
        ms_key: VerifyKey | None = None,
    ) -> None:
        self.host, self.port, self.ssl, self.timeout = host, port, ssl_context, timeout
        self.server_role = server_role
        self._sock: _ssl.SSLSocket | None = None
        self._dec = FrameDecoder(1 << 20)
        self._lock = threading.Lock()
        self._next = 0
        self._ms_key = ms_key
        self.identity: str | None = None

    def __repr__(self) -> str:
        return f"KeyServiceClient({self.host}:{self.port}, identity={self.identity!r})"

    def __enter__(self) -> KeyServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None

    def _connect(self) -> _ssl.SSLSocket:
        try:
            raw = socket.create_connection((self.host, self.port), timeout=self.timeout)
            s = self.ssl.wrap_socket(raw, server_hostname=self.host)
        except (OSError, _ssl.SSLError) as exc:
            raise TransportError(f"key service {self.host}:{self.port}: {exc}") from None
        _, role = peer_identity(s)
        if self.server_role is not None and role != self.server_role:
            s.close()
            raise TransportError(
                f"key service certificate has role {role!r}, not {self.server_role!r}"
            )
        self._dec = FrameDecoder(1 << 20)
        return s

    def _roundtrip(self, msg: dict[str, Any]) -> dict[str, Any]:
        if self._sock is None:
            self._sock = self._connect()
        s = self._sock
        try:
            s.sendall(encode_frame(msg))
            while True:
                data = s.recv(65536)
                if not data:
                    raise TransportError("key service closed the connection")
                for f in self._dec.feed(data):
                    if f.get("id") in (msg["id"], None):
                        return f
        except (OSError, _ssl.SSLError, FrameError) as exc:
            self.close()
            raise TransportError(f"key service: {type(exc).__name__}: {exc}") from None
        except TransportError:
            self.close()
            raise

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """One request; the ``ok`` map, or the mapped typed error."""
        with self._lock:
            self._next += 1
            msg = {"op": op, "id": self._next, **fields}
            reused = self._sock is not None
            try:
                resp = self._roundtrip(msg)
            except TransportError:
                if not reused:
                    raise
                resp = self._roundtrip(msg)  # the kept connection was gone: one fresh try
        err = resp.get("error")
        if err is not None:
            msg_text = str(resp.get("message", ""))[:200]
            make = _ERRORS.get(str(err))
            raise make(msg_text) if make else FrameError(f"key service: {err}: {msg_text}")
        ok = resp.get("ok")
        if type(ok) is not dict:
            raise FrameError("key service: response without result")
        return ok

    # -- MetaServiceLike -----------------------------------------------------------------------

    @property
    def public_key(self) -> VerifyKey:
        if self._ms_key is None:
            info = self.call("info")
            if type(info.get("ms_key")) is not bytes:
                raise StateError("this key service hosts no meta-service")
            self._ms_key = VerifyKey.from_bytes(info["ms_key"])
            self.identity = info.get("identity")
        return self._ms_key

    def _checked(self, blob: Any, cls: type[Permit], subject: str) -> Any:
        if type(blob) is not bytes:
            raise FrameError("key service: permit missing")
        p = decode_permit(blob)
        if not isinstance(p, cls) or p.subject != subject:
            raise InvalidToken()
        self.public_key.verify(p.signature, p.signed_bytes())
        return p

    def _secret(self, ok: dict[str, Any], name: str) -> SecretBytes:
        v = ok.get(name)
        if type(v) is not bytes:
            raise FrameError(f"key service: {name} missing")
        return SecretBytes(v)

    def subscribe(
        self, subscriber: str, w: str, *, now: float, rng: Any = None
    ) -> SubscriptionGrant:
        ok = self.call("subscribe", subject=subscriber, w=w)
        p = self._checked(ok.get("permit"), SubscriptionPermit, subscriber)
        return SubscriptionGrant(p, self._secret(ok, "key"), self._secret(ok, "ust"))

    def advertise(
        self, publisher: str, publisher_key: Any, w: str, *, now: float, rng: Any = None
    ) -> AdvertisementGrant:
        pk = publisher_key.to_bytes() if isinstance(publisher_key, VerifyKey) else publisher_key
        ok = self.call("advertise", subject=publisher, pk=pk, w=w)
        p = self._checked(ok.get("permit"), AdvertisementPermit, publisher)
        return AdvertisementGrant(p, self._secret(ok, "key"), self._secret(ok, "uat"))

    @staticmethod
    def _raw(s: Any) -> bytes:
        return s.reveal() if isinstance(s, SecretBytes) else bytes(s)

    def unsubscribe(
        self, permit: Any, ust: Any, *, now: float, rng: Any = None
    ) -> UnsubscriptionPermit:
        ok = self.call("unsubscribe", permit=permit.to_bytes(), ust=self._raw(ust))
        return self._checked(ok.get("permit"), UnsubscriptionPermit, permit.subject)  # type: ignore[no-any-return]

    def unadvertise(
        self, permit: Any, uat: Any, *, now: float, rng: Any = None
    ) -> UnadvertisementPermit:
        ok = self.call("unadvertise", permit=permit.to_bytes(), uat=self._raw(uat))
        return self._checked(ok.get("permit"), UnadvertisementPermit, permit.subject)  # type: ignore[no-any-return]

    def renew_subscription(self, permit: Any, ust: Any, w: str, *, now: float) -> SubscriptionGrant:
        ok = self.call("renew_subscription", permit=permit.to_bytes(), ust=self._raw(ust), w=w)
        p = self._checked(ok.get("permit"), SubscriptionPermit, permit.subject)
        return SubscriptionGrant(p, self._secret(ok, "key"), self._secret(ok, "ust"))

    def renew_advertisement(
        self, permit: Any, uat: Any, w: str, *, now: float
    ) -> AdvertisementGrant:
        ok = self.call("renew_advertisement", permit=permit.to_bytes(), uat=self._raw(uat), w=w)
        p = self._checked(ok.get("permit"), AdvertisementPermit, permit.subject)
        return AdvertisementGrant(p, self._secret(ok, "key"), self._secret(ok, "uat"))

    # -- narada §II-A discovery --------------------------------------------------------------

    def discover(self, req: DiscoveryRequest) -> bytes:
        """Send a signed discovery request to the TDN; the wrapped reply
        (:func:`~pubguard.keys.discovery.open_discovery_reply` opens it)."""
        ok = self.call(
            "discover",
            cert=req.cert,
            kmc=req.kmc,
            kem=req.kem_public,
            ts=req.timestamp_ms,
            nonce=req.nonce,
            sig=req.signature,
        )
        if type(ok.get("reply")) is not bytes:
            raise FrameError("key service: discovery reply missing")
        return ok["reply"]  # type: ignore[no-any-return]

    def tdn_advertise(self, adv: TopicAdvertisement) -> int:
        """A KMC places its (signed) topic advertisement at the TDN."""
        return int(self.call("tdn_advertise", adv=adv.to_bytes())["version"])
