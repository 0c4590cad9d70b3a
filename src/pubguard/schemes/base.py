"""The scheme hook interface: how a security profile plugs into clients and the broker core.

Theory of operation
-------------------
A *profile* (plain, eventguard, psguard, narada, default, ...) decides what travels on the wire
and what a broker may check and match. The broker core (``pubguard.broker.core``) knows nothing
about keys or tokens: every message names its profile in a ``profile`` field and the core looks
the profile up in a :class:`SchemeRegistry`, so one network carries several profiles at once
(ARCHITECTURE.md, "Scheme interface").

A scheme has two faces:

*Client side* (:class:`ClientScheme`), run by publishers and subscribers who hold keys:

- ``protect_filter(filter, now=, rng=) -> ProtectedFilter``: the wire form of a subscription
  (plain: the constraints; PSGuard: authorisation tokens; EventGuard: T(w) plus the MS permit).
- ``protect_advertisement(filter, ...)``: same for an advertisement.
- ``protect_event(event, now=, rng=) -> ProtectedEvent``: ``routing`` is what brokers match on
  (plain: the attribute map; PSGuard: ``<r, F_T(r)>`` tokens), ``body`` is opaque to brokers
  (plain: the payload; secure profiles: ciphertext), ``meta`` carries guard material
  (signatures, timestamps, permits, security tokens).
- ``open_event(event_id, routing, body, meta) -> Event``: decrypt / verify a delivery; raise
  :class:`~pubguard.errors.InvalidToken` when it cannot be opened.
- optional ``unsubscribe_meta(filter, now=, rng=)`` / ``unadvertise_meta(...)``: the ``meta``
  an unsubscribe / unadvertise must carry (EventGuard's UST/UAT-backed MS permits,
  eventguard.txt §4.5-4.6; Narada's security token). Declared on :class:`ClientScheme`
  with the default ``{}`` (empty meta), as are the client's other hooks (listed there).

*Broker side* (:class:`BrokerScheme`), run by routing nodes that hold no content keys:

- ``decode_filter(wire) -> PF`` and ``decode_event(routing) -> PE`` turn the opaque wire
  fields into whatever the scheme matches on; they raise
  :class:`~pubguard.errors.ValidationError` for malformed input (the core turns that into a
  ``malformed`` drop). Only the routing part of a publication is decoded; ``body`` is never
  touched by the core.
- ``broker_check(message, ctx) -> DropReason | None``: the guards (signatures, timestamps,
  authorisation, replay, revocation). ``ctx`` is a :class:`CheckContext` with the current time,
  the link the message came on and, for an unsubscribe / unadvertise, the stored message it
  cancels (EventGuard's UST / UAT permits, eventguard.txt §4.5-4.6, are checked against it).
  Returning a reason drops the message; the core never raises on a check. A scheme with no
  guards (plain) may set ``checks_messages = False`` so the core skips the call.
- ``covers(f1, f2) -> bool`` on decoded filters: must be *sound* (True only if every event
  matching f2 matches f1). A scheme that cannot tell (tokens) answers False, or True only for
  equal tokens; a missed covering costs forwarding, a wrong one loses events.
- ``new_matcher() -> Matcher``: an index over decoded filters (``add``, ``remove``, ``match``).
  PSGuard matches tokens, not plaintext, so the scheme owns the index. :class:`LinearMatcher`
  builds one from a pairwise ``broker_match(pf, pe)``. A matcher may also offer
  ``match_batch(pes) -> list[set]`` (one AES call per token over a batch's nonces for
  PSGuard); ``Broker.handle_batch`` uses it for runs of publications.
- ``outgoing(message, ctx) -> message | None``: a last per-hop transform before a message
  leaves on a link (per-hop signatures, re-encryption, suppression); ``ctx.link`` is the link
  it leaves on. A scheme whose ``outgoing`` is the identity may set the class attribute
  ``rewrites_outgoing = False`` so the core skips the call on the publication fast path.
- optional ``broker_check_run(messages, events, ctx) -> list[DropReason | None]`` with
  ``checks_in_runs = True``: the guards of a run of publications in one call (the native
  guard, ``schemes/common/native_guard.py``); ``Broker.handle_batch`` admits runs through it.
  Default: per message.
- optional ``link_guard(link, now) -> (event -> DropReason | None) | None``: with
  ``checks_in_runs``, the guard of every publication from ``link`` as a function of its
  decoded event alone (hermes: from a broker, sealed or refused), asked once per batch;
  ``Broker.handle_batch`` then admits those as plain's, without holding a run. Default: None.
- optional ``outgoing_run(items) -> list[message | None]`` with ``rewrites_in_runs = True``:
  ``outgoing`` for a run's messages in one call (hermes: one sealing or opening per
  micro-batch); a profile with both guards and rewrites joins ``handle_batch``'s runs only
  with it. Default: one ``outgoing`` per message.
- optional ``outgoing_routed(routed, through, contexts) -> list[action]`` with
  ``rewrites_in_runs``: the final actions of a run's publications, given the actions the
  core routed them to (a delivery's message: its sub ids), so a scheme builds each
  outgoing message and action once (hermes). Default: each delivery's ``Deliver`` built,
  then ``outgoing_run`` of the actions not to ``through`` peers, each rebuilt.
- optional ``passes_through(link, now) -> frozenset[peer]``: the broker peers a run's
  publications from ``link`` leave to unchanged (hermes: neighbours of equal credentials,
  decided at the credential handshake); ``outgoing_routed`` leaves them as routed. Default:
  none.
- optional ``lease_end(message) -> float | None``: when a stored subscription's (or
  advertisement's) authority runs out (a permit of one key epoch, plus ``max_delay``); the
  core forgets it then (``Broker.expire``). None (the default): it lasts until withdrawn or
  its link goes.
- optional ``filter_epoch`` / ``event_epoch`` / ``catch_up_horizon`` (catch-up routing across
  a key epoch change, ``pubguard.broker.catch_up``), ``filter_anchors`` (covering's equality
  anchors) and ``before_commit``: declared on :class:`BrokerScheme` with their defaults, which
  a broker scheme inherits by declaring it as a base class.

On the client side, a scheme whose subscriptions are bound to a key epoch offers
``epoch_end(now) -> float | None`` (when the epoch current at ``now`` ends, None if unknown)
and ``renews_ahead`` (True when ``protect_filter(f, now=<a time in the next epoch>)`` may be
called before that epoch begins, as the KDC serves the next epoch's keys shortly before it
starts); ``pubguard.net.client.client`` then subscribes again for each epoch and lets the old
subscription lapse (``leased_subscriptions``: brokers expire it; otherwise the client
withdraws it, which needs no proof).

Broker-side messages are passed duck-typed (the message classes live in ``pubguard.broker``,
a higher layer): they have ``op``, ``profile`` and ``meta``, and per op ``sub_id`` / ``adv_id``
/ ``event_id``, ``filter``, ``routing``, ``body``. Subscription ids are *hop-scoped*: a broker
renames a subscription when it forwards it upward, so a scheme must never sign ``sub_id`` or
``adv_id``; it signs the filter and its own ``meta`` fields, which the core forwards unchanged.

Wire values are the msgpack data model: None, bool, int, float, str, bytes, sequences and
string-keyed mappings (:data:`WireValue`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from random import Random
from typing import Any, Final, Protocol, TypeAlias, runtime_checkable

from pubguard.errors import DropReason, ValidationError
from pubguard.model.constraints import Op
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.wire.messages import Deliver

__all__ = [
    "LEASE_SLACK",
    "BrokerScheme",
    "CheckContext",
    "ClientScheme",
    "LinearMatcher",
    "LinkInfo",
    "LinkKind",
    "Matcher",
    "ProtectedEvent",
    "ProtectedFilter",
    "Scheme",
    "SchemeRegistry",
    "WireValue",
    "equality_anchors",
    "forwarded_grace",
    "withdrawal_meta",
]

WireValue: TypeAlias = (
    None | bool | int | float | str | bytes | tuple[Any, ...] | list[Any] | Mapping[str, Any]
)


class LinkKind(enum.StrEnum):
    """What is at the other end of a broker's link (hierarchical topology, eventguard.txt §2.1)."""

    PARENT = "parent"  # the broker one level closer to the root
    CHILD = "child"  # a broker one level further from the root
    CLIENT = "client"  # a publisher or subscriber attached to this broker


