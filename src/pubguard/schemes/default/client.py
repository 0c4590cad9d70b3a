"""Client face of the default profile and its authority (see :mod:`pubguard.schemes.default.broker`).

Theory of operation
-------------------
:class:`DefaultAuthority` is the KDC of psguard.txt §3 (a :class:`PSGuardKeyService`: tokens
and authorisation keys for filters its policy allows, scoped key trees for publishers, one key
generation per epoch) with a signing face: an Ed25519 key derived from the same master secret
(``hkdf(rk, "pubguard/default/authority-signing")``, so replicas agree, as EventGuard's MS
signing key), which issues the publish and subscribe permits brokers check. Revocation is the
authority's list of revoked keys (and the CA's CRL for certificate serials), handed to brokers.

:class:`DefaultClient` publishes and subscribes:

- ``protect_filter``: the KDC's tokens for the filter (its keys stay with the client) and a
  subscribe permit bound to the digest of that token set and to the client's key.
- ``protect_events([e ...])``: one PSGuard record per event, stamped with a strictly increasing
  ``(ts, seq)`` (narada §V-B), and one Ed25519 signature over the Merkle root of the batch;
  ``protect_event`` is a batch of one.
- ``open_event``: checks the publish permit and the root signature (a malicious broker cannot
  make a subscriber accept an event the publisher did not sign), then opens the record with the
  held authorisation keys (InvalidToken when they do not cover the event's values).
- ``unsubscribe_meta``: the withdrawal signed with the subscription's key; the filter's keys
  are dropped, so they are not renewed at the next epoch.
"""

from __future__ import annotations

import dataclasses
import itertools
import random as _random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pubguard.crypto import SecretBytes, SigningKey, VerifyKey, hkdf, random_bytes
from pubguard.crypto.secret import raw
from pubguard.errors import DropError, DropReason, InvalidToken, KeyError_, ValidationError
from pubguard.keys.kdc import KDC
from pubguard.model import Event, Filter
from pubguard.schemes.base import ClientScheme, ProtectedEvent, ProtectedFilter
from pubguard.schemes.common.guards import DEFAULT_MAX_DELAY
from pubguard.schemes.common.merkle import merkle_batch, signed_root
from pubguard.schemes.common.revocation_list import SignedRevocations
from pubguard.schemes.common.verified import SharedCredentials, SharedRoots
from pubguard.schemes.common.wire_id import WireIds
from pubguard.schemes.default.broker import (
    DEFAULT,
    PUBLISH,
    ROOT_TAG,
    SUBSCRIBE,
    AuthorityPermit,
    filter_digest,
    leaf_digest,
    merkle_fields,
    parse_publication,
    withdrawal_digest,
)
from pubguard.schemes.plain import new_event_id
from pubguard.schemes.psguard.client import PSGuardClient
from pubguard.schemes.psguard.keyservice import (
    DEFAULT_EPOCH_LENGTH,
    NEXT_EPOCH_WINDOW,
    PSGuardKeyService,
)
from pubguard.schemes.psguard.record import ProtectedRecord, Schema
from pubguard.schemes.psguard.wire import filter_to_wire, parse_filter, record_to_wire

__all__ = ["DefaultAuthority", "DefaultClient"]


