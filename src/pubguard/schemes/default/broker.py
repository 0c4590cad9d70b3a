"""The default profile: the composition of the papers' strongest parts (the reasoning is in
docs/profiles.md). This module is the wire format, the authority permits and
the broker face; the client face and the authority are in :mod:`pubguard.schemes.default.client`.

Theory of operation
-------------------
- **Content-based authorisation and unlinkable routing** (psguard.txt §3-§4.1): publications are
  PSGuard records (:mod:`pubguard.schemes.psguard`): routable attributes as randomized tokens
  ``<r, F_T(r)>``, secret attributes and the payload AEAD-sealed under ``K(e)``, which only a
  subscriber whose KDC authorisation keys cover the event's values can derive. Every ciphertext
  is bound by its associated data to type, attribute, epoch and event id.
- **Signatures and flood containment** (eventguard.txt §4.4, §4.7): the publisher signs a Merkle
  root over a batch of records (:mod:`pubguard.schemes.common.merkle`); brokers verify one signature
  per batch and cache verified roots; a link that keeps sending bogus messages is refused
  (FLOOD) before any signature check, so a flood stops at the first honest broker.
- **Authorisation permits** (eventguard.txt §4.2-4.3 permits, narada §IV-B tokens): the
  authority (the KDC's signing face) binds a publisher's name, Ed25519 key, epoch and
  certificate serial in a *publish permit*; a subscription carries a *subscribe permit* bound
  to the digest of its token set and the subscriber's key. Brokers hold only the authority's
  public key.
- **Replay defence and revocation** (narada §V-B, §IV-H1): every publication carries the
  publisher's millisecond timestamp and a sequence number; each broker keeps, per publisher
  key, the last accepted ``(ts, seq)`` (:class:`~pubguard.schemes.common.replay.ReplayState`, in
  SQLite when given ``db``, so a restart reopens no window). Revoked publisher keys and the
  CA's CRL (the permit carries the certificate serial) are checked on every message.

Wire forms::

    subscribe    filter {g: token groups}        meta {pm: subscribe permit}
    unsubscribe                                   meta {ts, q, sig}  (by the subscriber's key)
    advertise    filter {g: []}                   meta {pm: publish permit}
    unadvertise                                   meta {ts, q, sig}  (by the publisher's key)
    publish      routing {m, n, t}  body E_K(e)(payload)
                 meta {p, ts, e, h, s: the PSGuard record; q: sequence; pm: publish permit;
                       sig: Ed25519 over ROOT_TAG || mn || Merkle root; mi, mn, mp: index, size,
                       path (its hashes concatenated: meta stays a flat map of scalars)}

Publication guard, cheapest first: struck-out link -> FLOOD; undecodable -> MALFORMED; no
permit, a permit of another kind, subject or epoch, or outside its validity -> UNAUTHORISED; a
permit not signed by the authority -> FORGED; revoked key or certificate -> REVOKED;
``|now - ts| > max_delay`` -> STALE; bad root signature or Merkle path (any tampering with
tokens, ciphertexts, ids, sequence or permit) -> FORGED; ``(ts, seq)`` not after the
publisher's last -> REPLAYED. A verbatim copy within the core's de-dup window is a DUPLICATE
before any of this runs.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from pubguard.crypto import H, VerifyKey, sha256_fast
from pubguard.crypto.x509 import Certificate, RevocationList
from pubguard.errors import DropReason, ValidationError
from pubguard.schemes.base import CheckContext, LinkKind, forwarded_grace
from pubguard.schemes.common.guard_check import checked
from pubguard.schemes.common.guards import (
    DEFAULT_BAN,
    DEFAULT_MAX_DELAY,
    DEFAULT_STRIKE_WINDOW,
    DEFAULT_STRIKES,
    IdBindings,
    StrikeCounter,
    TimestampWindow,
    TTLCache,
    pack_fields,
)
from pubguard.schemes.common.merkle import (
    MAX_BATCH,
    PACKED_PATH_LENGTHS,
    check_packed_path,
    pack_path,
    unpack_path,
)
from pubguard.schemes.common.native_guard import FALLBACK, REASONS, root_verifier, token_run
from pubguard.schemes.common.replay import ReplayState
from pubguard.schemes.default.fast import publication_guard
from pubguard.schemes.psguard.keyservice import NEXT_EPOCH_WINDOW
from pubguard.schemes.psguard.record import ProtectedRecord
from pubguard.schemes.psguard.routing import TokenRouting
from pubguard.schemes.psguard.wire import (
    TokenEvent,
    TokenFilter,
    parse_filter,
    parse_routing,
    record_from_wire,
    signed_from_wire,
)
from pubguard.store import Database

__all__ = [
    "DEFAULT",
    "PUBLISH",
    "ROOT_TAG",
    "SUBSCRIBE",
    "AuthorityPermit",
    "DefaultBroker",
    "filter_digest",
    "leaf_digest",
    "make_scheme",
    "merkle_fields",
    "parse_publication",
    "withdrawal_digest",
]

DEFAULT: Final = "default"
PUBLISH: Final = "publish"
SUBSCRIBE: Final = "subscribe"
ROOT_TAG: Final = b"pubguard/default/root/v2\x00"
LEAF_TAG: Final = b"pubguard/default/leaf/v1\x00"
PERMIT_TAG: Final = b"pubguard/default/permit/v1\x00"
WITHDRAW_TAG: Final = b"pubguard/default/withdraw/v1\x00"
FILTER_TAG: Final = b"pubguard/default/filter/v1\x00"
MAX_PERMIT_BYTES: Final = 1024
SERIAL_BYTES: Final = 20


# -- permits ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuthorityPermit:
    """An authority-signed statement: ``subject`` holding Ed25519 ``key`` may ``kind``
    (publish / subscribe) in ``epoch`` between ``not_before`` and ``not_after``; a subscribe
    permit names the token set it authorises by ``digest``; ``serial`` is the subject's X.509
    certificate serial (0: none) for CRL checks; ``ident`` makes each permit unique."""

    kind: str
    subject: str
    key: bytes
    epoch: int
    not_before: float
    not_after: float
    digest: bytes
    serial: int
    ident: bytes
    signature: bytes = b""

    def signed_bytes(self) -> bytes:
        return pack_fields(
            PERMIT_TAG,
            self.kind,
            self.subject,
            self.key,
            self.epoch,
            float(self.not_before),
            float(self.not_after),
            self.digest,
            _serial_bytes(self.serial),
            self.ident,
        )

    def encode(self) -> bytes:
        return msgpack.packb(
            [
                1,
                self.kind,
                self.subject,
                self.key,
                self.epoch,
                float(self.not_before),
                float(self.not_after),
                self.digest,
                _serial_bytes(self.serial),
                self.ident,
                self.signature,
            ],
            use_bin_type=True,
        )

    @classmethod
    def decode(cls, blob: bytes) -> AuthorityPermit:
        if not isinstance(blob, bytes) or len(blob) > MAX_PERMIT_BYTES:
            raise ValidationError("a permit is at most 1 KiB of bytes")
        try:
            v = msgpack.unpackb(blob, raw=False, strict_map_key=True)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
            raise ValidationError("undecodable permit") from None
        if not isinstance(v, list) or len(v) != 11 or v[0] != 1:
            raise ValidationError("a permit is an 11-field list of version 1")
        _, kind, subject, key, epoch, nb, na, digest, sb, ident, sig = v
        if not isinstance(sb, bytes) or len(sb) != SERIAL_BYTES:
            raise ValidationError("malformed permit serial")
        serial = int.from_bytes(sb, "big")
        ok = (
            kind in (PUBLISH, SUBSCRIBE)
            and isinstance(subject, str)
            and bool(subject)
            and isinstance(key, bytes)
            and len(key) == 32
            and _nat(epoch)
            and isinstance(nb, float)
            and isinstance(na, float)
            and nb <= na
            and isinstance(digest, bytes)
            and isinstance(ident, bytes)
            and len(ident) == 16
            and isinstance(sig, bytes)
        )
        if not ok:
            raise ValidationError("malformed permit fields")
        return cls(kind, subject, key, epoch, nb, na, digest, serial, ident, sig)

    def verify(self, authority: VerifyKey) -> None:
        """InvalidToken unless the authority signed exactly these fields."""
        authority.verify(self.signature, self.signed_bytes())


def _serial_bytes(serial: int) -> bytes:
    """An X.509 serial (at most 20 octets, RFC 5280 §4.1.2.2) as fixed-width bytes."""
    if isinstance(serial, bool) or not isinstance(serial, int) or not 0 <= serial < 2**160:
        raise ValidationError("a certificate serial is a non-negative integer below 2**160")
    return serial.to_bytes(SERIAL_BYTES, "big")


def _nat(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63


def filter_digest(pf: TokenFilter) -> bytes:
    """A canonical digest of a subscription's token set (what a subscribe permit binds)."""
    scopes = sorted(b"".join(sorted(b"".join(sorted(g)) + b"|" for g in s)) for s in pf.scopes)
    return H(pack_fields(FILTER_TAG, len(scopes), *scopes))