#: seconds an entry another broker forwarded outlives its lease (``lease_end``) at the broker
#: that stores it (``Broker._lease``): the sender lapses its own copy first and forwards what
#: that copy covered (a renewal) before this copy goes, so there is no gap in coverage
LEASE_SLACK: Final = 5.0


def forwarded_grace(link: LinkInfo, max_delay: float) -> float:
    """How long after its permit's end a subscription or advertisement that *another broker*
    forwards is still accepted: as long as that broker may hold it (``max_delay`` plus
    ``LEASE_SLACK``, see ``Broker._lease``). A broker forwards such a held copy when the
    entry that covered it lapses first (eventguard's ``T(w)`` survives epochs, so an old
    generation from a grandchild may cover its own renewal); refusing it would leave the
    topic unrouted until the grandchild's withdrawal arrives. It grants nothing new: the
    copy would have been held here as long had it been forwarded before. Clients get none."""
    return 0.0 if link.kind is LinkKind.CLIENT else max_delay + LEASE_SLACK


@dataclass(frozen=True, slots=True)
class LinkInfo:
    """A link as the core describes it to a scheme. ``peer`` is the authenticated identity
    (certificate subject) when the transport knows it."""

    link_id: str
    kind: LinkKind
    peer: str | None = None


@dataclass(frozen=True, slots=True)
class CheckContext:
    """Everything a broker-side guard may look at besides the message itself."""

    now: float
    link: LinkInfo
    broker_id: str
    prior: Any | None = None  # the stored Subscribe / Advertise an unsubscribe cancels


