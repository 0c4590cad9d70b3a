"""The psguard profile's client face: a publisher and/or subscriber of PSGuard (psguard.txt) as a
:class:`~pubguard.schemes.base.ClientScheme` on the broker network.

Theory of operation
-------------------
A subscriber asks the KDC (:class:`~pubguard.schemes.psguard.keyservice.PSGuardKeyService`, or a
proxy to one) to tokenise each filter and to issue its authorisation keys for the current key
epoch; a publisher asks it for the epoch's topic keys and protects records with them
(:class:`~pubguard.schemes.psguard.publisher.Publisher`). Keys change per epoch (psguard.txt
§3.2): a client renews its filters' keys at an epoch change, a withdrawn filter is not renewed,
so its holder cannot read the new epoch's events. The KDC refuses filters no policy entry of
the subscriber covers (DropError UNAUTHORISED) and gives publishers key trees only for their
scopes.

Records are signed one by one or, amortised, once per batch over a Merkle root (the signed
forms are described in :mod:`pubguard.schemes.psguard.broker`, whose check they must pass).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from random import Random
from typing import Any

from pubguard.crypto import H, SigningKey, VerifyKey
from pubguard.errors import DropError, InvalidToken, KeyError_, ValidationError
from pubguard.model import Event, Filter
from pubguard.schemes.base import ClientScheme, ProtectedEvent, ProtectedFilter
from pubguard.schemes.common.guards import SignedRootVerifier
from pubguard.schemes.common.merkle import merkle_batch, pack_path, signed_root
from pubguard.schemes.common.wire_id import WireIds
from pubguard.schemes.plain import new_event_id
from pubguard.schemes.psguard.authority import FilterKeys
from pubguard.schemes.psguard.keyservice import NEXT_EPOCH_WINDOW, PSGuardKeyService, filter_id
from pubguard.schemes.psguard.publisher import Publisher
from pubguard.schemes.psguard.record import (
    DEFAULT_MAX_DELAY_MS,
    MODES,
    PROFILE,
    PSGUARD_PAPER,
    ProtectedFilterRows,
    ProtectedRecord,
    verify_record,
    with_sig,
)
from pubguard.schemes.psguard.wire import (
    ROOT_TAG,
    batch_fields,
    filter_to_wire,
    record_from_wire,
    record_to_wire,
)

__all__ = ["PSGuardClient"]


class _Held:
    __slots__ = ("filter", "keys")

    def __init__(self, f: Filter, keys: FilterKeys) -> None:
        self.filter, self.keys = f, keys


class PSGuardClient(ClientScheme):
    """A publisher and/or subscriber on the psguard profile. ``keys`` is the KDC (a
    :class:`PSGuardKeyService` or a proxy to one); ``signing_key`` the publisher's record key;
    ``publisher_keys`` lets a subscriber also check publishers' signatures on receipt (the
    AEAD under ``K(e)`` already authenticates the content to holders of ``K(e)``).
    ``profile``: the name its messages carry (``psguard``, or ``psguard-paper`` for brokers
    that only route: the same records, the same signatures)."""

    def __init__(
        self,
        name: str,
        keys: PSGuardKeyService,
        *,
        signing_key: SigningKey | None = None,
        mode: str = "randomized",
        publisher_keys: Mapping[str, VerifyKey] | None = None,
        sign_records: bool = True,
        profile: str = PROFILE,
        max_delay: float = DEFAULT_MAX_DELAY_MS / 1000,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValidationError("client name must be a non-empty string")
        if not max_delay > 0:
            raise ValidationError("max_delay must be positive")
        #: the brokers' timestamp window (seconds): an event arrives at most this late, so a
        #: filter's keys are kept that long past their epoch (``_hold``)
        self.max_delay = float(max_delay)
        if profile not in (PROFILE, PSGUARD_PAPER):
            raise ValidationError(f"not a psguard profile: {profile!r}")
        self.profile = profile
        if mode not in MODES:
            raise ValidationError(f"unknown psguard mode {mode!r} (valid: {', '.join(MODES)})")
        self.name, self.service, self.mode = name, keys, mode
        self._sk = signing_key
        #: opaque wire ids under the record key (schemes/common/wire_id.py)
        self._wire_ids = WireIds.for_key(signing_key) if signing_key is not None else None
        self._signer: Any = signing_key if sign_records else _NullSigner()
        self.publisher_keys = dict(publisher_keys or {})
        self._held: dict[tuple[str, int], _Held] = {}  # (str(filter), epoch) -> authorisation
        # str(filter) -> its epochs in ``_held``: holding a filter touches only its own
        # entries, so a client holding n filters protects them in O(n), not O(n^2)
        self._epochs_of: dict[str, set[int]] = {}
        self._pub: tuple[int, Publisher] | None = None
        self._sign_records = sign_records
        #: verified batch roots (one Ed25519 verify per Merkle batch, psguard.txt §4)
        self._roots = SignedRootVerifier(ROOT_TAG, ttl=2 * DEFAULT_MAX_DELAY_MS / 1000)
        self._record_checks = 0

    def __repr__(self) -> str:
        return f"PSGuardClient({self.name!r}, filters={len(self._held)})"

    #: psguard.txt §3.2: filter tokens and keys belong to one epoch; the KDC serves the next
    #: epoch's shortly before it begins (``EPOCH_SKEW``), so a subscription is renewed ahead
    renews_ahead = True
    #: brokers hold no permit to expire: the client withdraws the old epoch's subscription
    leased_subscriptions = False
    renews_subscriptions = True
    next_epoch_window = NEXT_EPOCH_WINDOW
    merkle_batches = True

    @property
    def key_service(self) -> object:
        """The KDC (or its proxy, ``RemoteKdc``) this client takes filter keys from."""
        return self.service

    def epoch_end(self, now: float) -> float | None:
        """When the key epoch current at ``now`` ends (``pubguard.net.client.client`` renews then)."""
        s = self.service
        return float(s.origin + (s.epoch_at(now) + 1) * s.epoch_length)

    @property
    def verify_key(self) -> VerifyKey | None:
        return None if self._sk is None else self._sk.public

    @property
    def signature_checks(self) -> int:
        """Ed25519 verifications this client performed on receipt (single-signed records, and
        batch roots not already verified)."""
        return self._record_checks + self._roots.verifications

    # -- subscriber -----------------------------------------------------------------------------
    def authorise(self, f: Filter, *, now: float) -> ProtectedFilterRows:
        f = f if f.id else f.with_id(filter_id(f))
        rows, keys = self.service.authorise(self.name, f, epoch=self.service.epoch_at(now))
        self._hold(f, keys)
        return rows

    def _hold(self, f: Filter, keys: FilterKeys) -> None:
        """Keep ``f``'s keys of this epoch and of those whose events may still arrive: a
        subscription renewed ahead (``pubguard.net.client.renewal``) holds the next epoch's keys
        while the current one runs, and an event of an earlier epoch in flight, or held in a
        durable outbox while a broker restarted, arrives up to ``max_delay`` after its epoch
        ended (the brokers refuse it later). Epoch ``k`` ends when ``k + 1`` begins and this
        epoch's keys came at the latest while the one before it ran, so ``k`` is kept while
        ``k >= this - 2 - max_delay / epoch_length``: the two epochs before this one, and as
        many more as ``max_delay`` spans whole epochs; older ones are dropped. The soak found
        it with 3 s epochs and a 10 s window: events a restarted broker delivered a few
        epochs late were ``invalid token`` at the subscriber."""
        fk = str(f)
        self._held[(fk, keys.epoch)] = _Held(f, keys)
        epochs = self._epochs_of.setdefault(fk, set())
        epochs.add(keys.epoch)
        keep = 2 + math.floor(self.max_delay / float(self.service.epoch_length))
        for e in [e for e in epochs if e < keys.epoch - keep]:
            epochs.discard(e)
            del self._held[(fk, e)]

    def protect_filter(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> ProtectedFilter:
        # the epoch the tokens belong to rides beside them (an unauthenticated routing hint:
        # a broker routes a catching-up link the next epoch's publications by it,
        # ``CatchUpRouter.route`` in broker/catch_up.py; the tokens themselves stay unlinkable)
        epoch = self.service.epoch_at(now)
        return ProtectedFilter(filter_to_wire(self.authorise(f, now=now)), {"e": epoch})

    def protect_advertisement(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> ProtectedFilter:
        return ProtectedFilter({"g": []})

    def unsubscribe_meta(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> dict[str, Any]:
        """Forget ``f``'s keys: it is not renewed at the next epoch."""
        for e in self._epochs_of.pop(str(f), ()):
            del self._held[(str(f), e)]
        return {}

    def unadvertise_meta(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> dict[str, Any]:
        return {}  # PSGuard has no advertisements

    def renew(self, *, now: float) -> list[Filter]:
        """Fetch the current epoch's keys for every held filter; returns the filters the KDC
        refused (they are dropped)."""
        epoch = self.service.epoch_at(now)
        latest: dict[str, _Held] = {}
        for (fk, _), h in self._held.items():
            if fk not in latest or h.keys.epoch > latest[fk].keys.epoch:
                latest[fk] = h
        lost = []
        for h in latest.values():
            if h.keys.epoch < epoch:
                try:
                    self._hold(
                        h.filter, self.service.authorise(self.name, h.filter, epoch=epoch)[1]
                    )
                except DropError:
                    lost.append(h.filter)
        return lost

    def open_record(
        self, rec: ProtectedRecord, *, now: float, batch: tuple[int, int, Any] | None = None
    ) -> Event:
        """Verify (when the publisher is known) and decrypt; InvalidToken if no held filter's
        keys open it or the subscriber's own filter rejects it. ``batch``: the record's
        ``(index, size, path)`` when it was signed as part of a Merkle batch."""
        vk = self.publisher_keys.get(rec.publisher)
        if vk is not None:
            if batch is None:
                self._record_checks += 1
                if not verify_record(rec, {rec.publisher: vk}):
                    raise InvalidToken()
            else:
                i, n, path = batch
                self._roots.verify(
                    vk, H(rec.message()), rec.sig, now=now, index=i, size=n, path=path
                )
        newest = max((k[1] for k in self._held), default=rec.epoch)
        if newest < rec.epoch <= self.service.epoch_at(now):
            self.renew(now=now)  # a new epoch began: fetch its keys (refused if withdrawn)
        for h in list(self._held.values()):
            if h.keys.epoch != rec.epoch:
                continue
            try:
                ev = h.keys.open_matching(rec)
            except InvalidToken:
                continue
            if ev is not None:
                return ev
        raise InvalidToken()

    def open_event(
        self,
        event_id: str,
        routing: Mapping[str, Any],
        body: bytes,
        meta: Mapping[str, Any],
        *,
        now: float,
    ) -> Event:
        try:
            rec = record_from_wire(event_id, routing, body, meta)
            batch = batch_fields(meta) if "mn" in meta else None
        except ValidationError:
            raise InvalidToken() from None
        return self.open_record(rec, now=now, batch=batch)

    # -- publisher ------------------------------------------------------------------------------
    def publisher(self, *, now: float) -> Publisher:
        """The :class:`~pubguard.schemes.psguard.publisher.Publisher` of the current epoch."""
        epoch = self.service.epoch_at(now)
        if self._pub is None or self._pub[0] != epoch:
            if self._signer is None:
                raise KeyError_("this client has no signing key: it cannot publish")
            pub = self.service.publisher(self.name, self._signer, epoch=epoch, mode=self.mode)
            self._pub = (epoch, pub)
        return self._pub[1]

    def record(self, event: Event, *, now: float, rng: Random | None = None) -> ProtectedRecord:
        """psguard.txt §4.1: the protected record of ``event`` (an id is drawn if missing)."""
        if event.id is None:
            event = Event(event.attrs, id=new_event_id(rng), type=event.type, payload=event.payload)
        return self.publisher(now=now).protect(
            event, now_ms=int(now * 1000), rng=rng, wire_id=self._wire_of(event)
        )

    def _wire_of(self, event: Event) -> str | None:
        """``wire_id(event.id)`` (None without a signing key: the publisher's own choice)."""
        assert event.id is not None
        return None if self._wire_ids is None else self._wire_ids(event.id)

    def wire_id(self, event_id: str) -> str:
        """The opaque wire id of ``event_id``: a keyed hash under the record key."""
        if self._wire_ids is None:
            raise KeyError_("this client has no signing key: it cannot publish")
        return self._wire_ids(event_id)

    def protect_event(
        self, event: Event, *, now: float, rng: Random | None = None
    ) -> ProtectedEvent:
        return record_to_wire(self.record(event, now=now, rng=rng))

    def protect_events(
        self, events: list[Event], *, now: float, rng: Random | None = None
    ) -> list[ProtectedEvent]:
        """Protect a batch under one signature over the Merkle root of its records (amortised
        signing; a batch of one is an ordinary single-signed record)."""
        return self.sign_prepared(
            [self.prepare_event(e, now=now, rng=rng) for e in events], now=now
        )

    def prepare_event(
        self, event: Event, *, now: float, rng: Random | None = None
    ) -> ProtectedRecord:
        """The first half of :meth:`protect_events`: the record of ``event``, encrypted and
        tokenised but not signed (typed errors for a bad event are raised here). A client
        that batches publications itself (:class:`pubguard.net.client.client.Client`) prepares
        each event as it is published and signs them together with :meth:`sign_prepared`."""
        if event.id is None:
            event = Event(event.attrs, id=new_event_id(rng), type=event.type, payload=event.payload)
        return self.publisher(now=now).protect(
            event, now_ms=int(now * 1000), rng=rng, sign=False, wire_id=self._wire_of(event)
        )

    def sign_prepared(
        self, recs: list[ProtectedRecord], *, now: float, rng: Random | None = None
    ) -> list[ProtectedEvent]:
        """Sign prepared records: one signature each for a batch of one (or without record
        signatures), else one over the Merkle root of the batch, each record carrying its
        index, the batch size and its path (``mi``, ``mn``, ``mp``)."""
        if len(recs) <= 1 or not self._sign_records:
            if recs and self._signer is None:
                raise KeyError_("this client has no signing key: it cannot publish")
            return [record_to_wire(with_sig(r, self._signer.sign(r.message()))) for r in recs]
        if self._sk is None:
            raise KeyError_("this client has no signing key: it cannot publish")
        root, paths = merkle_batch([H(r.message()) for r in recs])
        sig = self._sk.sign(signed_root(ROOT_TAG, root, len(recs)))
        out = []
        for i, r in enumerate(recs):
            pe = record_to_wire(with_sig(r, sig))
            meta = {**pe.meta, "mi": i, "mn": len(recs), "mp": pack_path(paths[i])}
            out.append(ProtectedEvent(pe.event_id, pe.routing, pe.body, meta))
        return out


class _NullSigner:
    """For profiles that sign something else than the record (the default profile signs a
    Merkle root over a batch of records): ``sig`` stays empty and costs nothing."""

    __slots__ = ()

    def sign(self, message: bytes) -> bytes:
        return b""
