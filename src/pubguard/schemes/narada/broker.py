"""The narada profile: KMC security tokens, signed and encrypted payloads, broker checks and
per-entity replay defence (narada-secure-delivery.txt §IV-V) as a broker scheme.

Theory of operation
-------------------
Narada secures the *payload*; the topic is routed in clear (§III). Every action an entity
initiates carries its KMC security token ``A_T^X = S_KMC(C_X, Rights, T, Duration)`` (§IV-B,
:class:`~pubguard.keys.kmc.SecurityToken`) together with its certificate ``C_X`` (the token
names it by fingerprint), a millisecond timestamp, a sequence number (§V-B) and the entity's
Ed25519 signature. Wire forms::

    subscribe / advertise   filter {topic: T, until: token.not_after}
                            meta {tok, cert, ts, seq, sig}
    publish                 routing {topic: T}   body E_{K_T}(M^P) (AEAD, aad = topic, key
                            version, event id)   meta {tok, cert, ts, seq, kv, sig}
    unsubscribe / unadvert. meta {ts, seq, sig}  (signed by the cancelled filter's entity)

The paper's message is ``S_X(M^H) + M^H + E_{K_T}(M^P)`` with ``M^H = S_X(M^P) + A_T^X``
(§IV-F); one Ed25519 signature over the digest of the encrypted payload, the token and the
header fields gives the same tamper evidence with one verification instead of two.

Broker checks (§IV-H, Fig. 3), cheapest first: a struck-out source -> FLOOD; no or malformed
token -> UNAUTHORISED / MALFORMED; the KMC that signed it unknown -> UNAUTHORISED; the KMC's or
the entity's certificate on the CRL -> REVOKED (§IV-H1); bad KMC signature or a certificate
that is not the token's -> FORGED; token outside its duration, topic or rights not matching
-> UNAUTHORISED (§IV-H3/4); ``|now - ts| > max_delay`` -> STALE (the NTP check of §V-B); bad
entity signature -> FORGED; ``(ts, seq)`` not after the entity's last -> REPLAYED (§V-B).
Drops of a client's message are answered with an Error by the core (§IV-H3).

The verified token is cached (§VI, :class:`~pubguard.schemes.common.replay.TokenCache`): the exact
token and certificate bytes are compared, and the entry is re-verified after ``token_ttl``
seconds or ``token_uses`` messages. Unlike the paper's sketch, expiry and the CRL are still
checked on every message (integer comparisons and set lookups), so the cache never routes a
message whose token ran out or whose signer was revoked. Subscriptions stop matching once
their token expires (§IV-H4): the filter carries ``until`` and the matcher skips expired ones.

KMC service topics (§IV-B footnote 1, §V-A). An entity reaches a KMC only by publishing on the
random 128-bit topic the KMC listens on (``kmc/<32 hex>``) and hears back on a random reply
topic of its own (``reply/<32 hex>``). Its key request comes *before* it holds a token, so the
token rule cannot apply there; instead (:meth:`NaradaBroker._check_service`):

- a publication on ``kmc/...`` needs no token: the KMC authenticates the (signed) request
  itself. It must carry ``meta {src}``, the sender's identity, which the first broker checks
  against the authenticated client link (so the KMC can refuse repeat offenders, §V-A), and a
  body of at most :data:`MAX_SERVICE_BODY` bytes;
- only a KMC the broker honours (``kmc_certs``) may subscribe to ``kmc/...`` or publish on
  ``reply/...``: ``meta {kmc, ts, seq, sig}`` signed with the KMC's key, replay-checked;
- anyone with a CA-issued, unrevoked certificate may subscribe to a ``reply/...`` topic
  (``meta {cert, ts, seq, sig}``); the delivery is wrapped to the requester's KEM key anyway.

A flood on a ``kmc/...`` topic is the KMC's to handle: it moves to a fresh topic and
unsubscribes the old one, after which no broker forwards the old topic's traffic past the
first broker (nothing subscribes to it any more).

On the native backend the publication checks above (on ordinary topics) run in Rust
(:mod:`~pubguard.schemes.narada.fast`, ``native/src/guard/narada.rs``), per publication or one
call per run of them (``broker_check_run``), calling back here for the token
(:meth:`NaradaBroker.verified`) and the replay state; this module stays the spec.

Replay state (:class:`~pubguard.schemes.common.replay.ReplayState`) is scoped per broker id and may
live in SQLite, so a restarted broker keeps refusing replays. Subscriptions and withdrawals are
replay-checked only where they enter the network (a client link): brokers legitimately re-send
stored subscriptions upward later (covering changes, reconnections).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pubguard.crypto import H, VerifyKey, aad_for
from pubguard.crypto.x509 import Certificate, RevocationList, Role, verify_chain
from pubguard.errors import DropError, DropReason, InvalidToken, RevokedError, ValidationError
from pubguard.keys.kmc_messages import Rights, SecurityToken
from pubguard.schemes.base import BrokerScheme, CheckContext, LinkKind, Matcher
from pubguard.schemes.common.guard_check import checked
from pubguard.schemes.common.guards import (
    DEFAULT_BAN,
    DEFAULT_MAX_DELAY,
    DEFAULT_STRIKE_WINDOW,
    DEFAULT_STRIKES,
    ExactMatcher,
    StrikeCounter,
    TimestampWindow,
    pack_fields,
)
from pubguard.schemes.common.native_guard import FALLBACK, REASONS, check_run
from pubguard.schemes.common.replay import (
    DEFAULT_TOKEN_MAX_USES,
    DEFAULT_TOKEN_TTL,
    ReplayState,
    TokenCache,
)
from pubguard.schemes.narada.fast import publication_guard
from pubguard.store import Database

__all__ = [
    "KMC_TOPIC_PREFIX",
    "MAX_SERVICE_BODY",
    "NARADA",
    "REPLY_TOPIC_PREFIX",
    "NaradaBroker",
    "NaradaFilter",
    "make_scheme",
    "payload_aad",
    "service_kind",
    "signed_digest",
]

NARADA: Final = "narada"
MAX_TOPIC_LEN: Final = 1024
SIG_TAG: Final = b"pubguard/narada/msg/v1\x00"
KMC_TOPIC_PREFIX: Final = "kmc/"  # §IV-B: the topic a KMC listens on (random 128 bits, §V-A)
REPLY_TOPIC_PREFIX: Final = "reply/"  # where a requester hears back (random 128 bits)
MAX_SERVICE_BODY: Final = 16 * 1024
_HEX: Final = frozenset("0123456789abcdef")
_STRIKING: Final = frozenset({DropReason.FORGED, DropReason.UNAUTHORISED, DropReason.MALFORMED})
_RIGHT_FOR: Final = {
    "publish": Rights.PUBLISH,
    "advertise": Rights.PUBLISH,
    "subscribe": Rights.SUBSCRIBE,
}


def payload_aad(topic: str, key_version: int, event_id: str) -> bytes:
    """AEAD associated data of ``E_{K_T}(M^P)``: topic, key version, event id."""
    return aad_for(b"narada/payload", topic, key_version, event_id.encode())


def signed_digest(
    op: str,
    ref: str,
    topic: str,
    ts: int,
    seq: int,
    *,
    until: int = 0,
    kv: int = 0,
    body: bytes = b"",
    token: bytes = b"",
) -> bytes:
    """What the entity signs: ``S_X(M^H)`` over the header fields, the token and ``H(M^P)``.
    ``ref`` is the event id for a publication and empty otherwise (sub ids are hop-scoped)."""
    return pack_fields(SIG_TAG, op, ref, topic, ts, seq, until, kv, H(body), H(token))


@dataclass(frozen=True, slots=True)
class NaradaFilter:
    """A decoded subscription: the topic and the end of its token's validity."""

    topic: str
    until: int


