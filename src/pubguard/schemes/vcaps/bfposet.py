"""The broker filter poset (BFPoset): filter handles with recipient lists, built from tokens.

Theory of operation
-------------------
vcaps.txt §4.1 Stage II, on receipt of ``T_sub`` for ``ID_F`` from downstream node ``x``:

- ``ID_F`` held: add ``x`` to its recipient list; nothing is forwarded.
- new: ``L_parent`` = held filters in ``F_pred``, ``L_child`` = held filters in ``F_succ``; add the
  node with those edges and recipient ``x``; forward ``T_sub`` upstream (recipient: this broker)
  *only if* ``L_parent`` is empty (:meth:`BFPoset.insert` returns whether to forward).

**Compaction** (§4.1, Fig. 2): a recipient listed under ``F`` and under a held filter covering
``F`` is removed from ``F``'s list (a notification matching ``F`` matches the coverer, whose ID is
then in the routing vector too), and a filter left without recipients leaves the poset. We keep
the full table and derive the compacted one from it (:meth:`recipients`, :meth:`nodes`), so an
unsubscription can bring a suppressed entry back. Recipients are compacted by *group*
(``group(recipient)``): a next-hop broker is its own group; a recipient whose group is None is
never compacted (on the broker network a client link's entries are its subscriptions, and a
delivery names every subscription it matches).

**Unsubscription** is our extension (the paper has none): :meth:`remove` drops a recipient; a
filter left with none leaves, and the held filters it alone covered become roots, which the
caller forwards upstream *before* withdrawing the removed one (no gap in coverage).

**Match** (§4.3 RV): ``R = ∪ receivers(ID) for ID in RV ∩ BFPoset``. SRV (§5.5) tests held
filters against the encrypted vector with the paper's two heuristics: (i) a filter is tested
only when every held filter covering it matched (starting from the roots, so an unmatched root
prunes its sub-tree), and (ii) stop once every recipient group is already in the receiver list
(only when every recipient has a group). SRV-fast tests every filter that has recipients, one
PRF each (cheaper than (i)'s bookkeeping), with heuristic (ii).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from pubguard.schemes.vcaps.swp import swp_match_any
from pubguard.schemes.vcaps.tokens import FastRouting, RvToken, Token

__all__ = ["BFPoset"]

R = TypeVar("R", bound=Hashable)


def _self_group(r: Hashable) -> Hashable | None:
    return r


class BFPoset(Generic[R]):
    """One broker's poset for one publisher and profile. Keys are token handles (``ID_F``,
    ``x_ID`` or ``h_ID``); recipients any hashables."""

    def __init__(self, group: Callable[[R], Hashable | None] = _self_group) -> None:  # type: ignore[assignment]
        self._group = group
        self.tokens: dict[bytes, Token] = {}
        self._full: dict[bytes, dict[R, None]] = {}  # handle -> every recipient, in order
        self._active: dict[bytes, tuple[R, ...]] = {}  # handle -> compacted recipients
        self.up: dict[bytes, set[bytes]] = {}  # handle -> held handles covering it
        self.down: dict[bytes, set[bytes]] = {}  # handle -> held handles it covers
        self.forwarded: set[bytes] = set()  # handles this broker sent upstream
        # RV only: held handles by the IDs their lists name (the other direction of F_pred/F_succ)
        self._named_succ: dict[bytes, set[bytes]] = {}  # ID -> held handles listing it in succ
        self._named_pred: dict[bytes, set[bytes]] = {}
        # SRV / SRV-fast: held handles whose encrypted succ (pred) list is not empty
        self._listing_succ: dict[bytes, None] = {}
        self._listing_pred: dict[bytes, None] = {}
        self.roots: set[bytes] = set()
        self._nogroup = 0  # recipients without a group (heuristic (ii) needs none)
        self._groups: set[Hashable] | None = None  # every active recipient's group (cached)

    def __len__(self) -> int:
        return len(self._active)

    def __contains__(self, handle: object) -> bool:
        return handle in self._active

    def nodes(self) -> set[bytes]:
        """The compacted poset's nodes (filters with at least one recipient left)."""
        return set(self._active)

    def recipients(self, handle: bytes) -> tuple[R, ...]:
        """The compacted recipient list of a held filter (empty if compacted away)."""
        return self._active.get(handle, ())

    def all_recipients(self, handle: bytes) -> tuple[R, ...]:
        return tuple(self._full.get(handle, ()))

    # -- Stage II -------------------------------------------------------------------------
    def insert(self, token: Token, recipient: R) -> bool:
        """Add ``recipient`` under ``token``'s filter; True iff the token is to be forwarded
        upstream (a new filter with ``L_parent`` empty, vcaps.txt §4.1 step (v))."""
        h = token.handle
        full = self._full.get(h)
        if full is not None:  # YES: add x_i to the recipient list of ID_F
            if recipient not in full:
                full[recipient] = None
                self._nogroup += self._group(recipient) is None
                self._recompact({h} | self.down[h])
            return False
        parents, children = self._relations(token)
        self.tokens[h] = token
        self._full[h] = {recipient: None}
        self._nogroup += self._group(recipient) is None
        self.up[h] = parents
        self.down[h] = children
        for p in parents:
            self.down[p].add(h)
        for c in children:
            self.up[c].add(h)
            self.roots.discard(c)
        if isinstance(token, RvToken):
            for i in token.succ:
                self._named_succ.setdefault(i, set()).add(h)
            for i in token.pred:
                self._named_pred.setdefault(i, set()).add(h)
        else:
            if token.succ:
                self._listing_succ[h] = None
            if token.pred:
                self._listing_pred[h] = None
        if not parents:
            self.roots.add(h)
        self._recompact({h} | children)
        if parents:
            return False
        self.forwarded.add(h)
        return True

    def _relations(self, token: Token) -> tuple[set[bytes], set[bytes]]:
        """(L_parent, L_child) among the held filters."""
        h = token.handle
        if isinstance(token, RvToken):  # set intersections (vcaps.txt §4.1 step (i))
            held = self._full
            parents = {p for p in token.pred if p in held} | self._named_succ.get(h, set())
            children = {c for c in token.succ if c in held} | self._named_pred.get(h, set())
            return parents, children
        # SRV (§5.3 steps i-ii) and SRV-fast: one test per held filter and direction. Only a
        # held filter with a non-empty list can name the new one (the lists' lengths are on
        # the wire anyway), and only a new token with a non-empty list can name a held one.
        tokens = self.tokens
        cand_p = tokens if token.pred else self._listing_succ
        cand_c = tokens if token.succ else self._listing_pred
        parents = {g for g in cand_p if tokens[g].covers(token)}
        children = {g for g in cand_c if g not in parents and token.covers(tokens[g])}
        return parents, children

    def remove(self, handle: bytes, recipient: R) -> tuple[bool, list[Token]]:
        """Drop ``recipient`` from ``handle``'s list (our unsubscription extension). Returns
        (withdraw: the filter left and had been forwarded, so the upstream broker must drop
        this broker from its list; promoted: tokens of held filters that lost their last
        cover and must now be forwarded upstream, before the withdrawal)."""
        full = self._full.get(handle)
        if full is None or recipient not in full:
            return False, []
        del full[recipient]
        self._nogroup -= self._group(recipient) is None
        if full:
            self._recompact({handle} | self.down[handle])
            return False, []
        token = self.tokens.pop(handle)
        del self._full[handle]
        self._active.pop(handle, None)
        if isinstance(token, RvToken):
            for i in token.succ:
                self._named_succ[i].discard(handle)
            for i in token.pred:
                self._named_pred[i].discard(handle)
        self._listing_succ.pop(handle, None)
        self._listing_pred.pop(handle, None)
        for p in self.up.pop(handle):
            self.down[p].discard(handle)
        below = self.down.pop(handle)
        self.roots.discard(handle)
        promoted: list[Token] = []
        for c in sorted(below):
            self.up[c].discard(handle)
            if not self.up[c]:
                self.roots.add(c)
                if c not in self.forwarded:
                    self.forwarded.add(c)
                    promoted.append(self.tokens[c])
        self._recompact(below)
        withdraw = handle in self.forwarded
        self.forwarded.discard(handle)
        return withdraw, promoted

    def _recompact(self, handles: Iterable[bytes]) -> None:
        group = self._group
        self._groups = None
        for h in handles:
            above: set[Hashable] = set()
            for p in self.up[h]:
                above.update(g for g in map(group, self._full[p]) if g is not None)
            keep = tuple(r for r in self._full[h] if (g := group(r)) is None or g not in above)
            if keep:
                self._active[h] = keep
            else:
                self._active.pop(h, None)

    # -- Match (§4.3, §5.5) ------------------------------------------------------------------
    def match(self, pe: Any) -> set[R]:
        """The receivers of a notification's decoded routing header."""
        if type(pe) is frozenset:  # RV: RV ∩ BFPoset
            out: set[R] = set()
            active = self._active
            for i in pe:
                r = active.get(i)
                if r is not None:
                    out.update(r)
            return out
        return self._search(pe)

    def _all_groups(self) -> set[Hashable] | None:
        """Heuristic (ii)'s target: every recipient's group, or None when some recipient has
        none (a client link's subscriptions must all be found)."""
        if self._nogroup:
            return None
        if self._groups is None:
            group = self._group
            self._groups = {g for rs in self._active.values() for g in map(group, rs)}
        return self._groups

    def _search(self, pe: Any) -> set[R]:
        if isinstance(pe, FastRouting):
            return self._codewords(pe)
        words = pe

        def hit(t: Token) -> bool:  # t is an SrvToken
            return swp_match_any(words, t.xi, t.fk)  # type: ignore[union-attr]

        out: set[R] = set()
        memo: dict[bytes, bool] = {}
        tokens, up, down, active = self.tokens, self.up, self.down, self._active
        group = self._group
        groups = self._all_groups()
        reached: set[Hashable] = set()
        stack = list(self.roots)
        while stack:
            h = stack.pop()
            if h in memo:
                continue
            # heuristic (i): test only when every held cover of h matched
            if not all(memo.get(p, False) for p in up[h]):
                if all(p in memo for p in up[h]):
                    memo[h] = False
                continue
            ok = memo[h] = hit(tokens[h])
            if not ok:
                continue
            rs = active.get(h)
            if rs:
                out.update(rs)
                if groups is not None:
                    reached.update(map(group, rs))
                    if reached >= groups:
                        break
            stack.extend(c for c in down[h] if c not in memo)
        return out

    def _codewords(self, pe: FastRouting) -> set[R]:
        """SRV-fast: one PRF and one set lookup per filter with recipients (a flat loop: a
        test costs less than heuristic (i)'s bookkeeping), stopping by heuristic (ii)."""
        nonce, v = pe.nonce, pe.v
        tokens, group = self.tokens, self._group
        groups = self._all_groups()
        out: set[R] = set()
        reached: set[Hashable] = set()
        for h, rs in self._active.items():
            if tokens[h].prf.unchecked(nonce) in v:  # type: ignore[union-attr]  # 16-byte nonce
                out.update(rs)
                if groups is not None:
                    reached.update(map(group, rs))
                    if reached >= groups:
                        break
        return out
