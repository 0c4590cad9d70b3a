"""Hermes key groups refreshed with one-way function trees (hermes-encrypted-access-control.txt
§4.1-4.2; McGrew and Sherman's OFT).

Theory of operation
-------------------
Members sit at the leaves of a binary tree; the manager gives each a random leaf key. Every
node ``x`` has a key ``k_x`` and a *blinded* key ``g(k_x)``; an internal node's key mixes its
children's blinded keys::

    g(k)         = H("pubguard-oft-blind" || k)           one-way blinding
    k_x          = f(g(k_left), g(k_right)) = KH_{g(k_left)}("pubguard-oft-mix" || g(k_right))

A member stores its leaf key and the blinded keys of the siblings along its path, and computes
every key on that path up to the root. Knowing ``g(k)`` reveals nothing of ``k``, so a member
learns no key off its own path.

Join (O(log n)): the manager walks down to the smaller subtree and splits a leaf ``L`` into a new
parent ``P`` with children ``L`` and the newcomer ``N``; ``L``'s leaf key is replaced (sent to
its member under the old one) so ``N`` can never compute an earlier key (backward secrecy).
Leave (O(log n)): the sibling subtree ``S`` of the departed leaf takes its parent's place and
one leaf key inside ``S`` is replaced. After either change the new blinded key of every node
``x`` on the changed path is broadcast encrypted under the key of ``x``'s sibling, which only
that sibling's subtree knows. A departed member knew only blinded keys off its path, so it can
decrypt none of these (forward secrecy). Each update carries ``kid`` = ``H("kid" || key)[:8]``
of the key it is sealed under, so members find theirs without trial decryption.

Group traffic key (§4.2 "Key Refreshing"): events are sealed with a *traffic key* derived from
the root, ``TEK_v = HKDF(k_root, "pubguard-oft-tek" || group || v || t_v)``, tagged with the
timestamp ``t_v`` of its refresh. Events pick their key by publication timestamp
(:meth:`GroupKeyRing.key_at`), and superseded keys are kept for a configurable ``grace`` period
against clock drift. With ``lazy=True`` the manager applies Hermes' lazy refresh: a joining
member whose credential was already valid at the previous refresh gets the current TEK and no
refresh happens; a leaving member's credential is cached and the refresh happens only when it
expires (:meth:`OFTGroup.tick`). With ``lazy=False`` every join and leave refreshes at once.
The tree itself is always rekeyed on leave, so the deferred refresh still excludes the member.

Pure and sans-IO: ``now`` and ``rng`` are arguments; the results are messages to deliver.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import math
import random as _random
import struct
from typing import Any, Final

from pubguard.crypto import KH, H, SecretBytes, aad_for, hkdf, open_, random_bytes, seal
from pubguard.errors import InvalidToken, KeyError_, StateError, ValidationError

__all__ = [
    "DEFAULT_GRACE",
    "Collapse",
    "GroupKey",
    "GroupKeyRing",
    "OFTGroup",
    "OFTMember",
    "PathEntry",
    "Refresh",
    "Rekey",
    "Split",
    "Update",
    "Welcome",
    "blind",
    "key_id",
    "mix",
]

DEFAULT_GRACE: Final = 30.0  # seconds an old traffic key stays usable after its successor
KEY_BYTES: Final = 32


def blind(k: bytes) -> bytes:
    """``g(k)``: the one-way blinding function."""
    return H(b"pubguard-oft-blind\x00" + k)


def mix(g_left: bytes, g_right: bytes) -> bytes:
    """``f(g(k_l), g(k_r))``: the mixing function giving the parent's key."""
    return KH(g_left, b"pubguard-oft-mix\x00" + g_right)


def key_id(k: bytes) -> bytes:
    """Public identifier of the key an update is sealed under."""
    return H(b"pubguard-oft-kid\x00" + k)[:8]


