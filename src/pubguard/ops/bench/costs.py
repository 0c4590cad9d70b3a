"""Per-message costs for ``bench network``, in process (real crypto, no sockets).

:func:`validation_cost` times what a broker does with one publication of a profile: decode
its routing part and run every guard (the broker cost of narada's Table 2, EventGuard's 1.7 ms
ElGamal verify). :func:`client_costs` times what the publisher (protect) and a subscriber
(open) do per event, which the network runs keep off the critical path. CPU time of this
process, best of three slices, because the machine is shared.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

from pubguard.model import AttributeSpec, Event, EventType, Filter
from pubguard.schemes.base import CheckContext, LinkInfo, LinkKind
from pubguard.schemes.registry import KeyBundle, make_broker_scheme
from pubguard.wire.messages import Publish

__all__ = [
    "ATTRIBUTES",
    "BENCH_NUMERIC",
    "BENCH_TYPE",
    "NUMERIC_PROFILES",
    "MERKLE_BATCH",
    "MERKLE_BATCHES",
    "PUBLISHER",
    "SIGNING_PROFILES",
    "bench_event",
    "bench_filter",
    "bench_type",
    "client_costs",
    "core_cost",
    "shared_open_cost",
    "core_costs",
    "validation_cost",
    "validation_costs",
    "wire_costs",
]

MERKLE_BATCH: Final = 16  # publications under one signature in the amortised runs
#: Merkle batch sizes whose per-publication broker costs every report carries
MERKLE_BATCHES: Final = (16, 64)
# measured single-signed and batch-signed (Merkle roots over MERKLE_BATCH publications)
SIGNING_PROFILES: Final = ("eventguard", "default", "psguard")
#: a topic-routed event type every profile can carry (PSGuard topic-kind attribute)
BENCH_TYPE: Final = EventType("bench", (AttributeSpec("topic", "str", kind="topic"),))
#: psguard.txt's second measured kind: one numeric attribute, routed on tokenized key-tree
#: node ids (a NAKT over 0..2047, least count 1); subscriber ``j`` holds ``[8j, 8j + 7]``
NUMERIC_WIDTH: Final = 8
BENCH_NUMERIC: Final = EventType(
    "bench-num", (AttributeSpec("n", "int", range_size=256 * NUMERIC_WIDTH, least_count=1),)
)
#: the routable attribute a bench run's subscriptions and events use
ATTRIBUTES: Final = ("topic", "numeric")
#: the profiles that route numeric ranges (eventguard and narada route on topics only)
NUMERIC_PROFILES: Final = ("plain", "psguard", "psguard-paper", "default")
PUBLISHER: Final = "bench-pub"


def bench_type(attribute: str) -> EventType:
    """The event type of a bench run on ``attribute`` (one of :data:`ATTRIBUTES`)."""
    if attribute not in ATTRIBUTES:
        raise ValueError(f"attribute is one of {', '.join(ATTRIBUTES)}, not {attribute!r}")
    return BENCH_TYPE if attribute == "topic" else BENCH_NUMERIC


def _bench_bundle(tmp: str, now: float, attribute: str, seed: int) -> KeyBundle:
    """The keys of the bench's one type and its publisher, under ``tmp``."""
    return KeyBundle(
        tmp,
        now=now,
        types=(bench_type(attribute),),
        identities=(PUBLISHER,),
        rng=random.Random(seed),
    )


def bench_filter(attribute: str, j: int) -> str:
    """Subscriber ``j``'s filter: ``topic = "s<j>"``, or its own numeric range; no two
    subscribers' filters overlap, so every event matches exactly one (fan-out one)."""
    bench_type(attribute)
    if attribute == "topic":
        return f'topic = "s{j}"'
    lo = NUMERIC_WIDTH * j
    return f"n >= {lo} && n <= {lo + NUMERIC_WIDTH - 1}"


