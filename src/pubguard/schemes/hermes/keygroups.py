"""Key groups: who holds a type's (or an attribute's) encryption key (hermes §4, Figs. 4-5).

Theory of operation
-------------------
Each encryption key has a *key group* of brokers (§4): one per event type for event encryption
(group name: the type id in hex), one per attribute for attribute encryption (the attribute
id in hex). The :class:`KeyGroupManager` runs them for one type; it belongs to the type
owner's domain or to a third party the owner trusts (§4). A broker joins (Fig. 4) by
presenting its capability: the manager checks it (:func:`check_capability`: signed by the
owner, held by that broker, for this type, valid now, not revoked) and adds the broker to the
OFT group (:mod:`pubguard.keys.oft`, §4.1) of the type, or of every attribute the capability
grants. A broker without a capability is refused with a :class:`~pubguard.errors.DropError`
(``unauthorised``), and no group changes.

Refresh (§4.2, Fig. 5): a join or a leave rekeys the tree at once (backward and forward
secrecy); the group's *traffic key* is refreshed at once unless the lazy rules of Fig. 5 apply
(a joiner whose capability was already valid at the last refresh gets the current key; a
leaver's capability is cached and the key refreshed when it expires). :meth:`tick` applies
the timer refresh (``refresh_every``), the lazy refreshes that fell due, and evicts members
whose capability expired; :meth:`revoke` (a serial) and :meth:`revoke_holder` (a holder of the
owner's revocation list) evict at once with an immediate refresh. Keys are
tagged with the refresh timestamp; old ones are kept for ``grace`` seconds (clock drift).

A broker's side is a :class:`BrokerKeyring`: one :class:`~pubguard.keys.oft.OFTMember` per
group it joined, fed the manager's :class:`~pubguard.keys.oft.Rekey` broadcasts, answering
"which key was in force for group G at timestamp t" (§4.2: keys are selected by the event's
publication timestamp).

Sans-IO: the manager returns the messages to deliver (a ``Welcome`` per group for the joiner,
secret, to be sent over the joiner's mutually authenticated channel; ``Rekey`` broadcasts to
every member); ``now`` and ``rng`` are arguments.
"""

from __future__ import annotations

import math
import random as _random
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from pubguard.errors import DropError, DropReason, KeyError_, StateError, ValidationError
from pubguard.keys.oft import DEFAULT_GRACE, GroupKey, OFTGroup, OFTMember, Rekey, Welcome
from pubguard.schemes.hermes.capability import ALL, Capability, RevocationSet, check_capability
from pubguard.schemes.hermes.secure_types import SecureEventType

__all__ = ["MODES", "BrokerKeyring", "JoinResult", "KeyGroupManager", "group_names"]

MODES: Final = ("event", "attribute")


def group_names(stype: SecureEventType, mode: str, cap: Capability | None = None) -> list[str]:
    """The key groups a capability opens: the type's (event mode, only for ``*``) or one per
    granted attribute (attribute mode); every group of the type when ``cap`` is None."""
    if mode == "event":
        if cap is not None and ALL not in cap.attributes:
            return []  # one key for the whole event: all attributes or none
        return [stype.type_id.hex()]
    if mode != "attribute":
        raise ValidationError(f"mode must be one of {MODES}")
    ids = stype.attribute_ids
    return [aid.hex() for name, aid in ids.items() if cap is None or cap.grants(name)]


@dataclass(frozen=True, slots=True)
class JoinResult:
    """What a successful join sends: secret ``welcomes`` (group -> Welcome) to the joiner and
    ``rekeys`` to broadcast to the groups' members."""

    welcomes: dict[str, Welcome]
    rekeys: list[Rekey] = field(default_factory=list)


