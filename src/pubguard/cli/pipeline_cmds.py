"""``pubguard pipeline run|match|stream``, ``pubguard spark-cluster up|down|status`` and
``pubguard bench pipeline`` (dissemination on Spark)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import click

from pubguard.cli.common import check_writable, console, err_console, get_group, print_json
from pubguard.errors import ConfigError, StateError

__all__ = ["check_master", "register"]

_MODES = click.Choice(["deterministic", "randomized"])
# what SparkSubmit accepts as a master; anything else makes the JVM print a stack trace
_MASTER = re.compile(
    r"local(\[(\*|[1-9][0-9]*)(,[0-9]+)?\])?|local-cluster\[.+\]|spark://\S+|yarn|k8s://\S+"
)


def check_master(master: str) -> None:
    """Refuse a master Spark would refuse, before a JVM starts (it prints a Java trace)."""
    if _MASTER.fullmatch(master) is None:
        raise ConfigError(
            f"--master must be local, local[N], local[*] or spark://host:port, got {master!r}",
            key="master",
        )


def _progress(quiet: bool) -> Any:
    t0 = time.perf_counter()

    def cb(stage: str, msg: str) -> None:
        if not quiet:
            err_console.print(
                f"[bold]{stage:>9}[/] {msg}  [dim]({time.perf_counter() - t0:.1f}s)[/]"
            )

    return cb


def _session(master: str, app: str) -> Any:
    from pubguard.pipeline.session import get_spark

    return get_spark(master=master, app_name=app)


def _print_summary(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(summary)
        return
    from rich.table import Table

    t = Table(title=f"pipeline {summary.get('mode', '')}")
    t.add_column("what")
    t.add_column("value", justify="right")
    for k, v in summary.items():
        if k == "seconds":
            for stage, s in v.items():
                t.add_row(f"seconds: {stage}", f"{s:.3f}")
        elif k == "drops":
            t.add_row("drops", ", ".join(f"{r}={n}" for r, n in v.items()) or "none")
        else:
            t.add_row(k, str(v))
    console.print(t)


def register(cli: click.Group) -> None:
    @cli.group(name="pipeline")
    def pipeline() -> None:
        """Secure dissemination on Spark: executors see tokens and ciphertext only."""

    @pipeline.command(name="run")
    @click.option("--workload", required=True, type=click.Path(file_okay=False, path_type=Path))
    @click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path))
    @click.option(
        "--profile",
        default="default",
        show_default=True,
        help="default, eventguard, psguard or plain (pubguard.pipeline.profiles).",
    )
    @click.option(
        "--mode", type=_MODES, default=None, help="Token mode (default: the profile's first)."
    )
    @click.option(
        "--master", default="local[*]", show_default=True, help="local[N] or spark://host:port"
    )
    @click.option("--seed", type=int, default=None, help="Deterministic nonces (tests, demos).")
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON summary object.")
    def run(
        workload: Path,
        out: Path,
        profile: str,
        mode: str | None,
        master: str,
        seed: int | None,
        as_json: bool,
    ) -> None:
        """protect -> validate -> match -> deliver -> open on a workload folder."""
        from pubguard.pipeline.run import load_run_workload, run_pipeline

        # everything that can be refused is refused before Spark starts (seconds, a JVM and
        # its log lines): the profile and mode, the master, then every record of the workload
        check_master(master)
        wl = load_run_workload(workload, profile=profile, mode=mode)  # refuses a bad mode too
        spark = _session(master, "pubguard-pipeline-run")
        summary = run_pipeline(
            spark, wl, out, profile=profile, mode=mode, seed=seed, progress=_progress(False)
        )
        _print_summary(summary, as_json)

    @pipeline.command(name="match")
    @click.option("--protected", required=True, type=click.Path(file_okay=False, path_type=Path))
    @click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path))
    @click.option("--master", default="local[*]", show_default=True)
    @click.option("--now-ms", type=int, default=None, help="Clock for the timestamp guard.")
    @click.option("--json", "as_json", is_flag=True)
    def match_cmd(
        protected: Path, out: Path, master: str, now_ms: int | None, as_json: bool
    ) -> None:
        """The untrusted part only (validate, match, deliver) on a protected folder."""
        from pubguard.pipeline.run import match_protected
        from pubguard.pipeline.tables import read_manifest

        read_manifest(protected)  # a missing or bad folder fails before Spark starts
        check_master(master)
        spark = _session(master, "pubguard-pipeline-match")
        res = match_protected(spark, protected, out, now_ms=now_ms, progress=_progress(False))
        res["seconds"] = {k: round(v, 3) for k, v in res["seconds"].items()}
        _print_summary(res, as_json)

    @pipeline.command(name="stream")
    @click.option("--source", required=True, type=click.Path(file_okay=False, path_type=Path))
    @click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path))
    @click.option("--checkpoint", required=True, type=click.Path(file_okay=False, path_type=Path))
    @click.option("--master", default="local[*]", show_default=True)
    @click.option("--available-now", is_flag=True, help="Process what is there, then stop.")
    @click.option("--timeout", type=float, default=None, help="Stop after this many seconds.")
    @click.option("--max-files-per-trigger", type=int, default=None)
    @click.option("--json", "as_json", is_flag=True)
    def stream_cmd(
        source: Path,
        out: Path,
        checkpoint: Path,
        master: str,
        available_now: bool,
        timeout: float | None,
        max_files_per_trigger: int | None,
        as_json: bool,
    ) -> None:
        """Structured Streaming: protected events arriving in SOURCE/events, exactly-once
        deliveries to OUT/outbox, restartable from CHECKPOINT."""
        from pubguard.pipeline.stream import run_stream

        check_master(master)
        spark = _session(master, "pubguard-pipeline-stream")
        res = run_stream(
            spark,
            source,
            out,
            checkpoint,
            available_now=available_now,
            timeout=timeout,
            max_files_per_trigger=max_files_per_trigger,
        )
        _print_summary(res, as_json)

    @cli.group(name="spark-cluster")
    def spark_cluster() -> None:
        """A Spark standalone master + worker on 127.0.0.1 from the pyspark wheel."""

    state_opt = click.option(
        "--state-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Where pids, logs and the master URL live (default ~/.local/state/pubguard/spark-cluster).",
    )

    @spark_cluster.command(name="up")
    @state_opt
    @click.option(
        "--cores", type=click.IntRange(min=1), default=2, show_default=True, help="Per worker."
    )
    @click.option("--memory", default="2g", show_default=True, help="Per worker.")
    @click.option(
        "--workers", type=click.IntRange(min=1), default=1, show_default=True, help="Workers."
    )
    @click.option("--json", "as_json", is_flag=True)
    def up(state_dir: Path | None, cores: int, memory: str, workers: int, as_json: bool) -> None:
        """Start a master and N workers (--cores each); returns when every worker has
        registered."""
        from pubguard.pipeline.cluster import cluster_up

        info = cluster_up(state_dir, cores=cores, memory=memory, workers=workers)
        if as_json:
            print_json(info.to_json())
        else:
            pids = ", ".join(map(str, info.worker_pids))
            console.print(
                f"master {info.master_url} (ui {info.master_ui}), "
                f"{info.workers} worker(s) x {info.cores} core(s), pids {pids}"
            )
            console.print(f"run jobs with: pubguard pipeline run --master {info.master_url} ...")

    @spark_cluster.command(name="down")
    @state_opt
    def down(state_dir: Path | None) -> None:
        """Stop the worker and master started by ``up``."""
        from pubguard.pipeline.cluster import cluster_down

        info = cluster_down(state_dir)
        console.print("stopped " + info.master_url if info else "no cluster recorded")

    @spark_cluster.command(name="status")
    @state_opt
    def status(state_dir: Path | None) -> None:
        """The running master's URL, UI and pids as one JSON object (exit 1 if none)."""
        from pubguard.pipeline.cluster import cluster_status

        info = cluster_status(state_dir)
        if info is None:
            raise StateError("no Spark cluster is running (pubguard spark-cluster up)")
        print_json(info.to_json())

    bench = get_group(cli, "bench", "Benchmarks (each with its plain baseline in the same run).")

    @bench.command(name="pipeline")
    @click.option("--subscriptions", type=click.IntRange(min=1), default=100_000, show_default=True)
    @click.option("--events", type=click.IntRange(min=1), default=2000, show_default=True)
    @click.option(
        "--mode",
        type=click.Choice(["deterministic", "randomized", "both"]),
        default="both",
        show_default=True,
    )
    @click.option(
        "--cores",
        type=click.IntRange(min=1),
        default=2,
        show_default=True,
        help="local[N] for the main run",
    )
    @click.option(
        "--profile",
        "profiles",
        default="default,eventguard",
        show_default=True,
        help="Comma-separated pipeline profiles, each beside the plaintext join.",
    )
    @click.option(
        "--master",
        default=None,
        help="Run on this cluster (spark://host:port; no scaling run). Default: local[--cores].",
    )
    @click.option("--no-scaling", is_flag=True, help="Skip the local[1] run (2-core/1-core ratio).")
    @click.option(
        "--sweep",
        "sweep_png",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Also run a sweep and plot time vs matches to this PNG.",
    )
    @click.option("--seed", type=int, default=1, show_default=True)
    @click.option(
        "--repeat",
        type=click.IntRange(min=1),
        default=3,
        show_default=True,
        help="Timed rounds after a warm-up; ratios are medians of per-round ratios.",
    )
    @click.option("--json", "as_json", is_flag=True)
    def bench_pipeline(
        subscriptions: int,
        events: int,
        mode: str,
        cores: int,
        profiles: str,
        master: str | None,
        no_scaling: bool,
        sweep_png: Path | None,
        seed: int,
        repeat: int,
        as_json: bool,
    ) -> None:
        """Match-stage throughput of each profile vs the plaintext join on the same data."""
        from pubguard.pipeline.bench import bench_pipeline as run_bench
        from pubguard.pipeline.bench import print_bench
        from pubguard.pipeline.profiles import get_profile

        if sweep_png is not None:  # before Spark and the runs, not after
            check_writable(sweep_png, "--sweep")
        names = [p.strip() for p in profiles.split(",") if p.strip()]
        for p in names:
            get_profile(p)  # an unknown name fails here, in one line
        if master is not None:
            check_master(master)
        modes = ["deterministic", "randomized"] if mode == "both" else [mode]
        res = run_bench(
            subscriptions=subscriptions,
            events=events,
            modes=modes,
            profiles=names,
            master=master,
            cores=cores,
            scaling=not no_scaling,
            sweep_png=sweep_png,
            seed=seed,
            repeat=repeat,
            progress=_progress(as_json),
        )
        if as_json:
            print_json(res)
        else:
            print_bench(res, console)