@dataclass(frozen=True, slots=True)
class ProtectedFilter:
    """Client-side output for a subscription or advertisement: the wire ``filter`` and ``meta``."""

    filter: Mapping[str, Any]
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProtectedEvent:
    """Client-side output for a publication."""

    event_id: str
    routing: Mapping[str, Any]
    body: bytes = b""
    meta: Mapping[str, Any] = field(default_factory=dict)


class Matcher(Protocol):
    """A filter index over decoded (protected) filters."""

    def add(self, key: Hashable, pf: Any) -> None: ...

    def remove(self, key: Hashable) -> None: ...

    def match(self, pe: Any) -> set[Hashable]: ...

    def __len__(self) -> int: ...


class LinearMatcher:
    """A matcher from a pairwise predicate: checks every filter (the safe default)."""

    def __init__(self, match: Callable[[Any, Any], bool]) -> None:
        self._pred = match
        self._filters: dict[Hashable, Any] = {}

    def add(self, key: Hashable, pf: Any) -> None:
        self._filters[key] = pf

    def remove(self, key: Hashable) -> None:
        self._filters.pop(key, None)

    def match(self, pe: Any) -> set[Hashable]:
        pred = self._pred
        return {k for k, f in self._filters.items() if pred(f, pe)}

    def __len__(self) -> int:
        return len(self._filters)