def leaf_digest(rec: ProtectedRecord, seq: int, permit_blob: bytes) -> bytes:
    """What the Merkle leaf of one publication commits to: the whole PSGuard record (ids,
    timestamp, epoch, tokens, hint, sealed secrets and payload), the sequence number and the
    publish permit."""
    return H(pack_fields(LEAF_TAG, DEFAULT, rec.message(), seq, H(permit_blob)))


_LEAF_HEAD: Final = pack_fields(LEAF_TAG, DEFAULT)
_I64: Final = struct.Struct(">q").pack
_U32: Final = struct.Struct(">I").pack


def _leaf_of(signed: bytes, seq: int, permit_digest: bytes) -> bytes:
    """:func:`leaf_digest` from the record's signed bytes and the permit's digest (the
    :func:`pack_fields` encoding, its constant head built once)."""
    return sha256_fast(
        b"".join(
            (
                _LEAF_HEAD,
                b"b",
                _U32(len(signed)),
                signed,
                b"i",
                _I64(seq),
                b"b",
                _U32(len(permit_digest)),
                permit_digest,
            )
        )
    ).digest()


def withdrawal_digest(op: str, permit: AuthorityPermit, ts: int, seq: int) -> bytes:
    """What a subscriber (publisher) signs to withdraw the subscription (advertisement) its
    permit authorised. Sub ids are hop-scoped, so the permit's ident names it."""
    return pack_fields(WITHDRAW_TAG, op, permit.ident, permit.digest, ts, seq)


