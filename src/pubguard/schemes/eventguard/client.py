"""Client face of the eventguard profile: subscribers and publishers (eventguard.txt §4.2-4.8).

Theory of operation
-------------------
A client talks to the meta-service (any object with :class:`~pubguard.keys.MetaService`'s
``public_key``, ``subscribe``, ``advertise``, ``unsubscribe``, ``unadvertise``,
``renew_subscription`` and ``renew_advertisement``: the in-process service, or a proxy that
reaches a replica over the network). It keeps, as :class:`~pubguard.crypto.SecretBytes`, the
epoch keys ``K(w, e)`` and the UST / UAT of its grants; none of them ever goes on the wire.

- ``protect_filter(topic = "w")`` asks the MS for a fresh subscription permit ``sb(w)``
  (one sbId per subscription) and returns ``{token: T(w)}`` with the permit.
- ``protect_advertisement(topic = "w")`` asks for ``ad(w)``, which binds the client's name to
  its Ed25519 key.
- ``protect_events([e ...])`` encrypts each event: ``pbl`` (all attributes but ``topic``, the
  type and the payload, msgpack-encoded) under a fresh ``Kr``, ``Kr`` under ``K(w, e)``
  (§4.4); it then signs one Merkle root over the batch (amortised signing). ``protect_event``
  is a batch of one, i.e. one signature per publication, as in the paper.
- ``open_event`` checks the MS permit and the publisher's signature, then decrypts.
- ``unsubscribe_meta`` / ``unadvertise_meta`` exchange the UST / UAT with the MS for the
  ``usb`` / ``uad`` permit the brokers' unsubscribe / unadvertise guards demand (§4.5-4.6).
- ``renew(now)`` fetches the next epoch's keys for every live grant (§4.8); a withdrawn grant
  is not renewed, so its holder cannot read the new epoch's events.
"""

from __future__ import annotations

import random as _random
import threading
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, Protocol

import msgpack

from pubguard.crypto import SecretBytes, SigningKey, VerifyKey, open_, random_bytes, seal
from pubguard.errors import InvalidToken, PubguardError, StateError, ValidationError
from pubguard.keys.ms import (
    AdvertisementGrant,
    AdvertisementPermit,
    MetaService,
    SubscriptionGrant,
    decode_permit,
)
from pubguard.model.constraints import Op
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.schemes.base import ClientScheme, ProtectedEvent, ProtectedFilter
from pubguard.schemes.common.merkle import merkle_batch, pack_path, signed_root
from pubguard.schemes.common.verified import SharedCredentials, SharedRoots
from pubguard.schemes.common.wire_id import WireIds
from pubguard.schemes.eventguard.wire import (
    EVENTGUARD,
    ROOT_TAG,
    PublicationFields,
    body_aad,
    key_aad,
    leaf_digest,
    pack_items,
    pack_tokens,
    parse_publication,
)
from pubguard.schemes.plain import new_event_id

__all__ = ["EventGuardClient", "MetaServiceLike", "topic_of"]

TOPIC = "topic"


class MetaServiceLike(Protocol):
    @property
    def public_key(self) -> VerifyKey: ...

    def subscribe(self, subscriber: str, w: str, *, now: float, rng: Any = None) -> Any: ...

    def advertise(
        self, publisher: str, publisher_key: Any, w: str, *, now: float, rng: Any = None
    ) -> Any: ...

    def unsubscribe(self, permit: Any, ust: Any, *, now: float, rng: Any = None) -> Any: ...

    def unadvertise(self, permit: Any, uat: Any, *, now: float, rng: Any = None) -> Any: ...

    def renew_subscription(self, permit: Any, ust: Any, w: str, *, now: float) -> Any: ...

    def renew_advertisement(self, permit: Any, uat: Any, w: str, *, now: float) -> Any: ...


def topic_of(f: Filter) -> str:
    """EventGuard filters are topic subscriptions: exactly ``topic = "w"``."""
    if len(f.constraints) != 1:
        raise ValidationError('an eventguard filter is exactly one constraint: topic = "w"')
    c = f.constraints[0]
    if c.name != TOPIC or c.op is not Op.EQ or not isinstance(c.value, str) or not c.value:
        raise ValidationError('an eventguard filter is exactly one constraint: topic = "w"')
    return c.value


