"""The PSGuard publisher: protects events into records (psguard.txt §4.1).

Tokens per routable attribute, randomized ``<r, F_T(r)>`` or deterministic; secret attributes
and payload sealed under ``K(e)``
(:mod:`pubguard.schemes.psguard.keytree`); the routable values in a hint sealed under the
scope key; the record signed, or left unsigned for a Merkle batch.

Key caching (psguard.txt §5.2.3 measures the publisher "with key caching"). A publisher is
built for one epoch and holds, in a bounded LRU (:class:`~pubguard.keys.cache.LruCache`),
what it derives per scope (the scope key ``S(w)``, the hint key, the aggregate of absent
keys ``A``, the topic token and its AES context) and per routable value (the value's tokens,
their AES-PRF contexts, and ``absent_a XOR leaf_a``). An event then costs one ``H`` for
``K(e)``, one AES block per token for ``F_T(r)``, the AEAD seals and the signature, instead
of a walk down each key tree and a cipher set-up per token. The cache is dropped with the
publisher at an epoch change (:meth:`~pubguard.schemes.psguard.client.PSGuardClient.publisher` builds a new one); it holds
keys only in memory and shows only its size in a ``repr``. ``cache_size=0`` turns it off
(the same derivations, recomputed per event).
"""

from __future__ import annotations

import json
import random
from collections.abc import Hashable
from typing import Any

from pubguard.crypto import AesPrf, SigningKey, aad_for, seal
from pubguard.crypto.secret import raw
from pubguard.errors import ValidationError
from pubguard.keys.cache import DEFAULT_LRU_CAPACITY, LruCache
from pubguard.keys.kdc import KDC, TopicKeys
from pubguard.model import AttributeSpec, Event, EventType
from pubguard.schemes.common.wire_id import WireIds, pack_inner, secret_labels
from pubguard.schemes.psguard import tokens as tk_
from pubguard.schemes.psguard.keytree import (
    absent_all,
    absent_key,
    event_key,
    event_leaf,
    hint_aad,
    hint_key,
    spec_tree,
    xor32,
)
from pubguard.schemes.psguard.record import (
    PAYLOAD_ATTR,
    SCOPE_NODE,
    ProtectedRecord,
    Schema,
    check_mode,
    with_sig,
)
from pubguard.schemes.psguard.tokens import (
    NONCE_BYTES,
    event_attr_tokens,
    randomize,
    tok64,
)

__all__ = [
    "Publisher",
]


class _Scope:
    """What a publisher derives once per (scope, event type): ``S(w)``, the hint key, ``A``
    and the topic token (with its AES context)."""

    __slots__ = ("absent", "hint_key", "prfs", "scope_key", "tk", "toks")

    def __init__(
        self, tk: TopicKeys, scope_key: bytes, absent: bytes, toks: tuple[bytes, ...]
    ) -> None:
        self.tk, self.scope_key, self.absent, self.toks = tk, scope_key, absent, toks
        self.hint_key = hint_key(scope_key)
        self.prfs = tuple(AesPrf(t) for t in toks)

    def __repr__(self) -> str:
        return "_Scope(<secret>)"


class _Leaf:
    """One routable value's tokens, their AES contexts and ``absent_a XOR leaf_a``."""

    __slots__ = ("delta", "prfs", "toks")

    def __init__(self, toks: list[bytes], delta: bytes) -> None:
        self.toks, self.delta = tuple(toks), delta
        self.prfs = tuple(AesPrf(t) for t in toks)

    def __repr__(self) -> str:
        return "_Leaf(<secret>)"


