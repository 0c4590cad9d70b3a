"""``pubguard demo`` (what ``make demo`` runs): the secure hospital network, then Spark.

Part 1 (:mod:`pubguard.ops.demo.hospital`): a five-broker cluster in three domains
(hospital, cloud, university) started from the embedded configuration, serving the ``default``
and ``psguard`` profiles from public key material. A hospital publishes ``<topic, age,
patientRecord>`` events (psguard.txt §1); a paediatric unit (ages 0-17), an oncology researcher
(20-30) and a geriatric ward (65-100) each receive exactly their events in plaintext, while the
curious cloud broker every event crosses holds tokens, ciphertext and signatures only. The
demo prints the two views side by side and scans the cloud broker's recorded messages, SQLite
files and log for every published plaintext string.

Its last act (default profile): a ward laptop's identity is stolen; the hospital's
administrator revokes it at the key service while the network runs; every broker takes the
authority-signed revocation list within a poll, and the thief's publications are dropped as
``revoked`` at the first broker and reach no subscriber.

Part 2: a Spark dissemination run (``local[*]`` by default) over a generated
psguard workload with :func:`pubguard.pipeline.run.run_pipeline`, printing the stage summary
and a few opened deliveries beside the ciphertext the executors handled.

Every broker process is stopped and the Spark session closed before the command returns.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.panel import Panel
from rich.table import Table

from pubguard.cli.common import console, print_json
from pubguard.errors import StateError, ValidationError
from pubguard.ops.demo.glossary import gloss

BROKER_LOGGER = "pubguard.net"  # what in-process brokers log (a broker process: its log file)

__all__ = ["hexcut", "register", "run_spark_part"]

SAMPLE_ROWS = 8  # events shown side by side
SPARK_SAMPLES = 3  # opened deliveries shown beside their ciphertext


def hexcut(b: Any, n: int = 12) -> str:
    """``b`` as truncated hex (``a1b2c3…(34 B)``)."""
    if not isinstance(b, bytes | bytearray):
        return "-"
    h = bytes(b).hex()
    return f"{h[: 2 * n]}…({len(b)} B)" if len(b) > n else h


def _secrets(blob: Any, n: int = 8) -> list[str]:
    """A sealed-secrets field as ``label: ciphertext`` lines (each label a keyed hash that
    only a holder of the event's key maps back to the attribute's name)."""
    from pubguard.schemes.psguard.record import decode_secrets

    if not isinstance(blob, bytes):
        return ["-"]
    try:
        return [f"{k[: 2 * n]}…: {hexcut(v, n)}" for k, v in decode_secrets(blob)]
    except ValidationError:  # not a secrets field: show the bytes
        return [hexcut(blob, n)]


def _tokens(routing: dict[str, Any]) -> list[str]:
    """The routing tokens of a recorded publication, one per line."""
    t = routing.get("t")
    n = routing.get("n")
    if isinstance(t, bytes):
        return [f"r={hexcut(n, 6)}", f"F_T(r)={hexcut(t, 6)}"]
    return [hexcut(json.dumps(routing, default=str).encode(), 6)]


# -- part 1: the hospital network ----------------------------------------------------------------


def _print_network(r: Any) -> None:
    from pubguard.ops.demo.hospital import CURIOUS, UNITS

    doms = ", ".join(f"{b} ({d})" for b, d in r.domains.items())
    console.print(
        Panel(
            f"brokers: {doms}\nprofile: {r.profile}; the cloud broker records every "
            "message it routes",
            title="secure hospital network",
        )
    )
    # one block per unit: the verdict on the unit's line, its filters below (they are too wide
    # for a table column at 80 columns)
    console.print("[bold]subscribers: authorised filters and what they received[/bold]")
    for unit, broker, filters in UNITS:
        got, exp = len(r.received.get(unit, [])), len(r.expected.get(unit, []))
        mark = "[green]✓[/green]" if got == exp else "[red]✗[/red]"
        console.print(f"  {unit} at {broker} ({r.domains[broker]}): received {got}/{exp} {mark}")
        for f in filters:
            console.print(f"    {f}", highlight=False)
    _print_events(r, CURIOUS)
    subs = [m for _, m in r.curious.messages if m.get("op") == "subscribe"]
    if subs:
        groups = subs[0].get("filter", {}).get("g", [[]])
        toks = [hexcut(t, 6) for clause in groups for g in clause for t in g]
        console.print(
            f"[dim]{CURIOUS} also holds {len(subs)} subscriptions as token sets, e.g. "
            f"{', '.join(toks[:3])}[/dim]"
        )
    cv = r.curious
    size = sum(cv.files.values())
    verdict = (
        "[green]0 found[/green]"
        if not cv.hits
        else f"[red]{len(cv.hits)} found: {cv.hits[:5]}[/red]"
    )
    # the verdict first: it must not be wrapped apart, whatever the file list's length
    console.print(
        f"{CURIOUS}'s view: {verdict} of {cv.needles} plaintext strings (every "
        f"event id, patientRecord, payload, topic and age, and the secret attribute's "
        f"name) in its {len(cv.messages)} recorded "
        f"messages and {len(cv.files)} files ({size:,} B: "
        f"{', '.join(sorted(cv.files))}). The same scan finds "
        f"{cv.control_hits}/{cv.needles} in the plain profile's wire form of these "
        "events."
    )


def _print_events(r: Any, curious: str) -> None:
    """The same events side by side, three narrow columns: the event, what its subscriber
    reads, and what the curious broker holds (tokens, ciphertext, signature as truncated hex,
    one item per line, so each fits its column at 80 columns)."""
    # the broker holds each publication under its opaque wire id (the publisher's keyed hash)
    held = {m["event_id"]: m for _, m in r.curious.messages if m.get("op") == "publish"}
    held = {i: held[w] for i, w in r.wire_ids.items() if w in held}
    who = {str(e.id): u for u, evs in r.received.items() for e in evs}
    merkle = r.profile == "default"  # one signature per batch of 8 publications, with paths
    sig = "a signature (Merkle root of 8)" if merkle else "an Ed25519 signature"
    console.print(
        f"[bold]the same events: what a subscriber reads | what '{curious}' holds[/bold]\n"
        f"{curious} holds tokens <r, F_T(r)>, ciphertext, {sig}:"
    )
    console.print(gloss("<r, F_T(r)>"), style="dim", highlight=False)
    if merkle:
        console.print(gloss("Merkle root of 8"), style="dim", highlight=False)
    side = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    side.add_column("event", no_wrap=True)
    side.add_column("subscriber reads (plaintext)")
    side.add_column(f"{curious} holds", overflow="fold")
    for e in [e for e in r.events if str(e.id) in who][:SAMPLE_ROWS]:
        m = held.get(str(e.id), {})
        meta = m.get("meta", {})
        holds = [
            f"id: {str(m.get('event_id', '-'))[:12]}…",
            *_tokens(m.get("routing", {})),
            f"body: {hexcut(m.get('body'), 6)}",
            *_secrets(meta.get("s"), 6),
            f"sig: {hexcut(meta.get('sig'), 6)}",
        ]
        reads = f"[bold]{who[str(e.id)]}[/bold]\n{e['topic']}, {e['age']}, {e['patientRecord']}"
        side.add_row(str(e.id), reads, "\n".join(holds), end_section=True)
    console.print(side, highlight=False)


def _print_revocation(act: Any) -> None:
    before = "; ".join(f"{u}: {', '.join(ids)}" for u, ids in act.before.items() if ids)
    learned = max(act.learned.values(), default=0.0)
    where = ", ".join(f"{b}: {n}" for b, n in act.drops.items()) or "none"
    leaked = sum(map(len, act.leaked.values()))
    mark = "[green]✓[/green]" if act.ok else "[red]✗[/red]"
    reasons = sorted({r for _, r in act.errors}) or ["none"]
    console.print(
        Panel(
            f"before the theft, {act.identity} published at {act.broker}: delivered ({before})\n"
            f"the admin revoked {act.identity} at the key service: signed list serial {act.serial}, "
            f"applied by {len(act.learned)} brokers within {learned:.1f} s\n"
            f"the thief published {len(act.thief)} events as {act.identity} "
            f"({', '.join(act.thief)}): dropped at the first broker as revoked ({where}); "
            f"thief told: {', '.join(reasons)}; received by subscribers: {leaked} {mark}",
            title="revocation while the network runs",
        )
    )


# -- part 2: Spark ---------------------------------------------------------------------------------


def run_spark_part(
    workdir: Path, *, master: str, events: int, subscribers: int, seed: int, say: Any
) -> dict[str, Any]:
    """Generate a psguard workload, run the pipeline on it, return its summary plus samples of
    opened deliveries with the ciphertext the executors handled."""
    import pyarrow.dataset as ds

    from pubguard.crypto import random_bytes
    from pubguard.pipeline.opener import read_opened
    from pubguard.pipeline.run import run_pipeline
    from pubguard.pipeline.session import get_spark
    from pubguard.pipeline.stages import TrustedContext
    from pubguard.schemes.common.wire_id import WireIds
    from pubguard.sim.workloads import generate

    generate(
        "psguard",
        workdir / "workload",
        seed=seed,
        events=events,
        subscribers=subscribers,
        topics_per_subscriber=8,
    )
    say(f"psguard workload: {events} events, {subscribers} subscribers; starting Spark ({master})")
    spark = get_spark(master=master, app_name="pubguard-demo", shuffle_partitions=4)
    secret = random_bytes(32)  # the KDC master (and the publisher's key derived from it)
    try:
        summary = run_pipeline(
            spark,
            workdir / "workload",
            workdir / "out",
            profile="psguard",
            mode="randomized",
            master_secret=secret,
            seed=seed,
            progress=lambda stage, msg: say(f"{stage}: {msg}"),
        )
    finally:
        _stop_spark(spark)
    opened = read_opened(workdir / "out" / "opened")
    outbox = ds.dataset(str(workdir / "out" / "outbox"), format="parquet", partitioning="hive")
    rows = {(str(x["subscriber"]), x["event_id"]): x for x in outbox.to_table().to_pylist()}
    # executors hold each event under the publisher's opaque wire id; opened/ has the
    # application's id back (the trusted side derives the one from the other)
    wire = WireIds.for_key(TrustedContext.create(secret, ()).signing_key)
    samples = []
    for rec in opened.head(SPARK_SAMPLES).to_dict("records"):
        c = rows.get((str(rec["subscriber"]), wire(str(rec["event_id"]))), {})
        samples.append(
            {
                "subscriber": rec["subscriber"],
                "event_id": rec["event_id"],
                "attrs": json.loads(rec["attrs"]),
                "payload": bytes(rec["payload"])[:24].decode(errors="replace"),
                "executor_secrets": _secrets(c.get("secrets"), 6),
                "executor_payload": hexcut(c.get("payload"), 6),
            }
        )
    summary["samples"] = samples
    return summary


def _stop_spark(spark: Any) -> None:
    """Stop the session *and* its JVM, so no process outlives the demo (pyspark otherwise
    keeps the gateway JVM until the interpreter exits)."""
    from pyspark import SparkContext

    spark.stop()
    gw = SparkContext._gateway
    if gw is None:
        return
    proc = getattr(gw, "proc", None)
    with contextlib.suppress(Exception):
        gw.shutdown()
    if proc is not None:
        with contextlib.suppress(Exception):
            proc.stdin.close()  # the launcher exits when its stdin closes
            proc.wait(timeout=30)
    SparkContext._gateway = None
    SparkContext._jvm = None


def _print_spark(s: dict[str, Any]) -> None:
    console.print(f"[bold]Spark dissemination ({s['master']}, psguard, {s['mode']} tokens)[/bold]")
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    t.add_column("stage")
    t.add_column("seconds", justify="right")
    for stage, sec in s["seconds"].items():
        t.add_row(stage, f"{sec:.2f}")
    console.print(t)
    drops = ", ".join(f"{k}: {v}" for k, v in s["drops"].items()) if s["drops"] else "none"
    console.print(
        f"{s['events']:,} events, {s['subscriptions']:,} subscriptions of "
        f"{s['subscribers']:,} subscribers\n{s['deliveries']:,} deliveries, "
        f"{s['opened']:,} opened, {s['refused']:,} refused; drops: {drops}"
    )
    console.print("[bold]opened by the subscriber | what the executors handled[/bold]")
    d = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    d.add_column("delivery", no_wrap=True)
    d.add_column("opened by the subscriber")
    d.add_column("executors handled", overflow="fold")
    for x in s["samples"]:
        opened = [f"{k}: {v}" for k, v in x["attrs"].items()]
        d.add_row(
            f"{x['subscriber']}\n{x['event_id']}",
            "\n".join([*opened, f"payload: {x['payload']}…"]),
            "\n".join([*x["executor_secrets"], f"payload: {x['executor_payload']}"]),
            end_section=True,
        )
    console.print(d, highlight=False)


@contextlib.contextmanager
def quiet_in_process_brokers(in_process: bool) -> Any:
    """With ``--in-process`` the brokers log into this terminal, so their warnings (each
    broker's first revocation poll runs before the key service is up: "revocation feed:
    unreachable") would interleave with the demo's narration, which reports the same events
    checked. Keep only their errors for the demo's duration, unless ``-v`` asked for more; as
    processes they write to their own log files anyway."""
    log = logging.getLogger(BROKER_LOGGER)
    if not in_process or logging.getLogger().getEffectiveLevel() < logging.WARNING:
        yield
        return
    old = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(old)


def register(cli: click.Group) -> None:
    @cli.command("demo")
    @click.option(
        "--profile",
        type=click.Choice(["default", "psguard"]),
        default="default",
        show_default=True,
        help="Profile the hospital and its units speak.",
    )
    @click.option("--events", type=click.IntRange(1, 1000), default=24, show_default=True)
    @click.option("--seed", type=int, default=7, show_default=True)
    @click.option("--in-process", is_flag=True, help="Brokers in this process (no processes).")
    @click.option("--no-spark", is_flag=True, help="Skip the Spark part.")
    @click.option("--master", default="local[*]", show_default=True, help="Spark master.")
    @click.option("--spark-events", type=click.IntRange(1, 100_000), default=200, show_default=True)
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
    @click.option(
        "--scenario",
        type=click.Choice(["hospital", "police"]),
        default="hospital",
        show_default=True,
        help="police: Hermes' Fig. 1 (pubguard.ops.demo.police), no Spark part.",
    )
    def demo(
        profile: str,
        events: int,
        seed: int,
        in_process: bool,
        no_spark: bool,
        master: str,
        spark_events: int,
        as_json: bool,
        scenario: str,
    ) -> None:
        """The secure hospital network with a curious cloud broker, then a Spark run."""
        import asyncio

        if scenario == "police":
            from pubguard.cli.police_view import run_police

            run_police(events=events, seed=seed, as_json=as_json)
            return

        from pubguard.cli.pipeline_cmds import check_master
        from pubguard.ops.demo.hospital import hospital_demo

        if not no_spark:  # a typo here must not surface as a Java trace after the network part
            check_master(master)
        t0 = time.perf_counter()

        def say(s: str) -> None:
            if not as_json:
                console.print(f"[dim]{s}[/dim]")

        with quiet_in_process_brokers(in_process):
            r = asyncio.run(
                hospital_demo(
                    profile=profile, events=events, seed=seed, in_process=in_process, say=say
                )
            )
        if not as_json:
            _print_network(r)
            if r.revocation is not None:
                _print_revocation(r.revocation)
        out: dict[str, Any] = {"network": r.to_json()}
        if not no_spark:
            with tempfile.TemporaryDirectory(prefix="pubguard-demo-spark-") as tmp:
                s = run_spark_part(
                    Path(tmp),
                    master=master,
                    events=spark_events,
                    subscribers=16,
                    seed=seed,
                    say=say,
                )
            s.pop("out", None)
            out["spark"] = s
            if not as_json:
                _print_spark(s)
        out["seconds"] = round(time.perf_counter() - t0, 1)
        if as_json:
            print_json(out)
        else:
            console.print(f"demo finished in {out['seconds']} s; every broker stopped")
        if not r.correct:
            raise StateError("some subscriber did not receive exactly its authorised events")
        assert r.curious is not None
        if not r.curious.clean:
            raise StateError(f"the curious broker holds plaintext: {r.curious.hits[:5]}")
        if r.revocation is not None and not r.revocation.ok:
            raise StateError("the revoked identity's publications were not all dropped")