def _tek(group: str, root: bytes, version: int, valid_from: float) -> SecretBytes:
    info = b"pubguard-oft-tek\x00" + group.encode() + struct.pack(">Qq", version, _ms(valid_from))
    return SecretBytes(hkdf(root, info=info))


def _ms(t: float) -> int:
    return int(round(t * 1000))


def _aad(group: str, seq: int, kind: str, node: int) -> bytes:
    return aad_for(b"pubguard-oft:" + group.encode(), f"{kind}:{node}", seq)


# -- messages ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class GroupKey:
    """Traffic key ``version``, in force from ``valid_from`` (a refresh timestamp)."""

    version: int
    valid_from: float
    key: SecretBytes


@dataclasses.dataclass(frozen=True, slots=True)
class Split:
    """Join: leaf ``leaf`` moved under the new internal node ``parent``; ``new`` is its sibling."""

    leaf: int
    parent: int
    new: int


@dataclasses.dataclass(frozen=True, slots=True)
class Collapse:
    """Leave: leaf ``removed`` and its parent ``parent`` vanish; ``survivor`` takes the parent's
    place."""

    removed: int
    parent: int
    survivor: int


@dataclasses.dataclass(frozen=True, slots=True)
class Update:
    """New key material for ``node``: its leaf key (``kind="leaf"``, for its member only) or its
    blinded key (``kind="blinded"``, for the sibling's subtree), sealed under key ``kid``."""

    node: int
    kind: str
    kid: bytes
    blob: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class Refresh:
    """A new traffic key version, derived by every member from the root key."""

    version: int
    valid_from: float


@dataclasses.dataclass(frozen=True, slots=True)
class Rekey:
    """One broadcast to the whole group: structure changes, sealed updates, maybe a refresh."""

    group: str
    seq: int
    time: float
    structure: tuple[Split | Collapse, ...]
    updates: tuple[Update, ...]
    refresh: Refresh | None

    @property
    def cost(self) -> int:
        """Number of key updates (the O(log n) of hermes §4.1)."""
        return len(self.updates)


@dataclasses.dataclass(frozen=True, slots=True)
class PathEntry:
    """One level of a member's path: ``node`` on the path, its ``sibling`` and that sibling's
    blinded key; ``left`` says whether ``node`` is its parent's left child."""

    node: int
    sibling: int
    left: bool
    sibling_blinded: SecretBytes


@dataclasses.dataclass(frozen=True, slots=True)
class Welcome:
    """Unicast to a joining member (secret: deliver it wrapped to the member's key)."""

    group: str
    member: str
    seq: int
    leaf: int
    leaf_key: SecretBytes
    path: tuple[PathEntry, ...]
    current: GroupKey | None


# -- key ring ---------------------------------------------------------------------------------


class GroupKeyRing:
    """Traffic keys by refresh timestamp, keeping superseded keys for ``grace`` seconds."""

    __slots__ = ("_keys", "grace")

    def __init__(self, grace: float = DEFAULT_GRACE) -> None:
        if grace < 0 or math.isnan(grace):
            raise ValidationError("grace period must be >= 0")
        self.grace = grace
        self._keys: list[GroupKey] = []

    def add(self, key: GroupKey, *, now: float) -> None:
        if self._keys and key.version <= self._keys[-1].version:
            raise StateError("group key versions must increase")
        self._keys.append(key)
        self.prune(now)

    def prune(self, now: float) -> None:
        """Drop every key whose successor came into force more than ``grace`` ago."""
        while len(self._keys) > 1 and self._keys[1].valid_from + self.grace < now:
            self._keys.pop(0)

    @property
    def current(self) -> GroupKey | None:
        return self._keys[-1] if self._keys else None

    def versions(self) -> list[int]:
        return [k.version for k in self._keys]

    def key_at(self, timestamp: float) -> GroupKey:
        """The key in force at an event's publication ``timestamp`` (hermes §4.2)."""
        i = bisect.bisect_right([k.valid_from for k in self._keys], timestamp) - 1
        if i < 0:
            raise KeyError_("no group key for that timestamp (older than the grace period)")
        return self._keys[i]


