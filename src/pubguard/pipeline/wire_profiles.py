"""The wire-layout pipeline profiles: ``default``, ``eventguard`` and ``plain``.

Each is a thin adapter from a scheme of :mod:`pubguard.schemes` to
:class:`~pubguard.pipeline.wire.WireProfile`: which client publishes and subscribes, which
broker face checks, and which decoder reads the join keys. The key services are derived from
the run's master secret, as on the broker network (the default authority and the EventGuard
meta-service are stateless functions of it).

- ``default`` (docs/profiles.md, "default"): PSGuard records and tokens, deterministic or
  randomized (psguard.txt §3-§4.1), authority permits, one Ed25519 signature per Merkle batch
  (eventguard.txt §4.4), the ``max_delay`` window (§4.7), ``(ts, seq)`` per publisher key
  (narada §V-B) and revocation (narada §IV-H1): :class:`~pubguard.schemes.default.DefaultClient`
  and :class:`~pubguard.schemes.default.DefaultBroker`.
- ``eventguard`` (eventguard.txt §4): deterministic topic tokens ``T(w)``, ``E_K(w)(Kr)`` per
  topic, the MS's advertisement permits and the publisher's Merkle-root signature. Topic
  routing only: a filter's other constraints are applied by the subscriber after opening.
- ``plain``: the baseline; executors read and match the plaintext with the plain scheme's index.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from pubguard.crypto import SigningKey, VerifyKey, hkdf
from pubguard.errors import ValidationError
from pubguard.model import Event, Filter, Op
from pubguard.pipeline.profiles import register
from pubguard.pipeline.stages import recipients
from pubguard.pipeline.wire import WireContext, WireProfile, pack, unpack
from pubguard.schemes.base import ProtectedEvent

__all__ = ["DefaultPipeline", "EventGuardPipeline", "PlainPipeline"]


def _publisher_key(ctx: WireContext, name: str) -> SigningKey:
    """A publisher's Ed25519 key, derived from the run's master secret (trusted side)."""
    return SigningKey.from_seed(
        hkdf(ctx.master, info=b"pubguard/pipeline/publisher/" + name.encode())
    )


def _public(ctx: WireContext, **service: str) -> dict[str, Any]:
    return {
        "publishers": {ctx.publisher: _publisher_key(ctx, ctx.publisher).public.to_bytes().hex()},
        "revoked": sorted(_publisher_key(ctx, n).public.to_bytes().hex() for n in ctx.revoked),
        **service,
    }


#: filters one subscribing client protects on the trusted side before a fresh one takes over:
#: a client keeps every filter it subscribed and re-scans them per new filter (the psguard
#: client's epoch bookkeeping), so one client for a whole filter table made protect quadratic
#: in filters (10,000 filters: hours); per chunk it stays linear
FILTERS_PER_CLIENT: Final = 64


def _token_client(ctx: WireContext, make: Callable[[], Any]) -> Any:
    """The subscribing client that protects the next filter's tokens (its keys are dropped:
    executors get tokens only, and each subscriber opens with a client of its own)."""
    n = ctx.cache.get("token-client-uses", 0)
    ctx.cache["token-client-uses"] = n + 1
    if n % FILTERS_PER_CLIENT == 0:
        ctx.cache["token-client"] = make()
    return ctx.cache["token-client"]


def _revoked(manifest: Mapping[str, Any]) -> list[bytes]:
    return [bytes.fromhex(k) for k in manifest.get("revoked", [])]


# -- default ------------------------------------------------------------------------------------


class DefaultPipeline(WireProfile):
    """The composed default profile on Spark (module docstring)."""

    name = "default"
    modes: tuple[str, ...] = ("randomized", "deterministic")
    mode_note = "default defines deterministic and randomized tokens"
    sequenced = True

    def _authority(self, ctx: WireContext) -> Any:
        from pubguard.schemes.default import DefaultAuthority
        from pubguard.schemes.psguard.record import Schema

        return ctx.memo(
            "authority", lambda: DefaultAuthority(ctx.master, Schema(ctx.event_types()))
        )

    def _client(self, ctx: WireContext, name: str, key: SigningKey | None = None) -> Any:
        from pubguard.schemes.default import DefaultClient

        return DefaultClient(name, self._authority(ctx), signing_key=key, mode=ctx.mode)

    def protect_batch(self, ctx: WireContext, events: Sequence[Event]) -> list[ProtectedEvent]:
        pub = ctx.memo(
            "publisher",
            lambda: self._client(ctx, ctx.publisher, _publisher_key(ctx, ctx.publisher)),
        )
        rng = ctx.memo("rng", lambda: ctx.rng("events") or False) or None
        return pub.protect_events(events, now=ctx.now, rng=rng)  # type: ignore[no-any-return]

    def join_fields(
        self, ctx: WireContext, pe: ProtectedEvent
    ) -> tuple[str, bytes, int, int, str, bytes, list[int]]:
        from pubguard.schemes.default import AuthorityPermit, parse_publication

        pub = parse_publication(pe.event_id, pe.routing, pe.body, pe.meta)
        key = AuthorityPermit.decode(pub.permit_blob).key
        r = pub.rec
        return r.publisher, key, r.ts, pub.seq, r.mode, r.nonce, list(r.tokens)

    def filter_rows(
        self, ctx: WireContext, fid: str, f: Filter
    ) -> list[tuple[str, int, int, bytes]]:
        from pubguard.schemes.psguard.record import ProtectedFilterRows
        from pubguard.schemes.psguard.wire import parse_filter

        sub = _token_client(ctx, lambda: self._client(ctx, "pipeline-filters"))
        pf = sub.protect_filter(f.with_id(fid), now=ctx.now)
        return ProtectedFilterRows(fid, parse_filter(pf.filter).as_rows().groups).rows()

    def public(self, ctx: WireContext) -> dict[str, Any]:
        return _public(ctx, authority=self._authority(ctx).public_key.to_bytes().hex())

    def broker(self, manifest: Mapping[str, Any], max_delay: float) -> Any:
        from pubguard.schemes.default import DefaultBroker

        key = VerifyKey.from_bytes(bytes.fromhex(manifest["authority"]))
        return DefaultBroker(
            key, max_delay=max_delay, revoked=_revoked(manifest), ban_brokers=False
        )

    def subscriber(self, ctx: WireContext, fid: str, f: Filter) -> Any:
        c = self._client(ctx, f"subscriber-{fid}")
        c.protect_filter(f.with_id(fid), now=ctx.now)
        return c


# -- eventguard ---------------------------------------------------------------------------------


def _topic(fid: str, f: Filter) -> str:
    """The topic a filter routes on (eventguard.txt §3: topic-based); a profile mismatch if
    it names none."""
    for c in f.constraints:
        if c.name == "topic" and c.op is Op.EQ and isinstance(c.value, str) and c.value:
            return c.value
    raise ValidationError(
        f'profile mismatch: eventguard routes on topics, and filter {fid} has no topic = "w" '
        "constraint"
    )


class EventGuardPipeline(WireProfile):
    """EventGuard on Spark (module docstring)."""

    name = "eventguard"
    modes: tuple[str, ...] = ("deterministic",)
    mode_note = (
        "eventguard is deterministic only: its topic tokens T(w) are the same for every event "
        "on a topic (eventguard.txt §4.1); psguard and default offer randomized tokens"
    )

    def _ms(self, ctx: WireContext) -> Any:
        from pubguard.keys.ms import MetaService

        return ctx.memo("ms", lambda: MetaService(ctx.master))

    def _client(self, ctx: WireContext, name: str, key: SigningKey | None = None) -> Any:
        from pubguard.schemes.eventguard import EventGuardClient

        return EventGuardClient(name, self._ms(ctx), signing_key=key)

    def protect_batch(self, ctx: WireContext, events: Sequence[Event]) -> list[ProtectedEvent]:
        pub = ctx.memo(
            "publisher",
            lambda: self._client(ctx, ctx.publisher, _publisher_key(ctx, ctx.publisher)),
        )
        advertised: set[str] = ctx.memo("advertised", set)
        for e in events:
            w = e.get("topic")
            if isinstance(w, str) and w and w not in advertised:
                pub.protect_advertisement(Filter.of(("topic", "=", w)), now=ctx.now)  # §4.3
                advertised.add(w)
        rng = ctx.memo("rng", lambda: ctx.rng("events") or False) or None
        return pub.protect_events(events, now=ctx.now, rng=rng)  # type: ignore[no-any-return]

    def join_fields(
        self, ctx: WireContext, pe: ProtectedEvent
    ) -> tuple[str, bytes, int, int, str, bytes, list[int]]:
        from pubguard.keys.ms import AdvertisementPermit, decode_permit
        from pubguard.schemes.eventguard import parse_publication
        from pubguard.schemes.psguard.tokens import tok64

        f = parse_publication(pe.routing, pe.meta)
        permit = decode_permit(f.permits[0])
        if not isinstance(permit, AdvertisementPermit):
            raise ValidationError("an eventguard publication carries advertisement permits")
        key = permit.publisher_key
        toks = [tok64(t) for t in f.tokens]
        return f.publisher, key, round(f.ts * 1000), 0, "deterministic", b"", toks

    def filter_rows(
        self, ctx: WireContext, fid: str, f: Filter
    ) -> list[tuple[str, int, int, bytes]]:
        from pubguard.schemes.psguard.tokens import tok64

        sub = _token_client(ctx, lambda: self._client(ctx, "pipeline-filters"))
        token = sub.protect_filter(Filter.of(("topic", "=", _topic(fid, f))), now=ctx.now).filter[
            "token"
        ]
        return [(fid, 1, tok64(token), token)]

    def public(self, ctx: WireContext) -> dict[str, Any]:
        return _public(ctx, ms=self._ms(ctx).public_key.to_bytes().hex())

    def broker(self, manifest: Mapping[str, Any], max_delay: float) -> Any:
        from pubguard.schemes.eventguard import EventGuardBroker

        key = VerifyKey.from_bytes(bytes.fromhex(manifest["ms"]))
        return EventGuardBroker(
            key, max_delay=max_delay, revoked=_revoked(manifest), ban_brokers=False
        )

    def subscriber(self, ctx: WireContext, fid: str, f: Filter) -> Any:
        c = self._client(ctx, f"subscriber-{fid}")
        c.protect_filter(Filter.of(("topic", "=", _topic(fid, f))), now=ctx.now)
        return c


# -- plain --------------------------------------------------------------------------------------


_MATCHERS: list[Any] = []  # [(index, matcher)]: this Python worker's plain index


class PlainPipeline(WireProfile):
    """The baseline on Spark: executors see and match everything (eventguard.txt §2.1)."""

    name = "plain"
    modes: tuple[str, ...] = ("deterministic",)
    mode_note = "plain routes on plaintext attributes; there are no tokens to randomize"
    leaks_plaintext = True
    token_join = False

    def _scheme(self) -> Any:
        from pubguard.schemes.plain import PlainScheme

        return PlainScheme()

    def protect_batch(self, ctx: WireContext, events: Sequence[Event]) -> list[ProtectedEvent]:
        s = self._scheme()
        return [s.protect_event(e, now=ctx.now) for e in events]

    def join_fields(
        self, ctx: WireContext, pe: ProtectedEvent
    ) -> tuple[str, bytes, int, int, str, bytes, list[int]]:
        return "", b"", ctx.now_ms, 0, "deterministic", b"", []

    def filter_rows(
        self, ctx: WireContext, fid: str, f: Filter
    ) -> list[tuple[str, int, int, bytes]]:
        wire = self._scheme().protect_filter(f, now=ctx.now).filter
        return [(fid, len(f.constraints), 0, pack(wire))]

    def public(self, ctx: WireContext) -> dict[str, Any]:
        return {"publishers": {}}

    def broker(self, manifest: Mapping[str, Any], max_delay: float) -> Any:
        return self._scheme()

    def subscriber(self, ctx: WireContext, fid: str, f: Filter) -> Any:
        return self._scheme()

    def build_match_index(self, filters: Any, subs: Any) -> Any:
        fs = {
            r["filter_id"]: bytes(r["token"])
            for r in filters.select("filter_id", "token").collect()
        }
        by_f: dict[str, list[str]] = {}
        for r in subs.select("subscriber", "filter_id").toLocalIterator():
            by_f.setdefault(r["filter_id"], []).append(r["subscriber"])
        return {"filters": fs, "subs": by_f}

    def _matcher(self, index: Any) -> Any:
        if _MATCHERS and _MATCHERS[0][0] is index:
            return _MATCHERS[0][1]
        s = self._scheme()
        m = s.new_matcher()
        for fid, blob in index["filters"].items():
            m.add(fid, s.decode_filter(unpack(blob)))
        _MATCHERS[:] = [(index, m)]
        return m

    def match_partition(self, index: Any, pdf: Any) -> list[tuple[str, str, str]]:
        s, m = self._scheme(), self._matcher(index)
        out = []
        for eid, routing in zip(pdf["event_id"], pdf["routing"], strict=True):
            best = recipients(m.match(s.decode_event(unpack(routing))), index["subs"])
            out += [(sub, eid, fid) for sub, fid in best.items()]
        return out


DEFAULT = register(DefaultPipeline())
EVENTGUARD = register(EventGuardPipeline())
PLAIN = register(PlainPipeline())
