"""The psguard token index (:class:`TokenMatcher`): the broker's filter index over tokenised
filters (:class:`~pubguard.schemes.psguard.wire.TokenFilter`, psguard.txt §4.1).

Theory of operation
-------------------
Deterministic tags are looked up in a posting list. Randomized tags ``<r, F_T(r)>`` can only be
tested by evaluating ``F_T(r)`` for subscription tokens ``T``; the matcher does this in two
stages: first the *anchor* group of every clause (its smallest group: the topic token ``T(w)``
when there is one), then only the remaining groups of clauses whose anchor met.
:meth:`TokenMatcher.match_batch` evaluates one token over every nonce of a micro-batch in a
single AES call (:func:`~pubguard.schemes.psguard.tokens.match_randomized`, AES as the PRF),
which makes randomized tokens nearly free per event when a driver hands the matcher batches.
Both stages go through :class:`~pubguard.schemes.psguard.tokens.TokenSet`, so with the native
backend (:mod:`pubguard.native`) each stage is one native call per batch, and a single
randomized event is matched as a batch of one.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Hashable, Sequence
from typing import Final

from pubguard import native as nb
from pubguard.crypto import AesPrf
from pubguard.errors import ValidationError
from pubguard.matching.multimap import discard_member
from pubguard.schemes.psguard.tokens import NONCE_BYTES, TokenSet, tok64
from pubguard.schemes.psguard.wire import TokenEvent, TokenFilter

__all__ = ["Clause", "TokenMatcher"]


# -- the token index ----------------------------------------------------------------------------

Clause = tuple[Hashable, int]  # (subscription key, scope index)
#: an anchor token's ``(F_T, clauses, all single-group, the clauses' subscription keys)``
_Anchor = tuple[Callable[[bytes], bytes], frozenset[Clause], bool, tuple[Hashable, ...]]
_first64 = struct.Struct(">q").unpack_from  # tok64 of a PRF output block


class TokenMatcher:
    """Filter index over :class:`~pubguard.schemes.psguard.wire.TokenFilter` (see the module docstring for the two stages)."""

    __slots__ = (
        "_afs",
        "_alist",
        "_anchor",
        "_by64",
        "_clauses",
        "_filters",
        "_post",
        "_prf",
        "evaluations",
    )

    #: randomized events in a batch below which :meth:`match_batch` matches them one by one
    #: (measured: with kept AES contexts, ``match`` costs about 25 us per event against 32
    #: subscriptions, ``match_batch`` about 20 us at 8 events and 8 us at 64). A driver may
    #: hand this matcher batches of any size; it need not wait for BATCH_MATCH_MIN.
    batch_min: Final = 8

    def __init__(self) -> None:
        self._filters: dict[Hashable, TokenFilter] = {}
        self._clauses: dict[Clause, tuple[int, tuple[frozenset[bytes], ...]]] = {}
        self._anchor: dict[bytes, set[Clause]] = {}  # anchor token -> clauses
        self._post: dict[bytes, dict[Clause, set[int]]] = {}  # token -> clause -> groups
        self._by64: dict[int, set[bytes]] = {}
        # token -> F_T over whole blocks, its AES context kept (crypto.AesPrf); fed only
        # parsed nonces (16 bytes each, checked by parse_routing)
        self._prf: dict[bytes, Callable[[bytes], bytes]] = {}
        self.evaluations = 0  # F_T(r) evaluations (AES calls in single-event matching)
        self._alist: list[_Anchor] | None = None
        self._afs: TokenSet | None = None  # the anchor tokens, in _anchor_list order

    def __len__(self) -> int:
        return len(self._filters)

    def add(self, key: Hashable, pf: TokenFilter) -> None:
        self.remove(key)
        self._alist = self._afs = None
        self._filters[key] = pf
        for i, groups in enumerate(pf.scopes):
            c = (key, i)
            a = min(range(len(groups)), key=lambda j: len(groups[j]))
            self._clauses[c] = (a, groups)
            for t in groups[a]:
                self._anchor.setdefault(t, set()).add(c)
            for gi, g in enumerate(groups):
                for t in g:
                    self._post.setdefault(t, {}).setdefault(c, set()).add(gi)
                    self._by64.setdefault(tok64(t), set()).add(t)
                    if t not in self._prf:
                        self._prf[t] = AesPrf(t).unchecked

    def remove(self, key: Hashable) -> None:
        pf = self._filters.pop(key, None)
        if pf is None:
            return
        self._alist = self._afs = None
        for i, groups in enumerate(pf.scopes):
            c = (key, i)
            a, _ = self._clauses.pop(c)
            for t in groups[a]:
                discard_member(self._anchor, t, c)
            for g in groups:
                for t in g:
                    post = self._post.get(t)
                    if post is not None:
                        post.pop(c, None)
                        if not post:
                            del self._post[t]
                            discard_member(self._by64, tok64(t), t)

    def match(self, pe: TokenEvent) -> set[Hashable]:
        if pe.mode == "deterministic":
            return self._match_det(pe)
        if nb.NATIVE is not None:  # one native call per stage, even for one event
            return self.match_batch([pe])[0]
        nonce, tags = pe.nonce, pe.tagset
        if len(nonce) != NONCE_BYTES:
            raise ValidationError("psguard nonce has the wrong length for its mode")
        out: set[Hashable] = set()
        rest: list[frozenset[Clause]] = []
        # stage 1: the anchor tokens (psguard.txt §4.1 F_T(r), one kept AES context each), in
        # one tight loop: a token's tag is the first 64 bits of its PRF block
        for prf, clauses, single, keys in self._anchor_list():
            if _first64(prf(nonce))[0] in tags:
                if single:  # every clause of this anchor has one group (a topic filter)
                    out.update(keys)
                else:
                    rest.append(clauses)
        self.evaluations += len(self._anchor)
        if not rest:
            return out
        cache: dict[bytes, bool] = {}
        prfs = self._prf

        def met(t: bytes) -> bool:
            hit = cache.get(t)
            if hit is None:
                self.evaluations += 1
                hit = cache[t] = _first64(prfs[t](nonce))[0] in tags
            return hit

        for clauses in rest:  # stage 2: the other groups of clauses whose anchor met
            for c in clauses:
                a, groups = self._clauses[c]
                if len(groups) == 1 or all(
                    any(met(x) for x in g) for j, g in enumerate(groups) if j != a
                ):
                    out.add(c[0])
        return out

    def _anchor_list(self) -> list[_Anchor]:
        """``(F_T, clauses, all single-group, the clauses' keys)`` per anchor token, rebuilt
        after a change (the keys: what a met single-group anchor adds to a match)."""
        al = self._alist
        if al is None:
            al = self._alist = [
                (
                    self._prf[t],
                    frozenset(cs),
                    all(len(self._clauses[c][1]) == 1 for c in cs),
                    tuple({c[0] for c in cs}),
                )
                for t, cs in self._anchor.items()
            ]
        return al

    def _match_det(self, pe: TokenEvent) -> set[Hashable]:
        met: dict[Clause, set[int]] = {}
        for tag in pe.tagset:
            for t in self._by64.get(tag, ()):
                for c, gis in self._post[t].items():
                    met.setdefault(c, set()).update(gis)
        return {c[0] for c, gis in met.items() if len(gis) == len(self._clauses[c][1])}

    def match_batch(self, pes: Sequence[TokenEvent]) -> list[set[Hashable]]:
        """``[match(pe) for pe in pes]``, evaluating each subscription token over every nonce
        of the batch's randomized events in one AES call per token (two stages)."""
        out: list[set[Hashable]] = [set() for _ in pes]
        rnd = [i for i, pe in enumerate(pes) if pe.mode == "randomized"]
        for i, pe in enumerate(pes):
            if pe.mode == "deterministic":
                out[i] = self._match_det(pe)
        if not rnd or not self._anchor:
            return out
        if len(rnd) < self.batch_min and nb.NATIVE is None:  # numpy's set-up outweighs it
            for i in rnd:
                out[i] = self.match(pes[i])
            return out
        nonces = b"".join([pes[i].nonce for i in rnd])
        if len(nonces) != NONCE_BYTES * len(rnd):
            raise ValidationError("psguard nonce has the wrong length for its mode")
        tags = [pes[i].tags for i in rnd]
        al = self._anchor_list()
        self.evaluations += len(al)
        # stage 1: every anchor token over every nonce (one AES call per token), compared
        # in one block against the events' tags
        cand: list[list[frozenset[Clause]]] = [[] for _ in rnd]
        for e, t in self._anchor_set.match_batch(nonces, tags):
            _, clauses, single, keys = al[t]
            if single:  # a topic filter: its clauses are met
                out[rnd[e]].update(keys)
            else:
                cand[e].append(clauses)
        if not any(cand):
            return out
        # stage 2: the other groups of the clauses whose anchor met
        clauses_of = self._clauses
        rest = sorted(
            {
                x
                for cl in cand
                for cs in cl
                for c in cs
                for j, g in enumerate(clauses_of[c][1])
                if j != clauses_of[c][0]
                for x in g
            }
        )
        self.evaluations += len(rest)
        met: list[set[bytes]] = [set() for _ in rnd]
        prf = self._prf
        kept = None if nb.NATIVE is not None else [prf[t] for t in rest]
        for e, t in TokenSet(rest, prfs=kept).match_batch(nonces, tags):
            met[e].add(rest[t])
        for e, cl in enumerate(cand):
            m = met[e]
            for cs in cl:
                for c in cs:
                    a, groups = clauses_of[c]
                    if all(not m.isdisjoint(g) for j, g in enumerate(groups) if j != a):
                        out[rnd[e]].add(c[0])
        return out

    @property
    def _anchor_set(self) -> TokenSet:
        """Every anchor token (its ``F_T`` kept), in :meth:`_anchor_list` order."""
        fs = self._afs
        if fs is None or (nb.NATIVE is not None) != fs.is_native:  # built, or backend changed
            al = self._anchor_list()
            fs = self._afs = TokenSet(list(self._anchor), prfs=[a[0] for a in al])
        return fs