@dataclass(frozen=True, slots=True)
class _Verified:
    token: SecurityToken
    key: VerifyKey
    entity_serial: int
    kmc_serial: int
    #: what the native guard reads: (topic, allows publish, certificate fingerprint, key,
    #: the key's raw bytes)
    route: tuple[str, bool, bytes, VerifyKey, bytes]


@dataclass(frozen=True, slots=True)
class _Kmc:
    key: VerifyKey
    serial: int


def service_kind(topic: str) -> str | None:
    """``"kmc"`` for a KMC service topic, ``"reply"`` for a reply topic, else None."""
    for kind, prefix in (("kmc", KMC_TOPIC_PREFIX), ("reply", REPLY_TOPIC_PREFIX)):
        if topic.startswith(prefix):
            rest = topic[len(prefix) :]
            if len(rest) == 32 and set(rest) <= _HEX:
                return kind
    return None


def _topic(v: Any) -> str:
    if not isinstance(v, str) or not v or len(v) > MAX_TOPIC_LEN:
        raise ValidationError("narada topic must be a non-empty string")
    return v


def _int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValidationError(f"narada {what} must be a non-negative integer")
    return v


class _Clock:
    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = float("-inf")


def _filter_topic(pf: NaradaFilter) -> str:
    return pf.topic


