"""The sans-IO broker core: messages in, actions out.

Theory of operation
-------------------
A :class:`Broker` is a pure state machine (STYLE.md convention 1, h11): the driver (asyncio
transport or the simulator) registers links, then calls ``handle(message, from_link, now)`` for
every message that arrives and carries out the returned actions (``pubguard.broker.actions``).
It never does I/O, never reads a clock and never raises on remote input: every refused message
becomes a ``Drop`` with a machine-readable :class:`~pubguard.errors.DropReason`, counted in
``drops``, and leaves the routing state untouched.

Routing is Siena's hierarchical scheme (eventguard.txt §2.1, psguard.txt §2.1): brokers form a
tree; each broker has at most one *parent* link, any number of *child* broker links and local
*client* links.

- **subscribe** from a child or client is stored under ``(link, sub_id)`` in the profile's
  matcher, and forwarded to the parent only when no filter already forwarded covers it
  (``ForwardSet``). Forwarded subscriptions are renamed ``<broker_id>~<hash(link, sub_id)>`` (ids
  are hop-scoped) and carry the original ``filter`` and ``meta`` unchanged, so upstream guards
  can verify the subscriber's permits.
- **unsubscribe** removes the entry; if it had been forwarded, the broker forwards the
  unsubscribe (with the unsubscriber's ``meta``) and forwards every filter that becomes
  uncovered. Unknown ids are acknowledged (idempotent, for retried frames).
- **leases**: a scheme whose subscriptions and advertisements rest on a permit of one key
  epoch reports when it ends (``lease_end``); ``expire(now)``, called periodically by the
  driver, forgets entries past it, so one whose client vanished without a withdrawal does not
  stay upstream for ever (live clients renew: ``pubguard.net.client.renewal``).
- **publish** goes to the parent unless it came from there (so every publication reaches the
  root of the tree) and to every child or client link with a matching filter, never back to the
  child it came from. On a tree this delivers each event exactly once to every subscriber
  whose filter matches: each event climbs the unique path to the root and descends only into
  subtrees whose forwarded (covering) filters match it. A client receives one ``Deliver``
  naming all of its matching subscriptions; with ``echo`` a publisher also gets its own
  matching events (as NATS does).
- **advertise / unadvertise** are flooded over the tree (to every broker link but the one they
  came on) and kept per link, so every broker knows what is advertised and a scheme's guard can
  consult them; routing of publications does *not* depend on advertisements (the hierarchical
  variant of Siena), which keeps routing correct whatever order messages arrive in.

Per message the core picks the scheme by the ``profile`` field, decodes the opaque wire fields
with the scheme, asks ``broker_check`` (the guards), de-duplicates publications by event id in a
bounded window (``DedupWindow``), matches with the scheme's index and lets ``outgoing`` rewrite
each message as it leaves. Control messages from clients are answered with ``Ack``; drops of
client messages with ``Error`` (narada §IV-H: errors go back to a directly connected client),
except duplicates, which are silent. Brokers get no error replies.

``handle_batch(messages, from_link, now)`` is ``handle`` for a batch from one link (what a
transport reads at once): the same actions and state as one call per message, with runs of
publications (plain, or of a profile whose matcher has ``match_batch``) admitted one by one and
matched together.

The publication path is three steps, kept separate so that ``handle_batch`` can admit a run one
by one, match it together (the index's ``match_batch``, vectorised across events) and route it
in arrival order, with exactly the actions and state of one ``handle`` per message: *admit*
(profile known, event id not in the duplicate window, routing decodable by the scheme, the
scheme's guards pass; then its id is recorded), *match* with the profile's index, and *route*
(one ``DeliverTo`` per local client link naming all of its matching subscriptions, one
``Forward`` per child broker link with a matching filter but the one it came from, and one to
the parent unless it came from there). Cheap rejects first (the flood containment of
eventguard.txt §4.7, Fig. 3): a publication still in wire form whose ``event_id`` is in the
duplicate window, of a profile already in use, is dropped as ``duplicate`` *before* it is
decoded (``_seen_wire``): a replayed copy costs a dict lookup instead of decoding and freezing
its routing fields. The drop, its reason, detail and counters are those of the full path; only
a duplicate that is also malformed counts as ``duplicate`` rather than ``malformed``. (A banned
source is refused by the profile's guard, ``schemes/common/guard_check.py``, which needs the
decoded message.)

Collaborators
-------------
The ``Broker`` owns its state; what has a life of its own is a collaborator it owns:

- per profile in use a :class:`~pubguard.broker.profiles.Profile`: the scheme, its matcher and
  the upward :class:`~pubguard.broker.covering.ForwardSet`, with the scheme's optional hooks
  read once;
- the :class:`~pubguard.broker.dedup.DedupWindow` of recently seen event ids;
- the :class:`~pubguard.broker.advertising.AdvertisementTable`;
- the :class:`~pubguard.broker.catch_up.CatchUpRouter`: which links are down or catching up
  and what a new key epoch's publications owe them.

The subscriptions, their leases and the publication path are the state machine's own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pubguard.broker.actions import Action, DeliverTo, Drop, Forward, Reply
from pubguard.broker.advertising import AdvertisementTable
from pubguard.broker.catch_up import CatchUpRouter
from pubguard.broker.dedup import DEDUP_MAX_IDS, DEDUP_WINDOW_S, DedupWindow
from pubguard.broker.profiles import DECODE_ERRORS, Key, Profile, forward_id, skey, why
from pubguard.broker.state import BrokerState
from pubguard.errors import (
    DropError,
    DropReason,
    FrameError,
    InvalidToken,
    RevokedError,
    StateError,
    ValidationError,
)
from pubguard.schemes.base import (
    LEASE_SLACK,
    BrokerScheme,
    CheckContext,
    LinkInfo,
    LinkKind,
    Matcher,
    SchemeRegistry,
)
from pubguard.wire.messages import (
    KNOWN_OPS,
    MAX_DETAIL_LEN,
    Ack,
    Advertise,
    Deliver,
    Error,
    Heartbeat,
    Message,
    Publish,
    Subscribe,
    Unadvertise,
    Unsubscribe,
    decode_message,
    decode_publish,
)

__all__ = ["BATCH_MATCH_MIN", "LEASE_SLACK", "MAX_BROKER_ID_LEN", "Broker"]

MAX_BROKER_ID_LEN: Final = 64
BATCH_MATCH_MIN: Final = 32  # publications in a run before handle_batch uses match_batch
_MESSAGE_TYPES = (
    Subscribe,
    Unsubscribe,
    Advertise,
    Unadvertise,
    Publish,
    Deliver,
    Ack,
    Error,
    Heartbeat,
)
_IN_KEY: Final = {op: f"in.{op}" for op in KNOWN_OPS}  # counter names, built once
_NEVER: Final = float("inf")


@dataclass(slots=True)
class _Entry:
    profile: str
    pf: Any
    message: Subscribe
    #: when the subscription's lease ends (the scheme's ``lease_end``), or None: never
    expires: float | None = None
    #: held past its lease for a link that is down or catching up (``Broker.expire``): out of
    #: the forward set, so what it covered goes up, but still matched for its own link
    held: bool = False


@dataclass(slots=True)
class _Admitted:
    """A publication that passed the guards: its profile, matcher and decoded event."""

    prof: Profile
    matcher: Matcher
    pe: Any


@dataclass(slots=True)
class _Held:
    """``handle_batch``'s publications awaiting their profile's run guard (``_hold_pub``): their
    places in the run, their event ids, their profile."""

    at: list[int] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    prof: Profile | None = None
    #: ids the duplicate window could take without evicting one, when the run began (its
    #: ids only expire until the run is checked, so this never overstates it)
    room: int = 0


class Broker:
    """One routing node. See the module docstring for the protocol."""

    def __init__(
        self,
        broker_id: str,
        schemes: SchemeRegistry | Iterable[BrokerScheme],
        *,
        store: BrokerState | None = None,
        echo: bool = True,
        dedup_window: float = DEDUP_WINDOW_S,
        dedup_capacity: int = DEDUP_MAX_IDS,
        no_catch_up: Iterable[str] = (),
    ) -> None:
        if not isinstance(broker_id, str) or not broker_id or len(broker_id) > MAX_BROKER_ID_LEN:
            raise ValidationError(f"broker id must be 1-{MAX_BROKER_ID_LEN} characters")
        self.broker_id = broker_id
        self.schemes = schemes if isinstance(schemes, SchemeRegistry) else SchemeRegistry(schemes)
        self.echo = echo
        self.store = store
        self.links: dict[str, LinkInfo] = {}
        self.parent: str | None = None
        self.drops: Counter[DropReason] = Counter()
        self.counters: Counter[str] = Counter()
        self._profiles: dict[str, Profile] = {}  # the profiles in use (``_profile``)
        self._subs: dict[Key, _Entry] = {}
        self._adverts = AdvertisementTable(broker_id, store)
        self._next_expiry = _NEVER  # the earliest lease end of any entry (expire's fast exit)
        self._dedup = DedupWindow(dedup_window, dedup_capacity)
        if isinstance(no_catch_up, str):
            raise ValidationError("no_catch_up is a collection of peer names, not one string")
        # catch-up routing (``link_down`` / ``link_live``, ``CatchUpRouter.route``)
        self._catch_up = CatchUpRouter(self._profiles, self.counters, frozenset(no_catch_up))
        # the guards' context of the last message without a prior entry (CheckContext is
        # frozen: a run of publications from one link at one time shares one)
        self._last_ctx = CheckContext(0.0, LinkInfo("-", LinkKind.CLIENT), broker_id)
        if store is not None:
            self._restore(store)

    @property
    def no_catch_up(self) -> frozenset[str]:
        """Peers (child brokers, durable clients by authenticated name) never caught up to:
        the operator's choice for a subtree in a less trusted domain (docs/network.md)."""
        return self._catch_up.no_catch_up

    @property
    def _recovering(self) -> Mapping[str, float]:
        """The links down (inf) or catching up since a time (for inspection)."""
        return self._catch_up.recovering

    @property
    def _parked(self) -> Mapping[str, Any]:
        """Publications parked per durable client link (for inspection)."""
        return self._catch_up.parked

    # -- links ------------------------------------------------------------------------------
    def add_link(self, link_id: str, kind: LinkKind | str, peer: str | None = None) -> list[Action]:
        """Register a link; returns the state to send on it (for a broker link)."""
        kind = LinkKind(kind)
        if not isinstance(link_id, str) or not link_id or "\x00" in link_id:
            raise ValidationError("link id must be a non-empty string without NUL")
        old = self.links.get(link_id)
        if old is not None and old.kind is not kind:
            raise StateError(f"link {link_id!r} already exists as {old.kind.value}")
        if kind is LinkKind.PARENT and self.parent not in (None, link_id):
            raise StateError(f"broker {self.broker_id!r} already has parent {self.parent!r}")
        info = LinkInfo(link_id, kind, peer)
        self.links[link_id] = info
        if kind is LinkKind.PARENT:
            self.parent = link_id
        self._persist("links", link_id, {"kind": kind.value, "peer": peer})
        return self.link_up(link_id)

    def link_up(self, link_id: str) -> list[Action]:
        """(Re)send what the peer must know after a (re)connection: idempotent at the peer."""
        info = self._link(link_id)
        if info.kind is LinkKind.CLIENT:
            return []
        out: list[Action] = []
        if info.kind is LinkKind.PARENT:
            for name, prof in self._profiles.items():
                for key in prof.fwd.forwarded:
                    out.append(self._forward_sub(name, key))  # type: ignore[arg-type]
        out += self._adverts.announce(link_id)
        return self._outgoing(out, 0.0)

    def link_down(self, link_id: str, now: float | None = None) -> None:
        """The driver lost the connection of a child broker link or a durable client link
        (its messages wait in an outbox) at ``now``: until it is back and has caught up, the
        publications of a new key epoch of a profile whose subscriptions over it are older are
        routed to it as well, or parked for the client until its renewal comes, for at most
        the profile's ``catch_up_horizon`` after ``now`` (``CatchUpRouter.route``)."""
        info = self.links.get(link_id)
        if info is None or info.kind is LinkKind.PARENT:
            return
        self._catch_up.link_down(link_id, now)

    def link_live(self, link_id: str, now: float) -> None:
        """A link that was down is connected again: it catches up for ``CATCH_UP_S`` (its
        peer re-sends what it queued meanwhile, renewals included)."""
        self._catch_up.link_live(link_id, now)

    def remove_link(self, link_id: str, now: float = 0.0) -> list[Action]:
        """Forget a link and everything that came over it (a non-durable client left)."""
        self._link(link_id)
        out: list[Action] = []
        for key in [k for k in self._subs if k[0] == link_id]:
            out += self._remove_sub(key, {})
        for key in self._adverts.keys_of(link_id):
            out += self._adverts.remove(key, {}, self._broker_links(except_=link_id))
        del self.links[link_id]
        self._catch_up.forget_link(link_id)
        if self.parent == link_id:
            self.parent = None
        self._unpersist("links", link_id)
        return self._outgoing(out, now)

    def _link(self, link_id: str) -> LinkInfo:
        info = self.links.get(link_id)
        if info is None:
            raise StateError(f"broker {self.broker_id!r} has no link {link_id!r}")
        return info

    # -- the entry point --------------------------------------------------------------------
    def handle(
        self, message: Message | Mapping[str, Any], from_link: str, now: float
    ) -> list[Action]:
        """Process one message from ``from_link`` at time ``now``; never raises on bad input."""
        link = self._link(from_link)
        dup = self._seen_wire(message, link, now)  # a replayed copy: dropped undecoded
        if dup is not None:
            return dup
        decoded = self._decode(message, link)
        if isinstance(decoded, list):
            return decoded
        if type(decoded) is Publish:
            return self._on_publish(decoded, link, now)
        return self._dispatch(decoded, link, now)

    def handle_batch(
        self, messages: Iterable[Message | Mapping[str, Any]], from_link: str, now: float
    ) -> list[Action]:
        """``handle`` each message in order and concatenate the actions: the same actions
        and the same state as one call per message. Runs of publications are admitted one by
        one (decoding, duplicate window, the guards: a refused one is dropped as ``handle``
        drops it and is not matched), then matched together, per matcher, with its
        ``match_batch`` when it has one and the run has at least the matcher's ``batch_min``
        (default ``BATCH_MATCH_MIN``) of them, and routed in arrival order. Publications of plain profiles and of profiles whose
        matcher has ``match_batch`` (the token profiles: psguard.txt §3.1, one AES call per
        token over the batch's nonces) join runs, unless the profile has both guards and
        outgoing rewrites (see ``Profile``) and does not rewrite runs (``rewrites_in_runs``:
        the run's actions are then rewritten by ``outgoing_routed``, hermes). So
        do those of a profile whose scheme checks a run of publications in one call
        (``checks_in_runs``: the native guard): their guards run together,
        ``broker_check_run``, after decoding and before their ids are recorded (``_hold_pub``,
        ``_check_held``), unless the scheme decides the link's guard per link
        (``link_guard``, asked once per batch: then admitted one by one, as plain's). A run
        whose every message would leave unchanged (``passes_through`` covers every link it
        can reach) is routed as plain's is, with no rewriting."""
        link = self._link(from_link)
        out: list[Action] = []
        run: list[tuple[Publish, _Admitted | None, list[Action]]] = []
        held = _Held()  # publications of a profile that checks runs, awaiting its guard
        # the last profile that checks runs, and its guard for this link (``link_guard``)
        gprof: Profile | None = None
        gfun: Callable[[Any], DropReason | None] | None = None
        for message in messages:
            if (
                held.at
                and type(message) is dict
                and (len(held.at) >= held.room or message.get("event_id") in held.ids)
            ):
                # a copy, or the held ids could evict the one it repeats: the held run's
                # guards first, so it is dropped undecoded (or passes) as ``handle`` does
                self._check_held(held, link, now, run)
            dup = self._seen_wire(message, link, now)
            decoded = dup if dup is not None else self._decode(message, link)
            if type(decoded) is Publish:
                prof = self._profiles.get(decoded.profile)
                if prof is not None and prof.batches:
                    # admitting it cannot change how earlier ones match or leave
                    guard = None
                    if prof.runs:
                        if prof is not gprof:
                            gprof, gfun = prof, prof.scheme.link_guard(link, now)
                        guard = gfun
                        if guard is None:
                            self._hold_pub(held, decoded, prof, link, now, run)
                            continue
                    if held.at:
                        self._check_held(held, link, now, run)
                    adm = self._admit(decoded, link, now, guard=guard)
                    if isinstance(adm, list):
                        run.append((decoded, None, adm))
                    else:
                        run.append((decoded, adm, []))
                    continue
            if held.at:
                self._check_held(held, link, now, run)
            if run:
                self._route_run(run, link, now, out)
                run = []
            if isinstance(decoded, list):
                out += decoded
            elif type(decoded) is Publish:
                out += self._on_publish(decoded, link, now)
            else:
                out += self._dispatch(decoded, link, now)
        if held.at:
            self._check_held(held, link, now, run)
        if run:
            self._route_run(run, link, now, out)
        return out

    def _hold_pub(
        self,
        held: _Held,
        msg: Publish,
        prof: Profile,
        link: LinkInfo,
        now: float,
        run: list[tuple[Publish, _Admitted | None, list[Action]]],
    ) -> None:
        """``_admit`` up to the guards for a publication of a profile that checks runs
        (``Profile.runs``): its guard runs later, with the held run's, in one call
        (``_check_held``). Held are only publications whose admission could not depend on
        an earlier held one's: the held run is checked first when this one is of another
        profile, repeats a held event id, or could find the duplicate window evicting ids."""
        dedup = self._dedup
        at = held.at
        if at and (held.prof is not prof or msg.event_id in held.ids or len(at) >= held.room):
            self._check_held(held, link, now, run)
        self.counters["in.publish"] += 1
        if dedup.seen(msg.event_id, now):
            drop = self._drop(DropReason.DUPLICATE, "seen event id", link, msg.event_id, "publish")
            run.append((msg, None, drop))
            return
        try:
            pe = prof.scheme.decode_event(msg.routing)
        except DECODE_ERRORS as exc:
            drop = self._drop(DropReason.MALFORMED, why(exc), link, msg.event_id, "publish")
            run.append((msg, None, drop))
            return
        if not at:
            held.prof = prof
            held.room = dedup.capacity - len(dedup)
        at.append(len(run))
        held.ids.add(msg.event_id)
        run.append((msg, _Admitted(prof, prof.matcher, pe), []))

    def _check_held(
        self,
        held: _Held,
        link: LinkInfo,
        now: float,
        run: list[tuple[Publish, _Admitted | None, list[Action]]],
    ) -> None:
        """Run the held publications' guards (the scheme's ``broker_check_run``, one call for
        as much of the run as it decides; the core checks the next one itself) and record the
        admitted ones' ids, in arrival order: the verdicts and state of one ``_admit`` each."""
        prof = held.prof
        assert prof is not None
        scheme = prof.scheme
        msgs = [run[i][0] for i in held.at]
        pes = [run[i][1].pe for i in held.at]  # type: ignore[union-attr]
        ctx = self._last_ctx
        if ctx.link is not link or ctx.now != now:
            ctx = self._last_ctx = CheckContext(now, link, self.broker_id)
        record = self._dedup.record
        at = held.at
        k = 0
        while k < len(msgs):
            verdicts: list[Any] = (
                scheme.broker_check_run(msgs[k:], pes[k:], ctx)
                if k
                else scheme.broker_check_run(msgs, pes, ctx)
            )
            if not verdicts:  # the scheme's fast path cannot decide the next one
                refused = self._check(scheme, msgs[k], link, now, None)
                verdicts = [refused]
            for i, v in zip(at[k : k + len(verdicts)], verdicts, strict=True):
                if v is None:
                    record(run[i][0].event_id, now)
                else:
                    msg = run[i][0]
                    drop = v if isinstance(v, list) else self._refused(DropReason(v), link, msg)
                    run[i] = (msg, None, drop)
            k += len(verdicts)
        held.at.clear()
        held.ids.clear()
        held.prof = None

    def _decode(
        self, message: Message | Mapping[str, Any], link: LinkInfo
    ) -> Message | list[Action]:
        """The message, decoded from its wire dict if need be, or the actions of its drop."""
        if type(message) is not dict and isinstance(message, _MESSAGE_TYPES):
            return message
        pub = decode_publish(message)  # the common publication: one call
        if pub is not None:
            return pub
        op = message.get("op") if isinstance(message, Mapping) else None
        op = op[:40] if isinstance(op, str) else None
        if op is not None and op not in KNOWN_OPS:
            return self._drop(DropReason.UNKNOWN_TYPE, "unknown op", link, _guess_id(message), op)
        try:
            return decode_message(message)
        except FrameError as exc:
            return self._drop(DropReason.MALFORMED, str(exc), link, _guess_id(message), op)

    def _dispatch(self, message: Message, link: LinkInfo, now: float) -> list[Action]:
        self.counters[_IN_KEY[message.op]] += 1
        match message:
            case Subscribe():
                return self._on_subscribe(message, link, now)
            case Unsubscribe():
                return self._on_unsubscribe(message, link, now)
            case Advertise():
                return self._on_advertise(message, link, now)
            case Unadvertise():
                return self._on_unadvertise(message, link, now)
            case Heartbeat() | Ack() | Error():
                return []  # link-level traffic: the transport's business
            case Publish():  # a subclass instance: the general path
                return self._on_publish(message, link, now, counted=True)
            case _:  # Deliver: only ever sent to clients
                return self._drop(
                    DropReason.MALFORMED, f"unexpected {message.op}", link, message.ref, message.op
                )

    # -- publications -------------------------------------------------------------------------
    def _seen_wire(self, message: Any, link: LinkInfo, now: float) -> list[Action] | None:
        """The drop of a wire publication whose id is in the duplicate window, decided before
        decoding it; None when the message needs the full path."""
        if type(message) is not dict or message.get("op") != "publish":
            return None
        eid, prof = message.get("event_id"), message.get("profile")
        if type(eid) is not str or type(prof) is not str or prof not in self._profiles:
            return None
        if not self._dedup.seen(eid, now):
            return None
        self.counters["in.publish"] += 1
        return self._drop(DropReason.DUPLICATE, "seen event id", link, eid, "publish")

    def _on_publish(
        self, msg: Publish, link: LinkInfo, now: float, counted: bool = False
    ) -> list[Action]:
        adm = self._admit(msg, link, now, counted)
        if isinstance(adm, list):
            return adm
        keys: set[Key] = adm.matcher.match(adm.pe)  # type: ignore[assignment]
        return self._route(msg, link, adm, keys, now)

    def _admit(
        self,
        msg: Publish,
        link: LinkInfo,
        now: float,
        counted: bool = False,
        guard: Callable[[Any], DropReason | None] | None = None,
    ) -> _Admitted | list[Action]:
        """Everything before matching: profile, duplicate window, decoding, the guards
        (``guard``: the scheme's ``link_guard`` for this link, which decides as its
        ``broker_check`` would)."""
        if not counted:
            self.counters["in.publish"] += 1
        prof = self._profiles.get(msg.profile) or self._profile(msg.profile)
        if prof is None:
            return self._drop(
                DropReason.UNKNOWN_TYPE, "unknown profile", link, msg.event_id, "publish"
            )
        if self._dedup.seen(msg.event_id, now):
            return self._drop(DropReason.DUPLICATE, "seen event id", link, msg.event_id, "publish")
        try:
            pe = prof.scheme.decode_event(msg.routing)
        except DECODE_ERRORS as exc:
            return self._drop(DropReason.MALFORMED, why(exc), link, msg.event_id, "publish")
        if guard is not None:
            reason = guard(pe)
            if reason is not None:
                return self._refused(DropReason(reason), link, msg)
        elif prof.checks:
            refused = self._check(prof.scheme, msg, link, now, None)
            if refused is not None:
                return refused
        self._dedup.record(msg.event_id, now)
        return _Admitted(prof, prof.matcher, pe)

    def _route(
        self,
        msg: Publish,
        link: LinkInfo,
        adm: _Admitted,
        keys: set[Key],
        now: float,
        rewrite: bool = True,
    ) -> list[Action]:
        """The actions for an admitted publication whose matching keys are ``keys``: see the
        module docstring for why this is exactly once on a tree. ``rewrite`` False: the
        scheme's ``outgoing`` is left to the caller (``_route_run``: the scheme's
        ``outgoing_routed``, and the core takes back from ``sent`` what it suppresses), and
        a delivery's message is its sub ids, the scheme building the ``Deliver`` once."""
        out: list[Action] = []
        src = link.link_id
        delivered = 0
        if len(keys) == 1:  # the common case (fan-out one): no grouping, no sorting
            ((lk, sid),) = keys
            if self.links[lk].kind is LinkKind.CLIENT:
                if lk != src or self.echo:
                    # (rewrite False: the scheme's ``outgoing_routed`` builds the Deliver)
                    d: Any = Deliver.trusted(msg, (sid,)) if rewrite else (sid,)
                    out.append(DeliverTo(lk, d))
                    delivered = 1
            elif lk != src:
                out.append(Forward(lk, msg))
        elif keys:
            by_link: dict[str, list[str]] = {}
            for lk, sid in keys:
                sids = by_link.get(lk)
                if sids is None:
                    by_link[lk] = [sid]
                else:
                    sids.append(sid)
            links = self.links
            echo = self.echo
            client = LinkKind.CLIENT
            for lk in sorted(by_link) if len(by_link) > 1 else by_link:
                if links[lk].kind is client:
                    if lk != src or echo:
                        sids = by_link[lk]
                        if len(sids) > 1:
                            sids.sort()
                        ids = tuple(sids)
                        d = Deliver.trusted(msg, ids) if rewrite else ids
                        out.append(DeliverTo(lk, d))
                        delivered += 1
                elif lk != src:
                    out.append(Forward(lk, msg))
        parent = self.parent
        if parent is not None and parent != src:
            out.append(Forward(parent, msg))
        catch_up = self._catch_up
        if catch_up.recovering:  # a broker link is down or catching up
            catch_up.route(msg, adm.pe, src, out, now, self.links, parent)
        counters = self.counters
        counters["delivered"] += delivered
        if not rewrite or not adm.prof.rewrites:
            counters["sent"] += len(out)
            return out
        return self._outgoing(out, now, adm.prof.scheme)

    def _route_run(
        self,
        run: list[tuple[Publish, _Admitted | None, list[Action]]],
        link: LinkInfo,
        now: float,
        out: list[Action],
    ) -> None:
        """Match a run of consecutive publications (together, per matcher) and append their
        actions (or their drops) to ``out`` in arrival order."""
        groups: dict[int, tuple[Matcher, list[int], Profile]] = {}
        for i, (_, adm, _) in enumerate(run):
            if adm is not None:
                g = groups.get(id(adm.matcher))
                if g is None:
                    g = groups[id(adm.matcher)] = (adm.matcher, [], adm.prof)
                g[1].append(i)
        found: dict[int, set[Key]] = {}
        # the profiles that rewrite runs (``Profile.in_runs``), and whether another rewrites
        in_runs: dict[int, Profile] = {}
        others_rewrite = False
        for matcher, idx, prof in groups.values():
            if prof.in_runs:
                in_runs[id(prof)] = prof
            elif prof.rewrites:
                others_rewrite = True
            pes = [run[i][1].pe for i in idx]  # type: ignore[union-attr]
            batch = getattr(matcher, "match_batch", None)
            # a matcher may name its own break-even run length (psguard's TokenMatcher: 8)
            if batch is not None and len(idx) >= getattr(matcher, "batch_min", BATCH_MATCH_MIN):
                results = batch(pes)
            else:
                results = [matcher.match(pe) for pe in pes]
            found.update(zip(idx, results, strict=True))
        if not in_runs:
            for i, (msg, adm, dropped) in enumerate(run):
                out += dropped if adm is None else self._route(msg, link, adm, found[i], now)
            return
        # (a message to a peer the scheme ``passes_through`` from this link leaves as it is)
        through = {k: p.scheme.passes_through(link, now) for k, p in in_runs.items()}
        if not others_rewrite and self._passes_all(link, through.values()):
            # nothing to rewrite (§3.4 between equals, hermes): routed as plain routes
            for i, (msg, adm, dropped) in enumerate(run):
                out += dropped if adm is None else self._route(msg, link, adm, found[i], now, False)
            return
        # each run of consecutive publications of one such profile goes to its scheme's
        # ``outgoing_routed`` with the actions ``_route`` routed them to, and comes back as
        # their final actions (a message to a peer in ``through`` leaves as it is)
        contexts = _Contexts(now, self.links, self.broker_id)
        cur: Profile | None = None
        seg: list[tuple[Publish, Any, list[Action]]] = []
        for i, (msg, adm, dropped) in enumerate(run):
            if adm is not None and adm.prof.in_runs:
                if adm.prof is not cur:
                    if seg:
                        self._outgoing_routed(cur, seg, through, contexts, out)
                        seg = []
                    cur = adm.prof
                seg.append((msg, adm.pe, self._route(msg, link, adm, found[i], now, False)))
                continue
            if seg:
                self._outgoing_routed(cur, seg, through, contexts, out)
                seg = []
            out += dropped if adm is None else self._route(msg, link, adm, found[i], now)
        if seg:
            self._outgoing_routed(cur, seg, through, contexts, out)

    def _outgoing_routed(
        self,
        prof: Profile | None,
        seg: list[tuple[Publish, Any, list[Action]]],
        through: dict[int, frozenset[str]],
        contexts: Mapping[str, CheckContext],
        out: list[Action],
    ) -> None:
        """Append the final actions of ``seg`` (consecutive publications of ``prof``, with
        the actions ``_route`` counted as sent) from the scheme's ``outgoing_routed``: what
        it suppressed is taken back from ``sent``."""
        assert prof is not None
        got = prof.scheme.outgoing_routed(seg, through[id(prof)], contexts)
        suppressed = sum([len(r[2]) for r in seg]) - len(got)
        if suppressed:
            self.counters["suppressed"] += suppressed
            self.counters["sent"] -= suppressed
        out += got

    def _passes_all(self, link: LinkInfo, peer_sets: Iterable[frozenset[str]]) -> bool:
        """Whether every message a run from broker link ``link`` can send leaves as it is:
        every other link is a broker link whose peer is in each of ``peer_sets`` (what the
        run's schemes ``passes_through``), so nothing is rewritten."""
        if link.kind is LinkKind.CLIENT:
            return False
        sets = list(peer_sets)
        src = link.link_id
        for lk, info in self.links.items():
            if lk != src and (
                info.kind is LinkKind.CLIENT or not all(info.peer in s for s in sets)
            ):
                return False
        return True

    # -- subscriptions ------------------------------------------------------------------------
    def _on_subscribe(self, msg: Subscribe, link: LinkInfo, now: float) -> list[Action]:
        if link.kind is LinkKind.PARENT:
            return self._drop(
                DropReason.MALFORMED, "subscription from the parent link", link, msg.sub_id, msg.op
            )
        prof = self._profile(msg.profile)
        if prof is None:
            return self._drop(DropReason.UNKNOWN_TYPE, "unknown profile", link, msg.sub_id, msg.op)
        try:
            pf = prof.scheme.decode_filter(msg.filter)
        except DECODE_ERRORS as exc:
            return self._drop(DropReason.MALFORMED, why(exc), link, msg.sub_id, msg.op)
        key = (link.link_id, msg.sub_id)
        prior = self._subs.get(key)
        refused = self._check(prof.scheme, msg, link, now, prior.message if prior else None)
        if refused is not None:
            return refused
        out: list[Action] = []
        if prior is None or prior.message != msg:
            if prior is not None:
                out += self._remove_sub(key, {})
            out += self._insert_sub(key, msg, pf, prof)
            out += self._catch_up.renewed(link.link_id, msg.profile)  # after an outage
        return self._ack(link, msg) + self._outgoing(out, now)

    def _on_unsubscribe(self, msg: Unsubscribe, link: LinkInfo, now: float) -> list[Action]:
        if link.kind is LinkKind.PARENT:
            return self._drop(
                DropReason.MALFORMED,
                "unsubscription from the parent link",
                link,
                msg.sub_id,
                msg.op,
            )
        prof = self._profile(msg.profile)
        if prof is None:
            return self._drop(DropReason.UNKNOWN_TYPE, "unknown profile", link, msg.sub_id, msg.op)
        key = (link.link_id, msg.sub_id)
        entry = self._subs.get(key)
        if entry is None:
            self.counters["unsubscribe.unknown"] += 1
            return self._ack(link, msg)
        if entry.profile != msg.profile:
            return self._drop(
                DropReason.MALFORMED,
                "profile differs from the subscription",
                link,
                msg.sub_id,
                msg.op,
            )
        refused = self._check(prof.scheme, msg, link, now, entry.message)
        if refused is not None:
            return refused
        out = self._remove_sub(key, msg.meta)
        self._catch_up.withdrawn(link.link_id, msg.profile)  # not lapsed: no catch-up
        return self._ack(link, msg) + self._outgoing(out, now)

    def _insert_sub(self, key: Key, msg: Subscribe, pf: Any, prof: Profile) -> list[Action]:
        self._subs[key] = self._entry(key[0], msg, pf, prof)
        self._catch_up.note_subscription(key[0], msg, prof.scheme)
        prof.matcher.add(key, pf)
        self._persist("subscriptions", skey(key), {"link": key[0], "message": msg.to_wire()})
        added, removed = prof.fwd.insert(key, pf)
        return self._upward(msg.profile, added, removed, {})

    def _remove_sub(self, key: Key, meta: Mapping[str, Any]) -> list[Action]:
        entry = self._subs.pop(key)
        self._catch_up.note_removal(key[0], entry.profile)
        prof = self._profiles[entry.profile]
        prof.matcher.remove(key)
        self._unpersist("subscriptions", skey(key))
        if entry.held:  # out of the forward set already
            return []
        added, removed = prof.fwd.remove(key)
        return self._upward(entry.profile, added, removed, meta)

    def _hold(self, key: Key) -> list[Action]:
        """Keep a lapsed entry of a down or catching-up link for routing to that link only:
        out of the forward set, so the brokers above (whose copies lapse on time) get what
        it covered, a renewal of another subscriber, instead of a gap until it goes."""
        entry = self._subs[key]
        entry.held = True
        added, removed = self._profiles[entry.profile].fwd.remove(key)
        return self._upward(entry.profile, added, removed, {})

    def _entry(self, link_id: str, msg: Subscribe, pf: Any, prof: Profile) -> _Entry:
        return _Entry(msg.profile, pf, msg, self._lease(link_id, msg, prof.scheme))

    def _lease(
        self, link_id: str, msg: Subscribe | Advertise, scheme: BrokerScheme
    ) -> float | None:
        """When ``msg`` (stored from ``link_id``) lapses: the scheme's ``lease_end``, plus
        LEASE_SLACK for what another broker forwarded (it lapses it first and forwards what
        it covered, a renewal, before this copy goes: no gap in coverage); None: never."""
        try:
            expires = scheme.lease_end(msg)
        except DECODE_ERRORS:  # checked by the scheme already; a stored one is trusted
            expires = None
        info = self.links.get(link_id)
        if expires is not None and info is not None and info.kind is not LinkKind.CLIENT:
            expires += LEASE_SLACK
        if expires is not None and expires < self._next_expiry:
            self._next_expiry = expires
        return expires

    def _advert_lease(self, key: Key, msg: Advertise) -> float | None:
        prof = self._profile(msg.profile)
        return None if prof is None else self._lease(key[0], msg, prof.scheme)

    def before_commit(self) -> None:
        """The driver is about to commit the transaction of a batch: schemes with state that
        must commit with it (``before_commit``: the replay state of narada and default) write
        it now."""
        for scheme in self.schemes:
            scheme.before_commit()

    # -- advertisements -------------------------------------------------------------------------
    def _on_advertise(self, msg: Advertise, link: LinkInfo, now: float) -> list[Action]:
        prof = self._profile(msg.profile)
        if prof is None:
            return self._drop(DropReason.UNKNOWN_TYPE, "unknown profile", link, msg.adv_id, msg.op)
        try:
            prof.scheme.decode_filter(msg.filter)
        except DECODE_ERRORS as exc:
            return self._drop(DropReason.MALFORMED, why(exc), link, msg.adv_id, msg.op)
        key = (link.link_id, msg.adv_id)
        prior = self._adverts.get(key)
        refused = self._check(prof.scheme, msg, link, now, prior)
        if refused is not None:
            return refused
        out: list[Action] = []
        if prior != msg:
            expires = self._lease(key[0], msg, prof.scheme)
            to = self._broker_links(except_=link.link_id)
            out += self._adverts.put(key, msg, expires, to)
        return self._ack(link, msg) + self._outgoing(out, now)

    def _on_unadvertise(self, msg: Unadvertise, link: LinkInfo, now: float) -> list[Action]:
        prof = self._profile(msg.profile)
        if prof is None:
            return self._drop(DropReason.UNKNOWN_TYPE, "unknown profile", link, msg.adv_id, msg.op)
        key = (link.link_id, msg.adv_id)
        prior = self._adverts.get(key)
        if prior is None:
            self.counters["unadvertise.unknown"] += 1
            return self._ack(link, msg)
        if prior.profile != msg.profile:
            return self._drop(
                DropReason.MALFORMED,
                "profile differs from the advertisement",
                link,
                msg.adv_id,
                msg.op,
            )
        refused = self._check(prof.scheme, msg, link, now, prior)
        if refused is not None:
            return refused
        to = self._broker_links(except_=link.link_id)
        return self._ack(link, msg) + self._outgoing(self._adverts.remove(key, msg.meta, to), now)

    def _broker_links(self, except_: str) -> list[str]:
        """The broker links but ``except_``, sorted: where advertisements are flooded."""
        return sorted(
            lk for lk, i in self.links.items() if i.kind is not LinkKind.CLIENT and lk != except_
        )

    # -- leases ---------------------------------------------------------------------------------
    def expire(self, now: float) -> list[Action]:
        """Forget every subscription and advertisement whose lease ended before ``now``: the
        schemes whose entries rest on a permit of one key epoch (eventguard.txt §4.8, the
        default profile's permits) report its end plus their ``max_delay`` as ``lease_end``.
        A live client renews before then (the next epoch's permit, ``net.renewal``); one that
        vanished without withdrawing is forgotten here, and the
        withdrawal this broker forwards carries no proof, which the broker above accepts for
        a permit that has run out (its own ``expire`` would remove it as well). The driver
        calls this periodically; it returns at once until the earliest lease ends.

        Not while the entry's link is down or catching up (``CatchUpRouter.lapsed``): its
        renewal cannot
        get through then, so the lease is held open until the link has been back for
        ``CATCH_UP_S``, or while it is down for the scheme's ``catch_up_horizon`` past the
        lease. A soak found it: eventguard entries of a child lapsed at its parent during the
        child's outage, or at the publishers' broker while that one was down, and the events
        published meanwhile (valid, within ``max_delay``) were routed nowhere."""
        catch_up = self._catch_up
        catch_up.tick(now)
        if now <= self._next_expiry:
            return []
        due: list[Key] = []
        hold: list[Key] = []
        for k, e in self._subs.items():
            if e.expires is not None and e.expires < now:
                if catch_up.lapsed(k[0], e.profile, e.expires, now):
                    due.append(k)
                elif not e.held:
                    hold.append(k)
        # covered entries first, so an expiring cover never forwards an expiring entry it covered
        due.sort(key=lambda k: k in self._profiles[self._subs[k].profile].fwd.forwarded)
        hold.sort(key=lambda k: k in self._profiles[self._subs[k].profile].fwd.forwarded)
        out: list[Action] = []
        for key in hold:
            out += self._hold(key)
        for key in due:
            out += self._remove_sub(key, {})
        self.counters["subscribe.expired"] += len(due)
        self.counters["subscribe.held"] += len(hold)
        gone = self._adverts.lapsed(lambda lk, profile, t: catch_up.lapsed(lk, profile, t, now))
        for key in gone:  # an advertisement's permit ran out the same way (eventguard §4.8)
            out += self._adverts.remove(key, {}, self._broker_links(except_=key[0]))
        self.counters["advertise.expired"] += len(gone)
        self._next_expiry = min(
            (
                *(e.expires for e in self._subs.values() if e.expires is not None),
                *self._adverts.lease_ends(),
            ),
            default=_NEVER,
        )
        return self._outgoing(out, now)

    def _upward(
        self, profile: str, added: list[Hashable], removed: list[Hashable], meta: Mapping[str, Any]
    ) -> list[Action]:
        """Subscribe the newly forwarded keys first, then unsubscribe the others, so the
        parent never has a gap in coverage."""
        for k in added:
            self._persist("forwarded", skey(k), {"profile": profile})  # type: ignore[arg-type]
        for k in removed:
            self._unpersist("forwarded", skey(k))  # type: ignore[arg-type]
        if self.parent is None:
            return []
        out: list[Action] = [self._forward_sub(profile, k) for k in added]  # type: ignore[arg-type]
        for k in removed:
            own = self._subs.get(k)  # type: ignore[call-overload]
            # the unsubscriber's meta goes with its own entry; evicted entries carry none
            m = meta if own is None else {}
            out.append(Forward(self.parent, Unsubscribe(forward_id(self.broker_id, k), profile, m)))  # type: ignore[arg-type]
        return out

    def _forward_sub(self, profile: str, key: Key) -> Forward:
        assert self.parent is not None
        m = self._subs[key].message
        return Forward(
            self.parent, Subscribe(forward_id(self.broker_id, key), profile, m.filter, m.meta)
        )

    # -- helpers ------------------------------------------------------------------------------
    def _profile(self, name: str) -> Profile | None:
        prof = self._profiles.get(name)
        if prof is None:
            scheme = self.schemes.get(name)
            if scheme is None:
                return None
            prof = self._profiles[name] = Profile(scheme)
        return prof

    def _check(
        self, scheme: BrokerScheme, msg: Message, link: LinkInfo, now: float, prior: Any
    ) -> list[Action] | None:
        if prior is None:  # a publication's: the last one's when link and time are the same
            ctx = self._last_ctx
            if ctx.link is not link or ctx.now != now:
                ctx = self._last_ctx = CheckContext(now, link, self.broker_id)
        else:
            ctx = CheckContext(now=now, link=link, broker_id=self.broker_id, prior=prior)
        try:
            reason = scheme.broker_check(msg, ctx)
        except DropError as exc:
            reason = exc.reason
        except InvalidToken:
            reason = DropReason.FORGED
        except RevokedError:
            reason = DropReason.REVOKED
        except DECODE_ERRORS:
            reason = DropReason.MALFORMED
        if reason is None:
            return None
        return self._refused(DropReason(reason), link, msg)

    def _refused(self, reason: DropReason, link: LinkInfo, msg: Message) -> list[Action]:
        return self._drop(reason, "refused by the guard", link, msg.ref, msg.op)

    def _drop(
        self,
        reason: DropReason,
        detail: str,
        link: LinkInfo,
        ref: str | None,
        op: str | None = None,
    ) -> list[Action]:
        self.drops[reason] += 1
        detail = detail[:MAX_DETAIL_LEN]
        out: list[Action] = []
        if link.kind is LinkKind.CLIENT and reason is not DropReason.DUPLICATE:
            out.append(Reply(link.link_id, Error(ref or "-", reason, detail)))
        out.append(Drop(reason, detail, ref, link.link_id, op))
        return out

    def _ack(
        self, link: LinkInfo, msg: Subscribe | Unsubscribe | Advertise | Unadvertise
    ) -> list[Action]:
        if link.kind is not LinkKind.CLIENT:
            return []
        return [Reply(link.link_id, Ack(msg.ref, msg.op))]

    def _outgoing(
        self, actions: list[Action], now: float, scheme: BrokerScheme | None = None
    ) -> list[Action]:
        """Let each message's scheme rewrite (or suppress) it as it leaves on its link."""
        out: list[Action] = []
        for a in actions:
            if not isinstance(a, Forward | DeliverTo):
                out.append(a)
                continue
            m = a.message
            s = scheme or self.schemes.get(_profile_of(m))
            if s is None:
                out.append(a)
                continue
            ctx = CheckContext(now=now, link=self.links[a.link], broker_id=self.broker_id)
            m2 = s.outgoing(m, ctx)
            if m2 is None:
                self.counters["suppressed"] += 1
            elif m2 is m:
                out.append(a)
            else:
                out.append(type(a)(a.link, m2))
        self.counters["sent"] += len(out)
        return out

    def _persist(self, table: str, key: str, value: Mapping[str, Any]) -> None:
        if self.store is not None:
            self.store.put(table, key, value)

    def _unpersist(self, table: str, key: str) -> None:
        if self.store is not None:
            self.store.delete(table, key)

    # -- inspection and restore ---------------------------------------------------------------
    def routing_snapshot(self) -> dict[str, Any]:
        """A comparable picture of the whole routing state (tests, ``pubguard status``)."""
        return {
            "links": {k: (v.kind.value, v.peer) for k, v in sorted(self.links.items())},
            "subscriptions": {skey(k): e.message.to_wire() for k, e in sorted(self._subs.items())},
            "forwarded": {
                name: sorted(skey(k) for k in p.fwd.forwarded)  # type: ignore[arg-type]
                for name, p in sorted(self._profiles.items())
                if p.fwd.forwarded
            },
            "advertisements": self._adverts.snapshot(),
        }

    def status(self) -> dict[str, Any]:
        """Counts for ``pubguard status``: links, subscriptions, drops by reason, traffic."""
        return {
            "broker": self.broker_id,
            "parent": self.parent,
            "links": {k: v.kind.value for k, v in sorted(self.links.items())},
            "subscriptions": len(self._subs),
            "forwarded": sum(len(p.fwd.forwarded) for p in self._profiles.values()),
            "advertisements": len(self._adverts),
            "dedup_ids": len(self._dedup),
            "drops": {r.value: n for r, n in sorted(self.drops.items())},
            "counters": dict(sorted(self.counters.items())),
        }

    def subscriptions(self) -> list[tuple[str, str, Subscribe]]:
        """(link, sub_id, message) for every stored subscription."""
        return [(k[0], k[1], e.message) for k, e in self._subs.items()]

    def _restore(self, store: BrokerState) -> None:
        for link_id, v in store.items("links"):
            info = LinkInfo(link_id, LinkKind(v["kind"]), v.get("peer"))
            self.links[link_id] = info
            if info.kind is LinkKind.PARENT:
                self.parent = link_id
            if info.kind is not LinkKind.PARENT:
                self._catch_up.restored_down(link_id)  # down until the driver reconnects it
        per_profile: dict[str, list[tuple[Hashable, Any]]] = {}
        for _, v in store.items("subscriptions"):
            msg = decode_message(v["message"])
            if not isinstance(msg, Subscribe):
                raise StateError("stored subscription is not a subscribe message")
            prof = self._profile(msg.profile)
            if prof is None:
                raise StateError(f"stored subscription uses unknown profile {msg.profile!r}")
            key = (str(v["link"]), msg.sub_id)
            pf = prof.scheme.decode_filter(msg.filter)
            self._subs[key] = self._entry(key[0], msg, pf, prof)
            self._catch_up.note_subscription(key[0], msg, prof.scheme)
            prof.matcher.add(key, pf)
            per_profile.setdefault(msg.profile, []).append((key, pf))
        forwarded = {k for k, _ in store.items("forwarded")}
        for name, items in per_profile.items():
            extra = self._profiles[name].fwd.restore(
                items,
                [k for k, _ in items if skey(k) in forwarded],  # type: ignore[arg-type]
            )
            for k in extra:
                store.put("forwarded", skey(k), {"profile": name})  # type: ignore[arg-type]
        for _, v in store.items("advertisements"):
            adv = decode_message(v["message"])
            if not isinstance(adv, Advertise):
                raise StateError("stored advertisement is not an advertise message")
            key = (str(v["link"]), adv.adv_id)
            self._adverts.restore(key, adv, self._advert_lease(key, adv))


class _Contexts(dict[str, CheckContext]):
    """The check contexts of a run's outgoing links at one instant, each built when first
    asked for (``BrokerScheme.outgoing_routed``)."""

    __slots__ = ("_broker_id", "_links", "_now")

    def __init__(self, now: float, links: Mapping[str, LinkInfo], broker_id: str) -> None:
        super().__init__()
        self._now = now
        self._links = links
        self._broker_id = broker_id

    def __missing__(self, link_id: str) -> CheckContext:
        ctx = self[link_id] = CheckContext(self._now, self._links[link_id], self._broker_id)
        return ctx


def _profile_of(m: Message) -> str:
    if isinstance(m, Deliver):
        return m.event.profile
    return getattr(m, "profile", "")


def _guess_id(obj: Any) -> str | None:
    if isinstance(obj, Mapping):
        for k in ("event_id", "sub_id", "adv_id", "ref"):
            v = obj.get(k)
            if isinstance(v, str) and 0 < len(v) <= 256:
                return v
    return None
