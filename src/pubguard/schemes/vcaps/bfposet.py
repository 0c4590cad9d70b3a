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
(only when every recipient has a group). SRV-fast tests the filters that have recipients, one
PRF and one set lookup each, with both heuristics over a search plan laid out once per
compacted poset (:mod:`~pubguard.schemes.vcaps.fastplan`). With the native backend
(:mod:`pubguard.native`) the whole search is one call per notification (``VcapsKeys`` of
``native/src/vcaps.rs``: every AES key schedule expanded once per plan, the codewords ``V`` as
one sorted set of raw 16-byte values built once per notification), which returns the indices
of the matched filters. Codewords are compared in full, so both backends give the same answer
on every input. The Python loop (:func:`~pubguard.schemes.vcaps.fastplan.search`) is the
reference.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from pubguard.schemes.vcaps.fastplan import FastPlan, fast_plan, search
from pubguard.schemes.vcaps.swp import swp_match_any
from pubguard.schemes.vcaps.tokens import (
    FastRouting,
    FastToken,
    RvToken,
    Token,
    codeword_set,
    native_vcaps,
)

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
        self._gc: dict[bytes, dict[Hashable, int]] = {}  # handle -> its recipients per group
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
        # SRV-fast: the search plan of the compacted poset (cached)
        self._fast_set: FastPlan[R] | None = None
        # SRV-fast Stage II, native backend: every held key (see _key_sets)
        self._keys_base: tuple[list[bytes], Any] | None = None
        self._keys_pending: list[bytes] = []

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
    def insert(
        self,
        token: Token,
        recipient: R,
        *,
        covering: Callable[[bytes], tuple[Iterable[bytes], Iterable[bytes]]] | None = None,
    ) -> bool:
        """Add ``recipient`` under ``token``'s filter; True iff the token is to be forwarded
        upstream (a new filter with ``L_parent`` empty, vcaps.txt §4.1 step (v)).

        ``covering``: for a trusted driver that knows the PFPoset (the experiments' sampled
        SRV at sizes where SRV's pairwise Stage II tests take hours): handle -> (handles of
        every filter covering it, handles of every filter it covers), used instead of the
        tokens' tests. It is the relation the tokens encode, so the poset is the same."""
        h = token.handle
        full = self._full.get(h)
        if full is not None:  # YES: add x_i to the recipient list of ID_F
            if recipient not in full:
                full[recipient] = None
                g = self._count(h, recipient, 1)
                self._recompact([h, *self._holding(self.down[h], g)])
            return False
        if covering is None:
            parents, children = self._relations(token)
        else:
            held = self._full
            above, below = covering(h)
            parents = {p for p in above if p in held}
            children = {c for c in below if c in held} - parents
        self.tokens[h] = token
        if isinstance(token, FastToken):
            self._keys_pending.append(h)
        self._full[h] = {recipient: None}
        self._gc[h] = {}
        g = self._count(h, recipient, 1)
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
        self._recompact([h, *self._holding(children, g)])
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
        if isinstance(token, FastToken) and (nv := native_vcaps()) is not None:
            return self._fast_relations(token, nv)
        tokens = self.tokens
        cand_p = tokens if token.pred else self._listing_succ
        cand_c = tokens if token.succ else self._listing_pred
        parents = {g for g in cand_p if tokens[g].covers(token)}
        children = {g for g in cand_c if g not in parents and token.covers(tokens[g])}
        return parents, children

    def _fast_relations(self, t: FastToken, nv: Any) -> tuple[set[bytes], set[bytes]]:
        """:meth:`_relations` of an SRV-fast token with the PRFs in native batches: every held
        key over ``t``'s nonce against its pred / succ codewords (held filters covering /
        covered by ``t`` that ``t`` names), and ``t``'s key over the nonce of each held filter
        with a list (those that name ``t``)."""
        tokens: dict[bytes, Any] = self.tokens
        parents: set[bytes] = set()
        below: set[bytes] = set()
        if t.pred or t.succ:
            pred = t.pred_cw if t.pred_cw is not None else codeword_set(t.pred)
            succ = t.succ_cw if t.succ_cw is not None else codeword_set(t.succ)
            for held, keys in self._key_sets(nv):
                hp, hs = keys.hits2(t.nonce, pred, succ)
                # a set may still list a filter that left
                parents.update(g for i in hp if (g := held[i]) in tokens)
                below.update(g for i in hs if (g := held[i]) in tokens)
        # t's key over every listing filter's nonce in one AES call, each output looked up in
        # that filter's own set (its lists may be long: a set lookup, not a tag batch)
        ls, lp = list(self._listing_succ), list(self._listing_pred)
        if ls or lp:
            out = t.prf(b"".join([tokens[g].nonce for g in ls] + [tokens[g].nonce for g in lp]))
            for j, g in enumerate(ls):
                if out[16 * j : 16 * j + 16] in tokens[g].succ:
                    parents.add(g)
            base = 16 * len(ls)
            for j, g in enumerate(lp):
                if out[base + 16 * j : base + 16 * j + 16] in tokens[g].pred:
                    below.add(g)
        return parents, below - parents

    def _key_sets(self, nv: Any) -> list[tuple[list[bytes], Any]]:
        """Every held SRV-fast key, scheduled: a large set rebuilt only when the filters added
        since outgrow an eighth of it, plus a small one of those (amortised O(sqrt n))."""
        base, pend = self._rebase_keys(nv)
        tokens = self.tokens
        out = [base]
        if pend:
            out.append((pend, nv.VcapsKeys(b"".join(tokens[g].k for g in pend))))  # type: ignore[union-attr]
        return out

    def _rebase_keys(self, nv: Any) -> tuple[tuple[list[bytes], Any], list[bytes]]:
        """The large key set, rebuilt when due, and the handles added since."""
        tokens = self.tokens
        base = self._keys_base
        if base is None or len(self._keys_pending) > 64 + len(base[0]) // 8:
            pend = [h for h in self._keys_pending if h in tokens]
            if base is None or len(pend) > 64 + len(base[0]) // 8:
                held = list(tokens)
                base = (held, nv.VcapsKeys(b"".join(tokens[g].k for g in held)))  # type: ignore[union-attr]
                self._keys_base = base
                self._keys_pending = []
                return base, []
            return base, pend
        return base, [h for h in self._keys_pending if h in tokens]

    def stage_ii_upkeep(self, token: Token) -> None:
        """What a tested insertion of new ``token`` does to the scheduled SRV-fast keys before
        its tests (:meth:`_key_sets`' rebuild when due), for a driver that inserts it with
        ``covering`` and times only some insertions with the real tests (the experiments'
        sampled Fig. 6): the sampled ones then pay what they would in a fully tested run."""
        if (
            isinstance(token, FastToken)
            and (token.pred or token.succ)
            and (nv := native_vcaps()) is not None
        ):
            self._rebase_keys(nv)

    def remove(self, handle: bytes, recipient: R) -> tuple[bool, list[Token]]:
        """Drop ``recipient`` from ``handle``'s list (our unsubscription extension). Returns
        (withdraw: the filter left and had been forwarded, so the upstream broker must drop
        this broker from its list; promoted: tokens of held filters that lost their last
        cover and must now be forwarded upstream, before the withdrawal)."""
        full = self._full.get(handle)
        if full is None or recipient not in full:
            return False, []
        del full[recipient]
        g = self._count(handle, recipient, -1)
        if full:
            self._recompact([handle, *self._holding(self.down[handle], g)])
            return False, []
        token = self.tokens.pop(handle)
        del self._full[handle]
        del self._gc[handle]
        self._active.pop(handle, None)
        self._fast_set = None
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

    def _count(self, h: bytes, recipient: R, d: int) -> Hashable | None:
        """Count ``recipient`` in (d = 1) or out of (d = -1) ``h``'s groups; its group."""
        g = self._group(recipient)
        if g is None:
            self._nogroup += d
            return None
        gc = self._gc[h]
        n = gc.get(g, 0) + d
        if n:
            gc[g] = n
        else:
            gc.pop(g, None)
        return g

    def _holding(self, handles: Iterable[bytes], g: Hashable | None) -> list[bytes]:
        """The handles with a recipient of group ``g``: the only ones whose compaction a
        change of ``g`` above them can alter."""
        if g is None:
            return []
        gc = self._gc
        return [c for c in handles if g in gc[c]]

    def _recompact(self, handles: Iterable[bytes]) -> None:
        """Recompute the compacted lists of ``handles``: a recipient whose group has a
        recipient under a held cover is dropped. Costs |recipients| x |covers| lookups."""
        group, gc = self._group, self._gc
        self._groups = None
        self._fast_set = None
        for h in handles:
            ups = [gc[p] for p in self.up[h]]
            keep = tuple(
                r for r in self._full[h] if (g := group(r)) is None or not any(g in u for u in ups)
            )
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
                    if len(reached) >= len(groups):  # reached ⊆ groups
                        break
            stack.extend(c for c in down[h] if c not in memo)
        return out

    def prepare(self) -> None:
        """Build SRV-fast's search plan (and its native keys) now; otherwise the first match
        after a change of the poset builds it. A broker's index, like RV's table."""
        if any(isinstance(t, FastToken) for t in self.tokens.values()):
            self._plan(native_vcaps())

    def _plan(self, nv: Any) -> FastPlan[R]:
        plan = self._fast_set
        if plan is None:
            group = self._group if self._all_groups() is not None else None
            plan = self._fast_set = fast_plan(self._active, self.up, self.down, group)
        if nv is not None and plan.native is None:
            keys = b"".join(self.tokens[h].k for h in plan.handles)  # type: ignore[union-attr]
            plan.native = nv.VcapsKeys(keys, plan.covers, plan.groups, plan.n_groups)
        return plan

    def _codewords(self, pe: FastRouting) -> set[R]:
        """SRV-fast: one PRF and one set lookup per filter tested, over the search plan
        (:mod:`~pubguard.schemes.vcaps.fastplan`: heuristics (i) and (ii)); natively in one
        call when the backend has the kernel, else the reference loop."""
        nv = native_vcaps()
        plan = self._plan(nv)
        if not plan.handles:
            return set()
        if nv is not None:
            cw = pe.cw if pe.cw is not None else codeword_set(pe.v)
            found = plan.native.hits(pe.nonce, cw)
        else:
            nonce, v, tokens, handles = pe.nonce, pe.v, self.tokens, plan.handles
            found = search(plan, lambda i: tokens[handles[i]].prf.unchecked(nonce) in v)  # type: ignore[union-attr]
        out: set[R] = set()
        recipients = plan.recipients
        for i in found:
            out.update(recipients[i])
        return out