class _ExpiringMatcher(ExactMatcher):
    """Topic index that skips subscriptions whose token has expired (§IV-H4)."""

    __slots__ = ("_clock", "_until")

    def __init__(self, clock: _Clock) -> None:
        super().__init__(value=_filter_topic)
        self._clock = clock
        self._until: dict[Hashable, int] = {}

    def add(self, key: Hashable, pf: Any) -> None:
        super().add(key, pf)
        self._until[key] = pf.until

    def remove(self, key: Hashable) -> None:
        super().remove(key)
        self._until.pop(key, None)

    def match(self, pe: Any) -> set[Hashable]:
        now, until = self._clock.now, self._until
        return {k for k in super().match(pe) if until[k] >= now}


class NaradaBroker(BrokerScheme):
    """Broker face of the narada profile (see the module docstring).

    ``ca_cert``: the CA; ``kmc_certs``: certificates of the KMCs whose tokens are honoured
    (checked against the CA, role ``kmc``); ``crl``: the CA's revocation list (replace it with
    :meth:`update_crl`); ``now``: time of construction (certificate checks). ``replay``: the
    per-entity replay state (default in memory; pass ``ReplayState(Database(path))`` or
    ``db=`` to survive restarts). ``max_delay``: seconds a timestamp may differ from ``now``.
    ``token_ttl`` / ``token_uses``: the verified-token cache's invalidation (§VI; ``0`` uses
    disables the cache). ``strikes`` / ``strike_window`` / ``ban``: as in EventGuardBroker.
    ``batch_verify``: on the native backend, the entity signatures of a run of publications
    (``broker_check_run``) are tried as one Ed25519 batch first (``narada/fast.py``).
    """

    profile = NARADA
    #: ``outgoing`` is the identity: the core skips it, and admits runs of publications
    #: through ``broker_check_run`` (the native guard)
    rewrites_outgoing = False

    def __init__(
        self,
        *,
        ca_cert: Certificate,
        kmc_certs: Iterable[Certificate],
        now: float,
        crl: RevocationList | None = None,
        replay: ReplayState | None = None,
        db: Database | None = None,
        max_delay: float = DEFAULT_MAX_DELAY,
        token_ttl: float = DEFAULT_TOKEN_TTL,
        token_uses: int = DEFAULT_TOKEN_MAX_USES,
        strikes: int = DEFAULT_STRIKES,
        strike_window: float = DEFAULT_STRIKE_WINDOW,
        ban: float = DEFAULT_BAN,
        batch_verify: bool = True,
    ) -> None:
        if replay is not None and db is not None:
            raise ValidationError("give either replay= or db=, not both")
        self.ca_cert = ca_cert
        self._revoked: frozenset[int] = frozenset()
        self.crl: RevocationList | None = None
        if crl is not None:
            self.update_crl(crl, now=now)
        self._kmcs: dict[str, _Kmc] = {}
        for c in kmc_certs:
            self.add_kmc(c, now=now)
        self.replay = replay if replay is not None else ReplayState(db)
        self.window = TimestampWindow(max_delay)
        self.tokens: TokenCache[_Verified] = TokenCache(token_ttl, token_uses)
        self._strike_args = (strikes, strike_window, ban)
        self._strikes: dict[str, StrikeCounter] = {}
        self._clock = _Clock()
        self.verifications = 0  # full token verifications (cache misses)
        # the native port of _check on publications (calling back for tokens and replay)
        self._fast = publication_guard(
            max_delay=max_delay,
            verified=self.verified,
            replay=self.replay.check_and_accept,
            batch_verify=batch_verify,
        )

    # -- trust anchors ---------------------------------------------------------------------
    def add_kmc(self, cert: Certificate, *, now: float) -> None:
        """Honour tokens signed by this KMC (its certificate must chain to the CA)."""
        verify_chain(cert, self.ca_cert, self.crl, now=now, role=Role.KMC)
        self._kmcs[cert.subject] = _Kmc(cert.verify_key, cert.serial)

    def update_crl(self, crl: RevocationList, *, now: float) -> None:
        """Install the CA's newer CRL (narada §IV-A: the CA notifies brokers)."""
        crl.check(self.ca_cert, now)
        self.crl = crl
        self._revoked = crl.serials

    # -- decoding and matching ---------------------------------------------------------------
    def decode_filter(self, wire: Mapping[str, Any]) -> NaradaFilter:
        if not isinstance(wire, Mapping) or set(wire) != {"topic", "until"}:
            raise ValidationError("narada filter is exactly {topic, until}")
        return NaradaFilter(_topic(wire["topic"]), _int(wire["until"], "until"))

    def decode_event(self, routing: Mapping[str, Any]) -> tuple[str]:
        if not isinstance(routing, Mapping) or set(routing) != {"topic"}:
            raise ValidationError("narada routing is exactly {topic}")
        return (_topic(routing["topic"]),)

    def covers(self, f1: NaradaFilter, f2: NaradaFilter) -> bool:
        return f1.topic == f2.topic and f1.until >= f2.until

    def broker_match(self, pf: NaradaFilter, pe: tuple[str]) -> bool:
        return pf.topic in pe and pf.until >= self._clock.now

    def new_matcher(self) -> Matcher:
        return _ExpiringMatcher(self._clock)

    def outgoing(self, message: Any, ctx: CheckContext) -> Any | None:
        return message

    # -- the checks ------------------------------------------------------------------------------
    def before_commit(self) -> None:
        """The broker's batch is about to commit: its accepted (ts, seq) commit with it
        (``ReplayState(deferred=True)`` on the broker's own database; narada §V-B)."""
        self.replay.flush_pending()

    def _strikes_of(self, ctx: CheckContext) -> StrikeCounter:
        """The strike counter of ``ctx``'s broker (the clock of expiring filters moved on)."""
        if ctx.now > self._clock.now:
            self._clock.now = ctx.now
        strikes = self._strikes.get(ctx.broker_id)
        if strikes is None:
            strikes = self._strikes[ctx.broker_id] = StrikeCounter(*self._strike_args)
        return strikes

    def broker_check(self, message: Any, ctx: CheckContext) -> DropReason | None:
        strikes = self._strikes_of(ctx)
        return checked(strikes, ctx, lambda: self._check_raising(message, ctx), striking=_STRIKING)

    @property
    def checks_in_runs(self) -> bool:
        """Whether the native guard is built for this scheme (``broker_check_run``)."""
        return self._fast is not None

    def broker_check_run(
        self, messages: Sequence[Any], events: Sequence[Any], ctx: CheckContext
    ) -> list[DropReason | None]:
        """``broker_check`` on a run of publications, one native call for as much as it
        decides (``native_guard.check_run``, with this profile's striking verdicts), on the
        topics the core decoded (``events``); an empty prefix without the native guard."""
        fast = self._fast
        if fast is None:
            return []
        strikes = self._strikes_of(ctx)
        frames = [
            (m.event_id, pe[0], m.body, m.meta) for m, pe in zip(messages, events, strict=True)
        ]
        return check_run(
            lambda fs, stop: fast.check_run(fs, ctx.now, ctx.broker_id, stop_on_strike=stop),
            frames,
            strikes,
            ctx,
            strike_brokers=True,
            striking=_STRIKING,
        )

    def _check_raising(self, m: Any, ctx: CheckContext) -> DropReason | None:
        """:meth:`_check` with the profile's own raised verdicts mapped to reasons."""
        try:
            return self._check(m, ctx)
        except DropError as exc:
            return exc.reason
        except RevokedError:
            return DropReason.REVOKED

    def _check(self, m: Any, ctx: CheckContext) -> DropReason | None:
        if m.op in ("unsubscribe", "unadvertise"):
            return self._check_withdrawal(m, ctx)
        right = _RIGHT_FOR.get(m.op)
        if right is None:
            return DropReason.UNKNOWN_TYPE
        meta = m.meta
        if m.op == "publish":
            topic, until = self.decode_event(m.routing)[0], 0
        else:
            pf = self.decode_filter(m.filter)
            topic, until = pf.topic, pf.until
        if topic[0] in "kr" and (kind := service_kind(topic)) is not None:
            return self._check_service(m, ctx, kind, topic, until)
        fast = self._fast
        if fast is not None and m.op == "publish":
            v = fast.check_publish(m.event_id, topic, m.body, meta, ctx.now, ctx.broker_id)
            if v != FALLBACK:
                return REASONS[v] if v else None
        if meta.get("tok") is None:
            return DropReason.UNAUTHORISED  # §IV-H3: no token, no routing
        if m.op == "publish":
            kv, body, ref = _int(meta.get("kv"), "key version"), m.body, m.event_id
        else:
            kv, body, ref = 0, b"", ""
        v = self.verified(meta.get("tok"), meta.get("cert"), ctx.now)
        tok = v.token
        if tok.topic != topic or not tok.rights.allows(right):
            return DropReason.UNAUTHORISED
        if m.op != "publish" and until != tok.not_after:
            return DropReason.UNAUTHORISED
        ts, seq = _int(meta.get("ts"), "timestamp"), _int(meta.get("seq"), "sequence")
        edge = m.op == "publish" or ctx.link.kind is LinkKind.CLIENT
        if edge:
            stale = self.window.check(ts / 1000.0, ctx.now)
            if stale is not None:
                return stale
        sig = meta.get("sig")
        if not isinstance(sig, bytes):
            raise ValidationError("narada signature must be bytes")
        digest = signed_digest(
            m.op, ref, topic, ts, seq, until=until, kv=kv, body=body, token=meta["tok"]
        )
        v.key.verify(sig, digest)
        if edge:
            return self.replay.check_and_accept(ctx.broker_id, tok.cert_fingerprint, ts, seq)
        return None

    def verified(self, tok_blob: Any, cert_blob: Any, now: float) -> _Verified:
        """The token, checked (cached) and still valid now; raises on any failure."""
        if not isinstance(tok_blob, bytes) or not isinstance(cert_blob, bytes):
            raise ValidationError("narada token and certificate must be bytes")
        ck = tok_blob + cert_blob  # both exactly as verified (the token is length-prefixed)
        v = self.tokens.lookup(ck, now)
        if v is None:
            v = self._verify_token(tok_blob, cert_blob)
            self.tokens.store(ck, v, now)
        if v.kmc_serial in self._revoked or v.entity_serial in self._revoked:
            raise RevokedError("token signer or holder revoked")  # §IV-H1, on every message
        if not v.token.not_before <= now <= v.token.not_after:
            raise DropError(DropReason.UNAUTHORISED)
        return v

    def _verify_token(self, tok_blob: bytes, cert_blob: bytes) -> _Verified:
        self.verifications += 1
        tok = SecurityToken.decode(tok_blob)
        kmc = self._kmcs.get(tok.kmc)
        if kmc is None:
            raise DropError(DropReason.UNAUTHORISED)
        kmc.key.verify(tok.signature, tok.signed_bytes())
        cert = Certificate.from_der(cert_blob)
        if cert.fingerprint != tok.cert_fingerprint:
            raise InvalidToken()
        key = VerifyKey.from_bytes(tok.entity_key)
        route = (
            tok.topic,
            tok.rights.allows(Rights.PUBLISH),
            tok.cert_fingerprint,
            key,
            bytes(tok.entity_key),
        )
        return _Verified(tok, key, cert.serial, kmc.serial, route)

    # -- KMC service topics (§IV-B, §V-A; see the module docstring) ------------------------------
    def _service_signer(
        self, meta: Mapping[str, Any], kind: str, op: str, now: float
    ) -> tuple[VerifyKey, bytes]:
        """(verify key, replay identity) of who may send ``op`` on a ``kind`` service topic."""
        if kind == "reply" and op == "subscribe":
            cert = Certificate.from_der(meta.get("cert"))  # type: ignore[arg-type]
            verify_chain(cert, self.ca_cert, self.crl, now=now)
            return cert.verify_key, cert.fingerprint
        name = meta.get("kmc")
        kmc = self._kmcs.get(name) if isinstance(name, str) else None
        if kmc is None:
            raise DropError(DropReason.UNAUTHORISED, "not a KMC this broker honours")
        if kmc.serial in self._revoked:
            raise RevokedError("KMC revoked")
        return kmc.key, b"kmc:" + str(meta["kmc"]).encode()

    def _check_service(
        self, m: Any, ctx: CheckContext, kind: str, topic: str, until: int
    ) -> DropReason | None:
        meta = m.meta
        edge = m.op == "publish" or ctx.link.kind is LinkKind.CLIENT
        if kind == "kmc" and m.op == "publish":
            # a key request: no token yet; the KMC verifies it. The source is the sender's
            # authenticated identity, checked where it enters the network.
            src = meta.get("src")
            if set(meta) != {"src"} or not isinstance(src, str) or not src:
                return DropReason.MALFORMED
            if len(m.body) > MAX_SERVICE_BODY:
                return DropReason.MALFORMED
            if ctx.link.kind is LinkKind.CLIENT and src != (ctx.link.peer or ctx.link.link_id):
                return DropReason.UNAUTHORISED
            return None
        if (kind, m.op) not in (("kmc", "subscribe"), ("reply", "subscribe"), ("reply", "publish")):
            return DropReason.UNAUTHORISED
        key, ident = self._service_signer(meta, kind, m.op, ctx.now)
        ts, seq = _int(meta.get("ts"), "timestamp"), _int(meta.get("seq"), "sequence")
        if edge:
            stale = self.window.check(ts / 1000.0, ctx.now)
            if stale is not None:
                return stale
        sig = meta.get("sig")
        if not isinstance(sig, bytes):
            raise ValidationError("narada signature must be bytes")
        ref, body = (m.event_id, m.body) if m.op == "publish" else ("", b"")
        key.verify(sig, signed_digest(m.op, ref, topic, ts, seq, until=until, body=body))
        if edge:
            return self.replay.check_and_accept(ctx.broker_id, ident, ts, seq)
        return None

    def _check_withdrawal(self, m: Any, ctx: CheckContext) -> DropReason | None:
        prior = ctx.prior
        if prior is None:
            return DropReason.UNAUTHORISED
        pf = self.decode_filter(prior.filter)
        if ctx.now > pf.until:
            return None  # the token ran out: nothing left to protect
        if (kind := service_kind(pf.topic)) is not None:
            return self._service_withdrawal(m, ctx, kind, pf, prior.meta)
        tok = SecurityToken.decode(prior.meta["tok"])  # verified when it was stored
        meta = m.meta
        if not isinstance(meta.get("sig"), bytes):
            return DropReason.UNAUTHORISED
        ts, seq = _int(meta.get("ts"), "timestamp"), _int(meta.get("seq"), "sequence")
        edge = ctx.link.kind is LinkKind.CLIENT
        if edge:
            stale = self.window.check(ts / 1000.0, ctx.now)
            if stale is not None:
                return stale
        digest = signed_digest(m.op, "", pf.topic, ts, seq, until=pf.until, token=prior.meta["tok"])
        if not tok.verify_key.is_valid(meta["sig"], digest):
            return DropReason.UNAUTHORISED  # only the subscriber itself may withdraw
        if edge:
            return self.replay.check_and_accept(ctx.broker_id, tok.cert_fingerprint, ts, seq)
        return None

    def _service_withdrawal(
        self, m: Any, ctx: CheckContext, kind: str, pf: NaradaFilter, prior_meta: Mapping[str, Any]
    ) -> DropReason | None:
        """Only the service subscription's own signer may withdraw it."""
        key, ident = self._service_signer(prior_meta, kind, "subscribe", ctx.now)
        meta = m.meta
        if not isinstance(meta.get("sig"), bytes):
            return DropReason.UNAUTHORISED
        ts, seq = _int(meta.get("ts"), "timestamp"), _int(meta.get("seq"), "sequence")
        edge = ctx.link.kind is LinkKind.CLIENT
        if edge and (stale := self.window.check(ts / 1000.0, ctx.now)) is not None:
            return stale
        if not key.is_valid(
            meta["sig"], signed_digest(m.op, "", pf.topic, ts, seq, until=pf.until)
        ):
            return DropReason.UNAUTHORISED
        if edge:
            return self.replay.check_and_accept(ctx.broker_id, ident, ts, seq)
        return None


def make_scheme(**options: Any) -> NaradaBroker:
    """The broker scheme for a :class:`~pubguard.schemes.SchemeRegistry` (see the class)."""
    return NaradaBroker(**options)