# -- broker face ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Publication:
    rec: ProtectedRecord
    seq: int
    permit_blob: bytes
    index: int
    size: int
    path: tuple[bytes, ...]


def _int(v: Any, what: str) -> int:
    if not _nat(v):
        raise ValidationError(f"default {what} must be a non-negative integer")
    return int(v)


def parse_publication(
    event_id: str,
    routing: Mapping[str, Any],
    body: bytes,
    meta: Mapping[str, Any],
    *,
    te: TokenEvent | None = None,
) -> _Publication:
    """A publication's record and default-profile fields (ValidationError if malformed);
    ``te``: the routing part already decoded."""
    rec = record_from_wire(event_id, routing, body, meta, te=te)
    pm, seq, index, size, path = _batch_meta(meta)
    return _Publication(rec, seq, pm, index, size, unpack_path(path))


def _batch_meta(meta: Mapping[str, Any]) -> tuple[bytes, int, int, int, bytes]:
    """``(permit blob, sequence, Merkle index, size, packed path)`` of a publication's meta."""
    pm = meta.get("pm")
    if pm is not None and type(pm) is not bytes:
        raise ValidationError("default permit must be bytes")
    path = meta.get("mp", b"")
    if type(path) is not bytes or len(path) not in PACKED_PATH_LENGTHS:
        path = check_packed_path(path)  # ValidationError unless a packed path
    size = meta.get("mn", 1)
    if type(size) is not int:
        size = _int(size, "batch size")
    if not 1 <= size <= MAX_BATCH:
        raise ValidationError("default batch size out of range")
    seq, index = meta.get("q"), meta.get("mi", 0)
    if not (type(seq) is int and 0 <= seq < 2**63):
        seq = _int(seq, "sequence")
    if not (type(index) is int and 0 <= index < 2**63):
        index = _int(index, "Merkle index")
    return pm or b"", seq, index, size, path


class _PerBroker:
    __slots__ = ("bindings", "strikes")

    def __init__(self, strikes: StrikeCounter) -> None:
        self.bindings = IdBindings()
        self.strikes = strikes


