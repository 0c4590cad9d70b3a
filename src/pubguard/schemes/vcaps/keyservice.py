"""The notification key ``K_N`` per publisher and epoch (vcaps.txt §1, §4.2: the group manager).

vcaps.txt assumes a solution to the dynamic group key problem P_B and names the simplest one:
"a single key shared by each publisher with all the subscribers". :class:`VcapsKeyService` is
that, per key epoch: ``K_N(P, e) = HKDF(master, "pubguard/vcaps/K_N" | P | e)``, deterministic
(replicas agree), served to the publisher itself and to the subscribers it registered (the
publisher grants them at Stage I). Pure: no I/O, time as an argument.
"""

from __future__ import annotations

import struct
from typing import Final

from pubguard.crypto import SecretBytes, hkdf
from pubguard.errors import ConfigError, DropError, DropReason

__all__ = ["DEFAULT_EPOCH", "VcapsKeyService"]

#: seconds per key epoch unless configured (a day: K_N changes daily)
DEFAULT_EPOCH: Final = 86_400.0


class VcapsKeyService:
    """``K_N`` per (publisher, epoch) for the publisher and the subscribers it granted."""

    def __init__(
        self,
        master: SecretBytes | bytes,
        *,
        epoch_length: float = DEFAULT_EPOCH,
        origin: float = 0.0,
    ) -> None:
        if epoch_length <= 0:
            raise ConfigError("epoch_length must be > 0", key="epoch_length")
        self._master = master if isinstance(master, SecretBytes) else SecretBytes(master)
        self.epoch_length = epoch_length
        self.origin = origin
        self._granted: dict[str, set[str]] = {}

    def __repr__(self) -> str:
        return f"VcapsKeyService(epoch_length={self.epoch_length})"

    def epoch(self, now: float) -> int:
        return max(0, int((now - self.origin) // self.epoch_length))

    def grant(self, publisher: str, subscriber: str) -> None:
        """Stage I: the publisher admits ``subscriber`` to its notification group."""
        self._granted.setdefault(publisher, set()).add(subscriber)

    def notification_key(self, publisher: str, epoch: int, *, requester: str) -> SecretBytes:
        """``K_N`` of ``publisher`` in ``epoch`` for ``requester`` (the publisher or a granted
        subscriber); DropError(unauthorised) otherwise."""
        if requester != publisher and requester not in self._granted.get(publisher, ()):
            raise DropError(
                DropReason.UNAUTHORISED, f"{requester!r} is not in {publisher!r}'s group"
            )
        info = b"pubguard/vcaps/K_N\x00" + publisher.encode() + struct.pack(">Q", epoch)
        return SecretBytes(hkdf(self._master, info=info))
