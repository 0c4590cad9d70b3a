"""The trusted side of a v-CAPS deployment: its key service and its publishers' cores.

:class:`~pubguard.schemes.registry.KeyBundle` holds one :class:`VcapsDeployment`; its
:meth:`client` is the bundle's client face for the v-CAPS profiles. A subscriber registers
(Stage I) at the deployment's publisher ``publisher`` (:data:`PUBLISHER`) unless told another;
the identity that *is* that publisher gets a client face that publishes.
By default the deployment's publishers are the bundle's ``identities``. Each publisher signs
with the bundle's key for its name (``KeyBundle.signing_key``), which brokers know from
``BrokerKeys.publishers`` when the name was among the bundle's ``identities`` before the broker
keys were taken.
"""

from __future__ import annotations

from collections.abc import Callable
from random import Random
from typing import Final

from pubguard.crypto import SecretBytes, SigningKey, hkdf
from pubguard.schemes.vcaps.client import VcapsClient
from pubguard.schemes.vcaps.keyservice import VcapsKeyService
from pubguard.schemes.vcaps.publisher import VcapsPublisher

__all__ = ["PUBLISHER", "VcapsDeployment"]

#: the default publisher name of a deployment
PUBLISHER: Final = "publisher"


class VcapsDeployment:
    """Key service and publisher cores, all derived from one master secret."""

    def __init__(
        self,
        master: SecretBytes | bytes,
        *,
        signing_key: Callable[[str], SigningKey],
        publisher_names: Callable[[], list[str]] = list,
        epoch_length: float = 86_400.0,
        origin: float = 0.0,
        rng: Random | None = None,
    ) -> None:
        m = master if isinstance(master, SecretBytes) else SecretBytes(master)
        self._master = m
        self._signing_key = signing_key
        self._publisher_names = publisher_names
        self._rng = rng
        self.keys = VcapsKeyService(
            hkdf(m, info=b"pubguard/vcaps/keyservice"), epoch_length=epoch_length, origin=origin
        )
        self.publishers: dict[tuple[str, str], VcapsPublisher] = {}

    def __repr__(self) -> str:
        return f"VcapsDeployment(publishers={sorted(self.publishers)})"

    def publisher(self, profile: str, name: str = PUBLISHER) -> VcapsPublisher:
        """The publisher core ``name`` of ``profile`` (made on first use; its secret derives
        from the deployment's master, so a restarted deployment has the same keys)."""
        p = self.publishers.get((profile, name))
        if p is None:
            master = hkdf(self._master, info=b"pubguard/vcaps/publisher\x00" + name.encode())
            p = self.publishers[(profile, name)] = VcapsPublisher(
                name,
                profile,
                master=master,
                signing_key=self._signing_key(name),
                keys=self.keys,
                rng=self._rng,
            )
        return p

    def client(self, profile: str, identity: str, *, publisher: str | None = None) -> VcapsClient:
        """``identity``'s client face: it registers at ``publisher`` (default: the first of the
        bundle's publisher identities, else :data:`PUBLISHER`) and publishes as itself when it
        is one of them."""
        names = self._publisher_names()
        reg = self.publisher(profile, publisher or (names[0] if names else PUBLISHER))
        own = (
            self.publisher(profile, identity) if identity in names or identity == reg.name else None
        )
        return VcapsClient(identity, self.keys, registrar=reg, publisher=own)