# -- manager ----------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True, eq=False)
class _Node:
    id: int
    key: bytes
    blinded: bytes
    parent: _Node | None = None
    left: _Node | None = None
    right: _Node | None = None
    leaves: int = 1
    member: str | None = None

    def __repr__(self) -> str:
        return f"_Node({self.id}, leaves={self.leaves}, member={self.member!r})"

    def sibling(self) -> _Node:
        p = self.parent
        assert p is not None and p.left is not None and p.right is not None
        return p.right if p.left is self else p.left


class OFTGroup:
    """The key group manager of hermes §4 (one per encryption key)."""

    def __init__(self, name: str, *, grace: float = DEFAULT_GRACE, lazy: bool = True) -> None:
        if not name:
            raise ValidationError("group name must not be empty")
        self.name = name
        self.lazy = lazy
        self.ring = GroupKeyRing(grace)
        self._root: _Node | None = None
        self._leaf: dict[str, _Node] = {}
        self._cred: dict[str, tuple[float, float]] = {}
        self._expiries: list[tuple[float, str]] = []  # departed members' credential expiry
        self._next_id = 0
        self._seq = 0
        self._last_refresh = -math.inf

    def __repr__(self) -> str:
        return f"OFTGroup({self.name!r}, members={len(self._leaf)}, version={self.version})"

    # -- inspection --------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._leaf)

    def __contains__(self, member: object) -> bool:
        return member in self._leaf

    @property
    def version(self) -> int:
        cur = self.ring.current
        return cur.version if cur else 0

    @property
    def current(self) -> GroupKey | None:
        return self.ring.current

    def depth(self) -> int:
        return max((self._depth(n) for n in self._leaf.values()), default=0)

    @staticmethod
    def _depth(n: _Node) -> int:
        d = 0
        while n.parent is not None:
            n, d = n.parent, d + 1
        return d

    # -- internals ---------------------------------------------------------------------------

    def _new_node(self, key: bytes, member: str | None = None) -> _Node:
        self._next_id += 1
        return _Node(self._next_id, key, blind(key), member=member)

    def _rekey_up(self, start: _Node, seq: int, updates: list[Update], skip: _Node | None) -> None:
        """Recompute keys from ``start`` to the root, sealing each new blinded key for the
        sibling subtree (except for ``skip``, the newcomer, who gets its path in the Welcome)."""
        n = start
        while n.parent is not None:
            sib = n.sibling()
            if sib is not skip:
                blob = seal(sib.key, n.blinded, aad=_aad(self.name, seq, "blinded", n.id))
                updates.append(Update(n.id, "blinded", key_id(sib.key), blob))
            p = n.parent
            assert p.left is not None and p.right is not None
            p.key = mix(p.left.blinded, p.right.blinded)
            p.blinded = blind(p.key)
            n = p

    def _refresh_leaf(
        self, leaf: _Node, seq: int, updates: list[Update], rng: _random.Random | None
    ) -> None:
        old = leaf.key
        leaf.key = random_bytes(KEY_BYTES, rng)
        leaf.blinded = blind(leaf.key)
        blob = seal(old, leaf.key, aad=_aad(self.name, seq, "leaf", leaf.id))
        updates.append(Update(leaf.id, "leaf", key_id(old), blob))

    def _refresh(self, now: float) -> Refresh | None:
        if self._root is None:
            return None
        version = self.version + 1
        self.ring.add(
            GroupKey(version, now, _tek(self.name, self._root.key, version, now)), now=now
        )
        self._last_refresh = now
        return Refresh(version, now)

    def _path_of(self, leaf: _Node) -> tuple[PathEntry, ...]:
        out = []
        n = leaf
        while n.parent is not None:
            sib = n.sibling()
            out.append(PathEntry(n.id, sib.id, n.parent.left is n, SecretBytes(sib.blinded)))
            n = n.parent
        return tuple(out)

    # -- operations --------------------------------------------------------------------------

    def join(
        self,
        member: str,
        *,
        now: float,
        valid_from: float | None = None,
        valid_until: float = math.inf,
        rng: _random.Random | None = None,
    ) -> tuple[Welcome, Rekey]:
        """Add ``member``; its credential is valid ``[valid_from, valid_until]`` (default from
        ``now``, forever)."""
        if not member:
            raise ValidationError("member id must not be empty")
        if member in self._leaf:
            raise StateError(f"{member!r} is already in group {self.name!r}")
        vf = now if valid_from is None else valid_from
        if not vf <= now < valid_until:
            raise StateError(f"the credential of {member!r} is not valid now")
        self._seq += 1
        seq = self._seq
        new = self._new_node(random_bytes(KEY_BYTES, rng), member)
        updates: list[Update] = []
        structure: tuple[Split | Collapse, ...] = ()
        if self._root is None:
            self._root = new
        else:
            leaf = self._root
            while leaf.left is not None and leaf.right is not None:  # toward the smaller subtree
                leaf = leaf.left if leaf.left.leaves <= leaf.right.leaves else leaf.right
            parent = self._new_node(b"")
            self._replace(leaf, parent)
            parent.left, parent.right = leaf, new
            leaf.parent = new.parent = parent
            parent.leaves = leaf.leaves + 1
            a = parent.parent
            while a is not None:
                a.leaves += 1
                a = a.parent
            structure = (Split(leaf.id, parent.id, new.id),)
            self._refresh_leaf(leaf, seq, updates, rng)  # backward secrecy
            # newcomer's blinded key to the split leaf, then the whole path upwards
            blob = seal(leaf.key, new.blinded, aad=_aad(self.name, seq, "blinded", new.id))
            updates.append(Update(new.id, "blinded", key_id(leaf.key), blob))
            self._rekey_up(leaf, seq, updates, skip=new)
        self._leaf[member] = new
        self._cred[member] = (vf, valid_until)
        lazy_ok = self.lazy and self.ring.current is not None and vf <= self._last_refresh
        refresh = None if lazy_ok else self._refresh(now)
        welcome = Welcome(
            self.name,
            member,
            seq,
            new.id,
            SecretBytes(new.key),
            self._path_of(new),
            self.ring.current if lazy_ok else None,
        )
        return welcome, Rekey(self.name, seq, now, structure, tuple(updates), refresh)

    def _replace(self, old: _Node, new: _Node) -> None:
        p = old.parent
        new.parent = p
        if p is None:
            self._root = new
        elif p.left is old:
            p.left = new
        else:
            p.right = new

    def leave(self, member: str, *, now: float, rng: _random.Random | None = None) -> Rekey:
        """Remove ``member``; the tree is rekeyed now, the traffic key now or (lazy) at the
        expiry of the member's credential."""
        leaf = self._leaf.pop(member, None)
        if leaf is None:
            raise StateError(f"{member!r} is not in group {self.name!r}")
        _, valid_until = self._cred.pop(member)
        self._seq += 1
        seq = self._seq
        updates: list[Update] = []
        structure: tuple[Split | Collapse, ...] = ()
        parent = leaf.parent
        if parent is None:
            self._root = None
        else:
            survivor = leaf.sibling()
            self._replace(parent, survivor)
            a = survivor.parent
            while a is not None:
                a.leaves -= 1
                a = a.parent
            structure = (Collapse(leaf.id, parent.id, survivor.id),)
            target = survivor
            while target.left is not None and target.right is not None:
                target = target.left if target.left.leaves <= target.right.leaves else target.right
            self._refresh_leaf(target, seq, updates, rng)  # forward secrecy of the tree
            self._rekey_up(target, seq, updates, skip=None)
        refresh = None
        if self.lazy and valid_until > now:
            heapq.heappush(self._expiries, (valid_until, member))
        else:
            refresh = self._refresh(now)
        return Rekey(self.name, seq, now, structure, tuple(updates), refresh)

    def refresh(self, *, now: float) -> Rekey:
        """Timer-triggered refresh (hermes §4.2): a new traffic key version from the root."""
        self._seq += 1
        return Rekey(self.name, self._seq, now, (), (), self._refresh(now))

    def tick(self, *, now: float) -> Rekey | None:
        """Lazy leave: refresh once the cached credential of a departed member has expired."""
        self.ring.prune(now)
        due = False
        while self._expiries and self._expiries[0][0] <= now:
            heapq.heappop(self._expiries)
            due = True
        return self.refresh(now=now) if due else None

    # -- durable state -----------------------------------------------------------------------

    def export_state(self) -> dict[str, Any]:
        """The whole manager state as msgpack-ready data, node and traffic keys included: it
        is SECRET, and the caller seals it before it leaves memory (a key-group manager that
        restarts with its groups, ``pubguard.net.keyservice.hermes_kgm_store``). A node's
        blinded key is always ``g(k)`` of its key, so only keys are exported."""
        nodes = []
        stack = [self._root] if self._root is not None else []
        while stack:
            n = stack.pop()
            kids = (n.left.id, n.right.id) if n.left is not None and n.right is not None else (0, 0)
            nodes.append([n.id, n.key, n.member, *kids])
            stack += [c for c in (n.left, n.right) if c is not None]
        return {
            "name": self.name,
            "lazy": self.lazy,
            "grace": self.ring.grace,
            "root": 0 if self._root is None else self._root.id,
            "nodes": nodes,
            "cred": [[m, vf, vu] for m, (vf, vu) in self._cred.items()],
            "expiries": [[t, m] for t, m in self._expiries],
            "next_id": self._next_id,
            "seq": self._seq,
            "last_refresh": self._last_refresh,
            "ring": [[k.version, k.valid_from, k.key.reveal()] for k in self.ring._keys],
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> OFTGroup:
        """The group :meth:`export_state` exported (ValidationError if it is malformed)."""
        try:
            g = cls(str(state["name"]), grace=float(state["grace"]), lazy=bool(state["lazy"]))
            by_id: dict[int, _Node] = {}
            kids: dict[int, tuple[int, int]] = {}
            for nid, key, member, left, right in state["nodes"]:
                k = bytes(key)
                by_id[int(nid)] = _Node(int(nid), k, blind(k), member=member)
                kids[int(nid)] = (int(left), int(right))
            for nid, (left, right) in kids.items():
                if left or right:
                    n = by_id[nid]
                    n.left, n.right = by_id[left], by_id[right]
                    n.left.parent = n.right.parent = n
            root = int(state["root"])
            g._root = by_id[root] if root else None
            if g._root is not None:
                _count_leaves(g._root)
            g._leaf = {n.member: n for n in by_id.values() if n.member is not None}
            g._cred = {str(m): (float(vf), float(vu)) for m, vf, vu in state["cred"]}
            g._expiries = [(float(t), str(m)) for t, m in state["expiries"]]
            heapq.heapify(g._expiries)
            g._next_id, g._seq = int(state["next_id"]), int(state["seq"])
            g._last_refresh = float(state["last_refresh"])
            g.ring._keys = [
                GroupKey(int(v), float(t), SecretBytes(bytes(k))) for v, t, k in state["ring"]
            ]
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            raise ValidationError("malformed key-group state") from None
        if set(g._leaf) != set(g._cred) or len(by_id) != 2 * len(g._leaf) - (1 if g._leaf else 0):
            raise ValidationError("malformed key-group state")
        return g


def _count_leaves(n: _Node) -> int:
    """Set ``leaves`` of ``n``'s subtree from its structure (restoring a group)."""
    if n.left is None or n.right is None:
        n.leaves = 1
    else:
        n.leaves = _count_leaves(n.left) + _count_leaves(n.right)
    return n.leaves


# -- member -----------------------------------------------------------------------------------


class OFTMember:
    """A member's side: leaf key, sibling blinded keys along its path, the traffic key ring."""

    def __init__(self, welcome: Welcome, *, grace: float = DEFAULT_GRACE) -> None:
        self.group = welcome.group
        self.member = welcome.member
        self.leaf = welcome.leaf
        self.active = True
        self._leaf_key = welcome.leaf_key.reveal()
        # [node, sibling, node-is-left, sibling's blinded key (None until received)]
        self._path: list[list] = [
            [e.node, e.sibling, e.left, e.sibling_blinded.reveal()] for e in welcome.path
        ]
        self._seq = welcome.seq
        self.ring = GroupKeyRing(grace)
        if welcome.current is not None:
            self.ring.add(welcome.current, now=welcome.current.valid_from)

    def __repr__(self) -> str:
        return f"OFTMember({self.member!r}, group={self.group!r}, depth={len(self._path)})"

    def _keys(self, upto: int) -> list[bytes]:
        """Keys of the path nodes from the leaf (index 0) to level ``upto``."""
        k = self._leaf_key
        out = [k]
        for node, _sib, left, gsib in self._path[:upto]:
            if gsib is None:
                raise StateError(f"missing blinded key below node {node}")
            k = mix(blind(k), gsib) if left else mix(gsib, blind(k))
            out.append(k)
        return out

    def root_key(self) -> bytes:
        return self._keys(len(self._path))[-1]

    @property
    def seq(self) -> int:
        """The sequence number of the last broadcast applied (a poller asks for later ones)."""
        return self._seq

    def apply(self, rekey: Rekey) -> None:
        """Process one group broadcast (in ``seq`` order)."""
        if rekey.group != self.group:
            raise ValidationError("rekey for another group")
        if rekey.seq < self._seq:
            return
        if rekey.seq > self._seq + 1:
            raise StateError(f"missed rekey messages ({self._seq + 1}..{rekey.seq - 1})")
        if rekey.seq == self._seq + 1 and self.active:
            for op in rekey.structure:
                self._restructure(op)
            for u in rekey.updates if self.active else ():
                self._update(u, rekey.seq)
        self._seq = rekey.seq
        if rekey.refresh is not None and self.active:
            r = rekey.refresh
            tek = _tek(self.group, self.root_key(), r.version, r.valid_from)
            self.ring.add(GroupKey(r.version, r.valid_from, tek), now=rekey.time)

    def _restructure(self, op: Split | Collapse) -> None:
        path = self._path
        if isinstance(op, Split):
            if op.leaf == self.leaf:
                if path:
                    path[0][0] = op.parent
                path.insert(0, [self.leaf, op.new, True, None])
                return
            for e in path:
                if e[1] == op.leaf:
                    e[1], e[3] = op.parent, None
            return
        if op.removed == self.leaf:
            self.active = False
            return
        for i, e in enumerate(path):
            if e[0] == op.survivor and e[1] == op.removed:
                del path[i]
                if i < len(path):
                    path[i][0] = op.survivor
                return
            if e[1] == op.parent:
                e[1], e[3] = op.survivor, None
                return

    def _update(self, u: Update, seq: int) -> None:
        aad = _aad(self.group, seq, u.kind, u.node)
        if u.kind == "leaf":
            if u.node == self.leaf and u.kid == key_id(self._leaf_key):
                self._leaf_key = open_(self._leaf_key, u.blob, aad=aad)
            return
        for i, e in enumerate(self._path):
            if e[1] == u.node:
                key = self._keys(i)[i]
                if u.kid != key_id(key):
                    raise InvalidToken("rekey sealed under a key this member does not hold")
                e[3] = open_(key, u.blob, aad=aad)
                return
