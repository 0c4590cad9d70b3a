"""The authority's signed revocation list, and the broker-side rule for taking it in.

Theory of operation
-------------------
narada-secure-delivery.txt §IV-H1 has brokers check every token's signer and holder against
the CA's CRL on every message, and §IV-A has the CA notify brokers of revocations. The default
and eventguard profiles refuse publications of revoked publisher *keys*
(:meth:`~pubguard.schemes.default.broker.DefaultBroker.revoke`,
:meth:`~pubguard.schemes.eventguard.broker.EventGuardBroker.revoke`); this module is how the list of
those keys travels from the authority (the key service) to running brokers.

- :class:`SignedRevocations` is the list: the revoked identities and every public key the
  authority ever saw for them (publish and subscribe permits, eventguard advertisements), a
  ``serial`` that grows by one with every change and the ``issued`` time of its signature,
  signed Ed25519 by the authority (the key brokers already hold as ``authority_key``) under
  its own domain tag :data:`REVOCATION_TAG`, so no permit signature can be passed off as a
  list or the reverse. Being signed, it may reach a broker over any channel.
- :class:`RevocationFeed` is the broker's sans-IO acceptor (time passed in). A list is taken
  only if the authority signed it (else ``forged``), its serial is not below the current one
  (``rollback``), a list with the current serial carries the same entries (``conflict``
  otherwise: the authority never signs two contents under one serial) and its issue time is
  not in the future beyond :data:`MAX_SKEW` (``future``) nor before the current one. An
  accepted list of a higher serial yields the keys that are new; one of the same serial only
  refreshes :attr:`RevocationFeed.issued`. Revocation is permanent: nothing is ever
  un-revoked, whatever a later list says.
- Freshness: the key service signs the list afresh at every fetch, so ``issued`` tells how
  current a broker's view is. :meth:`RevocationFeed.stale` says when it is older than
  ``max_age``: a broker whose feed is withheld cannot know of revocations since then; it
  reports and logs that (what it then does is the deployment's choice, see
  docs/keyservice.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import msgpack

from pubguard.crypto import SigningKey, VerifyKey
from pubguard.errors import InvalidToken, ValidationError
from pubguard.schemes.common.guards import pack_fields

__all__ = [
    "DEFAULT_MAX_AGE",
    "MAX_ENTRIES",
    "MAX_LIST_BYTES",
    "MAX_SKEW",
    "REVOCATION_TAG",
    "FeedVerdict",
    "RevocationFeed",
    "SignedRevocations",
    "apply_revocations",
]

#: domain separation of the list's signature from the authority's permits
REVOCATION_TAG: Final = b"pubguard/authority/revocations/v1"
MAX_LIST_BYTES: Final = 1 << 20
MAX_ENTRIES: Final = 16_384
#: seconds an issue time may lie ahead of the broker's clock
MAX_SKEW: Final = 60.0
#: seconds after its issue time when a broker's list counts as stale
DEFAULT_MAX_AGE: Final = 60.0
_KEY: Final = 32


@dataclass(frozen=True, slots=True)
class SignedRevocations:
    """The authority's revocation list (see the module docstring): ``identities`` and
    ``keys`` (raw 32-byte Ed25519 public keys) are sorted and without repeats."""

    serial: int
    issued: float
    identities: tuple[str, ...]
    keys: tuple[bytes, ...]
    signature: bytes = b""

    def __post_init__(self) -> None:
        if type(self.serial) is not int or not 0 <= self.serial < 2**63:
            raise ValidationError("a revocation list serial is a natural number")
        if not isinstance(self.issued, float) or self.issued != self.issued:
            raise ValidationError("a revocation list issue time is a float")
        ids, keys = tuple(self.identities), tuple(self.keys)
        if len(ids) > MAX_ENTRIES or len(keys) > MAX_ENTRIES:
            raise ValidationError(f"a revocation list holds at most {MAX_ENTRIES} entries")
        if not all(type(i) is str and i for i in ids):
            raise ValidationError("revoked identities are non-empty strings")
        if not all(type(k) is bytes and len(k) == _KEY for k in keys):
            raise ValidationError("revoked keys are 32-byte Ed25519 public keys")
        if list(ids) != sorted(set(ids)) or list(keys) != sorted(set(keys)):
            raise ValidationError("a revocation list is sorted and has no repeats")
        if type(self.signature) is not bytes:
            raise ValidationError("the signature is bytes")

    def __repr__(self) -> str:
        return (
            f"SignedRevocations(serial={self.serial}, identities={list(self.identities)}, "
            f"keys={len(self.keys)})"
        )

    @classmethod
    def sign(
        cls,
        signer: SigningKey,
        *,
        serial: int,
        issued: float,
        identities: Iterable[str],
        keys: Iterable[bytes],
    ) -> SignedRevocations:
        """The list with these entries, signed by the authority."""
        body = cls(
            serial,
            float(issued),
            tuple(sorted(set(identities))),
            tuple(sorted({bytes(k) for k in keys})),
        )
        return cls(
            body.serial, body.issued, body.identities, body.keys, signer.sign(body.signed_bytes())
        )

    def signed_bytes(self) -> bytes:
        return pack_fields(
            REVOCATION_TAG,
            self.serial,
            self.issued,
            len(self.identities),
            *self.identities,
            len(self.keys),
            *self.keys,
        )

    def same_entries(self, other: SignedRevocations) -> bool:
        return self.identities == other.identities and self.keys == other.keys

    def verify(self, authority: VerifyKey) -> None:
        """InvalidToken unless ``authority`` signed exactly this list."""
        authority.verify(self.signature, self.signed_bytes())

    def encode(self) -> bytes:
        return msgpack.packb(
            [1, self.serial, self.issued, list(self.identities), list(self.keys), self.signature],
            use_bin_type=True,
        )

    @classmethod
    def decode(cls, blob: Any) -> SignedRevocations:
        """ValidationError unless ``blob`` is a well-formed list (its signature unchecked)."""
        if type(blob) is not bytes or len(blob) > MAX_LIST_BYTES:
            raise ValidationError("a revocation list is at most 1 MiB of bytes")
        try:
            v = msgpack.unpackb(blob, raw=False, strict_map_key=True)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
            raise ValidationError("undecodable revocation list") from None
        if not isinstance(v, list) or len(v) != 6 or v[0] != 1:
            raise ValidationError("a revocation list is a 6-field list of version 1")
        _, serial, issued, ids, keys, sig = v
        if not isinstance(ids, list) or not isinstance(keys, list):
            raise ValidationError("malformed revocation list entries")
        return cls(serial, issued, tuple(ids), tuple(keys), sig)


class FeedVerdict(NamedTuple):
    """What :meth:`RevocationFeed.offer` made of a list: ``outcome`` is ``applied`` (a higher
    serial: ``new_keys`` are to be revoked now), ``current`` (the same list, fresher), or a
    refusal: ``malformed``, ``forged``, ``rollback``, ``conflict``, ``future``."""

    outcome: str
    serial: int | None
    new_keys: tuple[bytes, ...] = ()

    @property
    def accepted(self) -> bool:
        return self.outcome in ("applied", "current")


class RevocationFeed:
    """A broker's view of the authority's revocation list (sans-IO; see the module
    docstring). ``authority_key``: the key the list must be signed with; ``max_age``: seconds
    after its issue time when the view counts as stale."""

    def __init__(self, authority_key: VerifyKey, *, max_age: float = DEFAULT_MAX_AGE) -> None:
        if not isinstance(authority_key, VerifyKey):
            raise ValidationError("authority_key must be the authority's VerifyKey")
        if not max_age > 0:
            raise ValidationError("max_age must be positive")
        self.authority_key = authority_key
        self.max_age = float(max_age)
        self.current: SignedRevocations | None = None
        self.revoked: set[bytes] = set()  # every key ever revoked through this feed
        self.refused = 0

    def __repr__(self) -> str:
        return f"RevocationFeed(serial={self.serial}, keys={len(self.revoked)})"

    @property
    def serial(self) -> int | None:
        return None if self.current is None else self.current.serial

    @property
    def issued(self) -> float | None:
        return None if self.current is None else self.current.issued

    def stale(self, now: float) -> bool:
        """Whether the freshest accepted list is older than ``max_age`` (or there is none)."""
        return self.current is None or now - self.current.issued > self.max_age

    def offer(self, blob: bytes, *, now: float) -> FeedVerdict:
        """Take ``blob`` in if it passes the checks of the module docstring."""
        try:
            rl = SignedRevocations.decode(blob)
        except ValidationError:
            return self._refuse("malformed", None)
        try:
            rl.verify(self.authority_key)
        except InvalidToken:
            return self._refuse("forged", rl.serial)
        if rl.issued > now + MAX_SKEW:
            return self._refuse("future", rl.serial)
        cur = self.current
        if cur is not None:
            if rl.serial < cur.serial:
                return self._refuse("rollback", rl.serial)
            if rl.serial == cur.serial:
                if not rl.same_entries(cur):
                    return self._refuse("conflict", rl.serial)
                if rl.issued > cur.issued:
                    self.current = rl
                return FeedVerdict("current", rl.serial)
            if rl.issued < cur.issued:
                return self._refuse("rollback", rl.serial)
        new = tuple(k for k in rl.keys if k not in self.revoked)
        self.revoked.update(new)
        self.current = rl
        return FeedVerdict("applied", rl.serial, new)

    def _refuse(self, outcome: str, serial: int | None) -> FeedVerdict:
        self.refused += 1
        return FeedVerdict(outcome, serial)


def apply_revocations(schemes: Iterable[Any], keys: Iterable[bytes]) -> int:
    """``revoke(key)`` on every broker scheme that revokes publishers (eventguard, default,
    psguard: ``BrokerScheme.revokes_publishers``); the number of schemes that took the keys."""
    ks = tuple(keys)
    n = 0
    for s in schemes:
        if s.revokes_publishers:
            for k in ks:
                s.revoke(k)
            n += 1
    return n
