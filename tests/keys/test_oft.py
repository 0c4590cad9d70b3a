from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.crypto import open_
from pubguard.errors import KeyError_, StateError, ValidationError
from pubguard.keys.oft import (
    GroupKeyRing,
    OFTGroup,
    OFTMember,
    Rekey,
    Welcome,
    _aad,
    _tek,
    blind,
    key_id,
    mix,
)

T0 = 1_000_000.0


class Harness:
    """A manager, honest members receiving every broadcast, and a full public history."""

    def __init__(self, *, lazy: bool = False, grace: float = 30.0, seed: int = 1) -> None:
        self.group = OFTGroup("np", lazy=lazy, grace=grace)
        self.rng = random.Random(seed)
        self.members: dict[str, OFTMember] = {}
        self.welcomes: dict[str, Welcome] = {}
        self.history: list[Rekey] = []
        self.pairs: set[tuple[bytes, bytes]] = set()  # every (g(left), g(right)) ever mixed
        self.roots: list[tuple[int, float, bytes]] = []  # (version, joined/left at, root key)
        self.now = T0

    def _record(self, rk: Rekey) -> None:
        self.history.append(rk)
        for m in list(self.members.values()):
            m.apply(rk)
        stack = [self.group._root] if self.group._root else []
        while stack:
            n = stack.pop()
            if n.left is not None:
                self.pairs.add((n.left.blinded, n.right.blinded))
                stack += [n.left, n.right]
        if rk.refresh is not None:
            self.roots.append((rk.refresh.version, rk.time, self.group._root.key))

    def join(self, name: str, **kw) -> Rekey:
        self.now += 1
        welcome, rk = self.group.join(name, now=self.now, rng=self.rng, **kw)
        self.welcomes[name] = welcome
        self.members[name] = OFTMember(welcome, grace=self.group.ring.grace)
        self._record(rk)
        return rk

    def leave(self, name: str) -> Rekey:
        self.now += 1
        rk = self.group.leave(name, now=self.now, rng=self.rng)
        self._record(rk)
        del self.members[name]
        return rk

    def check_members_agree(self) -> None:
        cur = self.group.current
        for m in self.members.values():
            assert m.ring.current == cur
            assert m.root_key() == self.group._root.key

    def closure(self, name: str) -> set[bytes]:
        """Every key ``name`` can compute from its welcome and *every* broadcast ever sent: it
        may blind any key it has, open any update sealed under a key it has, and mix any pair of
        blinded keys that were ever siblings. (Blinding a blinded key yields nothing useful, so
        keys and blinded keys are tracked apart to keep the closure finite.)"""
        w = self.welcomes[name]
        keys = {w.leaf_key.reveal()}
        if w.current is not None:
            keys.add(w.current.key.reveal())
        blinded = {e.sibling_blinded.reveal() for e in w.path}
        while True:
            new_blinded = {blind(k) for k in keys} | blinded
            new_keys = set(keys)
            kids = {key_id(k): k for k in keys}
            for rk in self.history:
                for u in rk.updates:
                    if u.kid in kids:
                        aad = _aad("np", rk.seq, u.kind, u.node)
                        pt = open_(kids[u.kid], u.blob, aad=aad)
                        (new_keys if u.kind == "leaf" else new_blinded).add(pt)
            new_keys |= {
                mix(gl, gr) for gl, gr in self.pairs if gl in new_blinded and gr in new_blinded
            }
            if new_keys == keys and new_blinded == blinded:
                return keys | blinded
            keys, blinded = new_keys, new_blinded

    def tek(self, version: int, valid_from: float, root: bytes) -> bytes:
        return _tek("np", root, version, valid_from).reveal()


def test_members_compute_the_group_key():
    h = Harness()
    for i in range(20):
        h.join(f"b{i}")
        h.check_members_agree()
    for i in range(0, 20, 3):
        h.leave(f"b{i}")
        h.check_members_agree()
    assert len(h.group) == 13 and h.group.version == 27


def test_join_and_leave_cost_is_logarithmic():
    g = OFTGroup("big", lazy=False)
    rng = random.Random(3)
    for i in range(1024):
        _, rk = g.join(f"m{i}", now=T0 + i, rng=rng)
    assert g.depth() == 10
    _, rk = g.join("x", now=T0 + 2000, rng=rng)
    assert rk.cost <= 2 * (math.ceil(math.log2(1025)) + 1)
    rk = g.leave("m17", now=T0 + 2001, rng=rng)
    assert rk.cost <= 2 * (math.ceil(math.log2(1025)) + 1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 10_000)), min_size=2, max_size=16))