class DefaultAuthority:
    """The default profile's key service: a PSGuard KDC that also signs permits.

    ``master``: the KDC master secret (>= 16 bytes). ``subscribers`` / ``publishers``: the
    policy, as in :class:`~pubguard.schemes.psguard.keyservice.PSGuardKeyService` (None: allow all).
    Permits are valid for the epoch in which they are issued."""

    def __init__(
        self,
        master: SecretBytes | bytes,
        schema: Schema,
        *,
        subscribers: Mapping[str, Iterable[Filter | str]] | None = None,
        publishers: Mapping[str, Iterable[str]] | None = None,
        epoch_length: float = DEFAULT_EPOCH_LENGTH,
        origin: float = 0.0,
    ) -> None:
        m = raw(master)
        if len(m) < 16:
            raise ValidationError("the authority master secret must be at least 16 bytes")
        self.keys = PSGuardKeyService(
            KDC(m),
            schema,
            subscribers=subscribers,
            publishers=publishers,
            epoch_length=epoch_length,
            origin=origin,
        )
        self._publishers = None if publishers is None else set(publishers)
        self._sk = SigningKey.from_seed(hkdf(m, info=b"pubguard/default/authority-signing"))
        self.revoked: set[bytes] = set()

    def __repr__(self) -> str:
        return f"DefaultAuthority(public={self.public_key.to_bytes().hex()[:16]}...)"

    @property
    def public_key(self) -> VerifyKey:
        return self._sk.public

    @property
    def schema(self) -> Schema:
        return self.keys.schema

    def epoch_at(self, now: float) -> int:
        return self.keys.epoch_at(now)

    def _issue(
        self,
        kind: str,
        subject: str,
        key: VerifyKey,
        digest: bytes,
        serial: int,
        now: float,
        rng: _random.Random | None,
    ) -> AuthorityPermit:
        if key.to_bytes() in self.revoked:
            raise DropError(DropReason.REVOKED, f"the key of {subject} is revoked")
        e = self.epoch_at(now)
        start = self.keys.origin + e * self.keys.epoch_length
        p = AuthorityPermit(
            kind,
            subject,
            key.to_bytes(),
            e,
            start,
            start + self.keys.epoch_length,
            digest,
            serial,
            random_bytes(16, rng),
        )
        return dataclasses.replace(p, signature=self._sk.sign(p.signed_bytes()))

    def publish_permit(
        self,
        name: str,
        key: VerifyKey,
        *,
        now: float,
        serial: int = 0,
        rng: _random.Random | None = None,
    ) -> AuthorityPermit:
        """A publish permit for ``name``'s key in the current epoch (UNAUTHORISED if the
        policy gives it no scope)."""
        if self._publishers is not None and name not in self._publishers:
            raise DropError(DropReason.UNAUTHORISED, f"{name} may not publish")
        return self._issue(PUBLISH, name, key, b"", serial, now, rng)

    def subscribe_permit(
        self,
        name: str,
        key: VerifyKey,
        digest: bytes,
        *,
        now: float,
        rng: _random.Random | None = None,
    ) -> AuthorityPermit:
        return self._issue(SUBSCRIBE, name, key, digest, 0, now, rng)

    def sign_revocations(
        self, *, serial: int, issued: float, identities: Iterable[str], keys: Iterable[bytes]
    ) -> SignedRevocations:
        """The revocation list with these entries, signed with the permit key brokers hold as
        ``authority_key`` (under the list's own tag, so it cannot pass for a permit)."""
        return SignedRevocations.sign(
            self._sk, serial=serial, issued=issued, identities=identities, keys=keys
        )

    def revoke(self, key: VerifyKey | bytes) -> None:
        """No more permits for this key; hand :attr:`revoked` to the brokers."""
        self.revoked.add(key.to_bytes() if isinstance(key, VerifyKey) else bytes(key))