def bench_event(attribute: str, j: int, rng: random.Random, payload: int, **kw: Any) -> Event:
    """An event for subscriber ``j`` alone (a random value of its range for ``numeric``)."""
    attrs: dict[str, Any] = (
        {"topic": f"s{j}"}
        if attribute == "topic"
        else {"n": NUMERIC_WIDTH * j + rng.randrange(NUMERIC_WIDTH)}
    )
    return Event(attrs, type=bench_type(attribute).name, payload=b"\0" * payload, **kw)


def validation_cost(
    profile: str,
    n: int = 300,
    *,
    batch: int = 1,
    token_cache: bool = True,
    seed: int = 1,
    slices: int = 3,
    attribute: str = "topic",
) -> float:
    """Mean microseconds a broker spends on one publication of ``profile``: decoding its
    routing part and running every guard (signatures, permits or tokens, timestamps, replay).
    ``batch``: publications per signature (Merkle root verified once, then cached).
    ``token_cache=False``: narada without the verified-token cache (§VI). CPU time, best of
    ``slices`` slices of ``n / slices`` publications."""
    with _valid_setup(
        profile, n, batch=batch, token_cache=token_cache, seed=seed, attribute=attribute
    ) as timer:
        k = max(1, n // slices)
        return min(timer(s * k, (s + 1) * k if s < slices - 1 else n) for s in range(slices))


@contextlib.contextmanager
def _valid_setup(
    profile: str,
    n: int,
    *,
    batch: int = 1,
    token_cache: bool = True,
    seed: int = 1,
    attribute: str = "topic",
) -> Iterator[Callable[[int, int], float]]:
    """A broker face of ``profile`` and ``n`` publications (after a warm-up of two batches);
    yields ``timer(i, j)``: the CPU microseconds per publication to decode and guard
    publications ``i..j`` (each once: replay state moves on)."""
    import tempfile as _tf

    now = time.time()
    with _tf.TemporaryDirectory(prefix="pubguard-valid-") as tmp:
        bundle = _bench_bundle(tmp, now, attribute, seed)
        client = bundle.client(profile, PUBLISHER, topics=("s0",), now=now)
        keys = bundle.broker_keys(narada=profile == "narada")
        if profile == "narada" and not token_cache:
            from pubguard.schemes.narada.broker import NaradaBroker

            assert keys.ca_cert is not None
            broker: Any = NaradaBroker(
                ca_cert=keys.ca_cert, kmc_certs=keys.kmc_certs, now=now, crl=keys.crl, token_uses=0
            )
        else:
            broker = make_broker_scheme(profile, keys, now=now)
        if profile == "eventguard":
            client.protect_advertisement(Filter.parse('topic = "s0"'), now=now)
        warm = 2 * batch
        rng = random.Random(seed)
        evs = [bench_event(attribute, 0, rng, 16, id=f"v{i}") for i in range(n + warm)]
        protect = client.protect_events if client.merkle_batches else None
        pes: list[Any] = []
        for i in range(0, len(evs), batch):
            chunk = evs[i : i + batch]
            pes += (
                protect(chunk, now=now)
                if protect and batch > 1
                else [client.protect_event(e, now=now) for e in chunk]
            )
        msgs = [Publish(pe.event_id, profile, pe.routing, pe.body, pe.meta) for pe in pes]
        ctx = CheckContext(
            now=now, link=LinkInfo("c:" + PUBLISHER, LinkKind.CLIENT, PUBLISHER), broker_id="b0"
        )
        for m in msgs[:warm]:
            broker.decode_event(m.routing)
            broker.broker_check(m, ctx)
        rest = msgs[warm:]

        def timer(i: int, j: int) -> float:
            part = rest[i:j]
            if not part:
                return float("inf")
            t0 = time.process_time()  # CPU time of this process (the machine is shared)
            for m in part:
                broker.decode_event(m.routing)
                reason = broker.broker_check(m, ctx)
                if reason is not None:
                    raise RuntimeError(f"{profile}: a valid publication was dropped ({reason})")
            return round((time.process_time() - t0) / len(part) * 1e6, 1)

        yield timer


def core_cost(
    profile: str,
    n: int = 768,
    *,
    batch: int = 1,
    run: int = 0,
    subscribers: int = 32,
    seed: int = 1,
    slices: int = 3,
    attribute: str = "topic",
) -> float:
    """CPU microseconds one broker core spends per publication of ``profile``: admission
    (decoding, duplicate window, guards), matching against ``subscribers`` subscriptions
    ``topic = "s<j>"`` and routing (each event to one of them), fed as wire dicts the way the
    network hands them over. ``batch``: publications per signature (Merkle roots);
    ``run``: handle ``run`` publications per ``Broker.handle_batch`` call (0: one ``handle``
    call each). Best of ``slices`` slices (the machine is shared)."""
    from pubguard.broker import DeliverTo

    with _core_setup(
        profile, n, batch=batch, subscribers=subscribers, seed=seed, attribute=attribute
    ) as (core, wires):
        now = time.time()
        link = "c:" + PUBLISHER
        k = max(1, n // slices)
        best = float("inf")
        for s in range(slices):
            part = wires[s * k : (s + 1) * k]
            if not part:
                continue
            t0 = time.process_time()
            if run:
                acts = [
                    a
                    for i in range(0, len(part), run)
                    for a in core.handle_batch(part[i : i + run], link, now)
                ]
            else:
                acts = [a for w in part for a in core.handle(w, link, now)]
            dt = time.process_time() - t0
            if sum(type(a) is DeliverTo for a in acts) != len(part):
                raise RuntimeError(f"{profile}: not every publication was delivered once")
            best = min(best, dt / len(part))
        return round(best * 1e6, 1)


@contextlib.contextmanager
def _core_setup(
    profile: str,
    n: int,
    *,
    batch: int = 1,
    subscribers: int = 32,
    seed: int = 1,
    attribute: str = "topic",
    batch_verify: bool = True,
) -> Iterator[tuple[Any, list[dict[str, Any]]]]:
    """A broker core serving ``profile`` with ``subscribers`` subscriptions and ``n``
    publications as wire dicts (for :func:`core_cost` and profiling). ``batch_verify``: the
    native guard's Ed25519 batch of a run's signatures (``make_broker_scheme``)."""
    import tempfile as _tf

    from pubguard.broker import Broker
    from pubguard.schemes.plain import PlainScheme
    from pubguard.wire.messages import Advertise, Subscribe

    now = time.time()
    rng = random.Random(seed)
    with _tf.TemporaryDirectory(prefix="pubguard-core-") as tmp:
        topics = [f"s{j}" for j in range(subscribers)]
        if profile == "plain":
            scheme: Any = PlainScheme()
            pub: Any = scheme
            subs: list[Any] = [scheme] * subscribers
        else:
            bundle = _bench_bundle(tmp, now, attribute, seed)
            pub = bundle.client(profile, PUBLISHER, topics=tuple(topics), now=now)
            subs = [
                bundle.client(profile, f"bench-sub{j}", topics=(t,), now=now)
                for j, t in enumerate(topics)
            ]
            scheme = make_broker_scheme(
                profile,
                bundle.broker_keys(narada=profile == "narada"),
                now=now,
                batch_verify=batch_verify,
            )
        core = Broker("b0", [scheme])
        core.add_link("c:" + PUBLISHER, LinkKind.CLIENT, PUBLISHER)
        for j, t in enumerate(topics):
            core.add_link(f"c:s{j}", LinkKind.CLIENT, f"bench-sub{j}")
            pf = subs[j].protect_filter(Filter.parse(bench_filter(attribute, j)), now=now)
            core.handle(Subscribe(f"q{j}", profile, pf.filter, pf.meta), f"c:s{j}", now)
            if profile == "eventguard":
                pa = pub.protect_advertisement(Filter.parse(f'topic = "{t}"'), now=now)
                core.handle(Advertise(f"a{j}", profile, pa.filter, pa.meta), "c:" + PUBLISHER, now)
        evs = [
            bench_event(attribute, rng.randrange(subscribers), rng, 16, id=f"c{i}")
            for i in range(n)
        ]
        protect = pub.protect_events if pub.merkle_batches else None
        pes: list[Any] = []
        for i in range(0, n, batch):
            chunk = evs[i : i + batch]
            pes += (
                protect(chunk, now=now)
                if protect and batch > 1
                else [pub.protect_event(e, now=now) for e in chunk]
            )
        yield (
            core,
            [Publish(pe.event_id, profile, pe.routing, pe.body, pe.meta).to_wire() for pe in pes],
        )


def client_costs(
    profile: str, n: int = 200, *, seed: int = 1, attribute: str = "topic"
) -> dict[str, float]:
    """CPU microseconds per event for the publisher to protect and a subscriber to open (off
    the network's critical path in the throughput runs, where clients are other machines)."""
    import tempfile as _tf

    now = time.time()
    with _tf.TemporaryDirectory(prefix="pubguard-client-") as tmp:
        bundle = _bench_bundle(tmp, now, attribute, seed)
        f = Filter.parse(bench_filter(attribute, 0))
        sub = bundle.client(profile, "bench-sub0", topics=("s0",), now=now)
        sub.protect_filter(f, now=now)
        pub = bundle.client(profile, PUBLISHER, topics=("s0",), now=now)
        if profile == "eventguard":
            pub.protect_advertisement(f, now=now)
        rng = random.Random(seed)
        evs = [bench_event(attribute, 0, rng, 16) for _ in range(n)]
        t0 = time.process_time()
        pes = [pub.protect_event(e, now=now) for e in evs]
        t1 = time.process_time()
        for pe in pes:
            sub.open_event(pe.event_id, pe.routing, pe.body, pe.meta, now=now)
        t2 = time.process_time()
    return {"protect": round((t1 - t0) / n * 1e6, 1), "open": round((t2 - t1) / n * 1e6, 1)}


#: profiles whose subscribers share one process-wide cache of verified roots and credentials
SHARED_OPEN_PROFILES: Final = ("default", "eventguard")


def shared_open_cost(
    profile: str,
    subscribers: int = 32,
    *,
    batch: int = MERKLE_BATCH,
    batches: int = 4,
    seed: int = 1,
    attribute: str = "topic",
) -> dict[str, float]:
    """What a process hosting ``subscribers`` subscribers (the bench's subscriber process)
    spends opening deliveries of Merkle-batched publications with fan-out one: ``open_us``,
    CPU microseconds per delivery, and ``signature_checks_per_batch``, the Ed25519 verifies
    the process made per batch of ``batch`` (one root, plus the publisher's credential once:
    the subscribers share one process-wide cache, ``schemes/common/verified.py``; with a
    cache per subscriber a batch cost one verify per subscriber it reached)."""
    import tempfile as _tf

    now = time.time()
    with _tf.TemporaryDirectory(prefix="pubguard-open-") as tmp:
        bundle = _bench_bundle(tmp, now, attribute, seed)
        topics = tuple(f"s{j}" for j in range(subscribers))
        subs: list[Any] = []  # DefaultClient / EventGuardClient: they count signature_checks
        for j in range(subscribers):
            sub = bundle.client(profile, f"bench-sub{j}", topics=(topics[j],), now=now)
            sub.protect_filter(Filter.parse(bench_filter(attribute, j)), now=now)
            subs.append(sub)
        pub = bundle.client(profile, PUBLISHER, topics=topics, now=now)
        if profile == "eventguard":
            for t in topics:
                pub.protect_advertisement(Filter.parse(f'topic = "{t}"'), now=now)
        rng = random.Random(seed)
        todo: list[tuple[int, Any]] = []
        for _ in range(batches):
            js = [rng.randrange(subscribers) for _ in range(batch)]
            evs = [bench_event(attribute, j, rng, 16) for j in js]
            todo += zip(js, pub.protect_events(evs, now=now), strict=True)
        t0 = time.process_time()
        for j, pe in todo:
            subs[j].open_event(pe.event_id, pe.routing, pe.body, pe.meta, now=now)
        t1 = time.process_time()
    checks = sum(s.signature_checks for s in subs)
    return {
        "open_us": round((t1 - t0) / len(todo) * 1e6, 1),
        "signature_checks_per_batch": round(checks / batches, 2),
    }


def validation_costs(
    profile: str,
    n: int = 300,
    *,
    merkle_batches: tuple[int, ...] = MERKLE_BATCHES,
    slices: int = 6,
    attribute: str = "topic",
) -> dict[str, float]:
    """The per-message broker validation figures a profile's report carries: one signature
    per publication (``per_message``), psguard's paper brokers (``paper_brokers``), narada
    without its token cache and, for the signing profiles, ``merkle_<b>`` for each batch
    size ``b`` of ``merkle_batches``. Every configuration is set up first, then ``slices``
    slices (whole batches each) are timed round-robin and each keeps its best, so a burst of
    load falls on all of them alike."""
    plan: list[tuple[str, str, int, bool]] = [("per_message", profile, 1, True)]
    if profile == "psguard":  # the paper's brokers (psguard.txt §2) verify nothing
        plan.append(("paper_brokers", "psguard-paper", 1, True))
    if profile in SIGNING_PROFILES:
        plan += [(f"merkle_{b}", profile, b, True) for b in merkle_batches]
    if profile == "narada":
        plan.append(("without_token_cache", profile, 1, False))
    out: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        timers = []
        for key, prof, b, cache in plan:
            per = -(-max(1, n // slices) // b) * b  # one slice: whole batches
            timer = stack.enter_context(
                _valid_setup(prof, per * slices, batch=b, token_cache=cache, attribute=attribute)
            )
            timers.append((key, timer, per))
        for s in range(slices):
            for key, timer, per in timers:
                out[key] = min(out.get(key, float("inf")), timer(s * per, (s + 1) * per))
    return out


def core_costs(
    profile: str,
    n: int = 768,
    *,
    merkle_batches: tuple[int, ...] = MERKLE_BATCHES,
    run: int = 16,
    slices: int = 8,
    attribute: str = "topic",
) -> dict[str, float]:
    """:func:`core_cost` of plain, ``profile`` (one signature per publication; on the native
    backend a run's signatures are verified as one Ed25519 batch), the same without the
    batch (``<profile>_no_batch_verify``, :data:`BATCH_VERIFY_PROFILES`), psguard's
    paper configuration (for psguard) and each Merkle batch size of a signing profile
    (``merkle_<b>``): the broker core's whole CPU cost per publication (decode, guards,
    matching against 32 subscriptions, routing), ``run`` publications per ``handle_batch``
    as a network link hands them over. Every configuration's core is set up first, then
    ``slices`` slices of about ``n / 3`` publications each are timed round-robin over the
    configurations and each keeps its best: on a shared machine a burst of load then falls
    on every configuration alike. Divide by ``plain`` for the ratio the issue's goals are
    stated in."""
    from pubguard.broker import DeliverTo

    plan: list[tuple[str, str, int]] = [("plain", "plain", 1)]
    if profile != "plain":
        plan.append((profile, profile, 1))
    if profile in BATCH_VERIFY_PROFILES:  # one signature per publication, checked one by one
        plan.append((profile, profile + NO_BATCH_VERIFY, 1))
    if profile == "psguard":
        plan.append(("psguard-paper", "psguard-paper", 1))
    if profile in SIGNING_PROFILES:
        plan += [(profile, f"merkle_{b}", b) for b in merkle_batches]
    out: dict[str, float] = {}
    link = "c:" + PUBLISHER
    with contextlib.ExitStack() as stack:
        cores = []
        for prof, key, b in plan:
            per = _whole(max(1, n // 3), b)  # one slice: whole batches
            core, wires = stack.enter_context(
                _core_setup(
                    prof,
                    per * slices,
                    batch=b,
                    attribute=attribute,
                    batch_verify=not key.endswith(NO_BATCH_VERIFY),
                )
            )
            cores.append((key, core, wires, per))
        now = time.time()
        for s in range(slices):
            for key, core, wires, per in cores:
                part = wires[s * per : (s + 1) * per]
                t0 = time.process_time()
                acts = [
                    a
                    for i in range(0, len(part), run)
                    for a in core.handle_batch(part[i : i + run], link, now)
                ]
                dt = time.process_time() - t0
                if sum(type(a) is DeliverTo for a in acts) != len(part):
                    raise RuntimeError(f"{key}: not every publication was delivered once")
                out[key] = min(out.get(key, float("inf")), round(dt / len(part) * 1e6, 1))
    return out


#: profiles whose native guard verifies a run's single signatures as one Ed25519 batch
#: (RFC 8032 §5.1.7): :func:`core_costs` also times ``<profile>_no_batch_verify``, the same
#: one-signature-per-publication core with the batch off (the Python backend has no batch)
BATCH_VERIFY_PROFILES: Final = frozenset({"eventguard", "default", "narada"})
NO_BATCH_VERIFY: Final = "_no_batch_verify"


def _whole(n: int, batch: int) -> int:
    """``n`` rounded up to a multiple of three batches (three slices of whole batches)."""
    return -(-n // (3 * batch)) * 3 * batch


def wire_costs(
    profile: str,
    *,
    merkle_batch: int = 64,
    n: int = 1024,
    run: int = 64,
    slices: int = 8,
    attribute: str = "topic",
) -> dict[str, dict[str, float]]:
    """What a broker process spends per publication on its bytes, outside the core, in
    process, for plain and ``profile`` (Merkle-batched by ``merkle_batch`` when it signs):
    ``publish_bytes``, a publication's share of the publisher's batch frames (``run``
    messages each, as a link coalesces them); ``decode_us``, decoding those frames as a
    broker does (``FrameDecoder(raw=True).feed``: msgpack into the wire maps the core takes,
    and on the native backend each message's bytes); ``deliver_bytes`` and ``pack_us``, a
    delivery's packed message and making it from the publication as the server does
    (``pack_message``: the bytes it arrived as spliced in, when kept). CPU time, best slice of
    each, round-robin."""
    from pubguard.broker import DeliverTo
    from pubguard.net.server.batching import pack_message
    from pubguard.wire.framing import FrameDecoder, RawMessage, encode_run, pack

    plan = [("plain", "plain", 1)]
    if profile != "plain":
        b = merkle_batch if profile in SIGNING_PROFILES else 1
        plan.append((profile, profile if b == 1 else f"{profile}-merkle", b))
    out: dict[str, dict[str, float]] = {}
    link = "c:" + PUBLISHER
    with contextlib.ExitStack() as stack:
        setups = []
        for prof, tag, b in plan:
            core, wires = stack.enter_context(
                _core_setup(prof, _whole(n, b), batch=b, attribute=attribute)
            )
            frames = encode_run(1, [pack(w) for w in wires], run)
            acts = [
                a
                for i in range(0, len(wires), run)
                for a in core.handle_batch(wires[i : i + run], link, time.time())
                if type(a) is DeliverTo
            ]
            if len(acts) != len(wires):
                raise RuntimeError(f"{tag}: not every publication was delivered once")
            envs = [e for f in frames for e in FrameDecoder(raw=True).feed(f)]
            raws = {
                id(w): (w, e.fields)
                for w, e in zip(wires, envs, strict=True)
                if type(e) is RawMessage and e.fields is not None
            }
            setups.append((tag, frames, [a.message for a in acts], raws))
        for _ in range(slices):
            for tag, frames, delivers, raws in setups:
                k = len(delivers)
                t0 = time.process_time()
                dec = FrameDecoder(raw=True)
                for f in frames:
                    dec.feed(f)
                t1 = time.process_time()
                packed = [pack_message(d, {}, raws) for d in delivers]
                t2 = time.process_time()
                e = out.setdefault(tag, {})
                e["publish_bytes"] = round(sum(map(len, frames)) / k, 1)
                e["deliver_bytes"] = round(sum(map(len, packed)) / k, 1)
                e["decode_us"] = min(e.get("decode_us", 1e9), round((t1 - t0) / k * 1e6, 2))
                e["pack_us"] = min(e.get("pack_us", 1e9), round((t2 - t1) / k * 1e6, 2))
    return out
