"""Fuzz the wire path in process: frame decoder -> envelope check -> message codec -> core.

``PUBGUARD_FUZZ_FRAMES`` frames (100,000 by default; ``make fuzz`` runs a million), random and
mutated from valid seeds of every envelope and message type, go through exactly what a broker
does with bytes from a link. Nothing may raise except FrameError, and the routing state at the
end must equal the state built from the accepted messages alone: garbage changes nothing.
"""

from __future__ import annotations

import os
import random
import struct
from typing import Any

import msgpack

from pubguard.broker.actions import Drop
from pubguard.broker.core import Broker
from pubguard.errors import FrameError
from pubguard.schemes.plain import PlainScheme
from pubguard.wire import envelope
from pubguard.wire.framing import FrameDecoder, encode_frame

N_FRAMES = int(os.environ.get("PUBGUARD_FUZZ_FRAMES", "100000"))
LINKS = {"b:parent": "parent", "b:child": "child", "c:alice": "client", "c:bob": "client"}


def _broker() -> Broker:
    b = Broker("fuzz", [PlainScheme()])
    for lk, kind in LINKS.items():
        b.add_link(lk, kind, lk[2:])
    return b


def _seeds() -> list[dict[str, Any]]:
    f1 = {"constraints": [["age", ">", 20]]}
    f2 = {"constraints": [["age", ">", 30], ["name", "prefix", "a"]]}
    ev = {
        "event_id": "e1",
        "profile": "plain",
        "routing": {"age": 31, "name": "ann"},
        "body": b"x" * 16,
        "meta": {"type": "t"},
    }
    msgs = [
        {"op": "subscribe", "sub_id": "s1", "profile": "plain", "filter": f1},
        {"op": "subscribe", "sub_id": "s2", "profile": "plain", "filter": f2, "meta": {"k": 1}},
        {"op": "unsubscribe", "sub_id": "s1", "profile": "plain"},
        {"op": "advertise", "adv_id": "a1", "profile": "plain", "filter": f1},
        {"op": "unadvertise", "adv_id": "a1", "profile": "plain"},
        {"op": "publish", **ev},
        {"op": "deliver", "sub_ids": ["s1"], "event": ev},
        {"op": "ack", "ref": "s1", "of": "subscribe"},
        {"op": "error", "ref": "s1", "reason": "forged", "detail": "x"},
        {"op": "heartbeat", "seq": 3},
    ]
    envs = [envelope.message(i + 1, m) for i, m in enumerate(msgs)]
    envs += [envelope.batch(1, msgs[:3]), envelope.batch(40, [msgs[5], msgs[0], msgs[5]])]
    envs += [
        envelope.hello("b1", "broker", "s", durable=True, rx=0, resumed=False),
        envelope.ack(3),
        envelope.heartbeat(),
        envelope.status_request(1),
        envelope.status_reply(1, {"a": 1}),
        envelope.bye("x"),
    ]
    return envs


_ODD: list[Any] = [
    None,
    True,
    -1,
    0,
    2**63,
    1.5,
    float("inf"),
    float("nan"),
    "",
    "x" * 300,
    "age",
    "plain",
    ">",
    b"\xff\x00",
    [],
    [1, "a"],
    {},
    {"a": {"b": [None]}},
    [["age", ">", 20]],
    [["age", "~", 1]],
    [["age", "prefix", 3]],
]


def _mutate_value(rng: random.Random, v: Any, depth: int = 0) -> Any:
    if isinstance(v, dict) and v and rng.random() < 0.8:
        v = dict(v)
        k = rng.choice(list(v))
        r = rng.random()
        if r < 0.15:
            del v[k]
        elif r < 0.25:
            v[rng.choice(["zz", "op", "s", "m", "t", "filter", k + "_"])] = rng.choice(_ODD)
        else:
            v[k] = _mutate_value(rng, v[k], depth + 1)
        return v
    if isinstance(v, list) and v and rng.random() < 0.7:
        v = list(v)
        i = rng.randrange(len(v))
        v[i] = _mutate_value(rng, v[i], depth + 1)
        return v
    if isinstance(v, str) and v and rng.random() < 0.5:
        return v[: rng.randrange(len(v))] + rng.choice(["", "\x00", "é", "~", v])
    return rng.choice(_ODD)


