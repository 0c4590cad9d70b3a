"""Run a cluster's ``[hermes]`` table: the type owner's key-group manager beside the brokers
and every broker's ``hermes.json`` (hermes-encrypted-access-control.txt §2.2-2.3, §4).

Theory of operation
-------------------
:class:`~pubguard.ops.cluster.LocalCluster` starts a :class:`HermesDeployment` before its
brokers when its configuration has a ``[hermes]`` table
(:class:`~pubguard.schemes.hermes.HermesSettings`):

- the **type owner** signs the type definition (§2.2) with its Ed25519 key: the seed comes
  from the environment variable ``owner_env`` (base64, 32 bytes) or, unset, is drawn fresh
  for this run and kept in memory only. A **detached** cluster (``pubguard cluster up``)
  needs the variable: its manager must reopen its sealed state after a restart, and clients
  in other shells need the owner to sign their capabilities, so a random seed is refused with
  one line before anything starts;
- the **key-group manager** (§4, Fig. 4) runs as its own process
  (:mod:`pubguard.ops.hermes_kgm_proc`) behind mutual TLS with the identity ``<owner>-kgm``
  from the cluster's CA, one OFT manager per Hermes profile the brokers serve, its state
  durable in ``<state>/hermes-kgm/kgm.db`` sealed under a key derived from the owner's seed.
  A foreground cluster ties it to its own process; a detached one leaves it running until
  ``pubguard cluster down``;
- each broker gets a ``hermes.json`` with the manager's address and, when the table grants it
  attributes, the signed type and its ``publish`` and ``subscribe`` capabilities (§2.3); a
  broker granted nothing gets neither and routes by type id (§3.3), and so does a broker the
  owner revoked: its signed revocation list (:mod:`pubguard.ops.hermes_revocations`,
  ``<state>/hermes-kgm/revocations.json``) outlives this re-issue of the capabilities.

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
from pubguard.crypto.x509 import Role
from pubguard.errors import ConfigError
from pubguard.net.server.hermes_node import HERMES_PROFILES, write_hermes_file
from pubguard.ops.hermes_kgm_proc import (
    KgmProcess,
    kgm_dir,
    kgm_status,
    start_kgm,
    storage_key,
)
from pubguard.ops.hermes_revocations import load_revocations
from pubguard.ops.pki import ClusterPki
from pubguard.ops.process import terminate
from pubguard.schemes.hermes import (
    ALL,
    Capability,
    HermesClient,
    HermesSettings,
    SecureEventType,
    rendezvous_node,
)

__all__ = ["KGM_SUFFIX", "HermesDeployment"]

#: the manager's TLS identity is ``<owner>-kgm``
KGM_SUFFIX: Final = "-kgm"


def _owner_seed(env: str, *, required: bool) -> tuple[bytes, bool]:
    """The owner's Ed25519 seed from ``$env`` and whether it came from there (else: fresh,
    refused when ``required``)."""
    raw = os.environ.get(env)
    if not raw:
        if required:
            raise ConfigError(
                f"hermes: ${env} is not set: a detached cluster needs the type owner's seed "
                "(base64 of 32 random bytes, e.g. head -c 32 /dev/urandom | base64) to reopen "
                "the key-group manager's sealed state and sign clients' capabilities; nothing "
                "was started",
                key="hermes.owner_env",
            )
        return secrets.token_bytes(32), False
    try:
        seed = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        seed = b""
    if len(seed) != 32:
        raise ConfigError(f"${env} must be a base64 32-byte seed", key="hermes.owner_env")
    return seed, True


class HermesDeployment:
    """The owner's key, its signed type and its key-group manager process for one cluster."""

    def __init__(
        self,
        settings: HermesSettings,
        *,
        brokers: tuple[str, ...],
        profiles: tuple[str, ...],
        pki: ClusterPki,
        broker_dir: Callable[[str], Path],
        state_dir: Path,
        host: str = "127.0.0.1",
        detached: bool = False,
    ) -> None:
        """ConfigError before anything starts: no Hermes profile served, or (``detached``)
        no owner seed in the environment."""
        served = tuple(p for p in profiles if p in HERMES_PROFILES)
        if not served:
            raise ConfigError(
                "hermes: no broker serves hermes-event or hermes-attribute", key="hermes"
            )
        self.settings, self.brokers, self.profiles = settings, brokers, served
        seed, self._seed_kept = _owner_seed(settings.owner_env, required=detached)
        self._owner = SigningKey.from_seed(seed)
        self.stype = SecureEventType.define(settings.owner, settings.etype, self._owner)
        self._storage = storage_key(seed, self.stype.type_id)
        #: the type's rendezvous node among the brokers (§2.1, Fig. 2)
        self.rendezvous = rendezvous_node(self.stype.type_id, list(brokers))
        self._pki, self._broker_dir, self._host = pki, broker_dir, host
        self.state_dir, self.detached = Path(state_dir), detached
        #: the owner's signed revocation list (ConfigError now if it is not this owner's):
        #: a listed broker gets no capability, whatever the grants say
        self.revocations = load_revocations(
            kgm_dir(self.state_dir), self._owner.public, self.stype.type_id
        )
        #: the manager's process, once :meth:`start` ran
        self.kgm: KgmProcess | None = None
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
        """Start the manager's process and write every broker's ``hermes.json``; returns its
        port. A state sealed under a seed drawn for an earlier run can never open again, so
        without a kept seed it is removed first; with one, it is reopened (ConfigError if it
        does not open under this seed)."""
        if not self._seed_kept:
            for f in kgm_dir(self.state_dir).glob("kgm.db*"):
                f.unlink()
        # the owner's TLS identity, issued now while the CA is at hand: it alone may revoke
        # (`pubguard hermes revoke`), also after a detached `cluster up` has exited
        self._pki.identity(self.settings.owner, Role.CLIENT)
        self.kgm = await start_kgm(
            state_dir=self.state_dir,
            pki=self._pki,
            name=self.kgm_name,
            stype=self.stype,
            profiles=self.profiles,
            grace=self.settings.grace,
            storage=self._storage,
            owner_env=self.settings.owner_env,
            host=self._host,
            detached=self.detached,
        )
        self.port = self.kgm.port
        for b in self.brokers:
            grant = None if b in self.revoked else self.settings.grants.get(b)
            caps = [self.capability(b, a, grant) for a in ("publish", "subscribe")] if grant else []
            write_hermes_file(
                self._broker_dir(b),
                kgm=(self._host, self.port),
                stype=self.stype if grant else None,
                capabilities=caps,
                poll=self.settings.poll,
            )
        return self.port

    @property
    def revoked(self) -> frozenset[str]:
        """The brokers the type owner revoked (its signed list): issued no capability."""
        return frozenset(self.revocations.holders) if self.revocations else frozenset()

    async def stop(self) -> None:
        """End the manager's process (its state stays in ``kgm.db``)."""
        if self.kgm is not None:
            terminate(self.kgm.proc)
            self.kgm = None

    def status(self) -> dict[str, Any]:
        """The manager's answer to ``hermes_status`` (groups, members, epochs) as ``admin``,
        or ``down`` / ``error`` (:func:`~pubguard.ops.hermes_kgm_proc.kgm_status`)."""
        return kgm_status(self.state_dir) or {"down": True}

    def members(self) -> dict[str, list[str]]:
        """Profile -> the brokers in its key groups now (asked of the manager)."""
        profiles = self.status().get("profiles", {})
        return {p: list(v.get("members", [])) for p, v in profiles.items()}

    def readable_groups(self, profile: str) -> dict[str, list[str]]:
        """Broker -> the groups (attribute names, ``*`` for the type's) it is a member of."""
        out: dict[str, list[str]] = {}
        groups = self.status().get("profiles", {}).get(profile, {}).get("groups", {})
        for g, info in groups.items():
            for b in info.get("members", []):
                out.setdefault(b, []).append(g)
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "owner": self.settings.owner,
            "type": self.stype.name,
            "type_id": self.stype.type_id.hex(),
            "kgm": {"name": self.kgm_name, "domain": self.settings.kgm_domain, "port": self.port},
            "rendezvous": self.rendezvous,
            "readable": {
                b: [] if b in self.revoked else list(self.settings.readable(b))
                for b in self.brokers
            },
            "revoked": sorted(self.revoked & set(self.brokers)),
            "members": self.members(),
        }
