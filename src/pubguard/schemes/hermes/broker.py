"""The Hermes broker scheme: brokers encrypt, filter on what they may read, and decrypt for
their clients (hermes-encrypted-access-control.txt §3-4).

Theory of operation
-------------------
Hermes turns the other profiles' trust model around (§3): *brokers* hold keys, once they have
joined a key group with a capability (:mod:`.keygroups`); *clients* hold none and talk
plaintext to their hosting broker over mutually authenticated TLS (§2.4). So:

- the **publisher hosting broker** (PHB) type-checks a client's publication (§2.1), checks the
  client's and its own ``publish`` capability (§4: both must be authorised), and seals the
  event once, before it leaves on any broker link (§3.4: "the PHB will always encrypt");
- a **broker with the key** opens what it may (the whole event, or the attributes it holds
  keys for) and filters on it (§3.1-3.2); one **without** routes by type id only, treating
  every sealed filter of the type as matching (§3.3);
- the **subscriber hosting broker** (SHB) opens an event once for all its local subscribers
  (§3) and hands each only the attributes its capability grants (§4, Fig. 1: the Congestion
  Charge Service reads only the numberplate). A client's capability is re-checked at each
  delivery, so an expired or revoked one stops delivery at once; a broker's own expiry or
  revocation takes effect at its key group's next refresh (``KeyGroupManager``).

Subscriptions (§3.3) travel plaintext from the client to its SHB, which checks both
capabilities and then seals the filter (whole, or per attribute) before forwarding it. A
broker accepts from another broker only a sealed filter whose readable parts authenticate
under the group key: an unauthorised broker can therefore not *probe* with chosen filters,
and one that only *watches* sees type ids and ciphertext, never the constraints.

Plaintext cache (§3.4, Fig. 3): brokers present their capabilities to each neighbour in a
handshake (:meth:`HermesBroker.learn_neighbour`); a broker then sends, beside the
ciphertext, the values it has opened, cut down to what the next broker may read (nothing
for an unauthorised one), and a broker that receives a cache from a neighbour uses the
entries that neighbour was authorised to read instead of decrypting them again.

Hook use (``pubguard.schemes.base``): ``decode_event`` / ``decode_filter`` parse (the core
calls them first; a sealed event's opaque part is parsed only by a broker that opens or
filters it), ``broker_check`` applies the guards with the link in hand, the matcher opens
lazily, and ``outgoing`` seals, caches, strips and decrypts per link; ``outgoing_routed``
is the run-level twin at the hosting brokers: given the actions the core routed a run to,
it returns the run's final actions (a client's micro-batch sealed into its routings with
its wire ids, or a broker's parsed and opened, in one native call, then each outgoing or
delivered publication, and its action, built once per event and grant, the run's in one
``Publish.trusted_run``), and ``passes_through`` names, per neighbour pair, the hops
between equals that need no ``outgoing`` at all (§3.4). The event the
core decoded last is remembered by identity (one entry), so ``broker_check``, the matcher
and every ``outgoing`` of one publication share one opening.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from pubguard.crypto import SecretBytes
from pubguard.errors import DropError, DropReason, InvalidToken, ValidationError
from pubguard.model.codec import constraint_from_json
from pubguard.model.filters import Filter
from pubguard.schemes.base import BrokerScheme, CheckContext, LinkInfo, LinkKind, Matcher
from pubguard.schemes.hermes.capability import (
    ALL,
    Capability,
    RevocationSet,
    VerifiedCapabilities,
    check_capability,
)
from pubguard.schemes.hermes.content import (
    Crypter,
    OpenedFilter,
    Sealed,
    TypeView,
    pack_cache,
    unpack_cache,
)
from pubguard.schemes.hermes.keygroups import BrokerKeyring, group_names
from pubguard.schemes.hermes.nonces import NonceCounter
from pubguard.schemes.hermes.secure_types import SecureEventType
from pubguard.wire.messages import Deliver, Publish

__all__ = [
    "HERMES_ATTRIBUTE",
    "HERMES_EVENT",
    "TYPE_KEY",
    "HermesBroker",
    "HermesEvent",
    "HermesMatcher",
]

#: the key naming the secure type in a client's (flat) plaintext publication and delivery
TYPE_KEY: Final = "@type"
HERMES_EVENT: Final = "hermes-event"
HERMES_ATTRIBUTE: Final = "hermes-attribute"
_MODE: Final = {HERMES_EVENT: "event", HERMES_ATTRIBUTE: "attribute"}
_log = logging.getLogger("pubguard.hermes")
#: client requests remembered as granted at one instant (a micro-batch's worth, and more)
EVENT_MEMO_MAX: Final = 1024
_NONE: Final[Mapping[str, Any]] = MappingProxyType({})
_NO_NAMES: Final[frozenset[str]] = frozenset()
#: mappings whose ``copy()`` is a plain dict (a decoded routing is a read-only view)
_COPIES: Final = (dict, MappingProxyType)
#: a neighbour's grants when it presented no capability (§3.4: it gets no cache)
_NO_GRANTS: Final[Mapping[bytes, frozenset[str]]] = MappingProxyType({})


def ms(now: float) -> int:
    """A publication timestamp in milliseconds (§3.5's 64-bit timestamp), rounded *up* so a
    key refreshed at ``now`` is in force at the timestamp (§4.2 selects keys by it)."""
    return math.ceil(now * 1000)


class HermesEvent:
    """One broker's view of a publication: its type, and the values it has (from the client,
    the plaintext cache or its own opening). Internal to the scheme.

    A sealed event is built with its four routing fields; everything else is a class-level
    default until this broker sets it, so a broker that only forwards the event (§3.3, and
    §3.4 between equals) pays for no more than the type id it routes by."""

    #: attribute name -> value, what this broker can read (a fresh dict once opened)
    plain: Mapping[str, Any] = _NONE
    sealed = True  # False: a client's plaintext publication at its PHB
    local = False  # published here: this broker is its PHB (and seals it)
    opened = False
    by_attr = False  # attribute mode (its sealed part carries attribute tuples: ``_ByAttr``)
    #: attribute names the event carries (None: unknown, or not yet read from its sealed
    #: part: ``_present``)
    present: frozenset[str] | None = None
    cache: Mapping[str, Any] = _NONE  # the incoming cache's entries the sender may read
    cache_in: frozenset[str] = _NO_NAMES  # the names the incoming cache carried
    src: str | None = None  # the sending neighbour (its TLS identity)
    parsed: Sealed | None = None  # the sealed part, parsed when first read
    app_id: str | None = None  # the application's id, once read (sealed or cached)
    wire_id: str | None = None  # the id it carries between brokers (set by its PHB)

    def __init__(
        self,
        type_id: bytes,
        view: TypeView | None,
        routing: Mapping[str, Any],
        cache_raw: bytes | None,
    ) -> None:
        self.type_id = type_id
        self.view = view
        self.routing = routing
        # the incoming cache, packed and untrusted (§3.4), until vetted (``_vet``: None)
        self.cache_raw = cache_raw


class _Local(HermesEvent):
    """A client's plaintext publication at its PHB, type-checked there (``decode_event``,
    which sets ``plain``): sealed here once, for every broker link (``sealed`` becomes True
    then)."""

    sealed = False
    local = True
    opened = True


class _ByAttr(HermesEvent):
    """An event of a ``hermes-attribute`` broker (the mode is the broker's, not per event)."""

    by_attr = True


class HermesMatcher:
    """Filters by type id; a filter matches an event of its type unless a constraint this
    broker can decide (it read both sides) fails (§3.3: what it cannot read matches)."""

    def __init__(self, scheme: HermesBroker) -> None:
        self._scheme = scheme
        self._by_type: dict[bytes, dict[Hashable, OpenedFilter]] = {}
        self._type_of: dict[Hashable, bytes] = {}

    def add(self, key: Hashable, pf: OpenedFilter) -> None:
        self.remove(key)
        self._by_type.setdefault(pf.type_id, {})[key] = pf
        self._type_of[key] = pf.type_id

    def remove(self, key: Hashable) -> None:
        t = self._type_of.pop(key, None)
        if t is not None:
            self._by_type[t].pop(key, None)

    def __len__(self) -> int:
        return len(self._type_of)

    #: ``Broker.handle_batch`` matches every run with ``match_batch`` (one opening per run)
    batch_min: Final = 1

    def match(self, pe: HermesEvent) -> set[Hashable]:
        fs = self._by_type.get(pe.type_id)
        if not fs:
            return set()
        self._scheme.open(pe)
        return {k for k, f in fs.items() if _decides_match(f, pe)}

    def match_batch(self, pes: list[HermesEvent]) -> list[set[Hashable]]:
        """``match`` of each, the events to be opened opened together (one AEAD batch)."""
        if not self._type_of:  # no filters: nothing to open or match
            return [set() for _ in pes]
        by_type = self._by_type
        self._scheme.open_run([pe for pe in pes if by_type.get(pe.type_id)])
        out: list[set[Hashable]] = []
        for pe in pes:  # ``match`` of each, all of them opened above
            fs = by_type.get(pe.type_id)
            if not fs:
                out.append(set())
            elif len(fs) == 1:  # one filter of the type (a subscriber's hosting broker)
                ((k, f),) = fs.items()
                out.append({k} if f.readable is None or _decides_match(f, pe) else set())
            else:
                out.append({k for k, f in fs.items() if _decides_match(f, pe)})
        return out


def _publish(event_id: str, profile: str, routing: Mapping[str, Any], body: bytes) -> Publish:
    """A rewritten publication, built once from the routing this broker made
    (``Publish.trusted``: no decoding of a wire dict again); a routing outside the common
    shape (a value an authorised PHB sealed that is no wire scalar) takes the constructor,
    which validates it and words the error."""
    try:
        return Publish.trusted(event_id, profile, routing, body)  # type: ignore[arg-type]
    except ValidationError:
        return Publish(event_id, profile, routing, body, {})


def _parsed(pe: HermesEvent) -> Sealed | None:
    """The event's sealed part, parsed once (None: malformed, or not sealed elsewhere). Only
    a broker that opens or filters an event reads it; one that forwards never does."""
    p = pe.parsed
    if p is None and pe.sealed and not pe.local:
        try:
            p = pe.parsed = Sealed.parse(pe.routing["s"])
        except ValidationError:
            _log.info("malformed sealed event from %s: nothing of it is read", pe.src)
    return p


def _present(pe: HermesEvent) -> frozenset[str] | None:
    """The attribute names a sealed event carries, read from its tuples once (attribute
    mode; None in event mode, for a type this broker does not know, or if malformed)."""
    if pe.present is None and pe.by_attr and pe.view is not None:
        p = _parsed(pe)
        if p is not None:
            try:
                pairs = p.pairs()
            except ValidationError:
                return None
            names = pe.view.names
            pe.present = frozenset(names[a] for a, _ in pairs if a in names)
    return pe.present


def _decides_match(f: OpenedFilter, pe: HermesEvent) -> bool:
    if f.readable is None:
        return True
    plain = pe.plain
    for c in f.readable.constraints:
        if c.name in plain:
            if not c.matches(plain):
                return False
        elif (present := _present(pe)) is not None and c.name not in present:
            if not c.matches(plain):  # the event lacks the attribute: decided
                return False
        elif not pe.sealed:
            if not c.matches(plain):
                return False
        # else: sealed and unreadable here -> cannot decide -> matches (§3.3)
    return True


def _client_filter(view: TypeView, wire: Mapping[str, Any]) -> OpenedFilter:
    cs = wire.get("constraints")
    if not isinstance(cs, list | tuple) or not cs:
        raise ValidationError("hermes filter needs a non-empty 'constraints' list")
    f = Filter(tuple(constraint_from_json(list(c)) for c in cs))
    for c in f.constraints:
        view.stype.etype.attribute(c.name)
    return OpenedFilter(view.type_id, f, 0)


@dataclasses.dataclass(frozen=True, slots=True)
class _Forged:
    """A sealed filter whose readable part failed to authenticate (refused in the guard)."""

    type_id: bytes
    readable: None = None
    sealed_parts: int = 0


class HermesBroker(BrokerScheme):
    """One broker's Hermes profile (``hermes-event`` or ``hermes-attribute``)."""

    checks_messages = True
    rewrites_outgoing = True
    # a run's guards, then its rewrites (one sealing or opening per micro-batch): the guard
    # reads capabilities, revocations and key-group membership, none of which outgoing changes
    checks_in_runs = True
    rewrites_in_runs = True

    def __init__(
        self,
        profile: str,
        broker_id: str,
        *,
        types: Iterable[SecureEventType] = (),
        capabilities: Iterable[Capability] = (),
        keyring: BrokerKeyring | None = None,
        counter: NonceCounter | None = None,
        revoked: RevocationSet | None = None,
        wire_id_key: bytes | SecretBytes | None = None,
    ) -> None:
        """``wire_id_key``: this broker's secret for the wire ids of the events it
        publishes (``Crypter.wire_id``); None: a fresh one, held in memory."""
        if profile not in _MODE:
            raise ValidationError(f"hermes profile must be one of {sorted(_MODE)}")
        self.profile = profile
        self.mode = _MODE[profile]
        self.broker_id = broker_id
        self.revoked = revoked if revoked is not None else RevocationSet()
        self.keyring = keyring if keyring is not None else BrokerKeyring(broker_id)
        self.crypter = Crypter(
            broker_id,
            self.mode,
            self.keyring,
            counter or NonceCounter(broker_id),
            wire_id_key,
        )
        self._views: dict[bytes, TypeView] = {}
        # neighbour -> (until, the neighbours its publications pass on to unchanged)
        self._through: dict[str, tuple[float, frozenset[str]]] = {}
        self._by_name: dict[str, TypeView] = {}
        for t in types:
            self.add_type(t)
        self._caps: dict[tuple[bytes, str], Capability] = {}
        for c in capabilities:
            self._caps[(c.type_id, c.action)] = c
        self._neighbours: dict[str, dict[bytes, frozenset[str]]] = {}
        self._own: dict[bytes, tuple[float, frozenset[str]]] = {}
        # the client requests granted at one instant (``_check_client``; revocations only add)
        self._granted: tuple[float, set[tuple[Any, ...]]] = (math.nan, set())
        self._clients: dict[tuple[str, bytes], Capability] = {}
        self._verified = VerifiedCapabilities()
        self._last: tuple[Any, Any] = (None, None)  # (filter wire, decoded)
        # the routing decoded last (by identity) and its decoding (``decode_event``)
        self._last_event: tuple[Any, HermesEvent | None] = (None, None)
        # neighbour -> its publications' guard (``link_guard``: a function of the peer only)
        self._link_guards: dict[str | None, Callable[[HermesEvent], DropReason | None]] = {}
        self._event = _ByAttr if self.mode == "attribute" else HermesEvent
        self._sealed_filters: dict[tuple[bytes, Filter, int], Mapping[str, Any]] = {}

    def __repr__(self) -> str:
        return f"HermesBroker({self.profile!r}, {self.broker_id!r})"

    # -- configuration ------------------------------------------------------------------------
    def add_type(self, stype: SecureEventType) -> None:
        """Learn a type definition (verified: signed by its owner, §2.2)."""
        stype.verify()
        v = TypeView.of(stype)
        self._views[v.type_id] = v
        self._through.clear()
        self._by_name[stype.name] = v

    def view(self, type_id: bytes) -> TypeView | None:
        return self._views.get(type_id)

    def add_capability(self, cap: Capability) -> None:
        self._caps[(cap.type_id, cap.action)] = cap
        self._own.pop(cap.type_id, None)  # what its neighbours may now be told it reads
        self._through.clear()

    def credentials(self) -> list[Capability]:
        """What this broker presents to its neighbours in the handshake (§3.4)."""
        return list(self._caps.values())

    def learn_neighbour(self, peer: str, caps: Iterable[Capability], *, now: float) -> int:
        """The credential handshake of §3.4: a neighbour (``peer``: its TLS identity)
        presents its capabilities; the valid ones for types this broker knows are kept
        (attributes it may read, per type). Returns how many were accepted."""
        grants: dict[bytes, set[str]] = {}
        for c in caps:
            v = self._views.get(c.type_id)
            if v is None:
                continue
            try:
                check_capability(
                    c,
                    v.stype.owner_key,
                    holder=peer,
                    type_id=c.type_id,
                    action=None,
                    now=now,
                    revoked=self.revoked,
                )
            except DropError as exc:
                _log.info("neighbour %s: capability refused (%s)", peer, exc.reason.value)
                continue
            grants.setdefault(c.type_id, set()).update(
                v.ids if ALL in c.attributes else c.granted(v.ids)
            )
        self._neighbours[peer] = {t: frozenset(a) for t, a in grants.items()}
        self._through.clear()  # the pairs' pass-through is decided again (``passes_through``)
        return sum(len(a) > 0 for a in grants.values())

    def _own_grants(self, type_id: bytes, now: float) -> frozenset[str]:
        """The attributes this broker's own valid capabilities grant (what its neighbours
        learn in the handshake), memoised until the first of them expires."""
        hit = self._own.get(type_id)
        if hit is not None and hit[0] > now:
            return hit[1]
        v = self._views.get(type_id)
        caps = [
            c
            for (t, _), c in self._caps.items()
            if t == type_id and c.valid_at(now) and c.serial not in self.revoked
        ]
        if v is None or not caps:
            return frozenset()
        names: set[str] = set()
        for c in caps:
            names.update(v.ids if ALL in c.attributes else c.granted(v.ids))
        until = min(c.not_after for c in caps)
        # a revocation between two publications is seen at the next re-check (one second)
        self._own[type_id] = (min(until, now + 1.0), frozenset(names))
        return frozenset(names)

    def neighbour_grants(self, peer: str | None, type_id: bytes) -> frozenset[str]:
        if peer is None:
            return frozenset()
        return self._neighbours.get(peer, {}).get(type_id, frozenset())

    # -- decoding -------------------------------------------------------------------------
    def decode_event(self, routing: Mapping[str, Any]) -> HermesEvent:
        """The event of ``routing``; the last one decoded is remembered by identity, so the
        guard, the matcher and every ``outgoing`` of one publication (``Broker.handle``)
        share one decoding and one opening (a run's are handed over by the core)."""
        last = self._last_event
        if last[0] is routing:
            return last[1]  # type: ignore[return-value]
        if type(routing) is not MappingProxyType and not isinstance(routing, Mapping):
            raise ValidationError("hermes routing must be a mapping")
        if TYPE_KEY in routing:  # a client's plaintext publication (to its PHB only)
            view = self._by_name.get(routing[TYPE_KEY])
            if view is None:
                raise ValidationError("unknown event type")
            # a frozen routing's own copy (``dict()`` of a read-only view is ~7x slower)
            attrs: dict[str, Any] = (
                routing.copy()  # type: ignore[attr-defined]
                if type(routing) in _COPIES
                else dict(routing)
            )
            del attrs[TYPE_KEY]
            view.type_check(attrs)  # §2.1: type-checked at the PHB
            pe: HermesEvent = _Local(view.type_id, view, routing, None)
            pe.plain = attrs
        else:  # sealed: the type id routes it, the sealed part is read only to open or filter
            tid = routing["t"]
            if type(tid) is not bytes or len(tid) != 32:
                raise ValidationError("hermes type id must be 32 bytes")
            if type(routing["s"]) is not bytes:
                raise ValidationError("hermes sealed part must be bytes")
            raw = routing.get("k")
            if raw is not None and type(raw) is not bytes:
                raise ValidationError("hermes cache must be bytes")
            pe = self._event(tid, self._views.get(tid), routing, raw)
        self._last_event = (routing, pe)  # (the routing kept: its id stays unique)
        return pe

    def _vet(self, pe: HermesEvent) -> None:
        """Unpack the incoming plaintext cache and keep only the entries its sender was
        authorised to read (§3.4); in event mode all of them or none. A malformed cache is
        ignored (the broker decrypts instead)."""
        raw = pe.cache_raw
        if raw is None:
            return
        pe.cache_raw = None
        if pe.view is None:
            return
        try:
            cache, app_id = unpack_cache(raw, pe.view)
        except ValidationError:
            _log.info("neighbour %s: malformed plaintext cache ignored", pe.src)
            return
        pe.cache_in = frozenset(cache)
        ok = self.neighbour_grants(pe.src, pe.type_id)
        cache = {k: v for k, v in cache.items() if k in ok}
        if self.mode == "event" and set(cache) != set(pe.view.ids):
            cache = {}
        pe.cache = cache
        if cache and app_id is not None:
            pe.app_id = app_id

    def open(self, pe: HermesEvent) -> None:
        """Fill ``pe.plain`` with what this broker can read (vetted cache first, §3.4)."""
        if not pe.opened:
            self.open_run((pe,))

    def open_run(self, pes: Iterable[HermesEvent]) -> None:
        """``open`` of each, the AEAD calls of all of them in one batch
        (``Crypter.open_events``): the same values as one ``open`` each."""
        todo: list[HermesEvent] = []
        jobs: list[Any] = []
        # attribute mode, no cache: header, plan and tuples in one call (``open_sealed_run``)
        whole: list[HermesEvent] = []
        blobs: list[tuple[TypeView, bytes]] = []
        event_mode = self.mode == "event"
        for pe in pes:
            if pe.opened:
                continue
            pe.opened = True
            if pe.cache_raw is not None:
                self._vet(pe)
            cache = pe.cache
            view = pe.view
            if view is None:
                pe.plain = dict(cache) if cache else {}
                continue
            if not cache:
                if pe.parsed is None and not event_mode and pe.sealed and not pe.local:
                    whole.append(pe)  # its ``plain`` comes from the opening below
                    blobs.append((view, pe.routing["s"]))
                    continue
                pe.plain = {}
                skip = _NO_NAMES
            else:
                pe.plain = dict(cache)
                if event_mode:
                    continue
                skip = frozenset(cache)
            sealed = _parsed(pe)
            if sealed is None:
                continue
            todo.append(pe)
            jobs.append((view, sealed, skip))
        if whole:
            for pe, got in zip(whole, self.crypter.open_sealed_run(blobs), strict=True):
                if got is None:
                    pe.plain = {}
                    _parsed(pe)  # a malformed header: logged, nothing of it is read
                    continue
                # no cache (so no application id from one): both from the opening
                pe.plain, pe.app_id = got
        if not jobs:
            return
        for pe, (values, app_id) in zip(todo, self.crypter.open_events(jobs), strict=True):
            pe.plain = {**pe.plain, **values} if pe.plain else values
            if pe.app_id is None:
                pe.app_id = app_id

    def decode_filter(self, wire: Mapping[str, Any]) -> Any:
        last_w, last_f = self._last
        if last_w is wire:
            return last_f
        if not isinstance(wire, Mapping):
            raise ValidationError("hermes filter must be a mapping")
        if "type" in wire:
            view = self._by_name.get(wire["type"])
            if view is None:
                raise ValidationError("unknown event type")
            pf: Any = (
                OpenedFilter(view.type_id, None, 0)
                if wire.get("advert")
                else _client_filter(view, wire)
            )
        else:
            tid = wire["t"]
            if type(tid) is not bytes or len(tid) != 32:
                raise ValidationError("hermes type id must be 32 bytes")
            if "n" not in wire:  # a sealed advertisement: the type id alone
                pf = OpenedFilter(tid, None, 0)
            else:
                try:
                    pf = self.crypter.open_filter(self._views.get(tid), wire)
                except InvalidToken:
                    pf = _Forged(tid)
        self._last = (wire, pf)
        return pf

    # -- guards ---------------------------------------------------------------------------
    def broker_check(self, message: Any, ctx: CheckContext) -> DropReason | None:
        op = message.op
        from_client = ctx.link.kind is LinkKind.CLIENT
        if op == "publish":
            pe = self.decode_event(message.routing)
            if from_client:
                if message.body or pe.sealed:  # clients hold no keys: plaintext attributes only
                    return DropReason.MALFORMED  # (and no payload, which would cross in clear)
                return self._check_client(pe.view, "publish", message.meta, pe.plain, ctx)
            if not pe.sealed:
                return DropReason.UNAUTHORISED  # plaintext from a broker: never accepted
            pe.src = ctx.link.peer  # its cache is vetted against this sender when used (§3.4)
            return None
        if op in ("subscribe", "advertise"):
            pf = self.decode_filter(message.filter)
            if isinstance(pf, _Forged):
                return DropReason.FORGED
            if from_client:
                view = self._views.get(pf.type_id)
                action = "subscribe" if op == "subscribe" else "publish"
                names = pf.readable.attribute_names if pf.readable is not None else ()
                reason = self._check_client(view, action, message.meta, names, ctx)
                if reason is None and op == "subscribe":
                    cap = Capability.from_bytes(message.meta["cap"])
                    self._clients[(ctx.link.link_id, pf.type_id)] = cap
                return reason
            if "type" in message.filter:
                return DropReason.UNAUTHORISED  # §3.3 probe: a broker's filter must be sealed
            return None
        return None

    def broker_check_run(
        self, messages: Sequence[Any], events: Sequence[Any], ctx: CheckContext
    ) -> list[DropReason | None]:
        """``broker_check`` of a run of publications from one link (``events``: their
        decoded routing), in one call; it stops before a message whose check raises (the
        core then checks that one itself and maps the exception)."""
        out: list[DropReason | None] = []
        if ctx.link.kind is not LinkKind.CLIENT:
            peer = ctx.link.peer
            for pe in events:  # its cache is vetted against this sender when used (§3.4)
                pe.src = peer
            # plaintext from a broker: never
            return [None if pe.sealed else DropReason.UNAUTHORISED for pe in events]
        check = self._check_client
        # the requests granted in this call: one link, one instant, the same revocations, so
        # the same capability for the same type and attribute names gets the same answer
        granted: set[tuple[bytes, bytes, tuple[str, ...]]] = set()
        # the last request granted: a client's run repeats one capability object (its meta
        # is one dict) for one type and the same attribute names, so identity decides first
        last: tuple[Any, Any, Any] = (None, None, None)
        for m, pe in zip(messages, events, strict=False):
            if m.body or pe.sealed:
                out.append(DropReason.MALFORMED)
                continue
            meta = m.meta
            blob = meta.get("cap")
            names = pe.plain.keys()
            if blob is last[0] and pe.type_id is last[1] and names == last[2]:
                out.append(None)  # the same request as the last one granted
                continue
            key = (blob, pe.type_id, tuple(names)) if type(blob) is bytes else None
            if key is not None and key in granted:
                out.append(None)
                continue
            try:
                verdict = check(pe.view, "publish", meta, pe.plain, ctx)
            except Exception:  # noqa: BLE001 - the core's own check maps it
                break
            if verdict is None and key is not None:
                granted.add(key)  # type: ignore[arg-type]
                last = (blob, pe.type_id, names)
            out.append(verdict)
        return out

    def link_guard(
        self, link: LinkInfo, now: float
    ) -> Callable[[HermesEvent], DropReason | None] | None:
        """``broker_check`` of the publications from a broker link, decided per link: a
        sealed event passes (its sender noted, so its cache is vetted against that sender's
        grants when used, §3.4), plaintext from a broker is refused (§3.3: brokers route
        ciphertext). The core then admits a run from a neighbour as it admits plain's, with
        no held run (``Broker.handle_batch``). From a client the capabilities are checked
        per message (None)."""
        if link.kind is LinkKind.CLIENT:
            return None
        guard = self._link_guards.get(link.peer)
        if guard is None:
            peer = link.peer

            def guard(pe: HermesEvent) -> DropReason | None:
                if not pe.sealed:
                    return DropReason.UNAUTHORISED  # plaintext from a broker: never
                pe.src = peer
                return None

            self._link_guards[peer] = guard
        return guard

    def _check_client(
        self,
        view: TypeView | None,
        action: str,
        meta: Mapping[str, Any],
        names: Iterable[str],
        ctx: CheckContext,
    ) -> DropReason | None:
        """§4: both the client and its hosting broker must hold a capability for the action,
        covering every attribute involved; this broker must also hold the keys."""
        if view is None:
            return DropReason.UNKNOWN_TYPE
        who = ctx.link.peer
        names = tuple(names)
        blob = meta.get("cap")
        memo = (blob, who, action, names, view.type_id, len(self.revoked))
        if type(blob) is bytes and self._granted[0] == ctx.now and memo in self._granted[1]:
            return None  # the same request at the same instant (a micro-batch): granted
        try:
            cap = self._verified.get(meta["cap"], view.stype.owner_key)
            check_capability(
                cap,
                view.stype.owner_key,
                holder=who,
                type_id=view.type_id,
                action=action,
                now=ctx.now,
                revoked=self.revoked,
                signature_checked=True,
            )
        except DropError as exc:
            _log.info("client %s: %s refused (%s)", who, action, exc)
            return exc.reason
        except (KeyError, TypeError, ValidationError):
            _log.info("client %s: %s without a capability", who, action)
            return DropReason.UNAUTHORISED
        own = self._caps.get((view.type_id, action))
        if own is None or not own.valid_at(ctx.now) or own.serial in self.revoked:
            _log.info("client %s: %s refused: this broker holds no valid capability", who, action)
            return DropReason.UNAUTHORISED
        if not all(cap.grants(n) and own.grants(n) for n in names):
            _log.info("client %s: %s refused: attributes beyond the capabilities", who, action)
            return DropReason.UNAUTHORISED
        ts = ms(ctx.now)
        if self.mode == "event":
            needed = [view.type_group]
        else:
            needed = [view.ids[n].hex() for n in names]
        if not all(self.crypter.can_read(g, ts) for g in needed):
            _log.info("client %s: %s refused: this broker is not in the key group", who, action)
            return DropReason.UNAUTHORISED
        if self._granted[0] != ctx.now:
            self._granted = (ctx.now, set())
        if type(blob) is bytes and len(self._granted[1]) < EVENT_MEMO_MAX:
            self._granted[1].add(memo)
        return None

    # -- matching and covering ------------------------------------------------------------
    def new_matcher(self) -> Matcher:
        return HermesMatcher(self)

    def broker_match(self, pf: Any, pe: Any) -> bool:
        if pf.type_id != pe.type_id:
            return False
        self.open(pe)
        return _decides_match(pf, pe)

    def covers(self, f1: Any, f2: Any) -> bool:
        """Sound only: both read in full here and ``f1`` covers ``f2`` as a model filter."""
        if f1.type_id != f2.type_id or f1.sealed_parts or f2.sealed_parts:
            return False
        if f1.readable is None or f2.readable is None:
            return f1.readable is None and f2.readable is None and f1 == f2
        return bool(f1.readable.covers(f2.readable))

    def filter_anchors(self, pf: Any) -> None:
        return None

    # -- per-link transforms --------------------------------------------------------------
    def outgoing(self, message: Any, ctx: CheckContext) -> Any | None:
        return self._outgoing(message, None, ctx)

    def outgoing_routed(
        self,
        routed: Sequence[tuple[Any, HermesEvent, Sequence[Any]]],
        through: frozenset[str],
        contexts: Mapping[str, CheckContext],
    ) -> list[Any]:
        """The final actions of a run's publications (``Broker.handle_batch``), each outgoing
        message and its action built once, run-level at the hosting brokers: the PHB seals
        every event that leaves on a broker link, in arrival order (each takes the nonces it
        takes alone) and with its wire id, in one call (``_seal_run``), and the SHB opens every
        event it delivers in one (``open_run``); then, in one pass, each event's publication
        is built once per cache it carries (§3.4: cut per neighbour's grants) and each
        delivered publication once per grant (§4: a client's capability, re-checked here),
        the run's publications without a cache in one ``Publish.trusted_run``. The rest (a
        forwarded event's cache cut per neighbour, filters) goes message by message, as
        ``outgoing`` does. The same messages and state as one ``outgoing`` per action."""
        client = LinkKind.CLIENT
        seal: dict[int, tuple[HermesEvent, float, str]] = {}
        opening: list[HermesEvent] = []
        for m, pe, acts in routed:
            if pe.local:
                if not pe.sealed and id(pe) not in seal:
                    for a in acts:
                        c = contexts[a[0]]
                        if c.link.kind is not client:
                            seal[id(pe)] = (pe, c.now, m.event_id)
                            break
            elif not pe.opened:
                for a in acts:
                    if contexts[a[0]].link.kind is client:
                        opening.append(pe)
                        break
        if seal:
            self._seal_run(list(seal.values()))
        if opening:
            self.open_run(opening)
        out: list[Any] = []
        rows: list[tuple[str, dict[str, Any], bytes]] = []
        fwd: list[tuple[int, int, Any]] = []  # (position in ``out``, row, routed action)
        dlv: list[tuple[int, int, Any]] = []  # the same, for deliveries
        new = tuple.__new__
        profile = self.profile
        neighbours = self._neighbours
        tables: dict[str | None, Mapping[bytes, frozenset[str]]] = {}  # per neighbour
        bare: dict[int, int] = {}  # per event: the row of its publication without a cache
        caches: dict[tuple[int, frozenset[str]], Publish] = {}  # per event and grants
        grants: dict[tuple[str, bytes], tuple[str, ...] | None] = {}  # per client and type
        equals: dict[tuple[str | None, str | None, bytes], bool] = {}
        # the link of the previous action, its context and kind (a run mostly takes one)
        at: str | None = None
        ctx: Any = None
        link: Any = None
        to_client = False
        # the last grant asked for (link, type id): a run's deliveries mostly go to one client
        g_link: Any = None
        g_tid: Any = None
        g: tuple[str, ...] | None = None
        # the last delivered (event, grant) and its row: an event's deliveries are consecutive
        s_pe: Any = None
        s_g: Any = None
        k = -1
        for pub, pe, acts in routed:
            for a in acts:
                lk, msg = a
                if lk is not at:
                    at = lk
                    ctx = contexts[lk]
                    link = ctx.link
                    to_client = link.kind is client
                m2: Any
                if to_client:  # ``msg``: the matching sub ids (built into a Deliver here)
                    if pub.profile != profile:
                        msg = Deliver.trusted(pub, msg)
                        a = new(type(a), (lk, msg))
                        m2 = self._outgoing(msg, pe, ctx)  # the per-message path
                    else:
                        view = pe.view
                        if view is None:
                            continue
                        tid = pe.type_id
                        if link is not g_link or tid is not g_tid:
                            g_link, g_tid = link, tid
                            g = grants.get((lk, tid), False)  # type: ignore[arg-type]
                            if g is False:
                                g = grants[(lk, tid)] = self._delivery_grant(lk, tid, ctx.now)
                        if not g:
                            continue  # §4: no valid capability, or none of its hosting broker
                        if pe is not s_pe or g is not s_g:  # ``_delivered_row``
                            s_pe, s_g = pe, g
                            plain = pe.plain
                            if ALL not in g:  # §4: the attributes the grant covers
                                plain = {n: v for n, v in plain.items() if n in g}
                            if plain:
                                k = len(rows)
                                routing = {TYPE_KEY: view.name, **plain}
                                rows.append((pe.app_id or pub.event_id, routing, pub.body))
                            else:
                                k = -1  # nothing the grant covers was read here
                        if k >= 0:
                            dlv.append((len(out), k, a))
                            out.append(None)
                        continue
                elif through and link.peer in through:
                    out.append(a)  # §3.4 between equals: as it came
                    continue
                elif type(msg) is not Publish:
                    m2 = self._outgoing(msg, pe, ctx)
                elif pe.local:
                    wid = pe.wire_id
                    if wid is None or not pe.sealed or msg.profile != profile:
                        m2 = self._outgoing(msg, pe, ctx)  # not sealed: fails as alone
                    else:
                        peer = link.peer
                        table = tables.get(peer)
                        if table is None:
                            got = neighbours.get(peer) if peer is not None else None
                            table = tables[peer] = _NO_GRANTS if got is None else got
                        cut = table.get(pe.type_id)
                        if not cut:  # sealed here: ``{"t", "s"}``, no cache
                            r = bare.get(id(pe), -1)
                            if r < 0:
                                r = bare[id(pe)] = len(rows)
                                rows.append((wid, pe.routing, msg.body))  # type: ignore[arg-type]
                            fwd.append((len(out), r, a))
                            out.append(None)
                            continue
                        m2 = caches.get((id(pe), cut))
                        if m2 is None:
                            m2 = caches[(id(pe), cut)] = self._with_cache(msg, pe, wid, cut)
                else:
                    key = (pe.src, link.peer, pe.type_id)
                    eq = equals.get(key)
                    if eq is None:
                        eq = equals[key] = self._between_equals(key[0], key[1], key[2], ctx.now)
                    # §3.4: between equals it passes on as it came, decided once per run
                    m2 = msg if eq else self._outgoing(msg, pe, ctx)
                if m2 is msg:
                    out.append(a)
                elif m2 is not None:
                    out.append(new(type(a), (lk, m2)))
        if not rows:
            return out
        pubs = Publish.trusted_run(profile, rows)
        for r, p in enumerate(pubs):
            if p is None:  # outside the common shape: the constructor decides
                pubs[r] = Publish(rows[r][0], profile, rows[r][1], rows[r][2], {})
        for i, r, a in fwd:
            out[i] = new(type(a), (a[0], pubs[r]))
        if dlv:
            pairs = [(pubs[r], a[1]) for _, r, a in dlv]
            ds = Deliver.trusted_run(pairs)  # type: ignore[arg-type]
            for (i, _, a), d in zip(dlv, ds, strict=True):
                out[i] = new(type(a), (a[0], d))
        return out

    def _with_cache(
        self, msg: Publish, pe: HermesEvent, wire_id: str, grants: frozenset[str]
    ) -> Publish:
        """The PHB's sealed event with the plaintext cache a neighbour granted ``grants`` may
        read (§3.4; in event mode all of the event or nothing)."""
        view = pe.view
        assert view is not None
        routing = pe.routing
        cache = {k: v for k, v in pe.plain.items() if k in grants}
        if self.mode == "event" and set(cache) != set(view.ids):
            cache = {}
        if cache:
            routing = {**routing, "k": pack_cache(cache, view, pe.app_id)}
        return _publish(wire_id, self.profile, routing, msg.body)

    def _between_equals(
        self, src: str | None, peer: str | None, type_id: bytes, now: float
    ) -> bool:
        """Whether a sealed event from neighbour ``src`` passes on to ``peer`` as it came,
        ciphertext and cache untouched (§3.4, Fig. 3): the two were granted the same
        attributes, and this broker no more (the next broker vets the cache against this
        broker's grants, which cover no more than the sender's: ``_own_grants``)."""
        grants = self.neighbour_grants(peer, type_id)
        if not grants or grants != self.neighbour_grants(src, type_id):
            return False
        return self._own_grants(type_id, now) <= grants

    def passes_through(self, link: LinkInfo, now: float) -> frozenset[str]:
        """The neighbours a publication from ``link`` passes on to as it came, whatever its
        type (§3.4, Fig. 3: ``_between_equals`` for every type this broker knows; an event
        of a type it does not know leaves unchanged anyway): decided per neighbour pair from
        the credential handshake, kept until this broker's own grants may change (at most a
        second, ``_own_grants``) or a neighbour or capability is learnt, so ``handle_batch``
        hands a run none of these messages (no per-message hook)."""
        src = link.peer
        if link.kind is LinkKind.CLIENT or src is None or src not in self._neighbours:
            return frozenset()
        hit = self._through.get(src)
        if hit is not None and hit[0] > now:
            return hit[1]
        peers = frozenset(
            p
            for p in self._neighbours
            if p != src and all(self._between_equals(src, p, t, now) for t in self._views)
        )
        until = min((self._own[t][0] for t in self._views if t in self._own), default=now + 1.0)
        self._through[src] = (until, peers)
        return peers

    def _outgoing(self, message: Any, pe: HermesEvent | None, ctx: CheckContext) -> Any | None:
        op = message.op
        to_client = ctx.link.kind is LinkKind.CLIENT
        if op == "deliver":
            return self._deliver(message, ctx, pe) if to_client else message
        if to_client:
            return message
        if op == "publish":
            return self._to_broker(message, ctx, pe)
        if op in ("subscribe", "advertise") and "type" in message.filter:
            return self._seal_filter(message, ctx)
        if message.meta:  # never show a client's capability to other brokers
            return dataclasses.replace(message, meta={})
        return message

    def _seal_run(self, jobs: list[tuple[HermesEvent, float, str]]) -> None:
        """``_sealed_routing``'s sealing of each ``(event, now, application id)``, in order,
        with its wire id, in one call: a client's micro-batch (one type, one instant) into
        its routings in one native call (``Crypter.seal_publish_run``, attribute mode),
        else ``Crypter.seal_publications``, where one it cannot seal stays as it was (its
        ``outgoing`` then fails as it fails alone). Either way each event takes the counter
        values it takes alone, in arrival order."""
        view, now = jobs[0][0].view, jobs[0][1]
        same: list[tuple[Mapping[str, Any], str]] | None = []
        for pe, t, eid in jobs:  # one type at one instant (a client's micro-batch)
            if pe.view is not view or t != now:
                same = None
                break
            same.append((pe.plain, eid))  # type: ignore[union-attr]
        if same is not None and view is not None:
            sealed = self.crypter.seal_publish_run(view, ms(now), same)
            if sealed is not None:
                for (pe, _, eid), (routing, wid) in zip(jobs, sealed, strict=True):
                    pe.app_id = eid
                    pe.routing = routing
                    pe.wire_id = wid
                    pe.sealed = True
                return
        stamps: dict[float, int] = {}  # a run's events share their instant: ``ms`` once
        run = []
        for pe, now, eid in jobs:
            ts = stamps.get(now)
            if ts is None:
                ts = stamps[now] = ms(now)
            run.append((pe.view, pe.plain, ts, eid))
        done = self.crypter.seal_publications(run)  # type: ignore[arg-type]
        for (pe, _, eid), got in zip(jobs, done, strict=True):
            if got is not None:
                pe.app_id = eid
                pe.routing, pe.wire_id = got
                pe.sealed = True

    def _sealed_routing(self, pe: HermesEvent, now: float, event_id: str) -> Mapping[str, Any]:
        """The event's ciphertext without any cache: sealed here once if this is its PHB,
        with the application's id (``event_id``) inside and its wire id beside it."""
        if not pe.sealed:
            assert pe.view is not None
            ts = ms(now)
            routing = self.crypter.seal_event(pe.view, pe.plain, ts, event_id)
            pe.app_id = event_id
            pe.wire_id = self.crypter.wire_id(pe.view, event_id)
            pe.routing = routing
            pe.sealed = True  # every later link reuses this one sealing (§3.4)
        r = pe.routing
        return {k: v for k, v in r.items() if k != "k"} if "k" in r else r

    def _to_broker(
        self, message: Publish, ctx: CheckContext, pe: HermesEvent | None = None
    ) -> Publish | None:
        """Seal (at the PHB), then attach the cache the next broker may have (§3.4): the
        message leaves unchanged when what it carries is exactly that."""
        if pe is None:
            pe = self.decode_event(message.routing)
        sealed_in = not pe.local  # it arrived sealed (at its PHB: sealed here, for every link)
        if sealed_in and self._between_equals(pe.src, ctx.link.peer, pe.type_id, ctx.now):
            return message  # §3.4, Fig. 3: between equals the ciphertext and cache pass on
        grants = self.neighbour_grants(ctx.link.peer, pe.type_id)
        self.open(pe)
        cache = {k: v for k, v in pe.plain.items() if k in grants}
        if self.mode == "event" and pe.view is not None and set(cache) != set(pe.view.ids):
            cache = {}
        if sealed_in and set(cache) == pe.cache_in and len(pe.cache) == len(pe.cache_in):
            return message  # the ciphertext with the (all vetted) cache it came with, or none
        try:
            routing = self._sealed_routing(pe, ctx.now, message.event_id)
        except InvalidToken:  # the keys went (evicted) between the guard and this hop
            _log.warning("publication not sealed: this broker no longer holds the type's keys")
            return None
        if cache and pe.view is not None:
            routing = {**routing, "k": pack_cache(cache, pe.view, pe.app_id)}
        # between brokers the publication carries its wire id, never the application's id
        eid = message.event_id if sealed_in else pe.wire_id
        assert eid is not None
        return _publish(eid, message.profile, routing, message.body)

    def _delivery_grant(self, link_id: str, type_id: bytes, now: float) -> tuple[str, ...] | None:
        """The attributes a delivery of an event of ``type_id`` to client link ``link_id``
        may carry at ``now`` (the client's capability's), or None: §4, an expired or revoked
        capability stops delivery, and so does the hosting broker's own (it proxies for the
        client). A function of its arguments and the revocations, so a run asks it once per
        client and type (``outgoing_routed``)."""
        cap = self._clients.get((link_id, type_id))
        if cap is None or not cap.valid_at(now) or cap.serial in self.revoked:
            return None
        own = self._caps.get((type_id, "subscribe"))
        if own is None or not own.valid_at(now) or own.serial in self.revoked:
            return None
        return cap.attributes

    def _deliver(
        self,
        d: Deliver,
        ctx: CheckContext,
        pe: HermesEvent | None = None,
        granted: tuple[str, ...] | None | bool = False,
    ) -> Deliver | None:
        """``granted``: ``_delivery_grant``'s answer when the caller has it (False: ask)."""
        msg = d.event
        if pe is None:
            pe = self.decode_event(msg.routing)
        if pe.view is None:
            return None
        if granted is False:
            granted = self._delivery_grant(ctx.link.link_id, pe.type_id, ctx.now)
        if not granted:
            return None
        assert granted is not True
        ev = self._delivered(msg, pe, granted)
        return None if ev is None else Deliver.trusted(ev, d.sub_ids)  # the core validated the ids

    def _delivered(self, msg: Publish, pe: HermesEvent, granted: tuple[str, ...]) -> Publish | None:
        """The publication a client granted ``granted`` receives: the attributes this
        broker read that the grant covers, under the application's id (None: none)."""
        row = self._delivered_row(msg, pe, granted)
        return None if row is None else _publish(row[0], msg.profile, row[1], row[2])

    def _delivered_row(
        self, msg: Publish, pe: HermesEvent, granted: tuple[str, ...]
    ) -> tuple[str, dict[str, Any], bytes] | None:
        """``_delivered``'s fields: ``(event id, routing, body)``, or None (nothing the
        grant covers was read here)."""
        view = pe.view
        assert view is not None
        if not pe.opened:
            self.open(pe)
        plain = pe.plain
        if ALL in granted:  # <T, subscribe, *>: every attribute read here
            if not plain:
                return None
            routing = {TYPE_KEY: view.name, **plain}
        else:
            attrs = {k: v for k, v in plain.items() if k in granted}
            if not attrs:
                return None
            routing = {TYPE_KEY: view.name, **attrs}
        return pe.app_id or msg.event_id, routing, msg.body

    def _seal_filter(self, message: Any, ctx: CheckContext) -> Any:
        pf = self.decode_filter(message.filter)
        view = self._views[pf.type_id]
        if message.op == "advertise" or pf.readable is None:
            return dataclasses.replace(message, filter={"t": pf.type_id}, meta={})
        ts = ms(ctx.now)
        groups = (
            group_names(view.stype, self.mode)
            if self.mode == "event"
            else [view.ids[n].hex() for n in sorted(pf.readable.attribute_names)]
        )
        version = sum(k.version for g in groups if (k := self.keyring.current(g)) is not None)
        memo = (pf.type_id, pf.readable, version)
        wire = self._sealed_filters.get(memo)
        if wire is None:  # same filter, same keys: the same ciphertext (idempotent re-sends)
            wire = self._sealed_filters[memo] = self.crypter.seal_filter(view, pf.readable, ts)
        return dataclasses.replace(message, filter=wire, meta={})