class EventGuardClient(ClientScheme):
    """A publisher and/or subscriber. ``name`` is its identity at the MS (``S`` / ``P``);
    ``signing_key`` its publication key (generated if omitted)."""

    profile = EVENTGUARD

    def __init__(
        self, name: str, ms: MetaServiceLike, *, signing_key: SigningKey | None = None
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValidationError("client name must be a non-empty string")
        self.name = name
        self.ms = ms
        self._sk = signing_key or SigningKey.generate()
        self._wire_ids = WireIds.for_key(self._sk)  # opaque wire ids (common/wire_id.py)
        self._keys: dict[tuple[bytes, int], SecretBytes] = {}  # (T(w), epoch) -> K(w, e)
        self._topics: dict[bytes, str] = {}  # T(w) -> w
        #: an epoch for which every known topic's key is held: ``open_due`` answers its
        #: deliveries without parsing them (a delivery's hot path with a remote MS)
        self._keyed_epoch: int | None = None
        self._subs: list[tuple[str, SubscriptionGrant]] = []  # live subscriptions
        # guards the grant lists (not the MS calls): a net client fetches withdrawal permits
        # from a remote MS in a worker thread (net/client/withdrawal.py) while its loop renews
        self._grants = threading.Lock()
        self._ads: dict[str, list[AdvertisementGrant]] = {}  # live advertisements per topic
        #: batch roots and MS permits verified once per process, whichever subscriber meets
        #: them first (schemes/common/verified.py: a verification is a pure function of
        #: public inputs, so every subscriber of the process may reuse it)
        self._verifier = SharedRoots(ROOT_TAG, ttl=3600.0)
        self._permits: SharedCredentials[Any] = SharedCredentials(
            "eventguard/advertisement-permit", _permit_end
        )

    def __repr__(self) -> str:
        return f"EventGuardClient({self.name!r}, subs={len(self._subs)})"

    @property
    def verify_key(self) -> VerifyKey:
        return self._sk.public

    @property
    def signature_checks(self) -> int:
        """Ed25519 verifications made for this client on receipt (credentials and
        publications; roots and credentials already verified in this process cost none)."""
        return self._verifier.verifications + self._permits.verifications

    #: §4.8: a subscribe permit lives one epoch and the MS grants only the current one, so a
    #: subscription is renewed just after the epoch changes (T(w) survives epochs: the old
    #: subscription still routes the new epoch's events until then)
    renews_ahead = False
    #: brokers forget a subscription whose permit ran out (``EventGuardBroker.lease_end``)
    leased_subscriptions = True
    renews_subscriptions = True
    merkle_batches = True

    @property
    def key_service(self) -> object:
        return self.ms

    @property
    def blocks_on_io(self) -> bool:  # an in-process MS answers at once; a remote one blocks
        return not isinstance(self.ms, MetaService)

    def epoch_end(self, now: float) -> float | None:
        """When the newest live subscribe or advertise permit runs out (None: neither)."""
        ads = (g.permit.expires_at for gs in self._ads.values() for g in gs)
        return max((*(g.permit.expires_at for _, g in self._subs), *ads), default=None)

    def _learn(self, w: str, token: bytes, epoch: int, key: SecretBytes) -> None:
        self._topics[token] = w
        self._keys[(token, epoch)] = key

    # -- subscriptions and advertisements -----------------------------------------------------
    def protect_filter(
        self, f: Filter, *, now: float, rng: _random.Random | None = None
    ) -> ProtectedFilter:
        w = topic_of(f)
        g = self.ms.subscribe(self.name, w, now=now, rng=rng)
        # a grant of the same topic whose epoch is over is not withdrawn (its subscription
        # lapses at the brokers) nor renewed: forget it
        with self._grants:
            self._subs = [(v, h) for v, h in self._subs if v != w or h.permit.expires_at >= now]
            self._subs.append((w, g))
        self._learn(w, g.permit.token, g.permit.epoch, g.key)
        return ProtectedFilter({"token": g.permit.token}, {"permit": g.permit.to_bytes()})

    def protect_advertisement(
        self, f: Filter, *, now: float, rng: _random.Random | None = None
    ) -> ProtectedFilter:
        w = topic_of(f)
        g = self.ms.advertise(self.name, self._sk.public, w, now=now, rng=rng)
        with self._grants:  # grants whose epoch is over are neither withdrawn nor renewed
            live = [h for h in self._ads.get(w, ()) if h.permit.expires_at >= now]
            self._ads[w] = [*live, g]
        self._learn(w, g.permit.token, g.permit.epoch, g.key)
        wire = {"token": g.permit.token, "publisher": self.name, "pk": g.permit.publisher_key}
        return ProtectedFilter(wire, {"permit": g.permit.to_bytes()})

    def unsubscribe_meta(
        self, f: Filter, *, now: float, rng: _random.Random | None = None
    ) -> dict[str, Any]:
        """Withdraw the latest live subscription to ``f``'s topic: the usb permit to send."""
        w = topic_of(f)
        with self._grants:
            i = next((i for i in range(len(self._subs) - 1, -1, -1) if self._subs[i][0] == w), None)
            if i is None:
                raise StateError(f"no live subscription to {w!r}")
            _, g = self._subs.pop(i)
        usb = self.ms.unsubscribe(g.permit, g.ust, now=now, rng=rng)
        return {"permit": usb.to_bytes()}

    def unadvertise_meta(
        self, f: Filter, *, now: float, rng: _random.Random | None = None
    ) -> dict[str, Any]:
        w = topic_of(f)
        with self._grants:
            grants = self._ads.get(w)
            if not grants:
                raise StateError(f"no live advertisement of {w!r}")
            g = grants.pop()
        uad = self.ms.unadvertise(g.permit, g.uat, now=now, rng=rng)
        return {"permit": uad.to_bytes()}

    def renew(self, *, now: float) -> None:
        """Per-epoch renewal (§4.8) of every live subscription and advertisement."""
        self._subs = [(w, self._renew_sub(w, g, now)) for w, g in self._subs]
        for w, grants in self._ads.items():
            grants[:] = [self._renew_ad(w, g, now) for g in grants]

    def _renew_sub(self, w: str, g: SubscriptionGrant, now: float) -> SubscriptionGrant:
        n = self.ms.renew_subscription(g.permit, g.ust, w, now=now)
        self._learn(w, n.permit.token, n.permit.epoch, n.key)
        return n  # type: ignore[no-any-return]

    def _renew_ad(self, w: str, g: AdvertisementGrant, now: float) -> AdvertisementGrant:
        n = self.ms.renew_advertisement(g.permit, g.uat, w, now=now)
        self._learn(w, n.permit.token, n.permit.epoch, n.key)
        return n  # type: ignore[no-any-return]

    # -- publications ----------------------------------------------------------------------------
    def protect_event(
        self, event: Event, *, now: float, rng: _random.Random | None = None
    ) -> ProtectedEvent:
        return self.protect_events([event], now=now, rng=rng)[0]

    def protect_events(
        self, events: Sequence[Event], *, now: float, rng: _random.Random | None = None
    ) -> list[ProtectedEvent]:
        """Encrypt a batch and sign one Merkle root over it (amortised signing)."""
        return self.sign_prepared([self._seal(ev, now, rng) for ev in events], now=now)

    def prepare_event(
        self, event: Event, *, now: float, rng: _random.Random | None = None
    ) -> tuple[bytes, ProtectedEvent]:
        """The first half of :meth:`protect_events`: ``(leaf digest, unsigned publication)``
        (typed errors for a bad event, or a topic not advertised, are raised here)."""
        return self._seal(event, now, rng)

    def sign_prepared(
        self,
        parts: Sequence[tuple[bytes, ProtectedEvent]],
        *,
        now: float,
        rng: _random.Random | None = None,
    ) -> list[ProtectedEvent]:
        """One signature over the Merkle root of the prepared publications (a batch of one:
        the paper's one signature per publication, no Merkle fields)."""
        if not parts:
            return []
        root, paths = merkle_batch([p[0] for p in parts])
        sig = self._sk.sign(signed_root(ROOT_TAG, root, len(parts)))
        out = []
        for i, (_, pe) in enumerate(parts):
            meta = dict(pe.meta)
            meta["sig"] = sig
            if len(parts) > 1:
                meta.update(mi=i, mn=len(parts), mp=pack_path(paths[i]))
            out.append(ProtectedEvent(pe.event_id, pe.routing, pe.body, meta))
        return out

    def wire_id(self, event_id: str) -> str:
        """The opaque wire id of ``event_id``: a keyed hash under the publication key."""
        return self._wire_ids(event_id)

    def key_service_due(self, event: Event, now: float) -> bool:
        """Whether protecting ``event`` at ``now`` first asks the MS (its topic's newest grant
        ran out with its epoch, §4.8): ``pubguard.net.client.client`` then protects it in a worker
        thread when the MS is remote, so the loop is not held for the round trip."""
        w = event.get(TOPIC)
        if not isinstance(w, str):
            return False
        with self._grants:
            grants = self._ads.get(w)
            if not grants:
                return False  # not advertised: _seal raises the typed error, no MS call
            return now > grants[-1].permit.expires_at

    def _grant_for(self, w: str, now: float) -> AdvertisementGrant:
        grants = self._ads.get(w)
        if not grants:
            raise StateError(f"advertise topic {w!r} before publishing on it (§4.3)")
        g = grants[-1]
        if now > g.permit.expires_at:
            g = grants[-1] = self._renew_ad(w, g, now)
        return g

    def _seal(
        self, event: Event, now: float, rng: _random.Random | None
    ) -> tuple[bytes, ProtectedEvent]:
        w = event.get(TOPIC)
        if not isinstance(w, str) or not w:
            raise ValidationError("an eventguard event needs a string 'topic' attribute")
        g = self._grant_for(w, now)
        e, tok = g.permit.epoch, g.permit.token
        app_id = event.id if event.id is not None else new_event_id(rng)
        eid = self._wire_ids(app_id)  # the application's id travels inside pbl
        attrs = {k: v for k, v in event.attrs.items() if k != TOPIC}
        pbl = msgpack.packb(
            {"a": attrs, "t": event.type, "p": event.payload, "i": app_id}, use_bin_type=True
        )
        kr = random_bytes(32, rng)  # §4.4: a fresh random key per publication
        body = seal(kr, pbl, aad=body_aad(eid, e), rng=rng)
        wrapped = seal(g.key, kr, aad=key_aad(eid, e, tok), rng=rng)
        ts = float(now)
        leaf = leaf_digest(eid, EVENTGUARD, self.name, e, ts, [tok], [wrapped], body)
        meta = {
            "p": self.name,
            "e": e,
            "ts": ts,
            "wk": pack_items([wrapped]),
            "ad": pack_items([g.permit.to_bytes()]),
        }
        return leaf, ProtectedEvent(eid, {"tokens": pack_tokens([tok])}, body, meta)

    def open_event(
        self,
        event_id: str,
        routing: Mapping[str, Any],
        body: bytes,
        meta: Mapping[str, Any],
        *,
        now: float,
    ) -> Event:
        """Verify and decrypt a delivery; :class:`InvalidToken` if it cannot be opened. The
        first event of a new epoch on a subscribed topic renews that subscription's grant
        with the MS (§4.8: the new epoch's key; refused once the subscription is withdrawn)."""
        try:
            f = parse_publication(routing, meta)
        except ValidationError:
            raise InvalidToken() from None
        try:
            return self._open(f, event_id, body, now)
        except InvalidToken:
            if not self._renew_for(f, now):
                raise
        return self._open(f, event_id, body, now)

    def permit_lapsed(self, meta: Mapping[str, Any], *, now: float) -> bool:
        """Whether the subscribe or advertise permit in ``meta`` ran out before ``now`` (its
        epoch ended, §4.8): brokers refuse it from a client, so ``pubguard.net.client.client``
        does not re-send it after an outage."""
        blob = meta.get("permit")
        if not isinstance(blob, bytes):
            return False
        try:
            return now > decode_permit(blob).expires_at
        except (InvalidToken, ValidationError, TypeError, ValueError):
            return False  # not ours to judge: the broker says why

    def open_due(self, routing: Mapping[str, Any], meta: Mapping[str, Any], *, now: float) -> bool:
        """Whether opening this delivery at ``now`` first asks the MS (the first event of a
        new epoch on a subscribed topic renews its grant, §4.8): ``pubguard.net.client.client`` then
        opens it in a worker thread when the MS is remote, so the loop is not held for the
        round trip (nor for the MS's timeout when it is down)."""
        e = meta.get("e")
        if type(e) is int and e == self._keyed_epoch:
            return False  # the common case, without parsing: every topic has e's key
        try:
            f = parse_publication(routing, meta)
        except ValidationError:
            return False  # open_event refuses it without a call
        if self._renewal_due(f, now) is not None:
            return True
        if all((t, f.epoch) in self._keys for t in list(self._topics)):
            self._keyed_epoch = f.epoch
        return False

    def _renewal_due(self, f: PublicationFields, now: float) -> tuple[bytes, str, Any] | None:
        """``(token, topic, grant)``: the live grant of a topic of ``f`` to renew because its
        newest key is of an older epoch than ``f``'s; None if there is none."""
        for tok in f.tokens:
            w = self._topics.get(tok)
            if w is None or (tok, f.epoch) in self._keys:
                continue
            # a snapshot: a renewal in a worker thread may be adding keys meanwhile
            if f.epoch <= max((e for t, e in list(self._keys) if t == tok), default=f.epoch):
                continue  # an old epoch's event: its key is gone for good
            with self._grants:
                old = next(
                    (g for v, g in reversed(self._subs) if v == w and now > g.permit.expires_at),
                    None,
                )
            if old is not None:
                return tok, w, old
        return None

    def _renew_for(self, f: PublicationFields, now: float) -> bool:
        """Renew the grant :meth:`_renewal_due` names; True if a key of ``f``'s epoch was
        learned."""
        due = self._renewal_due(f, now)
        if due is None:
            return False
        tok, w, old = due
        try:
            new = self._renew_sub(w, old, now)
        except PubguardError:
            return False  # withdrawn, revoked, or the MS unreachable: not opened
        with self._grants:
            self._subs = [(v, new if g is old else g) for v, g in self._subs]
        return (tok, f.epoch) in self._keys

    def _open(self, f: PublicationFields, event_id: str, body: bytes, now: float) -> Event:
        for i, tok in enumerate(f.tokens):
            key = self._keys.get((tok, f.epoch))
            if key is None:
                continue
            mk, blob = self.ms.public_key, f.permits[i]
            p = self._permits.check(
                mk.to_bytes(), blob, partial(_verified_permit, blob, mk), now=now
            )
            if not isinstance(p, AdvertisementPermit) or p.token != tok:
                raise InvalidToken()
            if p.subject != f.publisher or p.epoch != f.epoch:
                raise InvalidToken()
            leaf = f.leaf(event_id, EVENTGUARD, body)
            pk = VerifyKey.from_bytes(p.publisher_key)
            self._verifier.verify(pk, leaf, f.sig, now=now, index=f.index, size=f.size, path=f.path)
            kr = open_(key, f.wrapped[i], aad=key_aad(event_id, f.epoch, tok))
            pbl = msgpack.unpackb(open_(kr, body, aad=body_aad(event_id, f.epoch)), raw=False)
            try:
                attrs = dict(pbl["a"])
                attrs[TOPIC] = self._topics[tok]
                return Event(attrs, id=str(pbl["i"]), type=pbl["t"], payload=pbl["p"])
            except (KeyError, TypeError, ValueError):
                raise InvalidToken() from None
        raise InvalidToken()  # no key for any of its topics in this epoch


def _permit_end(p: Any) -> float:
    return float(p.expires_at)


def _verified_permit(blob: bytes, ms_key: VerifyKey) -> Any:
    """Decode an MS permit and check the MS signature (InvalidToken if not)."""
    p = decode_permit(blob)
    ms_key.verify(p.signature, p.signed_bytes())
    return p