def test_forward_and_backward_secrecy(ops):
    h = Harness(lazy=False)
    joined_at: dict[str, int] = {}  # member -> number of refreshes before it joined
    left_at: dict[str, int] = {}  # ex-member -> number of refreshes up to its leave
    for i, (is_join, pick) in enumerate(ops):
        active = sorted(h.members)
        if is_join or not active:
            joined_at[f"m{i}"] = len(h.roots)
            h.join(f"m{i}")
        else:
            victim = active[pick % len(active)]
            h.leave(victim)
            left_at[victim] = len(h.roots)
        h.check_members_agree()
    for name, n_before in joined_at.items():
        known = h.closure(name)
        for version, t, root in h.roots[:n_before]:  # backward secrecy
            assert root not in known and h.tek(version, t, root) not in known
        leave = left_at.get(name)
        if leave is not None:
            for version, t, root in h.roots[leave:]:  # forward secrecy (the leave refreshed)
                assert root not in known and h.tek(version, t, root) not in known
        else:  # sanity: the closure is strong enough to find keys a member legitimately has
            assert h.roots[-1][2] in known


def test_lazy_refresh_skips_join_refresh_for_credentials_valid_at_last_refresh():
    h = Harness(lazy=True)
    h.join("a", valid_from=T0 - 100)
    h.join("b", valid_from=T0 - 100)  # valid before a's refresh at T0+1
    assert h.history[-1].refresh is None and h.group.version == 1
    assert h.members["b"].ring.current == h.group.current
    h.join("c")  # credential starts now: backward secrecy needs a refresh
    assert h.history[-1].refresh is not None and h.group.version == 2
    h.check_members_agree()


def test_lazy_leave_defers_refresh_until_credential_expiry():
    h = Harness(lazy=True)
    for m in "abcd":
        h.join(m)
    before = h.group.version
    h.now += 1
    rk = h.group.leave("b", now=h.now, rng=h.rng)
    h._record(rk)
    del h.members["b"]
    assert rk.refresh is None and h.group.version == before  # cached credential still valid
    h.check_members_agree()
    assert h.group.tick(now=h.now + 10) is None
    # with a finite credential the refresh happens when it expires, and excludes b
    h2 = Harness(lazy=True)
    for m in "abcd":
        h2.join(m, valid_until=T0 + 500)
    h2.leave("b")
    assert h2.history[-1].refresh is None
    assert h2.group.tick(now=T0 + 499) is None
    rk = h2.group.tick(now=T0 + 500)
    assert rk is not None and rk.refresh is not None
    h2._record(rk)
    h2.check_members_agree()
    version, t, root = h2.roots[-1]
    known = h2.closure("b")
    assert root not in known and h2.tek(version, t, root) not in known


def test_old_keys_kept_for_grace_period():
    h = Harness(grace=30)
    h.join("a")
    t1 = h.group.current.valid_from
    k1 = h.group.current
    h.now += 100
    h._record(h.group.refresh(now=h.now))
    m = h.members["a"]
    assert m.ring.key_at(t1 + 5) == k1 == h.group.ring.key_at(t1 + 5)
    assert m.ring.key_at(h.now + 1).version == 2
    h.group.tick(now=h.now + 31)
    with pytest.raises(KeyError_, match="grace"):
        h.group.ring.key_at(t1 + 5)
    with pytest.raises(ValidationError):
        GroupKeyRing(-1)


def test_bad_input_is_typed_and_keys_stay_out_of_reprs():
    h = Harness()
    h.join("a")
    with pytest.raises(StateError, match="already"):
        h.group.join("a", now=h.now)
    with pytest.raises(StateError, match="not in group"):
        h.group.leave("zz", now=h.now)
    with pytest.raises(StateError, match="not valid"):
        h.group.join("late", now=h.now, valid_from=h.now + 10)
    with pytest.raises(ValidationError):
        OFTGroup("")
    _, rk1 = h.group.join("b", now=h.now + 1)
    _, rk2 = h.group.join("c", now=h.now + 2)
    with pytest.raises(StateError, match="missed"):
        h.members["a"].apply(rk2)
    texts = repr(h.group) + repr(h.members["a"]) + repr(h.welcomes["a"]) + repr(rk1)
    for secret in (
        h.group._root.key,
        h.group.current.key.reveal(),
        h.welcomes["a"].leaf_key.reveal(),
    ):
        assert secret.hex() not in texts