class KeyGroupManager:
    """The key groups of one secure event type, in one mode (see the module docstring)."""

    def __init__(
        self,
        stype: SecureEventType,
        mode: str,
        *,
        revoked: RevocationSet | None = None,
        grace: float = DEFAULT_GRACE,
        lazy: bool = True,
        refresh_every: float = math.inf,
    ) -> None:
        stype.verify()
        self.stype = stype
        self.mode = mode
        self.revoked = revoked if revoked is not None else RevocationSet()
        self.refresh_every = refresh_every
        self.groups = {g: OFTGroup(g, grace=grace, lazy=lazy) for g in group_names(stype, mode)}
        self._members: dict[str, tuple[Capability, list[str]]] = {}
        self._last_timer = -math.inf

    def __repr__(self) -> str:
        return f"KeyGroupManager({self.stype.name!r}, {self.mode}, members={len(self._members)})"

    def members(self) -> list[str]:
        return sorted(self._members)

    def groups_of(self, broker: str) -> list[str]:
        """The groups ``broker`` is a member of (none if it is not one)."""
        entry = self._members.get(broker)
        return [] if entry is None else list(entry[1])

    def capability_of(self, broker: str) -> Capability:
        """The capability ``broker`` joined with (StateError if it is not a member)."""
        entry = self._members.get(broker)
        if entry is None:
            raise StateError(f"{broker!r} is not a member")
        return entry[0]

    def join(
        self, broker: str, cap: Capability, *, now: float, rng: _random.Random | None = None
    ) -> JoinResult:
        """Fig. 4: the broker presents its capability; the manager checks it and adds the
        broker to each group it opens. Refused: :class:`DropError` (``unauthorised``,
        ``forged``, ``stale``, ``revoked``), nothing changed."""
        check_capability(
            cap,
            self.stype.owner_key,
            holder=broker,
            type_id=self.stype.type_id,
            action=None,
            now=now,
            revoked=self.revoked,
        )
        names = group_names(self.stype, self.mode, cap)
        if not names:
            raise DropError(
                DropReason.UNAUTHORISED,
                "event encryption needs a capability for every attribute",
                holder=broker,
            )
        if broker in self._members:
            raise StateError(f"{broker!r} is already a member")
        welcomes: dict[str, Welcome] = {}
        rekeys: list[Rekey] = []
        for g in names:
            w, r = self.groups[g].join(
                broker, now=now, valid_from=cap.not_before, valid_until=cap.not_after, rng=rng
            )
            welcomes[g] = w
            rekeys.append(r)
        self._members[broker] = (cap, names)
        return JoinResult(welcomes, rekeys)

    def leave(
        self, broker: str, *, now: float, rng: _random.Random | None = None, at_once: bool = False
    ) -> list[Rekey]:
        """The broker leaves every group it is in: the tree is rekeyed now; the traffic key now
        (``at_once``, or lazy refresh off) or when its cached capability expires (Fig. 5)."""
        entry = self._members.pop(broker, None)
        if entry is None:
            raise StateError(f"{broker!r} is not a member")
        out = []
        for g in entry[1]:
            group = self.groups[g]
            r = group.leave(broker, now=now, rng=rng)
            out.append(r)
            if at_once and r.refresh is None:
                out.append(group.refresh(now=now))
        return out

    def revoke(self, serial: int, *, now: float, rng: _random.Random | None = None) -> list[Rekey]:
        """The owner revoked a capability: its holders are evicted and refreshed at once."""
        self.revoked.revoke(serial)
        out: list[Rekey] = []
        for broker in [b for b, (c, _) in self._members.items() if c.serial == serial]:
            out += self.leave(broker, now=now, rng=rng, at_once=True)
        return out

    def revoke_holder(
        self, holder: str, *, now: float, rng: _random.Random | None = None
    ) -> list[Rekey]:
        """The owner revoked a holder (its :class:`RevocationList`): it is evicted and
        refreshed at once, and refused at every later join, whatever capability it shows."""
        self.revoked.revoke_holder(holder)
        return self.leave(holder, now=now, rng=rng, at_once=True) if holder in self._members else []

    def tick(self, *, now: float, rng: _random.Random | None = None) -> list[Rekey]:
        """Periodic upkeep: evict members whose capability ran out (refreshing at once),
        refresh on the timer, and apply lazy refreshes that fell due (Fig. 5)."""
        out: list[Rekey] = []
        for broker in [b for b, (c, _) in self._members.items() if not c.valid_at(now)]:
            out += self.leave(broker, now=now, rng=rng, at_once=True)
        timer = now - self._last_timer >= self.refresh_every
        for group in self.groups.values():
            r = group.tick(now=now)
            if r is not None:
                out.append(r)
            elif timer and len(group):
                out.append(group.refresh(now=now))
        if timer:
            self._last_timer = now
        return out

    def export_state(self) -> dict[str, Any]:
        """Members (with the capability each joined with), the timer and every group's OFT
        state (:meth:`OFTGroup.export_state`: SECRET keys, to be sealed by the caller). The
        revocation set is the caller's: it passes it back to :meth:`restore`."""
        return {
            "mode": self.mode,
            "type_id": self.stype.type_id,
            "refresh_every": self.refresh_every,
            "last_timer": self._last_timer,
            "members": [[b, c.to_bytes(), list(g)] for b, (c, g) in self._members.items()],
            "groups": {name: g.export_state() for name, g in self.groups.items()},
        }

    @classmethod
    def restore(
        cls, stype: SecureEventType, state: dict[str, Any], *, revoked: RevocationSet
    ) -> KeyGroupManager:
        """The manager :meth:`export_state` exported, for ``stype`` (ValidationError if the
        state is malformed or another type's)."""
        try:
            mgr = cls(
                stype,
                str(state["mode"]),
                revoked=revoked,
                refresh_every=float(state["refresh_every"]),
            )
            if bytes(state["type_id"]) != stype.type_id:
                raise ValidationError("key-group state of another type")
            groups = {str(n): OFTGroup.from_state(s) for n, s in state["groups"].items()}
            members = {
                str(b): (Capability.from_bytes(bytes(c)), [str(x) for x in g])
                for b, c, g in state["members"]
            }
            mgr._last_timer = float(state["last_timer"])
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ValidationError("malformed key-group manager state") from None
        if set(groups) != set(mgr.groups) or any(set(g) - set(groups) for _, g in members.values()):
            raise ValidationError("key-group state does not fit the type's groups")
        mgr.groups, mgr._members = groups, members
        return mgr


