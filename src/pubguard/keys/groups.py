"""The subscriber-group baseline of psguard.txt §3.2 and its comparison with the PSGuard KDC.

Theory of operation
-------------------
:class:`SubscriberGroupManager` is the group-key approach PSGuard argues against (§3.2.1, after
Opyrchal and Prakash): for one numeric attribute over ``[0, R - 1]`` the endpoints of the
active subscriptions cut the range into elementary *groups* (maximal intervals with the same
set of subscribers), each with its own group key; a publisher encrypts an event under the key
of the group containing its value, so it must hold every group key, and a subscriber holds the
keys of every group inside its range. A join, as in §3.2.1's example (S1 on (20, 30), S2
joining on (25, 40)), splits the groups that contain the newcomer's endpoints; both parts of a
split group get fresh keys, sent to every member of the split group, and the newcomer is sent
the key of every group in its range. Groups wholly inside the new range only gain a member and
keep their key (no backward secrecy within an epoch, as in PSGuard's epoch model). Departures
use lazy revocation (§3.2.2): departed subscribers stay in their groups until the epoch ends,
when affected groups are merged where possible and rekeyed for their remaining members.

:func:`analytical_ratio` is §3.2.2's lower bound ``C_sg : C_psguard = 6 NS phi / (R log2 phi)``
and :func:`simulate_churn` measures the same ratio: M/M/N subscriber churn (arrival rate
``lam`` per inactive and departure rate ``mu`` per active subscriber, so ``NS = N lam / (lam +
mu)`` on average) drives both the group manager and the real :class:`~pubguard.keys.kdc.KDC`
(a join costs ``|cover|`` authorisation keys there and nothing else), and the number of keys
each sends per join is counted. With ``seal=True`` every key delivery is really sealed (AEAD)
under the recipient's individual key, so the timings and byte counts are those of real work.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import random as _random
import time
from collections.abc import Callable

from pubguard.crypto import aad_for, random_bytes, seal
from pubguard.errors import StateError, ValidationError
from pubguard.keys.kdc import KDC

__all__ = [
    "ChurnResult",
    "SubscriberGroupManager",
    "analytical_ratio",
    "simulate_churn",
]

_AAD = aad_for("psguard-subscriber-group", "group-key")


@dataclasses.dataclass(slots=True)
class _Cost:
    keys: int = 0
    bytes: int = 0


class SubscriberGroupManager:
    """Group keys for elementary intervals of one numeric attribute (psguard.txt §3.2.1)."""

    def __init__(
        self, range_size: int, *, rng: _random.Random | None = None, seal: bool = False
    ) -> None:
        if range_size < 1:
            raise ValidationError("range size must be positive")
        self.range_size = range_size
        self.seal = seal
        self._rng = rng
        self._starts: list[int] = [0]
        self._members: list[set[str]] = [set()]
        self._keys: list[bytes] = [b""]  # b"": empty group, no key
        self._ranges: dict[str, tuple[int, int]] = {}
        self._departed: set[str] = set()
        self._pairwise: dict[str, bytes] = {}

    def __repr__(self) -> str:
        return f"SubscriberGroupManager(groups={self.groups}, subscribers={len(self._ranges)})"

    # -- inspection --------------------------------------------------------------------------

    @property
    def groups(self) -> int:
        """Number of non-empty groups = keys a publisher must hold (psguard.txt Figure 4)."""
        return len({k for k, m in zip(self._keys, self._members, strict=True) if m})

    def keys_of(self, sub: str) -> int:
        """Number of distinct group keys ``sub`` holds (psguard.txt Figure 3)."""
        lo, hi = self._ranges[sub]
        i, j = self._index(lo), self._index(hi)
        return len(set(self._keys[i : j + 1]))

    @property
    def subscribers(self) -> int:
        return len(self._ranges)

    # -- internals ---------------------------------------------------------------------------

    def _index(self, x: int) -> int:
        return bisect.bisect_right(self._starts, x) - 1

    def _split(self, x: int) -> int | None:
        """Make a group start at ``x``; returns the index of the group that was cut, if any."""
        if x >= self.range_size:
            return None
        i = self._index(x)
        if self._starts[i] == x:
            return None
        self._starts.insert(i + 1, x)
        self._members.insert(i + 1, set(self._members[i]))
        self._keys.insert(i + 1, self._keys[i])
        return i

    def _deliver(self, cost: _Cost, key: bytes, recipients: set[str] | list[str]) -> None:
        cost.keys += len(recipients)
        if self.seal:
            for r in recipients:
                cost.bytes += len(seal(self._pairwise[r], key, aad=_AAD, rng=self._rng))

    def _fresh_key(self) -> bytes:
        return random_bytes(16, self._rng)

    # -- operations --------------------------------------------------------------------------

    def join(self, sub: str, low: int, high: int) -> tuple[int, int]:
        """Subscribe ``sub`` to ``[low, high]``; returns (keys sent, bytes sent)."""
        if sub in self._ranges:
            raise StateError(f"{sub!r} is already subscribed")
        if not 0 <= low <= high < self.range_size:
            raise ValidationError(f"bad range [{low}, {high}] for |R| = {self.range_size}")
        if self.seal:
            self._pairwise[sub] = random_bytes(16, self._rng)
        cost = _Cost()
        for x in (low, high + 1):
            cut = self._split(x)
            if cut is not None and self._members[cut]:
                # §3.2.1: both parts of the split group get fresh keys for all its members
                for part in (cut, cut + 1):
                    self._keys[part] = self._fresh_key()
                    self._deliver(cost, self._keys[part], self._members[part])
        i, j = self._index(low), self._index(high)
        for g in range(i, j + 1):
            if not self._members[g]:
                self._keys[g] = self._fresh_key()
            self._members[g].add(sub)
        for key in dict.fromkeys(self._keys[i : j + 1]):  # the newcomer gets each group key once
            self._deliver(cost, key, [sub])
        self._ranges[sub] = (low, high)
        return cost.keys, cost.bytes

    def leave(self, sub: str) -> None:
        """Lazy revocation: ``sub`` stays in its groups until :meth:`end_epoch`."""
        if sub not in self._ranges or sub in self._departed:
            raise StateError(f"{sub!r} is not subscribed")
        self._departed.add(sub)

    def end_epoch(self) -> tuple[int, int]:
        """Revoke the departed: merge equal neighbours, rekey affected groups; (keys, bytes)."""
        cost = _Cost()
        if not self._departed:
            return 0, 0
        gone = self._departed
        affected = [bool(m & gone) for m in self._members]
        for m in self._members:
            m -= gone
        starts, members, keys, dirty = (
            [self._starts[0]],
            [self._members[0]],
            [self._keys[0]],
            [affected[0]],
        )
        for s, m, k, a in zip(
            self._starts[1:], self._members[1:], self._keys[1:], affected[1:], strict=True
        ):
            if m == members[-1]:  # neighbours with the same subscribers become one group
                dirty[-1] = dirty[-1] or a or k != keys[-1]
                continue
            starts.append(s)
            members.append(m)
            keys.append(k)
            dirty.append(a)
        for g, d in enumerate(dirty):
            if d:
                keys[g] = self._fresh_key() if members[g] else b""
                self._deliver(cost, keys[g], members[g])
        self._starts, self._members, self._keys = starts, members, keys
        for sub in gone:
            del self._ranges[sub]
            self._pairwise.pop(sub, None)
        self._departed = set()
        return cost.keys, cost.bytes


def analytical_ratio(ns: float, phi: float, range_size: float) -> float:
    """psguard.txt §3.2.2: ``C_subscribergroup : C_psguard = 6 NS phi / (R log2 phi)``."""
    if phi <= 1:
        raise ValidationError("the bound needs a subscription range phi > 1")
    return 6 * ns * phi / (range_size * math.log2(phi))


@dataclasses.dataclass(frozen=True, slots=True)
class ChurnResult:
    """Per-join averages measured over ``joins`` joins of an M/M/N churn run."""

    ns: float  # mean active subscribers seen at the joins
    joins: int
    sg_keys: float
    sg_bytes: float
    sg_ms: float
    psg_keys: float
    psg_bytes: float
    psg_ms: float
    sg_keys_per_subscriber: float
    psg_keys_per_subscriber: float
    sg_keys_per_publisher: float
    psg_keys_per_publisher: float
    sg_revocation_keys_per_epoch: float
    epochs: int

    @property
    def ratio(self) -> float:
        return self.sg_keys / self.psg_keys if self.psg_keys else math.inf


RangeDraw = Callable[[_random.Random], tuple[int, int]]


def simulate_churn(
    *,
    ns: int,
    draw: RangeDraw,
    range_size: int,
    tree_size: int,
    least_count: int = 1,
    joins: int = 200,
    lam: float = 1.0,
    mu: float = 1.0,
    epoch: float = 0.05,
    rng: _random.Random,
    seal_keys: bool = False,
    master: bytes = b"\x01" * 32,
) -> ChurnResult:
    """Run M/M/N churn with ``N = ns (lam + mu) / lam`` subscribers, starting in steady state,
    until ``joins`` joins happened; ranges come from ``draw(rng)`` within ``[0, range_size)``;
    the KDC's NAKT has ``tree_size`` leaves-times-``least_count`` (a power of two >= range)."""
    if ns < 1 or joins < 1:
        raise ValidationError("need at least one subscriber and one join")
    n_total = max(ns + 1, round(ns * (lam + mu) / lam))
    sg = SubscriberGroupManager(range_size, rng=rng, seal=seal_keys)
    kdc = KDC(master)
    pairwise: dict[str, bytes] = {}
    aad = aad_for("psguard-auth-key", "num")

    def psg_join(sub: str, lo: int, hi: int) -> tuple[int, int]:
        keys = kdc.numeric_auth_keys("w", "num", lo, hi, tree_size, least_count, snap=True)
        nbytes = 0
        if seal_keys:
            pk = pairwise.setdefault(sub, random_bytes(16, rng))
            for node, k in keys.items():
                nbytes += len(seal(pk, node.encode() + k.reveal(), aad=aad, rng=rng))
        return len(keys), nbytes

    active: list[str] = []  # subscription ids; a rejoin is a new subscription id
    inactive: list[str] = []
    ranges: dict[str, tuple[int, int]] = {}
    p_active = lam / (lam + mu)
    seal_flag, sg.seal = sg.seal, False  # warm-up: build the steady state without accounting
    for i in range(n_total):
        if rng.random() < p_active:
            sub = f"s{i}#0"
            ranges[sub] = draw(rng)
            sg.join(sub, *ranges[sub])
            active.append(sub)
        else:
            inactive.append(f"s{i}#0")
    sg.seal = seal_flag
    if seal_flag:
        for sub in active:
            sg._pairwise[sub] = random_bytes(16, rng)
    t, next_epoch, epochs, done = 0.0, epoch, 0, 0
    sgk = sgb = pk = pb = seen = rev = 0
    sgt = pt = 0.0
    while done < joins:
        rate = len(inactive) * lam + len(active) * mu
        t += rng.expovariate(rate)
        while t >= next_epoch:
            rev += sg.end_epoch()[0]
            epochs += 1
            next_epoch += epoch
        if inactive and rng.random() * rate < len(inactive) * lam:
            idx = rng.randrange(len(inactive))
            inactive[idx], inactive[-1] = inactive[-1], inactive[idx]
            base, gen = inactive.pop().split("#")
            sub = f"{base}#{int(gen) + 1}"
            lo, hi = ranges[sub] = draw(rng)
            seen += len(active)
            t0 = time.perf_counter()
            k, b = sg.join(sub, lo, hi)
            t1 = time.perf_counter()
            k2, b2 = psg_join(sub, lo, hi)
            t2 = time.perf_counter()
            sgk, sgb, sgt = sgk + k, sgb + b, sgt + t1 - t0
            pk, pb, pt = pk + k2, pb + b2, pt + t2 - t1
            active.append(sub)
            done += 1
        elif active:
            idx = rng.randrange(len(active))
            active[idx], active[-1] = active[-1], active[idx]
            sub = active.pop()
            sg.leave(sub)
            inactive.append(sub)
    live = [s for s in active if s in sg._ranges]
    per_sub_sg = sum(sg.keys_of(s) for s in live) / max(1, len(live))
    per_sub_psg = sum(
        len(kdc.numeric_auth_keys("w", "num", *ranges[s], tree_size, least_count, snap=True))
        for s in live
    ) / max(1, len(live))
    return ChurnResult(
        ns=seen / joins,
        joins=joins,
        sg_keys=sgk / joins,
        sg_bytes=sgb / joins,
        sg_ms=1000 * sgt / joins,
        psg_keys=pk / joins,
        psg_bytes=pb / joins,
        psg_ms=1000 * pt / joins,
        sg_keys_per_subscriber=per_sub_sg,
        psg_keys_per_subscriber=per_sub_psg,
        sg_keys_per_publisher=float(sg.groups),
        psg_keys_per_publisher=1.0,  # K(w) (or K^P(w)) derives every event key (§3.1)
        sg_revocation_keys_per_epoch=rev / max(1, epochs),
        epochs=epochs,
    )