class DefaultClient(ClientScheme):
    """A publisher and/or subscriber on the default profile (see the module docstring).
    ``cert_serial``: the X.509 serial of the client's certificate, bound into its permits."""

    profile = DEFAULT

    @property
    def key_service(self) -> object:
        """The authority (or its proxy, ``RemoteAuthority``) that issues this client's permits."""
        return self.authority

    def __init__(
        self,
        name: str,
        authority: DefaultAuthority,
        *,
        signing_key: SigningKey | None = None,
        mode: str = "randomized",
        cert_serial: int = 0,
        max_delay: float = DEFAULT_MAX_DELAY,
    ) -> None:
        self.name = name
        self.authority = authority
        self._sk = signing_key or SigningKey.generate()
        self._wire_ids = WireIds.for_key(self._sk)  # opaque wire ids (common/wire_id.py)
        # max_delay: the brokers' timestamp window (default: the default broker's); how long
        # past its epoch a filter's keys are kept (PSGuardClient._hold) and a subscribe permit
        # is still re-sent (permit_lapsed)
        self._ps = PSGuardClient(
            name, authority.keys, mode=mode, sign_records=False, max_delay=max_delay
        )
        self.cert_serial = cert_serial
        self.max_delay = max_delay
        self._subs: dict[str, AuthorityPermit] = {}  # str(filter) -> subscribe permit
        self._pm: AuthorityPermit | None = None  # the latest publish permit
        #: epoch -> (publish permit, its encoding), the last two: a record prepared in one
        #: epoch and signed in the next carries the permit of its own epoch
        self._pms: dict[int, tuple[AuthorityPermit, bytes]] = {}
        self._last = (-1, -1)
        #: batch roots and publish permits verified once per process, whichever subscriber
        #: meets them first (schemes/common/verified.py: a verification is a pure function of
        #: public inputs, so every subscriber of the process may reuse it)
        self._roots = SharedRoots(ROOT_TAG, ttl=3600.0)
        self._permits: SharedCredentials[AuthorityPermit] = SharedCredentials(
            "default/publish-permit", _permit_end
        )

    def __repr__(self) -> str:
        return f"DefaultClient({self.name!r}, subs={len(self._subs)})"

    #: tokens, keys and the subscribe permit belong to one epoch; the next epoch's are served
    #: shortly before it begins, so a subscription is renewed ahead (``pubguard.net.client.client``)
    renews_ahead = True
    #: brokers forget a subscription whose permit ran out (``DefaultBroker.lease_end``)
    leased_subscriptions = True
    renews_subscriptions = True
    next_epoch_window = NEXT_EPOCH_WINDOW
    merkle_batches = True

    def epoch_end(self, now: float) -> float | None:
        """When the key epoch current at ``now`` ends."""
        return self._ps.epoch_end(now)

    @property
    def verify_key(self) -> VerifyKey:
        return self._sk.public

    @property
    def signature_checks(self) -> int:
        """Ed25519 verifications made for this client on receipt (credentials and
        publications; roots and credentials already verified in this process cost none)."""
        return self._roots.verifications + self._permits.verifications

    def _stamp(self, now: float) -> tuple[int, int]:
        """(ms timestamp, sequence), strictly increasing over this client's messages."""
        ts = int(now * 1000)
        last_ts, last_seq = self._last
        self._last = (ts, 0) if ts > last_ts else (last_ts, last_seq + 1)
        return self._last

    # -- subscriber -----------------------------------------------------------------------------
    def protect_filter(
        self, f: Filter, *, now: float, rng: _random.Random | None = None
    ) -> ProtectedFilter:
        wire = filter_to_wire(self._ps.authorise(f, now=now))
        digest = filter_digest(parse_filter(wire))
        p = self.authority.subscribe_permit(self.name, self.verify_key, digest, now=now, rng=rng)
        self._subs[str(f)] = p
        return ProtectedFilter(wire, {"pm": p.encode()})

    def protect_advertisement(
        self, f: Filter, *, now: float, rng: _random.Random | None = None
    ) -> ProtectedFilter:
        return ProtectedFilter({"g": []}, {"pm": self._permit(now, rng)[1]})

    def permit_lapsed(self, meta: Mapping[str, Any], *, now: float) -> bool:
        """Whether the subscribe or publish permit in ``meta`` ran out before ``now``:
        brokers refuse it from a client, so ``pubguard.net.client.client`` does not re-send it
        after an outage. A publish permit runs out with its epoch; a subscribe permit
        ``max_delay`` later (the epoch's publications may arrive until then, and brokers
        accept the subscription as long)."""
        blob = meta.get("pm")
        if not isinstance(blob, bytes):
            return False
        try:
            p = AuthorityPermit.decode(blob)
        except (InvalidToken, ValidationError, TypeError, ValueError):
            return False  # not ours to judge: the broker says why
        return now > p.not_after + (self.max_delay if p.kind == SUBSCRIBE else 0.0)

    def unsubscribe_meta(
        self, f: Filter, *, now: float, rng: _random.Random | None = None, op: str = "unsubscribe"
    ) -> dict[str, Any]:
        """The signed withdrawal of this client's subscription to ``f`` (or, with
        ``op="unadvertise"``, of its advertisement)."""
        if op == "unsubscribe":
            p = self._subs.pop(str(f), None)
            self._ps.unsubscribe_meta(f, now=now)
        else:
            p = self._pm
        if p is None:
            raise KeyError_(f"no {op[2:]} of {f} to withdraw")
        ts, seq = self._stamp(now)
        return {"ts": ts, "q": seq, "sig": self._sk.sign(withdrawal_digest(op, p, ts, seq))}

    def unadvertise_meta(
        self, f: Filter, *, now: float, rng: _random.Random | None = None
    ) -> dict[str, Any]:
        """The signed withdrawal of this client's advertisement (its publish permit's key)."""
        return self.unsubscribe_meta(f, now=now, rng=rng, op="unadvertise")

    def renew(self, *, now: float) -> list[Filter]:
        """The current epoch's keys for every held filter (refused ones are dropped)."""
        return self._ps.renew(now=now)

    # -- publisher ------------------------------------------------------------------------------
    def _permit(self, now: float, rng: _random.Random | None) -> tuple[AuthorityPermit, bytes]:
        p = self._pm
        if p is not None and p.not_before <= now < p.not_after:
            return self._pms[p.epoch]
        p = self.authority.publish_permit(
            self.name, self.verify_key, now=now, serial=self.cert_serial, rng=rng
        )
        self._pm = p
        self._pms[p.epoch] = (p, p.encode())
        for e in sorted(self._pms)[:-2]:
            del self._pms[e]
        return self._pms[p.epoch]

    def protect_events(
        self, events: Sequence[Event], *, now: float, rng: _random.Random | None = None
    ) -> list[ProtectedEvent]:
        """Protect a batch under one signature over its Merkle root (amortised signing)."""
        if not events:
            return []
        return self.sign_prepared(
            [self.prepare_event(e, now=now, rng=rng) for e in events], now=now, rng=rng
        )

    def prepare_event(
        self, event: Event, *, now: float, rng: _random.Random | None = None
    ) -> tuple[ProtectedRecord, int]:
        """The first half of :meth:`protect_events`: the event's record stamped with its
        ``(ts, seq)`` (narada §V-B), not yet signed; typed errors for a bad event here."""
        self._permit(now, rng)
        if event.id is None:
            event = Event(event.attrs, id=new_event_id(rng), type=event.type, payload=event.payload)
        publisher = self._ps.publisher(now=now)
        ts, seq = self._stamp(now)
        assert event.id is not None
        wid = self._wire_ids(event.id)
        return publisher.protect(event, now_ms=ts, rng=rng, wire_id=wid), seq

    def sign_prepared(
        self,
        prepared: Sequence[tuple[ProtectedRecord, int]],
        *,
        now: float,
        rng: _random.Random | None = None,
    ) -> list[ProtectedEvent]:
        """One Ed25519 signature over the Merkle root of the prepared records, each carrying
        the publish permit, its sequence number and its Merkle path."""
        if not prepared:
            return []
        out: list[ProtectedEvent] = []
        # one root per epoch: a batch prepared across an epoch change is signed in two runs,
        # each under the permit of its records' epoch (brokers check the permit's epoch
        # against the record's)
        for epoch, run in itertools.groupby(prepared, key=lambda rq: rq[0].epoch):
            out += self._sign_run(list(run), epoch, rng)
        return out

    def _sign_run(
        self, prepared: list[tuple[ProtectedRecord, int]], epoch: int, rng: _random.Random | None
    ) -> list[ProtectedEvent]:
        held = self._pms.get(epoch)
        # prepare_event fetched it; re-fetch at the record's own time if it was pruned since
        blob = held[1] if held else self._permit(prepared[0][0].ts / 1000.0, rng)[1]
        root, paths = merkle_batch([leaf_digest(r, q, blob) for r, q in prepared])
        sig = self._sk.sign(signed_root(ROOT_TAG, root, len(prepared)))
        out = []
        for i, (r, q) in enumerate(prepared):
            pe = record_to_wire(r)
            meta = {
                **pe.meta,
                "sig": sig,
                "q": q,
                "pm": blob,
                **merkle_fields(i, len(prepared), paths[i]),
            }
            out.append(ProtectedEvent(pe.event_id, pe.routing, pe.body, meta))
        return out

    def protect_event(
        self, event: Event, *, now: float, rng: _random.Random | None = None
    ) -> ProtectedEvent:
        return self.protect_events([event], now=now, rng=rng)[0]

    def wire_id(self, event_id: str) -> str:
        """The opaque wire id of ``event_id``: a keyed hash under this client's key."""
        return self._wire_ids(event_id)

    # -- delivery -------------------------------------------------------------------------------
    def open_event(
        self,
        event_id: str,
        routing: Mapping[str, Any],
        body: bytes,
        meta: Mapping[str, Any],
        *,
        now: float,
    ) -> Event:
        """Verify the publisher's permit and root signature, then decrypt (InvalidToken on
        any failure, including a delivery this client's keys do not cover)."""
        try:
            pub = parse_publication(event_id, routing, body, meta)
        except (ValidationError, TypeError, KeyError):
            raise InvalidToken() from None
        ak = self.authority.public_key
        p = self._permits.check(
            ak.to_bytes(), pub.permit_blob, lambda: _verified_permit(pub.permit_blob, ak), now=now
        )
        if p.kind != PUBLISH or p.subject != pub.rec.publisher or p.epoch != pub.rec.epoch:
            raise InvalidToken()
        if p.key in self.authority.revoked:
            raise InvalidToken()
        self._roots.verify(
            VerifyKey.from_bytes(p.key),
            leaf_digest(pub.rec, pub.seq, pub.permit_blob),
            pub.rec.sig,
            now=now,
            index=pub.index,
            size=pub.size,
            path=pub.path,
        )
        return self._ps.open_record(pub.rec, now=now)


def _permit_end(p: AuthorityPermit) -> float:
    return p.not_after


def _verified_permit(blob: bytes, authority: VerifyKey) -> AuthorityPermit:
    """Decode a publish permit and check the authority's signature (InvalidToken if not)."""
    try:
        p = AuthorityPermit.decode(blob)
    except (ValidationError, TypeError, KeyError):
        raise InvalidToken() from None
    p.verify(authority)
    return p
