"""When the CA must re-sign its CRL: a pure schedule, no I/O, the clock an argument.

Theory of operation
-------------------
narada-secure-delivery.txt §IV-A has the CA maintain the revocation list that brokers and
KMCs consult (§IV-H1). An X.509 CRL carries a *next update*; past it OpenSSL refuses every
certificate checked against the list (``CRL has expired``), so a CRL nobody re-signs turns,
after its validity, into a refusal of every connection. :class:`CrlRenewal` says when the
holder of the CA key must sign a new one: ``lead`` seconds before the current one's next
update, each new one valid ``validity`` seconds. With ``lead`` well above the holder's
check interval a renewal is never late, and a holder that misses a check (a restart, a
suspended laptop) still has ``lead`` to catch up.

:class:`CrlRenewal` keeps the current next update (read from the signed CRL by the caller,
so a CRL re-signed elsewhere -- ``ClusterPki.revoke`` -- counts) and answers ``due(now)``;
``renew(now)`` records the window of the list the caller then signs. The process that holds
the key and does the signing is :mod:`pubguard.ops.crl_agent`.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from pubguard.errors import ValidationError

__all__ = ["DEFAULT_LEAD", "DEFAULT_VALIDITY", "DAY", "CrlRenewal", "CrlWindow"]

DAY: Final = 86_400.0
#: how long a new CRL is valid (seconds): as the CA's own default (``DEFAULT_CRL_DAYS``)
DEFAULT_VALIDITY: Final = 7 * DAY
#: how long before its next update a CRL is re-signed: two days of missed checks survive
DEFAULT_LEAD: Final = 2 * DAY


@dataclasses.dataclass(frozen=True, slots=True)
class CrlWindow:
    """The validity window of one CRL to sign: ``last_update`` to ``next_update`` (epoch
    seconds)."""

    last_update: float
    next_update: float

    @property
    def days(self) -> float:
        return (self.next_update - self.last_update) / DAY


class CrlRenewal:
    """The renewal schedule (see the module docstring). ``next_update``: the current CRL's,
    None if there is none (then a renewal is due at once)."""

    __slots__ = ("lead", "next_update", "validity")

    def __init__(
        self,
        *,
        validity: float = DEFAULT_VALIDITY,
        lead: float = DEFAULT_LEAD,
        next_update: float | None = None,
    ) -> None:
        if not 0 < lead < validity:
            raise ValidationError(
                f"CRL renewal needs 0 < lead < validity (got lead {lead:g} s, "
                f"validity {validity:g} s)"
            )
        self.validity, self.lead, self.next_update = validity, lead, next_update

    def __repr__(self) -> str:
        return (
            f"CrlRenewal(validity={self.validity:g}, lead={self.lead:g}, "
            f"next_update={self.next_update!r})"
        )

    def observe(self, next_update: float | None) -> None:
        """The current CRL as read from disk (it may have been re-signed by someone else)."""
        self.next_update = next_update

    def due(self, now: float) -> bool:
        """Whether the CRL must be re-signed at ``now``: none yet, or within ``lead`` of (or
        past) its next update."""
        return self.next_update is None or now >= self.next_update - self.lead

    def renew(self, now: float) -> CrlWindow:
        """The window of the CRL to sign at ``now``; recorded as the current one."""
        w = CrlWindow(now, now + self.validity)
        self.next_update = w.next_update
        return w

    def wait(self, now: float) -> float:
        """Seconds from ``now`` until a renewal is due (0: due now)."""
        if self.next_update is None:
            return 0.0
        return max(0.0, self.next_update - self.lead - now)
