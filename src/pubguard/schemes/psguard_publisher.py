"""The PSGuard publisher: protects events into records (psguard.txt §4.1; split from
:mod:`pubguard.schemes.psguard`). Tokens per routable attribute, randomized ``<r, F_T(r)>``
or deterministic; secret attributes and payload sealed under ``K(e)``
(:mod:`pubguard.schemes.psguard_keytree`); the routable values in a hint sealed under the
scope key; the record signed, or left unsigned for a Merkle batch.
"""

from __future__ import annotations

import json
import random

from pubguard.crypto import SigningKey, aad_for, seal
from pubguard.crypto.secret import raw
from pubguard.errors import ValidationError
from pubguard.keys.kdc import KDC
from pubguard.model import Event
from pubguard.schemes import tokens as tk_
from pubguard.schemes.psguard_keytree import (
    _absent_all,
    _absent_key,
    _component,
    _event_key,
    _hint_aad,
    _hint_key,
    _xor,
    spec_tree,
)
from pubguard.schemes.psguard_record import (
    PAYLOAD_ATTR,
    SCOPE_NODE,
    ProtectedRecord,
    Schema,
    _check_mode,
    _with_sig,
)
from pubguard.schemes.tokens import (
    NONCE_BYTES,
    event_attr_tokens,
    randomize,
    tok64,
)

__all__ = [
    "Publisher",
]


class Publisher:
    """Protects events (trusted side: holds the KDC's keys for its topics)."""

    __slots__ = ("_absent", "_kdc", "_sk", "epoch", "mode", "name", "schema")

    def __init__(
        self,
        kdc: KDC,
        schema: Schema,
        *,
        name: str,
        signing_key: SigningKey,
        epoch: int = 0,
        mode: str = "randomized",
    ) -> None:
        self._kdc = kdc.for_epoch(epoch)
        self.schema, self.name, self._sk = schema, name, signing_key
        self.epoch, self.mode = epoch, _check_mode(mode)
        self._absent: dict[tuple[str, str], bytes] = {}

    def __repr__(self) -> str:
        return f"Publisher({self.name!r}, mode={self.mode!r}, epoch={self.epoch})"

    def event_tokens(self, event: Event) -> tuple[str, list[bytes]]:
        """``(scope, routing tokens)`` of an event (before randomisation)."""
        et = self.schema.type_of(event)
        et.validate(event)
        w = self.schema.scope_of(et, event.attrs)
        tk = self._kdc.topic(w)
        toks: list[bytes] = []
        ta = self.schema.topic_attr(et.name)
        if ta is not None:
            toks.append(self._kdc.topic_token(w)[: tk_.TOKEN_BYTES])
        for spec in et.routable:
            if spec.name != ta and spec.name in event.attrs:
                toks += event_attr_tokens(tk, spec, event.attrs[spec.name])
        return w, toks

    def protect(
        self, event: Event, *, now_ms: int, rng: random.Random | None = None, sign: bool = True
    ) -> ProtectedRecord:
        """The protected record of ``event``; ``sign=False`` leaves ``sig`` empty (the caller
        signs a Merkle root over a batch of records instead)."""
        if not event.id:
            raise ValidationError("psguard: events need an id (dedup and AAD bind to it)")
        et = self.schema.type_of(event)
        w, toks = self.event_tokens(event)
        tk = self._kdc.topic(w)
        ta = self.schema.topic_attr(et.name)
        scope_key = raw(tk.root_key("category", SCOPE_NODE))
        memo_key = (w, et.name)
        x = self._absent.get(memo_key)
        if x is None:
            if len(self._absent) > 4096:
                self._absent.clear()
            x = self._absent[memo_key] = _absent_all(tk, et, ta)
        for spec in et.routable:
            if spec.name != ta and spec.name in event.attrs:
                leaf = _component(tk, spec, event.attrs[spec.name])
                absent = _absent_key(tk.root(spec_tree(spec), spec.name))
                x = _xor(x, _xor(absent, leaf))
        k_e = _event_key(scope_key, x)
        if self.mode == "randomized":
            nonce = rng.randbytes(NONCE_BYTES) if rng is not None else _urandom(NONCE_BYTES)
            ints = tuple(tok64(x) for x in randomize(toks, nonce))
        else:
            nonce, ints = b"", tuple(tok64(x) for x in toks)
        routable = {s.name: event.attrs[s.name] for s in et.routable if s.name in event.attrs}
        hint_pt = json.dumps({"t": et.name, "a": routable}, sort_keys=True).encode()
        hint = seal(_hint_key(scope_key), hint_pt, aad=_hint_aad(self.epoch, event.id), rng=rng)
        tid = et.type_id
        secrets = tuple(
            (
                s.name,
                seal(
                    k_e,
                    json.dumps(event.attrs[s.name]).encode(),
                    aad=aad_for(tid, s.name, self.epoch, event.id.encode()),
                    rng=rng,
                ),
            )
            for s in et.secret
            if s.name in event.attrs
        )
        payload = seal(
            k_e,
            event.payload,
            aad=aad_for(tid, PAYLOAD_ATTR, self.epoch, event.id.encode()),
            rng=rng,
        )
        rec = ProtectedRecord(
            event.id,
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
        return _with_sig(rec, self._sk.sign(rec.message())) if sign else rec


def _urandom(n: int) -> bytes:
    from pubguard.crypto import random_bytes

    return random_bytes(n)
