"""The v-CAPS publisher's registration endpoint over mutual TLS, and its blocking clients.

Theory of operation
-------------------
vcaps.txt §4.1 Stage I runs over "an authenticated channel" between a subscriber and the
publisher; §8 has the brokers hand the publisher back the ``E_ks(F)`` they hold.
:class:`VcapsRegistrarServer` is the thin asyncio shell around the sans-IO
:class:`~pubguard.schemes.vcaps.registrar.VcapsRegistrar`, as
:class:`~pubguard.net.keyservice.server.KeyServiceServer` is around the key-service core:
one listening socket, mutual TLS (client certificates from the project CA required; the
caller's identity and role are read off its verified certificate), length-prefixed msgpack
frames, one response per request, in order (the shell both share:
:class:`~pubguard.net.frame_server.FrameServer`). The publisher's certificate carries the ``kdc``
role: it distributes its group's ``K_N``.

:class:`RemoteRegistrar` is a subscriber's side (``VcapsClient(registrar=..., keys=...)``),
:func:`return_ciphertexts` a broker operator's: it reads the tokens a broker stored in its
SQLite state and returns their ``E_ks(F)`` to a restarted publisher (§8).
"""

from __future__ import annotations

import logging
import random as _random
import ssl as _ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from pubguard.crypto import SecretBytes
from pubguard.errors import FrameError, ValidationError
from pubguard.model.filters import Filter
from pubguard.net.frame_server import FrameServer, Peer
from pubguard.net.keyservice.client import KeyServiceClient
from pubguard.net.keyservice.protocol import MAX_REQUEST_SIZE
from pubguard.schemes.vcaps.registrar import VcapsRegistrar, stored_ciphertexts
from pubguard.store.broker_state import BrokerStore

__all__ = [
    "REGISTRAR_ROLE",
    "RemoteRegistrar",
    "VcapsRegistrarServer",
    "return_ciphertexts",
]

log = logging.getLogger(__name__)

#: the role on the publisher's certificate that a subscriber checks
REGISTRAR_ROLE: Final = "kdc"


class VcapsRegistrarServer:
    """Serve a :class:`VcapsRegistrar` on ``host:port`` behind mutual TLS (``ssl_context``
    from :func:`~pubguard.crypto.x509.server_ssl_context`: client certificates required);
    the request/response shell is :class:`~pubguard.net.frame_server.FrameServer`."""

    def __init__(
        self,
        core: VcapsRegistrar,
        ssl_context: _ssl.SSLContext,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], float] = time.time,
        rng: _random.Random | None = None,
    ) -> None:
        if ssl_context.verify_mode != _ssl.CERT_REQUIRED:
            raise ValidationError("the registrar requires client certificates (mutual TLS)")
        self.core, self.ssl, self.host, self.port = core, ssl_context, host, port
        self.clock, self.rng = clock, rng
        self._frames = FrameServer(
            self._respond,
            ssl_context,
            name=f"vcaps registrar {core.name}",
            max_request=MAX_REQUEST_SIZE * 16,  # a broker's §8 batch of E_ks(F)
            host=host,
            port=port,
            detail=False,
            logger=log,
        )

    def __repr__(self) -> str:
        return f"VcapsRegistrarServer({self.core.name!r}, port={self.port})"

    def _respond(self, request: dict[str, Any], peer: Peer) -> Any:
        return self.core.handle(request, peer=peer.cn, peer_role=peer.role, now=self.clock())

    async def start(self) -> int:
        """Listen; returns the bound port."""
        self.port = await self._frames.start()
        return self.port

    async def stop(self) -> None:
        await self._frames.stop()


class RemoteRegistrar:
    """A subscriber's blocking proxy for a publisher's registrar: Stage I (``register``) and
    ``K_N`` (``notification_key``, cached per epoch). ``identity``: the subscriber, as its
    certificate names it (the registrar registers the certificate's name, whatever is
    asked). Thread-safe."""

    def __init__(
        self,
        host: str,
        port: int,
        ssl_context: _ssl.SSLContext,
        *,
        publisher: str,
        profile: str,
        timeout: float = 10.0,
    ) -> None:
        self.publisher, self.profile = publisher, profile
        self._ks = KeyServiceClient(
            host, port, ssl_context, timeout=timeout, server_role=REGISTRAR_ROLE
        )
        self._keys: dict[int, SecretBytes] = {}

    def __repr__(self) -> str:
        return f"RemoteRegistrar({self.publisher!r}, {self.profile})"

    def close(self) -> None:
        self._ks.close()

    def register(self, f: Filter, *, subscriber: str) -> dict[str, Any]:
        """vcaps.txt §4.1 Stage I over the channel: ``T_sub`` for ``f``."""
        cs = [c.to_json() for c in f.constraints]
        ok = self._ks.call("vcaps_register", profile=self.profile, constraints=cs)
        token = ok.get("token")
        if not isinstance(token, dict):
            raise FrameError("registrar: response without a token")
        return token

    def notification_key(self, publisher: str, epoch: int, *, requester: str) -> SecretBytes:
        if publisher != self.publisher:
            raise ValidationError(f"this registrar serves {self.publisher!r}, not {publisher!r}")
        kn = self._keys.get(epoch)
        if kn is None:
            key = self._ks.call("vcaps_key", epoch=epoch).get("key")
            if type(key) is not bytes or len(key) != 32:
                raise FrameError("registrar: response without a key")
            kn = self._keys[epoch] = SecretBytes(key)
        return kn

    def recover(self, efs: list[bytes]) -> int:
        """§8 as a broker: hand the publisher ``efs``; the number of filters it added."""
        added = self._ks.call("vcaps_recover", profile=self.profile, efs=efs).get("added")
        if type(added) is not int:
            raise FrameError("registrar: response without a count")
        return added


def return_ciphertexts(
    broker_db: Path, registrar: RemoteRegistrar, *, batch: int = 512
) -> tuple[int, int]:
    """§8 for one broker: read the ``registrar``'s publisher's tokens from the broker's
    SQLite state (``broker.db``) and return their ``E_ks(F)`` over the authenticated
    channel (``registrar`` connects with the broker's certificate). (ciphertexts sent,
    filters the publisher added)."""
    store = BrokerStore(broker_db)
    try:
        msgs = [v["message"] for _, v in store.items("subscriptions")]
    finally:
        store.close()
    efs = stored_ciphertexts(msgs, registrar.profile, registrar.publisher)
    added = 0
    for i in range(0, len(efs), batch):
        added += registrar.recover(efs[i : i + batch])
    return len(efs), added
