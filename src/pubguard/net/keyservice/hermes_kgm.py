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
  capability serial; holders are evicted and their groups refreshed at once.

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

from pubguard.errors import DropError, DropReason, PubguardError
from pubguard.keys.oft import Rekey
from pubguard.net.keyservice.protocol import Caller, Refused, field
from pubguard.schemes.hermes import Capability, KeyGroupManager
from pubguard.schemes.hermes.kgm_wire import rekey_to_wire, welcome_to_wire

__all__ = ["REKEY_LOG_MAX", "HermesKgmCore"]

log = logging.getLogger("pubguard.net.keyservice.server")

#: broadcasts kept per group for polling members; one further behind must join again
REKEY_LOG_MAX: Final = 4096


class HermesKgmCore:
    """Key-group manager requests in, responses out (the ``KeyServiceCore.handle`` contract)."""

    def __init__(self, managers: Mapping[str, KeyGroupManager]) -> None:
        """``managers``: profile (``hermes-event`` / ``hermes-attribute``) -> its manager."""
        self.managers = dict(managers)
        self.stats: Counter[str] = Counter()
        self._log: dict[tuple[str, str], deque[Rekey]] = {}

    def __repr__(self) -> str:
        return f"HermesKgmCore(profiles={sorted(self.managers)})"

    def _record(self, profile: str, rekeys: list[Rekey]) -> None:
        for r in rekeys:
            self._log.setdefault((profile, r.group), deque(maxlen=REKEY_LOG_MAX)).append(r)

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
            return {"id": rid, "error": exc.code, "message": exc.message}
        self.stats[f"ok:{op}"] += 1
        return {"id": rid, "ok": out}

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
        serial = field(req, "serial", int)
        rekeys = mgr.revoke(serial, now=now, rng=rng)
        self._record(profile, rekeys)
        return {"rekeys": len(rekeys)}