class DefaultBroker(TokenRouting):
    """Broker face of the default profile (see the module docstring).

    ``authority_key``: the authority's public key. ``max_delay``: the timestamp window in
    seconds. ``revoked``: publisher keys (raw 32 bytes) refused with REVOKED (add more with
    :meth:`revoke`); ``ca_cert`` + ``crl``: the CA's revocation list, checked against the
    permit's certificate serial. ``replay`` / ``db``: the per-publisher replay state (in memory,
    or persisted). ``strikes`` / ``strike_window`` / ``ban`` / ``ban_brokers``: flood
    containment as in :class:`~pubguard.schemes.eventguard.broker.EventGuardBroker`.
    ``batch_verify``: on the native backend, the signatures of a run's single-signature
    publications are tried as one Ed25519 batch first (``fast.py``)."""

    profile = DEFAULT

    def __init__(
        self,
        authority_key: VerifyKey,
        *,
        max_delay: float = DEFAULT_MAX_DELAY,
        revoked: Iterable[bytes] = (),
        ca_cert: Certificate | None = None,
        crl: RevocationList | None = None,
        now: float = 0.0,
        replay: ReplayState | None = None,
        db: Database | None = None,
        strikes: int = DEFAULT_STRIKES,
        strike_window: float = DEFAULT_STRIKE_WINDOW,
        ban: float = DEFAULT_BAN,
        ban_brokers: bool = True,
        batch_verify: bool = True,
    ) -> None:
        if not isinstance(authority_key, VerifyKey):
            raise ValidationError("authority_key must be the authority's VerifyKey")
        if replay is not None and db is not None:
            raise ValidationError("give either replay= or db=, not both")
        if crl is not None and ca_cert is None:
            raise ValidationError("a CRL needs the CA certificate that signed it")
        self.authority_key = authority_key
        self.window = TimestampWindow(max_delay)
        self.revoked: set[bytes] = {bytes(k) for k in revoked}
        self.ca_cert = ca_cert
        # updated in place (update_crl): the native guard reads this very set
        self._revoked_serials: set[int] = set()
        if crl is not None:
            self.update_crl(crl, now=now)
        self.replay = replay if replay is not None else ReplayState(db)
        self.roots = root_verifier(ROOT_TAG, ttl=2 * max_delay)  # native when built
        self._permits: TTLCache[bytes, AuthorityPermit] = TTLCache()
        self._keys: dict[bytes, VerifyKey] = {}
        # publish permit blob -> (verified permit, its key parsed, H(blob) for leaves): the
        # permit is still checked for kind, validity and revocation on every publication
        self._publishers: dict[bytes, tuple[AuthorityPermit, VerifyKey, bytes]] = {}
        self._strike_args = (strikes, strike_window, ban)
        self.ban_brokers = ban_brokers
        self._state: dict[str, _PerBroker] = {}
        # the native port of _check_publish (sharing roots, permits, revocations, replay)
        self._fast = publication_guard(
            self.roots,
            max_delay=max_delay,
            permit=self.permit,
            key_of=self._key,
            revoked_keys=self.revoked,
            revoked_serials=self._revoked_serials,
            replay=self.replay.check_and_accept,
            replay_state=self.replay.run_state,
            batch_verify=batch_verify,
        )

    revokes_publishers = True

    def revoke(self, publisher_key: VerifyKey | bytes) -> None:
        """Refuse this key's publications from now on (the authority's revocation feed)."""
        k = publisher_key.to_bytes() if isinstance(publisher_key, VerifyKey) else publisher_key
        self.revoked.add(bytes(k))

    def update_crl(self, crl: RevocationList, *, now: float) -> None:
        """Install the CA's (newer) CRL (narada §IV-A: the CA notifies brokers)."""
        if self.ca_cert is None:
            raise ValidationError("no CA certificate to check the CRL against")
        crl.check(self.ca_cert, now)
        serials = self._revoked_serials
        serials.clear()
        serials.update(crl.serials)

    # decoding, matching, covering: TokenRouting (as the psguard profile)

    # -- the guards ---------------------------------------------------------------------------
    def _per(self, ctx: CheckContext) -> _PerBroker:
        st = self._state.get(ctx.broker_id)
        if st is None:
            st = self._state[ctx.broker_id] = _PerBroker(StrikeCounter(*self._strike_args))
        return st

    def before_commit(self) -> None:
        """The broker's batch is about to commit: its accepted (ts, seq) commit with it
        (``ReplayState(deferred=True)`` on the broker's own database; narada §V-B)."""
        self.replay.flush_pending()

    def broker_check(self, message: Any, ctx: CheckContext) -> DropReason | None:
        st = self._per(ctx)
        return checked(
            st.strikes, ctx, lambda: self._check(message, ctx, st), strike_brokers=self.ban_brokers
        )

    @property
    def checks_in_runs(self) -> bool:
        """Whether the native guard is built for this scheme (``broker_check_run``)."""
        return self._fast is not None

    def broker_check_run(
        self, messages: Sequence[Any], events: Sequence[Any], ctx: CheckContext
    ) -> list[DropReason | None]:
        """``broker_check`` on a run of publications, one native call for as much as it
        decides (``native_guard.check_run``), on the routing parts the core decoded
        (``events``); an empty prefix without the native guard."""
        return token_run(
            self._fast,
            self.roots,
            messages,
            events,
            ctx,
            self._per(ctx).strikes,
            strike_brokers=self.ban_brokers,
        )

    def _check(self, m: Any, ctx: CheckContext, st: _PerBroker) -> DropReason | None:
        match m.op:
            case "publish":
                return self._check_publish(m, ctx)
            case "subscribe" | "advertise":
                return self._check_filter(m, ctx, st)
            case "unsubscribe" | "unadvertise":
                return self._check_withdrawal(m, ctx, st)
        return DropReason.UNKNOWN_TYPE

    def permit(self, blob: bytes, now: float) -> AuthorityPermit:
        """Decode and authority-verify a permit (cached until it expires); InvalidToken if
        forged, ValidationError if malformed."""
        p = self._permits.get(blob, now)
        if p is None:
            p = AuthorityPermit.decode(blob)
            p.verify(self.authority_key)
            self._permits.put(blob, p, p.not_after)
        return p

    @property
    def catch_up_horizon(self) -> float:
        """Seconds a down link is routed a new epoch's publications (``CatchUpRouter.route``):
        the timestamp window, after which they would arrive stale anyway."""
        return self.window.max_delay

    def filter_epoch(self, message: Any) -> int | None:
        """The key epoch of a subscription's tokens: its authority permit's (the core's
        catch-up routing, ``CatchUpRouter.route`` in broker/catch_up.py)."""
        blob = message.meta.get("pm")
        return AuthorityPermit.decode(blob).epoch if isinstance(blob, bytes) else None

    def lease_end(self, message: Any) -> float | None:
        """When a stored subscription's (advertisement's) permit has run out: the end of its
        epoch plus ``max_delay`` (publications of that epoch may still arrive until then).
        The core forgets it then (``Broker.expire``); a live client has renewed it with the
        next epoch's permit by then."""
        return AuthorityPermit.decode(message.meta["pm"]).not_after + self.window.max_delay

    def _valid(
        self, p: AuthorityPermit, kind: str, now: float, late: float = 0.0
    ) -> DropReason | None:
        if p.kind != kind:
            return DropReason.UNAUTHORISED
        # a subscribe permit of the next epoch is good up to NEXT_EPOCH_WINDOW ahead (its
        # keys are served then: a renewal without a gap, pubguard.net.client.renewal)
        early = max(self.window.max_delay, NEXT_EPOCH_WINDOW if kind == SUBSCRIBE else 0.0)
        if not p.not_before - early <= now <= p.not_after + late:
            return DropReason.UNAUTHORISED  # another epoch: renew with the authority
        if p.key in self.revoked or p.serial in self._revoked_serials:
            return DropReason.REVOKED
        return None

    def _key(self, raw: bytes) -> VerifyKey:
        k = self._keys.get(raw)
        if k is None:
            if len(self._keys) >= 4096:
                self._keys.clear()
            k = self._keys[raw] = VerifyKey.from_bytes(raw)
        return k

    def _check_publish(self, m: Any, ctx: CheckContext) -> DropReason | None:
        now, meta, routing = ctx.now, m.meta, m.routing
        # parse_publication's checks without building the record (the broker needs only its
        # signed bytes): ValidationError -> MALFORMED before any other check, as before
        te = self.decoded(routing) or parse_routing(routing)
        fast = self._fast
        if fast is not None and fast.roots is self.roots:
            v = fast.check_publish(
                m.event_id, te.mode, te.nonce, routing.get("t"), m.body, meta, now, ctx.broker_id
            )
            if v != FALLBACK:
                return REASONS[v] if v else None
        publisher, ts, epoch, signed, sig = signed_from_wire(m.event_id, te, routing, m.body, meta)
        blob, seq, index, size, path = _batch_meta(meta)
        if not blob:
            return DropReason.UNAUTHORISED
        hot = self._publishers.get(blob)
        if hot is None:
            p = self.permit(blob, now)
            if len(self._publishers) >= 4096:
                self._publishers.clear()
            hot = self._publishers[blob] = (p, self._key(p.key), H(blob))
        p, key, pd = hot
        if abs(now - ts / 1000.0) > self.window.max_delay:  # TimestampWindow.check, inline
            return DropReason.STALE
        # the permit was valid when the publication was signed (its ts, within max_delay of
        # now): one published as its epoch ended is not lost in transit
        bad = self._valid(p, PUBLISH, ts / 1000.0)
        if bad is not None:
            return bad
        if p.subject != publisher or p.epoch != epoch:
            return DropReason.UNAUTHORISED
        self.roots.verify_packed(key, _leaf_of(signed, seq, pd), sig, now, index, size, path)
        return self.replay.check_and_accept(ctx.broker_id, p.key, ts, seq)

    def _check_filter(self, m: Any, ctx: CheckContext, st: _PerBroker) -> DropReason | None:
        pf = parse_filter(m.filter)
        blob = m.meta.get("pm")
        if not isinstance(blob, bytes):
            return DropReason.UNAUTHORISED  # no authority permit, no routing state
        p = self.permit(blob, ctx.now)
        sub = m.op == "subscribe"
        # a copy another broker still holds is good as long as it may hold it (leases); a
        # client's subscription as long as its epoch's publications may still arrive (its
        # lease: the permit's end plus max_delay), so one re-sent after an outage that ended
        # just after the change still receives the epoch's events held for it meanwhile
        late = forwarded_grace(ctx.link, self.window.max_delay)
        if sub and not late:
            late = self.window.max_delay
        bad = self._valid(p, SUBSCRIBE if sub else PUBLISH, ctx.now, late)
        if bad is not None:
            return bad
        if sub and (not pf.scopes or p.digest != filter_digest(pf)):
            return DropReason.UNAUTHORISED  # the permit authorises another token set
        ident = m.sub_id if sub else m.adv_id
        if not st.bindings.bind((m.op, p.ident), (ctx.link.link_id, ident)):
            return DropReason.DUPLICATE  # one permit, two subscriptions: a replay flood
        return None

    def _check_withdrawal(self, m: Any, ctx: CheckContext, st: _PerBroker) -> DropReason | None:
        """Only the holder of the permit's key withdraws what the permit authorised (a fake
        unsubscribe is refused)."""
        prior = ctx.prior
        if prior is None:
            return DropReason.UNAUTHORISED
        p = self.permit(prior.meta["pm"], ctx.now)  # verified when it was stored
        if ctx.now > p.not_after:
            st.bindings.release((prior.op, p.ident))
            return None  # the permit ran out: nothing left to protect
        meta = m.meta
        sig = meta.get("sig")
        if not isinstance(sig, bytes):
            return DropReason.UNAUTHORISED
        ts, seq = _int(meta.get("ts"), "timestamp"), _int(meta.get("q"), "sequence")
        edge = ctx.link.kind is LinkKind.CLIENT
        if edge:
            stale = self.window.check(ts / 1000.0, ctx.now)
            if stale is not None:
                return stale
        if not self._key(p.key).is_valid(sig, withdrawal_digest(m.op, p, ts, seq)):
            return DropReason.UNAUTHORISED
        if edge:
            bad = self.replay.check_and_accept(ctx.broker_id + "/withdraw", p.key, ts, seq)
            if bad is not None:
                return bad
        st.bindings.release((prior.op, p.ident))
        return None


def make_scheme(authority_key: VerifyKey, **options: Any) -> DefaultBroker:
    """The broker scheme for a :class:`~pubguard.schemes.SchemeRegistry` (see the class)."""
    return DefaultBroker(authority_key, **options)


def merkle_fields(index: int, size: int, path: Sequence[bytes]) -> dict[str, Any]:
    """The ``mi``/``mn``/``mp`` meta fields (omitted for a batch of one)."""
    if size == 1:
        return {}
    return {"mi": index, "mn": size, "mp": pack_path(path)}
