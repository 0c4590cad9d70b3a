"""The steady headline of ``pubguard bench network``: broker CPU per publication at one fixed
offered rate near saturation, on each backend of the guard (Python, native), as the median of
alternated runs with their spread.

Theory of operation
-------------------
A throughput search (:func:`~pubguard.ops.bench.network.measure_network`) moves 20-70 %
between runs on a shared 2-core machine: saturation is decided by queues that three processes
competing for two cores push around. The broker's CPU time per publication at a rate all
configurations sustain is steadier: it counts the work, not the wait. So after the searches
every configuration of the plan (the profile, plain, the Merkle-batched form) is run again,
each on a fresh cluster, at the same offered rate ``STEADY_LOAD`` x the lowest median maximum
the searches found (near saturation of the slowest, below everyone's), for ``STEADY_S``
seconds, and the broker processes' CPU time (``/proc/<pid>/stat``) is divided by the
publications sent. Runs alternate configuration and backend (profile, plain, merkle on
Python, the same on native, then again), so a change in the machine's load falls on every
figure alike. Per backend and configuration the report gives the median and every run; the
ratio to plain is the median of the per-round ratios, with their spread.

The backend of a broker process is chosen by ``PUBGUARD_NATIVE`` in its environment
(:mod:`pubguard.native`), set here around each cluster's start; the in-process core costs
(:func:`~pubguard.ops.bench.costs.core_costs`) are taken per backend with ``native.use``.
"""

from __future__ import annotations

import contextlib
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

from pubguard import native
from pubguard.net.config import ClusterConfig
from pubguard.ops.bench import network
from pubguard.ops.bench.costs import (
    MERKLE_BATCH,
    MERKLE_BATCHES,
    PUBLISHER,
    bench_type,
    core_costs,
    wire_costs,
)
from pubguard.ops.bench.network import _broker_cpu_per_event, _setup, _Sink, _tree
from pubguard.ops.bench.report import _plan
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.registry import KeyBundle

__all__ = [
    "CPU_RATIO_GOAL",
    "STEADY_LOAD",
    "STEADY_S",
    "backends",
    "core_costs_by_backend",
    "run_network_bench_steady",
    "run_steady",
    "steady_goal",
    "steady_lines",
]

STEADY_LOAD: Final = 0.8  # of the slowest configuration's median maximum throughput
STEADY_S: Final = 4.0  # seconds per run (CPU clock ticks are 10 ms: >= 400 ticks a run)
#: broker CPU per publication, at most this many times plain's, on the steady headline run
#: (``psguard``'s goal is judged on its ``psguard-paper`` run, psguard.txt §2's configuration,
#: which is also a profile of its own)
CPU_RATIO_GOAL: Final = {
    "eventguard": 1.11,
    "default": 1.11,
    "psguard": 1.02,
    "psguard-paper": 1.02,
}


def backends() -> list[str]:
    """The backends to measure: both when the extension is built and not switched off."""
    return ["python", "native"] if native.available() and native.NATIVE is not None else ["python"]


@contextlib.contextmanager
def _backend(which: str) -> Iterator[None]:
    """Broker processes started inside run on ``which`` (their environment), and so does this
    process's code."""
    old = os.environ.get(native.ENV_VAR)
    os.environ[native.ENV_VAR] = "0" if which == "python" else "1"
    try:
        with native.use(which):  # type: ignore[arg-type]
            yield
    finally:
        if old is None:
            os.environ.pop(native.ENV_VAR, None)
        else:
            os.environ[native.ENV_VAR] = old


async def _steady_cpu(
    profile: str,
    brokers: int,
    payload: int,
    rate: float,
    *,
    state_dir: Path,
    batch: int,
    attribute: str,
    subscribers: int,
    seconds: float,
    seed: int,
) -> tuple[float | None, dict[str, float]]:
    """Broker CPU microseconds per publication of one run at ``rate`` on a fresh cluster, and
    every process's (brokers, publisher, subscribers, total: ``_Net.cpu_us``)."""
    edges = _tree(brokers)
    cfg = ClusterConfig(
        state_dir,
        tuple(edges),
        ("b0", *(c for _, c in edges)),
        "127.0.0.1",
        {"profiles": [profile]},
        publishers=(PUBLISHER,),
    )
    bundle = None
    if profile != "plain":
        bundle = KeyBundle(
            state_dir / "keys",
            now=time.time(),
            types=(bench_type(attribute),),
            identities=(PUBLISHER,),
            rng=random.Random(seed),
        )
    cluster = LocalCluster(cfg, bundle=bundle)
    net = None
    try:
        await cluster.start()
        net = await _setup(cluster, _Sink(), subscribers, profile, attribute)
        cpu = await _broker_cpu_per_event(net, rate, payload, seconds, random.Random(seed), batch)
        return cpu, {**net.cpu_us, **{f"io.{k}": v for k, v in net.io.items()}}
    finally:
        if net is not None:
            with contextlib.suppress(Exception):
                await net.pub.close()
            await net.subs.close()
        await cluster.stop()


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 3) if xs else None