class BrokerKeyring:
    """A broker's key-group memberships: group name -> OFT member state and traffic keys."""

    __slots__ = ("_grace", "_lock", "_members", "broker", "stamp")

    def __init__(self, broker: str, *, grace: float = DEFAULT_GRACE) -> None:
        self.broker = broker
        self._grace = grace
        self._members: dict[str, OFTMember] = {}
        #: bumped by every welcome and rekey: what a sealer's cached key choice depends on
        self.stamp = 0
        # a broker process applies rekeys from its poller thread while its event loop seals
        # and opens: membership changes and key look-ups take this lock
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"BrokerKeyring({self.broker!r}, groups={len(self._members)})"

    def welcome(self, welcomes: dict[str, Welcome]) -> None:
        for w in welcomes.values():
            if w.member != self.broker:
                raise ValidationError("welcome for another broker")
        with self._lock:
            for g, w in welcomes.items():
                self._members[g] = OFTMember(w, grace=self._grace)
            self.stamp += 1

    def apply(self, rekeys: Iterable[Rekey]) -> None:
        """Process the manager's broadcasts (a member applies those of its groups)."""
        with self._lock:
            for r in rekeys:
                m = self._members.get(r.group)
                if m is not None:
                    m.apply(r)
                    if not m.active:
                        del self._members[r.group]
            self.stamp += 1

    def groups(self) -> frozenset[str]:
        return frozenset(self._members)

    def seqs(self) -> dict[str, int]:
        """Group -> the last broadcast applied (what a poller asks the manager after)."""
        with self._lock:
            return {g: m.seq for g, m in self._members.items()}

    def key_at(self, group: str, timestamp: float) -> GroupKey | None:
        """The traffic key of ``group`` in force at ``timestamp``, or None (not a member, or
        the timestamp is older than the grace period allows)."""
        m = self._members.get(group)
        if m is None:
            return None
        cur = m.ring.current  # the common case: the newest key (one list read, no lock)
        if cur is not None and cur.valid_from <= timestamp:
            return cur
        with self._lock:
            try:
                return m.ring.key_at(timestamp)
            except KeyError_:  # no key for that time
                return None

    def current(self, group: str) -> GroupKey | None:
        m = self._members.get(group)
        return None if m is None else m.ring.current