@runtime_checkable
class BrokerScheme(Protocol):
    """What a routing node does for one profile (see the module docstring).

    The methods without a body are required. The optional hooks below have their defaults
    here, so a broker scheme declares ``BrokerScheme`` as a base class and overrides only what
    it does; the core reads the flags once per profile, when the profile is first used
    (``pubguard.broker.profiles.Profile``)."""

    profile: str

    #: False when ``broker_check`` accepts everything: the core then skips the call and its
    #: context on the publication path. (``Any``: a scheme may set it per class, per instance
    #: or as a property derived from what it overrides.)
    checks_messages: Any = True
    #: False when ``outgoing`` is the identity: the core then skips the call.
    rewrites_outgoing: Any = True
    #: True when :meth:`broker_check_run` checks a run of publications in one call (a native
    #: guard): ``Broker.handle_batch`` then admits its runs through it. False, the default:
    #: one ``broker_check`` per publication.
    checks_in_runs: Any = False
    #: True when :meth:`outgoing_run` rewrites a run's publications in one call and what
    #: ``broker_check`` decides never depends on what ``outgoing`` did (a scheme that both
    #: guards and rewrites, hermes): ``Broker.handle_batch`` then admits, matches and routes
    #: a run of its publications and rewrites the run's messages together. False, the
    #: default: such a profile's publications take the per-message path.
    rewrites_in_runs: Any = False

    def decode_filter(self, wire: Mapping[str, Any]) -> Any: ...

    def decode_event(self, routing: Mapping[str, Any]) -> Any: ...

    def broker_check(self, message: Any, ctx: CheckContext) -> DropReason | None: ...

    def broker_check_run(
        self, messages: Sequence[Any], events: Sequence[Any], ctx: CheckContext
    ) -> list[DropReason | None]:
        """The verdicts of ``broker_check`` on a prefix of ``messages``, publications from one
        link at one time (``ctx``) whose routing parts the core decoded to ``events``
        (``decode_event``: no need to decode again), in order: the same verdicts and the same
        state as one call per message. The core checks the message after the prefix itself (``broker_check``)
        and calls again with the rest, so a scheme returns early where its fast path cannot
        decide (a frame its native guard hands back, a callback's exception it cannot map).
        The core calls it only when ``checks_in_runs``; the default: an empty prefix (one
        ``broker_check`` per publication)."""
        return []

    def link_guard(self, link: LinkInfo, now: float) -> Callable[[Any], DropReason | None] | None:
        """With ``checks_in_runs``: what ``broker_check`` decides for every publication from
        ``link`` at ``now``, as a function of its decoded event alone (the same verdicts and
        the same state; it must not raise), or None: it needs the message, or the run (the
        default). ``Broker.handle_batch`` asks once per batch and admits such publications
        one by one, as plain's, instead of holding them for ``broker_check_run``."""
        return None

    def outgoing_run(self, items: Sequence[tuple[Any, Any, CheckContext]]) -> list[Any | None]:
        """``outgoing`` of each ``(message, event, ctx)``, in order, in one call: the
        messages a run of publications (``Broker.handle_batch``, when ``rewrites_in_runs``)
        leaves with, one per link it leaves on, grouped by publication in arrival order;
        ``event`` is that publication's routing as ``decode_event`` decoded it (no need to
        decode again). The same results and the same state as one ``outgoing`` per item (the
        default), so a scheme may do the run's shared work once (hermes seals or opens a
        micro-batch in one call)."""
        return [self.outgoing(m, ctx) for m, _, ctx in items]

    def outgoing_routed(
        self,
        routed: Sequence[tuple[Any, Any, Sequence[Any]]],
        through: frozenset[str],
        contexts: Mapping[str, CheckContext],
    ) -> list[Any]:
        """The final actions of a run's publications of this profile, in arrival order
        (``Broker.handle_batch``, when ``rewrites_in_runs``): ``routed`` holds each
        publication, its event as ``decode_event`` decoded it, and the actions the core
        routed it to, each a ``(link, message)`` named pair of the broker layer (a forward
        on a broker link; a delivery on a client link, whose message is the matching sub
        ids, the scheme building the ``Deliver`` once). Each comes back as it is (a forward
        to a peer in ``through``, see :meth:`passes_through`, or a message ``outgoing``
        leaves as it is), rebuilt around the message ``outgoing`` gives
        (``tuple.__new__(type(action), (link, message))``), or is left out (suppressed).
        ``contexts[link]``: the outgoing link's check context at the run's instant. A scheme
        that rewrites whole runs overrides it to build each outgoing message, and its action,
        once (hermes). The default: each ``Deliver`` built, then :meth:`outgoing_run` of
        the actions not to ``through``."""
        acts: list[Any] = []
        at: list[int] = []
        items: list[tuple[Any, Any, CheckContext]] = []
        client = LinkKind.CLIENT
        new = tuple.__new__
        for msg, pe, routed_acts in routed:
            for a in routed_acts:
                ctx = contexts[a[0]]
                if ctx.link.kind is client:  # its message: the sub ids
                    a = new(type(a), (a[0], Deliver.trusted(msg, a[1])))
                if ctx.link.kind is client or ctx.link.peer not in through:
                    at.append(len(acts))
                    items.append((a[1], pe, ctx))
                acts.append(a)
        if not items:
            return acts
        for i, m2 in zip(at, self.outgoing_run(items), strict=True):
            a = acts[i]
            acts[i] = None if m2 is None else a if m2 is a[1] else new(type(a), (a[0], m2))
        return [a for a in acts if a is not None]

    def passes_through(self, link: LinkInfo, now: float) -> frozenset[str]:
        """The broker peers to which every publication of this profile arriving on ``link``
        leaves exactly as it came (``outgoing`` would return the message itself, whatever the
        publication: hermes §3.4 between brokers of equal credentials). ``Broker.handle_batch``
        asks once per run (when ``rewrites_in_runs``) and hands it to ``outgoing_routed``,
        which leaves those messages as routed. The default: none."""
        return frozenset()

    def covers(self, f1: Any, f2: Any) -> bool: ...

    def broker_match(self, pf: Any, pe: Any) -> bool: ...

    def new_matcher(self) -> Matcher: ...

    def outgoing(self, message: Any, ctx: CheckContext) -> Any | None: ...

    def filter_anchors(self, pf: Any) -> frozenset[tuple[str, Hashable]] | None:
        """The ``(name, value)`` pairs a decoded filter's covers must share (the broker's
        ``ForwardSet`` looks for covers only among filters with them), or None: no narrowing.
        The default: the equality constraints of a model :class:`Filter` (``a = v`` covers no
        constraint but ``a = v``: :meth:`Filter.covers`, the plain profile's covering), None
        for anything else (tokens, opaque filters). Only a scheme covering model filters more
        loosely than :meth:`Filter.covers` returns None here; it would otherwise get less
        suppression, never a wrong one (every cover is still checked with ``covers``)."""
        return equality_anchors(pf)

    def lease_end(self, message: Any) -> float | None:
        """When a stored subscription's (or advertisement's) authority runs out (a permit of
        one key epoch, plus ``max_delay``): the core forgets it then (``Broker.expire``).
        None, the default: it lasts until withdrawn or its link goes."""
        return None

    def filter_epoch(self, message: Any) -> int | None:
        """The key epoch a subscription's filter belongs to, for a profile whose routing
        changes with the epoch (psguard.txt §3.2: tokens); None, the default, for the others.
        With ``event_epoch`` it drives the core's catch-up routing (``pubguard.broker.catch_up``)."""
        return None

    def event_epoch(self, message: Any) -> int | None:
        """The key epoch a publication's routing belongs to (see ``filter_epoch``); None, the
        default: no catch-up routing for it."""
        return None

    @property
    def catch_up_horizon(self) -> float:
        """Seconds a down link is routed a new epoch's publications (its timestamp window:
        later they would arrive stale); 0.0, the default."""
        return 0.0

    def before_commit(self) -> None:
        """Write state that must commit with the driver's transaction of a batch (the replay
        state of narada and default); nothing, the default (``Broker.before_commit``)."""
        return None

    #: True when :meth:`revoke` refuses a publisher key's publications from then on (eventguard,
    #: psguard, default: the authority-signed revocation list, ``schemes.common.revocation_list``)
    revokes_publishers: bool = False

    def revoke(self, publisher_key: Any) -> None:
        """Refuse this publisher key's publications from now on; nothing, the default (plain has
        no publisher keys; narada revokes by CRL serial in its own guard)."""
        return None


