"""Run a cluster's ``[hermes]`` table: the type owner's key-group manager beside the brokers
and every broker's ``hermes.json`` (hermes-encrypted-access-control.txt §2.2-2.3, §4).

Theory of operation
-------------------
:class:`~pubguard.ops.cluster.LocalCluster` starts a :class:`HermesDeployment` before its
brokers when its configuration has a ``[hermes]`` table
(:class:`~pubguard.schemes.hermes.HermesSettings`):

- the **type owner** signs the type definition (§2.2) with its Ed25519 key: the seed comes
  from the environment variable ``owner_env`` (base64, 32 bytes) or, unset, is drawn fresh
  for this run and kept in memory only;
- the **key-group manager** (§4, Fig. 4) runs in this process behind mutual TLS with the
  identity ``<owner>-kgm`` from the cluster's CA, one OFT manager per Hermes profile the
  brokers serve; it lives as long as the cluster object (a detached ``cluster up`` would
  orphan it, so Hermes clusters run in the foreground: ``pubguard hermes up``);
- each broker gets a ``hermes.json`` with the manager's address and, when the table grants it
  attributes, the signed type and its ``publish`` and ``subscribe`` capabilities (§2.3); a
  broker granted nothing gets neither and routes by type id (§3.3).

:meth:`HermesDeployment.capability` issues clients' capabilities under the same owner key.
"""

from __future__ import annotations

import base64
import binascii
import math
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from pubguard.crypto import SigningKey
from pubguard.crypto.x509 import Role, server_ssl_context
from pubguard.errors import ConfigError
from pubguard.net.keyservice.hermes_kgm import HermesKgmCore
from pubguard.net.keyservice.server import KeyServiceServer
from pubguard.net.server.hermes_node import HERMES_PROFILES, write_hermes_file
from pubguard.net.tls import tls_password
from pubguard.ops.pki import ClusterPki
from pubguard.schemes.hermes import (
    ALL,
    Capability,
    HermesClient,
    HermesSettings,
    KeyGroupManager,
    SecureEventType,
    rendezvous_node,
)

__all__ = ["KGM_SUFFIX", "HermesDeployment"]

#: the manager's TLS identity is ``<owner>-kgm``
KGM_SUFFIX: Final = "-kgm"
_MODES: Final = {"hermes-event": "event", "hermes-attribute": "attribute"}


def _owner_key(env: str) -> SigningKey:
    raw = os.environ.get(env)
    if not raw:
        return SigningKey.from_seed(secrets.token_bytes(32))
    try:
        seed = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        seed = b""
    if len(seed) != 32:
        raise ConfigError(f"${env} must be a base64 32-byte seed", key="hermes.owner_env")
    return SigningKey.from_seed(seed)


class HermesDeployment:
    """The owner's key, its signed type and its key-group manager for one cluster."""

    def __init__(
        self,
        settings: HermesSettings,
        *,
        brokers: tuple[str, ...],
        profiles: tuple[str, ...],
        pki: ClusterPki,
        broker_dir: Callable[[str], Path],
        host: str = "127.0.0.1",
    ) -> None:
        served = [p for p in profiles if p in HERMES_PROFILES]
        if not served:
            raise ConfigError(
                "hermes: no broker serves hermes-event or hermes-attribute", key="hermes"
            )
        self.settings = settings
        self.brokers = brokers
        self._owner = _owner_key(settings.owner_env)
        self.stype = SecureEventType.define(settings.owner, settings.etype, self._owner)
        #: the type's rendezvous node among the brokers (§2.1, Fig. 2)
        self.rendezvous = rendezvous_node(self.stype.type_id, list(brokers))
        self.core = HermesKgmCore(
            {p: KeyGroupManager(self.stype, _MODES[p], grace=settings.grace) for p in served}
        )
        self._pki, self._broker_dir, self._host = pki, broker_dir, host
        self._server: KeyServiceServer | None = None
        self.port = 0

    def __repr__(self) -> str:
        return f"HermesDeployment({self.settings.owner!r}, {self.stype.name!r})"

    @property
    def kgm_name(self) -> str:
        return self.settings.owner + KGM_SUFFIX

    def capability(
        self,
        holder: str,
        action: str,
        attributes: tuple[str, ...] = (ALL,),
        *,
        not_after: float = math.inf,
    ) -> Capability:
        """A capability ``<type, action, attributes>`` for ``holder``, signed by the owner."""
        return Capability.issue(
            self._owner,
            holder=holder,
            type_id=self.stype.type_id,
            action=action,
            attributes=attributes,
            not_before=time.time() - 60,
            not_after=not_after,
            serial=secrets.randbits(62),
        )

    def client(
        self, profile: str, holder: str, *, publish: bool = False, subscribe: tuple[str, ...] = ()
    ) -> HermesClient:
        """A client scheme for ``holder`` with the capabilities asked for."""
        return HermesClient(
            profile,
            self.stype.name,
            publish=self.capability(holder, "publish") if publish else None,
            subscribe=self.capability(holder, "subscribe", subscribe) if subscribe else None,
        )

    async def start(self) -> int:
        """Start the manager and write every broker's ``hermes.json``; returns its port."""
        ident = self._pki.identity(self.kgm_name, Role.KDC)
        ctx = server_ssl_context(
            ident.cert_path, ident.key_path, ident.ca_path, password=tls_password()
        )
        self._server = KeyServiceServer(self.core, ctx, host=self._host)
        self.port = await self._server.start()
        for b in self.brokers:
            grant = self.settings.grants.get(b)
            caps = [self.capability(b, a, grant) for a in ("publish", "subscribe")] if grant else []
            write_hermes_file(
                self._broker_dir(b),
                kgm=(self._host, self.port),
                stype=self.stype if grant else None,
                capabilities=caps,
                poll=self.settings.poll,
            )
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop()
            self._server = None

    def members(self) -> dict[str, list[str]]:
        """Profile -> the brokers in its key groups now."""
        return {p: sorted(m.members()) for p, m in self.core.managers.items()}

    def summary(self) -> dict[str, Any]:
        return {
            "owner": self.settings.owner,
            "type": self.stype.name,
            "type_id": self.stype.type_id.hex(),
            "kgm": {"name": self.kgm_name, "domain": self.settings.kgm_domain, "port": self.port},
            "rendezvous": self.rendezvous,
            "readable": {b: list(self.settings.readable(b)) for b in self.brokers},
            "members": self.members(),
        }