class Publisher:
    """Protects events (trusted side: holds the KDC's keys for its topics)."""

    __slots__ = ("_cache", "_kdc", "_sk", "_wire_ids", "epoch", "mode", "name", "schema")

    def __init__(
        self,
        kdc: KDC,
        schema: Schema,
        *,
        name: str,
        signing_key: SigningKey,
        epoch: int = 0,
        mode: str = "randomized",
        cache_size: int = DEFAULT_LRU_CAPACITY,
    ) -> None:
        self._kdc = kdc.for_epoch(epoch)
        self.schema, self.name, self._sk = schema, name, signing_key
        self.epoch, self.mode = epoch, check_mode(mode)
        self._cache: LruCache[Hashable, Any] = LruCache(cache_size)
        # the keyed wire ids (schemes/common/wire_id.py) under the record key; a publisher
        # whose records someone else signs (the default profile) passes ``wire_id`` itself
        self._wire_ids = (
            WireIds.for_key(signing_key) if isinstance(signing_key, SigningKey) else None
        )

    def __repr__(self) -> str:
        return f"Publisher({self.name!r}, mode={self.mode!r}, epoch={self.epoch})"

    @property
    def cache(self) -> LruCache[Hashable, Any]:
        """The epoch's key cache (sizes and hit counts; its entries are never shown)."""
        return self._cache

    def _scope(self, w: str, et: EventType, ta: str | None) -> _Scope:
        ck = (w, et.name)
        sc: _Scope | None = self._cache.get(ck)
        if sc is None:
            tk = self._kdc.topic(w)
            toks = (self._kdc.topic_token(w)[: tk_.TOKEN_BYTES],) if ta is not None else ()
            sc = _Scope(tk, raw(tk.root_key("category", SCOPE_NODE)), absent_all(tk, et, ta), toks)
            self._cache.put(ck, sc)
        return sc

    def _leaf(self, w: str, et: EventType, tk: TopicKeys, spec: AttributeSpec, v: Any) -> _Leaf:
        # the value's exact type is part of the key: True, 1 and 1.0 are distinct values
        ck = (w, et.name, spec.name, type(v), v)
        lf: _Leaf | None = self._cache.get(ck)
        if lf is None:
            absent = absent_key(tk.root(spec_tree(spec), spec.name))
            lf = _Leaf(event_attr_tokens(tk, spec, v), xor32(absent, event_leaf(tk, spec, v)))
            self._cache.put(ck, lf)
        return lf

    def _derive(self, event: Event) -> tuple[EventType, str, _Scope, list[_Leaf]]:
        et = self.schema.type_of(event)
        et.validate(event)
        w = self.schema.scope_of(et, event.attrs)
        ta = self.schema.topic_attr(et.name)
        sc = self._scope(w, et, ta)
        attrs = event.attrs
        leaves = [
            self._leaf(w, et, sc.tk, spec, attrs[spec.name])
            for spec in et.routable
            if spec.name != ta and spec.name in attrs
        ]
        return et, w, sc, leaves

    def event_tokens(self, event: Event) -> tuple[str, list[bytes]]:
        """``(scope, routing tokens)`` of an event (before randomisation)."""
        _, w, sc, leaves = self._derive(event)
        toks = list(sc.toks)
        for lf in leaves:
            toks += lf.toks
        return w, toks

    def protect(
        self,
        event: Event,
        *,
        now_ms: int,
        rng: random.Random | None = None,
        sign: bool = True,
        wire_id: str | None = None,
    ) -> ProtectedRecord:
        """The protected record of ``event``; ``sign=False`` leaves ``sig`` empty (the caller
        signs a Merkle root over a batch of records instead).

        The record's ``event_id`` is the opaque wire id (``wire_id``, or the keyed hash of
        ``event.id`` under this publisher's key: :class:`WireIds`); ``event.id`` itself is
        sealed with the payload (:func:`pack_inner`), and each secret attribute travels under
        a keyed label, not its name (:func:`secret_labels`), so a broker learns neither."""
        if not event.id:
            raise ValidationError("psguard: events need an id (dedup and AAD bind to it)")
        if wire_id is None:
            if self._wire_ids is None:
                self._wire_ids = WireIds.random()
            wire_id = self._wire_ids(event.id)
        et, _, sc, leaves = self._derive(event)
        x, toks, prfs = sc.absent, list(sc.toks), list(sc.prfs)
        for lf in leaves:
            x = xor32(x, lf.delta)
            toks += lf.toks
            prfs += lf.prfs
        k_e = event_key(sc.scope_key, x)
        if self.mode == "randomized":
            nonce = rng.randbytes(NONCE_BYTES) if rng is not None else _urandom(NONCE_BYTES)
            ints = tuple(tok64(x) for x in randomize(toks, nonce, prfs=prfs))
        else:
            nonce, ints = b"", tuple(tok64(x) for x in toks)
        routable = {s.name: event.attrs[s.name] for s in et.routable if s.name in event.attrs}
        hint_pt = json.dumps({"t": et.name, "a": routable}, sort_keys=True).encode()
        hint = seal(sc.hint_key, hint_pt, aad=hint_aad(self.epoch, wire_id), rng=rng)
        tid, eid = et.type_id, wire_id.encode()
        names = [s.name for s in et.secret if s.name in event.attrs]
        labels = secret_labels(k_e, wire_id, names) if names else {}
        secrets = tuple(
            (
                labels[n],
                seal(
                    k_e,
                    json.dumps(event.attrs[n]).encode(),
                    aad=aad_for(tid, n, self.epoch, eid),
                    rng=rng,
                ),
            )
            for n in names
        )
        payload = seal(
            k_e,
            pack_inner(event.id, event.payload),
            aad=aad_for(tid, PAYLOAD_ATTR, self.epoch, eid),
            rng=rng,
        )
        rec = ProtectedRecord(
            wire_id,
            self.name,
            int(now_ms),
            self.epoch,
            self.mode,
            nonce,
            ints,
            hint,
            secrets,
            payload,
        )
        return with_sig(rec, self._sk.sign(rec.message())) if sign else rec


def _urandom(n: int) -> bytes:
    from pubguard.crypto import random_bytes

    return random_bytes(n)
