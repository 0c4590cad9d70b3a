"""The Hermes key-group manager as a network service (hermes-encrypted-access-control.txt §4,
Fig. 4), sans-IO core for :class:`~pubguard.net.keyservice.server.KeyServiceServer`.

Theory of operation
-------------------
The manager of a type's key groups (:class:`~pubguard.schemes.hermes.KeyGroupManager`) runs
in the type owner's domain (§4). Brokers reach it over mutual TLS; the caller's identity is
its certificate's common name, never a request field. Ops:

- ``hermes_join`` (Fig. 4): the broker presents its capability; the manager checks it (owner's
  signature, holder = the caller, type, validity, revocation) and answers the secret
  ``Welcome`` of every group it opens. A broker without a valid capability is refused
  (``unauthorised`` / ``invalid_token``). A broker that joins again (it restarted and lost its
  keys, which are never written to disk) is first removed with an immediate refresh.
- ``hermes_rekeys``: the ``Rekey`` broadcasts of the caller's groups after the sequence
  numbers it has (brokers poll; the broadcasts are sealed for their subtrees, §4.1).
- ``hermes_neighbours``: the capabilities the named brokers presented (members only), so a
  broker learns which of its neighbours the manager still admits; the neighbours present
  their capabilities themselves in their link ``hello`` (§3.4's handshake,
  ``pubguard.net.server.hermes_node``) and each broker verifies them against the owner's key.
- ``hermes_revoke``: the type owner (the caller named as the type's owner) revokes a
  capability serial, or a ``holder`` (every capability naming it, also ones issued later);
  holders are evicted and their groups refreshed at once. The owner's signed
  :class:`~pubguard.schemes.hermes.capability.RevocationList` is applied at start
  (:meth:`HermesKgmCore.apply_revocations`), so a revocation outlives a restart and a
  re-issue of the capabilities.
- ``hermes_status``: for ``admin`` and the type owner: per profile the groups (an attribute's
  name, or ``*`` for the type's), their members, current epoch (traffic key version), last
  broadcast and the last one each member said it applied (its latest poll).

With a :class:`~pubguard.net.keyservice.hermes_kgm_store.KgmStore` the core is durable: every
request that changed a group saves the managers' sealed state and the new broadcasts before
it answers, and :meth:`HermesKgmCore.restore` brings them back after a restart (a member's
next poll continues where it left off; a revoked broker stays out).

Every request first runs the manager's timer (:meth:`KeyGroupManager.tick`): capability
expiry, the periodic refresh and Fig. 5's lazy refreshes happen at the first request after
they fall due, so a broker learns of them within one poll.
"""

from __future__ import annotations

import logging
import random as _random
from collections import Counter, deque
from collections.abc import Mapping
from typing import Any, Final

from pubguard.errors import DropError, DropReason, PubguardError, StateError
from pubguard.keys.oft import Rekey
from pubguard.net.keyservice.hermes_kgm_store import KgmStore
from pubguard.net.keyservice.protocol import Caller, Refused, field
from pubguard.schemes.hermes import Capability, KeyGroupManager, SecureEventType
from pubguard.schemes.hermes.capability import RevocationList
from pubguard.schemes.hermes.kgm_wire import rekey_to_wire, welcome_to_wire

__all__ = ["REKEY_LOG_MAX", "STATUS_CALLERS", "HermesKgmCore"]

log = logging.getLogger("pubguard.net.keyservice.server")

#: broadcasts kept per group for polling members; one further behind must join again
REKEY_LOG_MAX: Final = 4096
#: who may ask ``hermes_status`` besides the type owner (the cluster's administrator)
STATUS_CALLERS: Final = ("admin",)


