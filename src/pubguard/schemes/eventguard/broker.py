"""The eventguard profile: EventGuard's six guards (eventguard.txt §4) as a broker scheme.

Theory of operation
-------------------
Topics never travel in clear: every topic ``w`` is replaced by its token ``T(w)`` (§4.1), and
brokers route by token equality. The trusted meta-service (MS, :mod:`pubguard.keys.ms`) issues
MS-signed permits; brokers hold only the MS public key (never ``rk``) and publishers' keys
reach them inside MS-signed advertisement permits. The wire forms, the signed digest and
the parsers live in :mod:`pubguard.schemes.eventguard.wire`.

Wire forms (``meta`` fields are signed by the MS or the publisher, never by a broker)::

    subscribe    filter {token: T(w)}                           meta {permit: sb(w)}     §4.2
    advertise    filter {token: T(w), publisher: P, pk: pk(P)}  meta {permit: ad(w)}     §4.3
    publish      routing {tokens: T(w_1) || ...}   body E_Kr(pbl)                          §4.4
                 meta {p: P, e: epoch, ts, wk: [E_K(w_i,e)(Kr) ...], ad: [ad(w_i) ...],
                       sig, (mi, mn, mp: Merkle index, batch size, path)}

    Lists travel as one bytes value each (so the routing part and ``meta`` are flat maps of
    scalars, which the broker core freezes on its fast path): the 32-byte tokens and the path's
    hashes concatenated, wrapped keys and permits as length-prefixed items
    (:func:`~pubguard.schemes.eventguard.wire.pack_items`).
    unsubscribe  meta {permit: usb(w)}  (bound to the cancelled sbId)                      §4.5
    unadvertise  meta {permit: uad(w)}  (bound to the cancelled adId)                      §4.6

The publisher signs (Ed25519, replacing ElGamal) a *leaf* digest over the event id, profile,
publisher, epoch, timestamp, tokens, wrapped keys and ``H(body)``; with amortised signing it
signs a Merkle root over a batch of leaves and each publication carries its path
(:mod:`pubguard.schemes.common.merkle`). Ed25519 is deterministic, so the unique identifier the paper
takes from ElGamal's ``r`` is the (signed) event id.

The routing guard (§4.7), per broker: a source on the struck-out list is refused (FLOOD)
before any signature check; then ``|ct - ts| > max_delay`` -> STALE; a token without a matching
MS advertisement permit, a permit of another epoch or an expired one -> UNAUTHORISED; a
revoked publisher -> REVOKED; a bad MS or publisher signature -> FORGED. Duplicate event ids
are dropped by the core's dedup window (DUPLICATE) before the guard runs; duplicate sbIds /
adIds under another subscription and repeated usbIds / uadIds are DUPLICATE here. Verified
roots and permits are cached, so a batch costs one verification per broker.

State (bindings, windows, strikes) is kept per ``ctx.broker_id``, so one instance may serve
several brokers of a simulation. Rekeying (§4.8) is the MS's: keys change per epoch, tokens
and the network's subscriptions do not. The client side is
:class:`pubguard.schemes.eventguard.client.EventGuardClient`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from pubguard.crypto import VerifyKey
from pubguard.errors import DropReason, InvalidToken, ValidationError
from pubguard.keys.ms import (
    AdvertisementPermit,
    Permit,
    SubscriptionPermit,
    UnadvertisementPermit,
    UnsubscriptionPermit,
    decode_permit,
)
from pubguard.schemes.base import BrokerScheme, CheckContext, Matcher, forwarded_grace
from pubguard.schemes.common.guard_check import checked
from pubguard.schemes.common.guards import (
    DEFAULT_BAN,
    DEFAULT_MAX_DELAY,
    DEFAULT_STRIKE_WINDOW,
    DEFAULT_STRIKES,
    ExactMatcher,
    IdBindings,
    IdWindow,
    StrikeCounter,
    TimestampWindow,
    TTLCache,
)
from pubguard.schemes.common.native_guard import FALLBACK, REASONS, check_run, root_verifier
from pubguard.schemes.eventguard.fast import publication_guard
from pubguard.schemes.eventguard.wire import (
    EVENTGUARD,
    ROOT_TAG,
    TOKEN_BYTES,
    leaf_digest_fast,
    parse_meta,
    parse_tokens,
)

__all__ = ["EventGuardBroker", "make_scheme"]


class _PerBroker:
    __slots__ = ("bindings", "strikes", "withdrawals")

    def __init__(self, max_delay: float, strikes: StrikeCounter) -> None:
        self.bindings = IdBindings()  # sbId / adId -> (link, id)
        self.withdrawals = IdWindow(max(2 * max_delay, 1.0))  # usbId / uadId
        self.strikes = strikes


class EventGuardBroker(BrokerScheme):
    """Broker face of the eventguard profile (see the module docstring).

    ``ms_key``: the MS public key. ``max_delay``: the routing guard's window in seconds.
    ``strikes`` / ``strike_window`` / ``ban``: a link that sends ``strikes`` bogus messages
    within ``strike_window`` seconds is refused (FLOOD) for ``ban`` seconds, without a signature
    check; with ``ban_brokers=False`` only client links are banned (broker links are then
    contained by the per-message checks alone). STALE drops never count (clock skew is not
    malice). ``revoked``: publisher public keys (raw 32
    bytes) refused with REVOKED; more can be added with :meth:`revoke`.
    ``batch_verify``: on the native backend, the signatures of a run's single-signature
    publications (``broker_check_run``) are tried as one Ed25519 batch first (``fast.py``).
    """

    profile = EVENTGUARD
    #: ``outgoing`` is the identity: the core skips it
    rewrites_outgoing = False

    @property
    def catch_up_horizon(self) -> float:
        """Seconds past its lease an entry of a down link is held (``Broker.expire``): the
        timestamp window, after which what it routes would arrive stale anyway."""
        return self.window.max_delay

    def __init__(
        self,
        ms_key: VerifyKey,
        *,
        max_delay: float = DEFAULT_MAX_DELAY,
        strikes: int = DEFAULT_STRIKES,
        strike_window: float = DEFAULT_STRIKE_WINDOW,
        ban: float = DEFAULT_BAN,
        ban_brokers: bool = True,
        revoked: Iterable[bytes] = (),
        batch_verify: bool = True,
    ) -> None:
        if not isinstance(ms_key, VerifyKey):
            raise ValidationError("ms_key must be the MS VerifyKey")
        self.ms_key = ms_key
        self.window = TimestampWindow(max_delay)
        self._strike_args = (strikes, strike_window, ban)
        self.ban_brokers = ban_brokers
        self.revoked: set[bytes] = {bytes(k) for k in revoked}
        self.roots = root_verifier(ROOT_TAG, ttl=2 * max_delay)  # native when built
        self._permits: TTLCache[bytes, Permit] = TTLCache()  # verified permit bytes
        self._hot: dict[bytes, Permit] = {}  # publications' permits, verified (bounded)
        self._keys: dict[bytes, VerifyKey] = {}  # pk(P) bytes -> parsed key
        self._state: dict[str, _PerBroker] = {}
        # the native port of _check_publish (sharing roots, permits, revoked), or None
        self._fast = publication_guard(
            self.roots,
            max_delay=max_delay,
            permit=self.permit,
            revoked=self.revoked,
            batch_verify=batch_verify,
        )

    revokes_publishers = True

    def revoke(self, publisher_key: VerifyKey | bytes) -> None:
        """Refuse this publisher's publications from now on (an operator's revocation feed)."""
        k = publisher_key.to_bytes() if isinstance(publisher_key, VerifyKey) else publisher_key
        self.revoked.add(bytes(k))

    # -- decoding and matching ----------------------------------------------------------------
    def decode_filter(self, wire: Mapping[str, Any]) -> bytes:
        if not isinstance(wire, Mapping):
            raise ValidationError("eventguard filter must be a mapping")
        keys = set(wire)
        if keys not in ({"token"}, {"token", "publisher", "pk"}):
            raise ValidationError("eventguard filter is {token} or {token, publisher, pk}")
        tok = wire["token"]
        if not isinstance(tok, bytes) or len(tok) != TOKEN_BYTES:
            raise ValidationError("eventguard token must be 32 bytes")
        if "pk" in keys:
            if not isinstance(wire["publisher"], str) or not isinstance(wire["pk"], bytes):
                raise ValidationError("eventguard advertisement needs publisher and pk")
        return tok

    def decode_event(self, routing: Mapping[str, Any]) -> tuple[bytes, ...]:
        tokens = parse_tokens(routing)
        if type(routing) is MappingProxyType:  # immutable: the core's frozen wire form
            self._last_decoded = (routing, tokens)
        return tokens

    #: the last frozen routing part decoded and its tokens: the core decodes a publication's
    #: routing just before its guards run, which then need it again (decode once)
    _last_decoded: tuple[Any, tuple[bytes, ...] | None] = (None, None)

    def covers(self, f1: bytes, f2: bytes) -> bool:
        return f1 == f2  # tokens are opaque: only equal ones cover each other

    def broker_match(self, pf: bytes, pe: tuple[bytes, ...]) -> bool:
        return pf in pe

    def new_matcher(self) -> Matcher:
        return ExactMatcher()

    def outgoing(self, message: Any, ctx: CheckContext) -> Any | None:
        return message

    # -- the guards ------------------------------------------------------------------------------
    def _per(self, ctx: CheckContext) -> _PerBroker:
        st = self._state.get(ctx.broker_id)
        if st is None:
            n, w, b = self._strike_args
            st = self._state[ctx.broker_id] = _PerBroker(
                self.window.max_delay, StrikeCounter(n, w, b)
            )
        return st

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
        decides (``native_guard.check_run``); an empty prefix without the native guard."""
        fast = self._fast
        if fast is None or fast.roots is not self.roots:  # swapped (EventGuard-nosig)
            return []
        # each frame's (event_id, profile, routing, body, meta) is read natively
        return check_run(
            lambda ms, stop: fast.check_msgs(ms, ctx.now, stop_on_strike=stop),
            messages,
            self._per(ctx).strikes,
            ctx,
            strike_brokers=self.ban_brokers,
        )

    def _check(self, m: Any, ctx: CheckContext, st: _PerBroker) -> DropReason | None:
        match m.op:
            case "publish":
                return self._check_publish(m, ctx)
            case "subscribe":
                return self._check_permit(m, ctx, st, SubscriptionPermit, m.sub_id)
            case "advertise":
                return self._check_permit(m, ctx, st, AdvertisementPermit, m.adv_id)
            case "unsubscribe" | "unadvertise":
                return self._check_withdrawal(m, ctx, st)
        return DropReason.UNKNOWN_TYPE

    def permit(self, blob: Any, now: float) -> Permit:
        """Decode and MS-verify a permit (cached until it expires); InvalidToken if forged."""
        if not isinstance(blob, bytes):
            raise ValidationError("a permit must be bytes")
        p = self._permits.get(blob, now)
        if p is None:
            p = decode_permit(blob)
            self.ms_key.verify(p.signature, p.signed_bytes())
            self._permits.put(blob, p, p.expires_at)
        return p

    def lease_end(self, message: Any) -> float | None:
        """When a stored subscription's (advertisement's) permit has run out (§4.8: permits
        live one epoch): its expiry plus ``max_delay``. The core forgets it then
        (``Broker.expire``); a live client has renewed with the MS by then."""
        return decode_permit(message.meta["permit"]).expires_at + self.window.max_delay

    def _usable(self, p: Permit, now: float, late: float = 0.0) -> DropReason | None:
        if p.issued_at > now + self.window.max_delay:
            return DropReason.STALE  # issued in the future beyond the clock-skew allowance
        if now > p.expires_at + late:
            return DropReason.UNAUTHORISED  # the epoch ended: renew with the MS (§4.8)
        return None

    def _check_publish(self, m: Any, ctx: CheckContext) -> DropReason | None:
        now = ctx.now
        fast = self._fast
        if fast is not None and fast.roots is self.roots:  # not swapped (EventGuard-nosig)
            v = fast.check_publish(m.event_id, m.profile, m.routing, m.body, m.meta, now)
            if v != FALLBACK:
                return REASONS[v] if v else None
        last, toks = self._last_decoded
        tokens = toks if last is m.routing and toks is not None else parse_tokens(m.routing)
        publisher, epoch, ts, sig, index, size, path, wrapped, permits = parse_meta(
            m.meta, len(tokens)
        )
        if abs(now - ts) > self.window.max_delay:  # TimestampWindow.check, inline
            return DropReason.STALE
        pk: bytes | None = None
        hot = self._hot
        for tok, blob in zip(tokens, permits, strict=True):
            p = hot.get(blob)
            if p is None:
                p = self.permit(blob, now)
                if len(hot) >= 4096:
                    hot.clear()
                hot[blob] = p  # verified; its validity is still checked below every time
            if not isinstance(p, AdvertisementPermit) or p.token != tok:
                return DropReason.UNAUTHORISED
            if p.subject != publisher or p.epoch != epoch or (pk and p.publisher_key != pk):
                return DropReason.UNAUTHORISED
            # valid when the publication was signed (ts, within max_delay of now above): one
            # published as its epoch ended is not lost in transit (§4.7-4.8)
            bad = self._usable(p, ts)
            if bad is not None:
                return bad
            pk = p.publisher_key
        assert pk is not None
        if pk in self.revoked:
            return DropReason.REVOKED
        key = self._keys.get(pk)
        if key is None:
            if len(self._keys) >= 4096:
                self._keys.clear()
            key = self._keys[pk] = VerifyKey.from_bytes(pk)
        leaf = leaf_digest_fast(
            m.event_id, m.profile, publisher, epoch, ts, tokens, wrapped, m.body
        )
        # verify, not verify_packed: EventGuard-nosig (sim/scaling_sim.py) stands in a
        # verifier with only verify (a packed path goes straight through)
        self.roots.verify(key, leaf, sig, now=now, index=index, size=size, path=path)
        return None

    def _check_permit(
        self, m: Any, ctx: CheckContext, st: _PerBroker, cls: type, ident: str
    ) -> DropReason | None:
        """Subscribe guard (§4.2) and advertise guard (§4.3)."""
        tok = self.decode_filter(m.filter)
        blob = m.meta.get("permit")
        if blob is None:
            return DropReason.UNAUTHORISED  # §4.2: no MS permit, no subscription
        p = self.permit(blob, ctx.now)
        if not isinstance(p, cls) or p.token != tok:
            return DropReason.UNAUTHORISED
        if isinstance(p, AdvertisementPermit):
            if m.filter.get("publisher") != p.subject or m.filter.get("pk") != p.publisher_key:
                return DropReason.UNAUTHORISED
            if p.publisher_key in self.revoked:
                return DropReason.REVOKED
        # a copy another broker still holds is good as long as it may hold it (§4.8 leases)
        bad = self._usable(p, ctx.now, forwarded_grace(ctx.link, self.window.max_delay))
        if bad is not None:
            return bad
        if not st.bindings.bind((cls.__name__, p.ident), (ctx.link.link_id, ident)):
            return DropReason.DUPLICATE  # one permit, two subscriptions: a replay flood
        return None

    def _check_withdrawal(self, m: Any, ctx: CheckContext, st: _PerBroker) -> DropReason | None:
        """Unsubscribe guard (§4.5) and unadvertise guard (§4.6): only an MS permit bound to
        the cancelled sbId / adId (obtained with the UST / UAT) withdraws it."""
        prior = ctx.prior
        if prior is None:
            return DropReason.UNAUTHORISED
        try:
            old = self.permit(prior.meta.get("permit"), ctx.now)
        except InvalidToken:
            old = None  # cannot happen for a stored entry; be safe
        sub = m.op == "unsubscribe"
        if old is not None and ctx.now > old.expires_at:
            # the cancelled permit's epoch is over: nothing left to protect (lets a broker
            # clean up after a client that left without unsubscribing)
            st.bindings.release((type(old).__name__, old.ident))
            return None
        blob = m.meta.get("permit")
        if blob is None or old is None:
            return DropReason.UNAUTHORISED
        w = self.permit(blob, ctx.now)
        if isinstance(w, UnsubscriptionPermit):
            cancels = w.sb_id if sub else None
        elif isinstance(w, UnadvertisementPermit):
            cancels = None if sub else w.ad_id
        else:
            return DropReason.UNAUTHORISED
        if cancels is None or w.token != old.token or cancels != old.ident:
            return DropReason.UNAUTHORISED
        stale = self.window.check(w.issued_at, ctx.now)
        if stale is not None:
            return stale
        if not st.withdrawals.check_and_record(w.ident, ctx.now):
            return DropReason.DUPLICATE
        st.bindings.release((type(old).__name__, old.ident))
        return None


def make_scheme(ms_key: VerifyKey, **options: Any) -> EventGuardBroker:
    """The broker scheme for a :class:`~pubguard.schemes.SchemeRegistry` (see the class)."""
    return EventGuardBroker(ms_key, **options)