def equality_anchors(f: Any) -> frozenset[tuple[str, Hashable]] | None:
    """The ``(name, value)`` pairs of a model filter's equality constraints (None for anything
    else, or an unhashable value: no narrowing); ``BrokerScheme.filter_anchors``'s default."""
    if type(f) is not Filter:
        return None
    try:
        return frozenset((c.name, c.value) for c in f.constraints if c.op is Op.EQ)
    except TypeError:
        return None


@runtime_checkable
class ClientScheme(Protocol):
    """What a publisher / subscriber does for one profile (see the module docstring).

    Besides the four required methods, a client scheme may override these hooks; a client
    scheme class declares ``ClientScheme`` as an explicit base to inherit their defaults
    (``pubguard.net.client`` calls them unconditionally, never probing for them):

    - ``unsubscribe_meta`` / ``unadvertise_meta``: the withdrawal proof (default ``{}``).
    - ``merkle_batches``: ``prepare_event`` / ``sign_prepared`` / ``protect_events`` sign
      one Merkle root per batch (psguard, default, eventguard); the defaults protect each
      event alone, and the client batches only for a scheme that says True.
    - ``key_service_due(event, now)`` / ``open_due(routing, meta, now=)``: protecting or
      opening this one asks the key service first (eventguard.txt §4.8: the first event of
      a new epoch renews a grant); ``blocks_on_io``: that key service is remote, so the
      client runs such calls (and the withdrawal proofs) in a worker thread.
    - ``permit_lapsed(meta, now=)``: a queued subscribe / advertise permit ran out, so the
      client does not resend it after an outage (a broker would count a strike).
    - ``epoch_end(now)`` / ``renews_ahead`` / ``leased_subscriptions`` /
      ``next_epoch_window``: key-epoch renewal (``pubguard.net.client.renewal``); a scheme
      with ``renews_subscriptions`` False (the default) is never renewed.
    - ``wire_id(event_id)``: the opaque id a publication carries on the wire (default: the
      application's own id).
    """

    profile: str

    #: subscriptions are bound to a key epoch and renewed once per epoch (``epoch_end``)
    renews_subscriptions: bool = False
    #: ``protect_filter(f, now=<a time in the next epoch>)`` works before that epoch begins
    renews_ahead: bool = False
    #: brokers forget an old generation when its permit runs out: nothing to withdraw
    leased_subscriptions: bool = False
    #: seconds before an epoch begins that the key service serves its keys (an ahead renewal
    #: cannot be built earlier); 0 when it serves only the current epoch
    next_epoch_window: float = 0.0
    #: prepare_event / sign_prepared / protect_events sign one Merkle root per batch
    merkle_batches: bool = False

    def protect_filter(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> ProtectedFilter: ...

    def protect_advertisement(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> ProtectedFilter: ...

    def protect_event(
        self, event: Event, *, now: float, rng: Random | None = None
    ) -> ProtectedEvent: ...

    def open_event(
        self,
        event_id: str,
        routing: Mapping[str, Any],
        body: bytes,
        meta: Mapping[str, Any],
        *,
        now: float,
    ) -> Event: ...

    def unsubscribe_meta(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> Mapping[str, Any]:
        """The proof an unsubscribe carries (none by default)."""
        return {}

    def unadvertise_meta(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> Mapping[str, Any]:
        """The proof an unadvertise carries (none by default)."""
        return {}

    def protect_events(
        self, events: list[Event], *, now: float, rng: Random | None = None
    ) -> list[ProtectedEvent]:
        """Several events protected at once (by default each alone)."""
        return [self.protect_event(e, now=now, rng=rng) for e in events]

    def prepare_event(self, event: Event, *, now: float, rng: Random | None = None) -> Any:
        """The first half of ``protect_event``: everything but the signature (by default
        nothing: ``sign_prepared`` protects the event)."""
        return event

    def sign_prepared(
        self, prepared: list[Any], *, now: float, rng: Random | None = None
    ) -> list[ProtectedEvent]:
        """The second half: sign a batch of prepared events (by default each alone)."""
        return [self.protect_event(e, now=now, rng=rng) for e in prepared]

    @property
    def blocks_on_io(self) -> bool:
        """Whether the key service calls block on the network (a remote key service): the
        client then makes them in a worker thread, not on its event loop (none, by default)."""
        return False

    @property
    def key_service(self) -> object | None:
        """The key service this client fetches keys, tokens or permits from (in process, or its
        network proxy such as ``RemoteKdc``); None, the default (plain has none)."""
        return None

    def key_service_due(self, event: Event, now: float) -> bool:
        """Whether protecting ``event`` asks the key service first (never, by default)."""
        return False

    def open_due(self, routing: Mapping[str, Any], meta: Mapping[str, Any], *, now: float) -> bool:
        """Whether opening this delivery asks the key service first (never, by default)."""
        return False

    def permit_lapsed(self, meta: Mapping[str, Any], *, now: float) -> bool:
        """Whether a subscribe / advertise ``meta``'s permit ran out (none do, by default)."""
        return False

    def epoch_end(self, now: float) -> float | None:
        """When the key epoch current at ``now`` ends; None if unknown (the default)."""
        return None

    def wire_id(self, event_id: str) -> str:
        """The id a publication of the application event ``event_id`` carries on the wire,
        the same every time (brokers detect duplicates by it). The default, the application's
        id itself (plain); the secure profiles return an opaque keyed hash and seal the
        application's id inside the body (``pubguard.schemes.common.wire_id``)."""
        return event_id


class Scheme(BrokerScheme, ClientScheme, Protocol):
    """A profile implementing both faces (the plain profile does)."""


class SchemeRegistry:
    """Profile name -> broker-side scheme. The core dispatches on each message's ``profile``."""

    def __init__(self, schemes: Iterable[BrokerScheme] = ()) -> None:
        self._schemes: dict[str, BrokerScheme] = {}
        for s in schemes:
            self.register(s)

    def register(self, scheme: BrokerScheme) -> None:
        name = scheme.profile  # required by the protocol; checked, as it keys the dispatch
        if not isinstance(name, str) or not name:
            raise ValidationError("a scheme needs a non-empty 'profile' name")
        if name in self._schemes:
            raise ValidationError(f"profile {name!r} is already registered")
        self._schemes[name] = scheme

    def get(self, profile: str) -> BrokerScheme | None:
        return self._schemes.get(profile)

    def __contains__(self, profile: object) -> bool:
        return profile in self._schemes

    def __iter__(self) -> Any:
        return iter(self._schemes.values())

    @property
    def profiles(self) -> tuple[str, ...]:
        return tuple(sorted(self._schemes))


def withdrawal_meta(
    scheme: ClientScheme, hook: str, f: Filter | None, *, now: float, rng: Random | None = None
) -> dict[str, Any]:
    """The ``meta`` for an unsubscribe (``hook="unsubscribe_meta"``) or unadvertise
    (``"unadvertise_meta"``): the scheme's hook (``{}`` by default, and without a filter)."""
    if hook == "unsubscribe_meta":
        fn = scheme.unsubscribe_meta
    elif hook == "unadvertise_meta":
        fn = scheme.unadvertise_meta
    else:
        raise ValidationError(f"unknown withdrawal hook {hook!r}")
    if f is None:
        return {}
    return dict(fn(f, now=now, rng=rng))