async def run_steady(
    profile: str,
    brokers: int,
    payload: int,
    plan: list[tuple[str, str, int]],
    rate: float,
    *,
    state_dir: Path,
    repeat: int,
    attribute: str = "topic",
    subscribers: int = 32,
    seconds: float = STEADY_S,
    which: list[str] | None = None,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Broker CPU per publication of every ``(profile, tag, batch)`` of ``plan`` at ``rate``,
    ``repeat`` alternated rounds per backend of ``which`` (see the module docstring)."""
    say = say or (lambda s: None)
    which = which or backends()
    runs: dict[str, dict[str, list[float]]] = {b: {} for b in which}
    procs: dict[str, dict[str, list[dict[str, float]]]] = {b: {} for b in which}
    for i in range(repeat):
        for b in which:
            for prof, tag, batch in plan:
                say(f"[steady {b} {tag}] round {i + 1}/{repeat} at {rate:.0f} ev/s")
                with _backend(b):
                    cpu, by_role = await _steady_cpu(
                        prof,
                        brokers,
                        payload,
                        rate,
                        state_dir=state_dir / f"steady-{b}-{tag}-{i}",
                        batch=batch,
                        attribute=attribute,
                        subscribers=subscribers,
                        seconds=seconds,
                        seed=i + 1,
                    )
                runs[b].setdefault(tag, []).append(cpu if cpu is not None else float("nan"))
                procs[b].setdefault(tag, []).append(by_role)
    out: dict[str, Any] = {"rate_eps": round(rate, 1), "seconds": seconds, "rounds": repeat}
    for b, by_tag in runs.items():
        plain = by_tag.get("plain", [])
        per: dict[str, Any] = {}
        for tag, xs in by_tag.items():
            ok = [x for x in xs if x == x]
            entry: dict[str, Any] = {"cpu_us": _median(ok), "cpu_runs_us": xs}
            if tag != "plain" and plain:
                ratios = sorted(
                    round(x / p, 3) for x, p in zip(xs, plain, strict=True) if x == x and p == p
                )
                entry["cpu_ratio"] = _median(ratios)
                entry["cpu_ratio_runs"] = ratios
                entry["cpu_ratio_spread"] = [ratios[0], ratios[-1]] if ratios else None
            entry.update(_by_process(procs[b][tag], procs[b].get("plain", []), tag))
            per[tag] = entry
        out[b] = per
    return out


def _by_process(
    runs: list[dict[str, float]], plain: list[dict[str, float]], tag: str
) -> dict[str, Any]:
    """The median CPU per publication of each process over the rounds and, beside plain,
    the median of the per-round ratios of the total (what one machine's throughput follows);
    the median of the brokers' I/O per publication (``io.*`` entries of the runs)."""
    keys = sorted({k for r in runs for k in r})
    med = {k: _median([r[k] for r in runs if k in r]) for k in keys}
    out: dict[str, Any] = {
        "process_cpu_us": {k: v for k, v in med.items() if not k.startswith("io.")},
        # the brokers' I/O per publication (batches, reads, link writes and their bytes)
        "io_per_publication": {k[3:]: v for k, v in med.items() if k.startswith("io.")},
    }
    if tag != "plain" and plain:
        totals = [
            round(r["total"] / p["total"], 3)
            for r, p in zip(runs, plain, strict=True)
            if r.get("total") and p.get("total")
        ]
        out["total_cpu_ratio"] = _median(totals)
    return out


def steady_goal(profile: str, head: str, steady: dict[str, Any]) -> list[dict[str, Any]]:
    """The broker-CPU goal of ``profile`` (at most ``CPU_RATIO_GOAL`` x plain's) judged on the
    steady figure of the headline run, per backend; none for a profile without one."""
    out: list[dict[str, Any]] = []
    limit = CPU_RATIO_GOAL.get(profile)
    if limit is None:
        return out
    for b in ("python", "native"):
        v = (steady.get(b) or {}).get(head, {}).get("cpu_ratio")
        if b in steady:
            out.append(
                {
                    "name": f"broker CPU ratio, steady ({b})",
                    "goal": f"<= {limit:g}",
                    "limit": limit,
                    "unit": "x",
                    "ours": v,
                    "met": None if v is None else v <= limit,
                }
            )
    return out


def core_costs_by_backend(profile: str, n: int, **kw: Any) -> dict[str, dict[str, float]]:
    """:func:`~pubguard.ops.bench.costs.core_costs` on each backend (in process)."""
    out = {}
    for b in backends():
        with native.use(b):  # type: ignore[arg-type]
            out[b] = core_costs(profile, n, **kw)
    return out


def steady_lines(results: list[dict[str, Any]]) -> list[str]:
    """The steady headline as text lines (the CLI prints them under its tables)."""
    lines = []
    for r in results:
        s = r.get("steady")
        if not s:
            continue
        lines.append(
            f"steady (headline): broker CPU us per publication at {s['rate_eps']:.0f} ev/s, "
            f"median of {s['rounds']} alternated rounds [spread of the ratio], "
            f"{r['brokers']} broker(s), {r['payload']} B"
        )
        for b in ("python", "native"):
            per = s.get(b)
            if not per:
                continue
            parts = []
            for tag, e in per.items():
                txt = f"{tag} {e['cpu_us']}"
                if "cpu_ratio" in e:
                    txt += f" (x{e['cpu_ratio']} {e['cpu_ratio_spread']})"
                parts.append(txt)
            lines.append(f"  {b}: " + ", ".join(parts))
            for tag, e in per.items():
                pc = e.get("process_cpu_us")
                if pc:
                    txt = ", ".join(f"{k} {v}" for k, v in pc.items())
                    ratio = e.get("total_cpu_ratio")
                    lines.append(
                        f"    {tag} per process: {txt}" + (f" (total x{ratio})" if ratio else "")
                    )
                io = e.get("io_per_publication")
                if io:
                    txt = ", ".join(f"{k} {v}" for k, v in io.items())
                    lines.append(f"    {tag} broker I/O per publication: {txt}")
        for tag, w in (r.get("broker_wire_us") or {}).items():
            lines.append(
                f"  bytes in process ({tag}): publication {w['publish_bytes']} B decoded in "
                f"{w['decode_us']} us, delivery {w['deliver_bytes']} B packed in {w['pack_us']} us"
            )
        cb = r.get("broker_core_us_by_backend")
        for b, core in (cb or {}).items():
            plain = core.get("plain") or 1.0
            lines.append(
                f"  core in process ({b}): "
                + ", ".join(f"{k} {v} us (x{v / plain:.2f})" for k, v in core.items())
            )
    return lines


def _steady_plan(profile: str, merkle_batch: int) -> list[tuple[str, str, int]]:
    """The runs of the steady figure: plain and the Merkle-batched form of a signing profile
    (one signature per publication is a search figure only: its verify alone is several times
    plain's whole cost, so a rate it sustains says little about the others), or the profile."""
    plan = _plan(profile, merkle_batch)
    merkle = [p for p in plan if p[1].endswith("-merkle")]
    # psguard's goal is on the paper's configuration (psguard.txt §2: brokers verify nothing)
    paper = [p for p in plan if p[1] == "psguard-paper"]
    rest = merkle + paper
    return [p for p in plan if p[1] == "plain"] + (rest or [p for p in plan if p[1] == profile])


async def run_network_bench_steady(
    profile: str,
    brokers: list[int],
    payloads: list[int],
    *,
    repeat: int = 1,
    merkle_batch: int = MERKLE_BATCH,
    attribute: str = "topic",
    subscribers: int = 32,
    quick: bool = False,
    in_process: bool = False,
    on_step: Callable[[str], None] | None = None,
    **kw: Any,
) -> list[dict[str, Any]]:
    """:func:`~pubguard.ops.bench.network.run_network_bench` (the throughput searches, kept
    beside the headline), then per configuration the steady figure (:func:`run_steady`, on
    each backend, ``repeat`` rounds) and the in-process core costs per backend; each report
    names the backend its searches ran on. Skipped for plain, ``quick`` and ``in_process``."""
    results = await network.run_network_bench(
        profile,
        brokers,
        payloads,
        repeat=repeat,
        merkle_batch=merkle_batch,
        attribute=attribute,
        subscribers=subscribers,
        quick=quick,
        in_process=in_process,
        on_step=on_step,
        **kw,
    )
    say = on_step or (lambda s: None)
    for r in results:
        r["backend"] = native.backend()
        if profile == "plain" or quick or in_process:
            continue
        plan = _steady_plan(profile, merkle_batch)
        maxima = {r.get("variant", profile): r["max_throughput_runs_eps"]}
        maxima["plain"] = r["baseline_max_throughput_runs_eps"]
        for v in r.get("variants", ()):
            maxima[v["variant"]] = v["max_throughput_runs_eps"]
        slowest = min(statistics.median(maxima[tag]) for _, tag, _ in plan if maxima.get(tag))
        with tempfile.TemporaryDirectory(prefix="pubguard-steady-") as tmp:
            r["steady"] = await run_steady(
                profile,
                r["brokers"],
                r["payload"],
                plan,
                max(STEADY_LOAD * slowest, 50.0),
                state_dir=Path(tmp),
                repeat=repeat,
                attribute=attribute,
                subscribers=subscribers,
                say=say,
            )
        head = plan[-1][1]
        r["steady_headline_run"] = head
        r["goals"] = [*r.get("goals", ()), *steady_goal(profile, head, r["steady"])]
        say(f"{profile}: broker core CPU per publication on each backend")
        batches = tuple(sorted({*MERKLE_BATCHES, merkle_batch}))
        r["broker_core_us_by_backend"] = core_costs_by_backend(
            profile, 768, merkle_batches=batches, attribute=attribute
        )
        # what the broker process spends on each publication's bytes outside the core
        r["broker_wire_us"] = wire_costs(profile, merkle_batch=merkle_batch, attribute=attribute)
    return results