def _frame(rng: random.Random, seeds: list[dict[str, Any]]) -> bytes:
    r = rng.random()
    if r < 0.08:  # pure noise
        return rng.randbytes(rng.randrange(0, 64))
    seed = rng.choice(seeds)
    if r < 0.7:  # structured mutation, valid msgpack; mostly inside the carried message
        if seed["t"] in ("m", "mb") and rng.random() < 0.8:
            obj = {**seed, "m": _mutate_value(rng, seed["m"])}
        else:
            obj = _mutate_value(rng, seed)
        try:
            body = msgpack.packb(obj, use_bin_type=True)
        except (TypeError, ValueError, OverflowError):
            body = b"\xc1"
        return struct.pack(">I", len(body) + 1) + b"\x01" + body
    frame = bytearray(encode_frame(seed))
    for _ in range(rng.randrange(1, 4)):  # byte-level mutation
        op = rng.random()
        if op < 0.5 and frame:
            frame[rng.randrange(len(frame))] = rng.randrange(256)
        elif op < 0.7:
            del frame[rng.randrange(len(frame) + 1) :]
        elif op < 0.85:
            frame[0:4] = struct.pack(">I", rng.choice([0, 1, 2, len(frame), 2**31, 2**20 + 1]))
        else:
            pos = rng.randrange(len(frame) + 1)
            frame[pos:pos] = rng.randbytes(rng.randrange(1, 8))
    return bytes(frame)


def test_fuzz_frames_never_crash_and_never_change_routing_state() -> None:
    rng = random.Random(20240604)
    seeds = _seeds()
    broker = _broker()
    accepted: list[tuple[dict[str, Any], str, float]] = []
    outcome = {
        "frame_error": 0,
        "incomplete": 0,
        "envelope_only": 0,
        "dropped": 0,
        "accepted": 0,
        "batch": 0,
    }
    links = list(LINKS)
    for i in range(N_FRAMES):
        frame = _frame(rng, seeds)
        dec = FrameDecoder()
        try:
            envs = dec.feed(frame)
            if not envs:
                outcome["incomplete"] += 1  # a truncated frame waits for more bytes
            if len(envs) > 1:
                outcome["batch"] += 1  # a batch frame, handed out as its messages' envelopes
            for env in envs:
                t = envelope.check_envelope(env)
                if t != "m":
                    outcome["envelope_only"] += 1
                    continue
                link, now = rng.choice(links), float(i)
                for _, msg in envelope.reliable(env):
                    actions = broker.handle(msg, link, now)
                    if any(isinstance(a, Drop) for a in actions):
                        outcome["dropped"] += 1
                    else:
                        outcome["accepted"] += 1
                        accepted.append((msg, link, now))
        except FrameError:
            outcome["frame_error"] += 1
    assert sum(outcome.values()) >= N_FRAMES
    assert all(n > 0 for n in outcome.values()), outcome
    replay = _broker()
    for msg, link, now in accepted:
        acts = replay.handle(msg, link, now)
        assert not any(isinstance(a, Drop) for a in acts)
    assert broker.routing_snapshot() == replay.routing_snapshot()


def test_fuzzed_stream_poisons_only_its_decoder() -> None:
    rng = random.Random(7)
    seeds = _seeds()
    good = encode_frame(seeds[0])
    for _ in range(2000):
        dec = FrameDecoder()
        try:
            dec.feed(_frame(rng, seeds))
        except FrameError:
            pass
        assert FrameDecoder().feed(good) == [seeds[0]]