class HermesKgmCore:
    """Key-group manager requests in, responses out (the ``KeyServiceCore.handle`` contract)."""

    def __init__(
        self, managers: Mapping[str, KeyGroupManager], *, store: KgmStore | None = None
    ) -> None:
        """``managers``: profile (``hermes-event`` / ``hermes-attribute``) -> its manager;
        ``store``: where changed state is saved before each answer (None: memory only)."""
        self.managers = dict(managers)
        self.stats: Counter[str] = Counter()
        self._log: dict[tuple[str, str], deque[Rekey]] = {}
        self._store = store
        self._dirty: dict[str, list[Rekey]] = {}
        self._revoked: dict[str, list[int]] = {}
        #: (profile, group) -> member -> the last broadcast it said it applied (its poll's
        #: ``since``): how far each member has followed, for ``hermes_status``
        self._acked: dict[tuple[str, str], dict[str, int]] = {}

    @classmethod
    def restore(
        cls,
        store: KgmStore,
        fresh: Mapping[str, KeyGroupManager],
    ) -> HermesKgmCore:
        """The core ``store`` saved, with its broadcast log; a profile never saved starts as
        given in ``fresh`` (ConfigError if a saved state does not open)."""
        managers = {}
        for profile, mgr in fresh.items():
            managers[profile] = store.load_manager(profile) or mgr
        core = cls(managers, store=store)
        for profile in managers:
            for r in store.load_rekeys(profile):
                core._log.setdefault((profile, r.group), deque(maxlen=REKEY_LOG_MAX)).append(r)
        return core

    def __repr__(self) -> str:
        return f"HermesKgmCore(profiles={sorted(self.managers)})"

    @property
    def stype(self) -> SecureEventType:
        return next(iter(self.managers.values())).stype

    def _record(self, profile: str, rekeys: list[Rekey]) -> None:
        for r in rekeys:
            self._log.setdefault((profile, r.group), deque(maxlen=REKEY_LOG_MAX)).append(r)
        if rekeys:
            self._dirty.setdefault(profile, []).extend(rekeys)

    def _save(self) -> None:
        """Write what changed since the last save (nothing without a store)."""
        dirty, revoked = self._dirty, self._revoked
        self._dirty, self._revoked = {}, {}
        if self._store is None:
            return
        for profile in set(dirty) | set(revoked):
            self._store.save(
                profile,
                self.managers[profile],
                dirty.get(profile, ()),
                keep=REKEY_LOG_MAX,
                revoked=revoked.get(profile, ()),
            )

    def _manager(self, req: dict[str, Any]) -> tuple[str, KeyGroupManager]:
        profile = field(req, "profile", str)
        mgr = self.managers.get(profile)
        if mgr is None:
            raise Refused("invalid", "no key groups for that profile")
        return profile, mgr

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
        rid = req.get("id") if type(req.get("id")) is int else None
        op = req.get("op")
        for profile, mgr in self.managers.items():
            self._record(profile, mgr.tick(now=now, rng=rng))
        try:
            out = self._answer(op, req, Caller(peer, peer_role, peer_serial), now, rng)
        except Refused as exc:
            self.stats[exc.code] += 1
            log.warning("hermes kgm: refused %s from %s: %s", str(op)[:40], peer, exc.code)
            out = {"error": exc.code, "message": exc.message}
        else:
            self.stats[f"ok:{op}"] += 1
            out = {"ok": out}
        try:  # durable before any answer leaves (a welcome must survive a crash)
            self._save()
        except StateError as exc:
            log.error("hermes kgm: cannot save the key groups: %s", type(exc).__name__)
            return {"id": rid, "error": "unavailable", "message": "state not saved"}
        return {"id": rid, **out}

    def _answer(
        self, op: Any, req: dict[str, Any], caller: Caller, now: float, rng: Any
    ) -> dict[str, Any]:
        try:
            if op == "info":
                return {"identity": caller.name, "profiles": sorted(self.managers)}
            if op == "hermes_join":
                return self._join(req, caller, now, rng)
            if op == "hermes_rekeys":
                return self._rekeys(req, caller)
            if op == "hermes_neighbours":
                return self._neighbours(req)
            if op == "hermes_revoke":
                return self._revoke(req, caller, now, rng)
            if op == "hermes_status":
                return self._status(caller)
        except DropError as exc:
            code = "unauthorised" if exc.reason is not DropReason.FORGED else "invalid_token"
            raise Refused(code, exc.reason.value) from None
        except PubguardError as exc:
            raise Refused("invalid", type(exc).__name__) from None
        raise Refused("unknown_op", "unknown op")

    def _join(self, req: dict[str, Any], caller: Caller, now: float, rng: Any) -> dict[str, Any]:
        profile, mgr = self._manager(req)
        cap = Capability.from_wire(field(req, "cap", dict))
        if caller.name in mgr.members():
            self._record(profile, mgr.leave(caller.name, now=now, rng=rng, at_once=True))
        res = mgr.join(caller.name, cap, now=now, rng=rng)
        self._record(profile, res.rekeys)
        log.info("hermes kgm: %s joined %d group(s) of %s", caller.name, len(res.welcomes), profile)
        return {  # the join's own broadcasts too: they carry the joiner's first traffic key
            "welcomes": {g: welcome_to_wire(w) for g, w in res.welcomes.items()},
            "rekeys": [rekey_to_wire(r) for r in res.rekeys],
        }

    def _rekeys(self, req: dict[str, Any], caller: Caller) -> dict[str, Any]:
        profile, mgr = self._manager(req)
        since = field(req, "since", dict)
        mine = set(mgr.groups_of(caller.name))
        out = []
        for g, seq in since.items():
            if g not in mine or type(seq) is not int:
                continue
            self._acked.setdefault((profile, g), {})[caller.name] = seq
            for r in self._log.get((profile, g), ()):
                if r.seq > seq:
                    out.append(rekey_to_wire(r))
        return {"rekeys": out, "member": bool(mine)}

    def _neighbours(self, req: dict[str, Any]) -> dict[str, Any]:
        _, mgr = self._manager(req)
        names = field(req, "names", list)
        caps = {
            n: [mgr.capability_of(n).to_wire()]
            for n in names
            if isinstance(n, str) and n in mgr.members()
        }
        return {"caps": caps}

    def _revoke(self, req: dict[str, Any], caller: Caller, now: float, rng: Any) -> dict[str, Any]:
        profile, mgr = self._manager(req)
        if caller.name != mgr.stype.owner:
            raise Refused("unauthorised", "only the type owner revokes its capabilities")
        if "holder" in req:  # every capability of a holder (the owner's RevocationList)
            holder = field(req, "holder", str)
            rekeys = mgr.revoke_holder(holder, now=now, rng=rng)
            self._record(profile, rekeys)
            log.info(
                "hermes kgm: the owner revoked %s in %s (%d rekeys)", holder, profile, len(rekeys)
            )
            return {"rekeys": len(rekeys)}
        serial = field(req, "serial", int)
        rekeys = mgr.revoke(serial, now=now, rng=rng)
        self._record(profile, rekeys)
        self._revoked.setdefault(profile, []).append(serial)
        log.info(
            "hermes kgm: the owner revoked a capability of %s (%d rekeys)", profile, len(rekeys)
        )
        return {"rekeys": len(rekeys)}

    def apply_revocations(
        self, rl: RevocationList, *, now: float, rng: _random.Random | None = None
    ) -> int:
        """At start: the owner's revocation list (its signature verified by the caller) in
        every profile: listed serials and holders are refused from now on, listed members
        evicted at once; saved like any change. Returns the rekeys it caused."""
        n = 0
        for profile, mgr in self.managers.items():
            for serial in rl.serials:
                if serial not in mgr.revoked:
                    rekeys = mgr.revoke(serial, now=now, rng=rng)
                    self._record(profile, rekeys)
                    self._revoked.setdefault(profile, []).append(serial)
                    n += len(rekeys)
            for holder in rl.holders:
                rekeys = mgr.revoke_holder(holder, now=now, rng=rng)
                self._record(profile, rekeys)
                n += len(rekeys)
        self._save()
        return n

    def _status(self, caller: Caller) -> dict[str, Any]:
        """Per profile: each group (attribute name, ``*`` for the type's), its members and
        epoch (the traffic key version); public facts only, for the owner and ``admin``."""
        if caller.name not in (*STATUS_CALLERS, self.stype.owner):
            raise Refused("unauthorised", "only the type owner and admin see the key groups")
        names = {aid.hex(): n for n, aid in self.stype.attribute_ids.items()}
        names[self.stype.type_id.hex()] = "*"
        out: dict[str, Any] = {}
        for profile, mgr in self.managers.items():
            groups: dict[str, dict[str, Any]] = {}
            for g, grp in mgr.groups.items():
                log_ = self._log.get((profile, g))
                groups[g] = {"members": [], "epoch": grp.version, "group": g[:16]}
                groups[g]["seq"] = log_[-1].seq if log_ else 0  # the last broadcast
                groups[g]["acked"] = {}
            for b in mgr.members():
                for g in mgr.groups_of(b):
                    groups[g]["members"].append(b)
                    groups[g]["acked"][b] = self._acked.get((profile, g), {}).get(b)
            out[profile] = {
                "members": mgr.members(),
                "revoked": sorted(mgr.revoked.holders),
                "groups": {names.get(g, g[:16]): v for g, v in groups.items()},
            }
        return {"type": self.stype.name, "owner": self.stype.owner, "profiles": out}
