"""``pubguard experiments vcaps``: vcaps.txt §6 (Figs. 3(b)-7) in the simulator and on Spark.

Runs the 40-broker tree with the real v-CAPS cores (:mod:`pubguard.sim.vcaps_experiment`) for
plain, RV, SRV and SRV-fast on the five §6.1 workloads (or ``--small``: the smallest, 60
notifications), prints one table per figure with the paper's values beside ours, and writes
JSON (``--json``) and a PNG (``--plot``). It leads with the steady broker figure
(:mod:`pubguard.sim.vcaps_steady`): thread CPU time of the broker cores per notification,
``--repeats`` interleaved repetitions, ratios per notification. Above ``--srv-max-filters`` the faithful SRV is
measured on ``--srv-sample`` notifications per class (marked sampled). ``--spark`` also runs
the largest selected workload through the Spark pipeline (:mod:`pubguard.pipeline.vcaps_run`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from pubguard.cli.common import check_writable, console, err_console, get_group, print_json
from pubguard.errors import ValidationError

__all__ = ["register"]


CLASS_NAMES = ("popular", "moderate", "esoteric")


def _workloads(small: bool, sizes: tuple[int, ...]) -> list[tuple[int, int]]:
    from pubguard.sim.vcaps_experiment import WORKLOADS

    if small:
        return [WORKLOADS[0]]
    if not sizes:
        return list(WORKLOADS)
    known = dict(WORKLOADS)
    bad = [n for n in sizes if n not in known]
    if bad:
        raise ValidationError(f"--filters {bad[0]}: one of {', '.join(str(n) for n in known)}")
    return [(n, known[n]) for n in sizes]


@click.command("vcaps")
@click.option("--small", is_flag=True, help="Only the smallest workload, 60 notifications.")
@click.option(
    "--filters", "sizes", type=int, multiple=True, help="Workload by unique filters; repeat."
)
@click.option("--events", type=click.IntRange(3, 10_000), default=None, help="Default 200.")
@click.option(
    "--profile",
    "profiles",
    multiple=True,
    type=click.Choice(["plain", "vcaps-rv", "vcaps-srv", "vcaps-srv-fast"]),
    help="Profiles to run (default all four); repeat.",
)
@click.option(
    "--srv-max-filters",
    type=int,
    default=1000,
    show_default=True,
    help="Skip the faithful SRV above this many filters (it is slow by design).",
)
@click.option(
    "--srv-sample",
    type=click.IntRange(0, 200),
    default=3,
    show_default=True,
    help="Above --srv-max-filters, run the faithful SRV on this many notifications per class "
    "(reported as sampled; 0: skip it).",
)
@click.option(
    "--poset-stage-ii",
    is_flag=True,
    help="SRV / SRV-fast brokers take the covering relation from the publisher's PFPoset "
    "(same posets and routing, minutes faster at 10,000 filters; no Fig. 6 broker column).",
)
@click.option(
    "--repeats",
    type=click.IntRange(0, 25),
    default=5,
    show_default=True,
    help="Steady broker figure: each notification's broker work this many times, profiles "
    "interleaved, thread CPU time, median kept (0: skip it).",
)
@click.option("--spark", is_flag=True, help="Also run the largest workload on the Spark pipeline.")
@click.option("--spark-only", is_flag=True, help="Only the Spark run (no simulator).")
@click.option("--master", default="local[*]", show_default=True, help="Spark master (--spark).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--plot", type=click.Path(path_type=Path), default=None, help="Draw Figs. 5-7 (PNG).")
def vcaps_experiment(
    small: bool,
    sizes: tuple[int, ...],
    events: int | None,
    profiles: tuple[str, ...],
    srv_max_filters: int,
    srv_sample: int,
    poset_stage_ii: bool,
    repeats: int,
    spark: bool,
    spark_only: bool,
    master: str,
    seed: int,
    as_json: bool,
    plot: Path | None,
) -> None:
    """v-CAPS (vcaps.txt §6): deliveries, computation, latency excess, one-time costs and
    header bytes for plain, RV, SRV and SRV-fast on the 40-broker tree."""
    from pubguard.cli.pipeline_cmds import check_master
    from pubguard.sim.vcaps_experiment import PAPER, PROFILES, histogram, run_workload

    if plot is not None:
        check_writable(plot, "--plot")
    if spark or spark_only:
        check_master(master)
    n_events = events or (60 if small else 200)
    chosen = tuple(profiles) or PROFILES
    workloads = _workloads(small, sizes)
    rows = []
    for nf, ns in [] if spark_only else workloads:
        ps = [p for p in chosen if p != "vcaps-srv" or nf <= srv_max_filters]
        sample = srv_sample if "vcaps-srv" in chosen and nf > srv_max_filters else 0
        rows.append(
            run_workload(
                nf,
                ns,
                events=n_events,
                profiles=ps,
                timer=time.perf_counter,
                seed=seed,
                srv_sampled=sample,
                poset_stage_ii=poset_stage_ii,
                steady_repeats=repeats,
                cpu_clock=time.thread_time_ns,
            )
        )
    paper: dict[str, Any] = dict(PAPER)
    doc: dict[str, Any] = {"paper": paper, "workloads": rows}
    if rows:
        doc["checks"] = _checks(rows)
    if spark or spark_only:
        nf, ns = workloads[-1]
        on = [p for p in chosen if p != "plain" and (p != "vcaps-srv" or nf <= srv_max_filters)]
        doc["spark"] = _spark_run(master, nf, ns, n_events, on, seed, quiet=as_json)
    if plot is not None and rows:
        doc["png"] = str(_plot(rows, plot))
    if as_json:
        print_json(doc)
        return
    for w in rows:
        pop = [x for c in w["popularity"].values() for x in c]
        console.print(
            f"[bold]{w['filters']} filters, {w['subscriptions']} subscriptions, "
            f"{w['events']} notifications[/]: reference deliveries {w['reference_deliveries']} "
            f"(paper: {paper['deliveries']['smallest']} smallest, "
            f"{paper['deliveries']['largest']} largest); RTT ms {w['rtt_ms']}"
        )
        console.print(
            "Fig. 3(b) subscriptions matched per notification: "
            + ", ".join(f"{lo}-{hi}: {n}" for lo, hi, n in histogram(pop) if n)
        )
        if "steady" in w:
            console.print(_steady_table(w["steady"]))
        console.print(_table(w))
        if "srv_sampled" in w:
            console.print(_srv_sampled_line(w["srv_sampled"], paper))
    for name, v in doc.get("checks", {}).items():
        console.print(f"{name}: {v}")
    if "spark" in doc:
        console.print(_spark_table(doc["spark"]))
    if "png" in doc:
        console.print(f"plot: {doc['png']}")


def _steady_table(st: dict[str, Any]) -> Table:
    """The steady broker figure first: CPU ms per notification and the per-notification
    ratios (median [quartiles] min-max) beside the goals and the paper."""
    t = Table(
        "broker CPU per notification",
        *(f"{c}" for c in ("popular", "moderate", "esoteric")),
        "goal / paper",
        title=f"Steady broker computation ({st['clock']}, median of {st['repeats']} "
        "interleaved repeats per notification; ratios: median [IQR] min-max of per-notification "
        "ratios)",
    )
    for p, row in st["broker_ms_median"].items():
        t.add_row(f"{p} ms", *(f"{row.get(c, 0):.3f}" for c in CLASS_NAMES), "")
    goals = {
        "vcaps-srv-fast/vcaps-rv": "popular <= 2 (paper's SRV: ~500x)",
        "vcaps-rv/plain": "<= 1.10 (paper: RV - baseline <= 3 ms)",
    }
    short = {"vcaps-srv-fast/vcaps-rv": "SRV-fast / RV", "vcaps-rv/plain": "RV / plain"}
    for name, per in st["ratios"].items():
        t.add_row(
            short.get(name, name),
            *(
                f"{r['median']:.2f} [{r['q1']:.2f}-{r['q3']:.2f}] {r['min']:.2f}-{r['max']:.2f}"
                if (r := per.get(c))
                else "-"
                for c in CLASS_NAMES
            ),
            goals.get(name, ""),
        )
    return t


def _srv_sampled_line(r: dict[str, Any], paper: dict[str, Any]) -> str:
    ms, want = r["broker_ms"], paper["fig5_srv_ms_at_100k"]
    n = r["per_class"].get("popular", 0)
    return (
        f"vcaps-srv, sampled ({n} notifications per class; {r['stage_ii']}): brokers ms "
        + " / ".join(f"{ms.get(c, 0):.0f}" for c in ("popular", "moderate", "esoteric"))
        + " (paper: "
        + " / ".join(f"{want[c]:.0f}" for c in ("popular", "moderate", "esoteric"))
        + f"); publisher ms {r['publisher_ms'].get('popular', 0):.2f} (paper: "
        f"{paper['fig5_srv_publisher_ms_at_100k']:.0f}); = ref {r['equal_reference']}"
    )


def _spark_run(
    master: str, nf: int, ns: int, n_events: int, profiles: list[str], seed: int, *, quiet: bool
) -> dict[str, Any]:
    import tempfile

    from pubguard.pipeline.session import get_spark
    from pubguard.pipeline.vcaps_run import run_vcaps_on_spark

    t0 = time.perf_counter()

    def progress(stage: str, msg: str) -> None:
        if not quiet:
            err_console.print(
                f"[bold]{stage:>9}[/] {msg}  [dim]({time.perf_counter() - t0:.1f}s)[/]"
            )

    spark = get_spark(master=master, app_name="pubguard-vcaps")
    with tempfile.TemporaryDirectory(prefix="pubguard-vcaps-spark-") as d:
        return run_vcaps_on_spark(
            spark, nf, ns, Path(d), events=n_events, profiles=profiles, seed=seed, progress=progress
        )


def _spark_table(r: dict[str, Any]) -> Table:
    t = Table(
        "profile",
        "deliveries",
        "= ref",
        "protect s",
        "match s",
        "open s",
        "wall s",
        title=f"Spark ({r['master']}): {r['filters']} filters, {r['subscriptions']} "
        f"subscriptions, {r['events']} notifications, reference deliveries "
        f"{r['reference_deliveries']}",
    )
    for p, x in r["profiles"].items():
        sec = x["seconds"]
        t.add_row(
            p,
            str(x["deliveries"]),
            str(x["equal_reference"]),
            f"{sec.get('protect', 0):.1f}",
            f"{sec.get('match', 0):.1f}",
            f"{sec.get('open', 0):.1f}",
            f"{x['wall_s']:.1f}",
        )
    return t


def _table(w: dict[str, Any]) -> Table:
    t = Table(
        "profile",
        "class",
        "deliv.",
        "= ref",
        "pub ms",
        "broker ms",
        "excess ms (max)",
        "hdr B/sub",
        "new filter ms broker / pub",
    )
    for p, r in w["profiles"].items():
        nb = r["new_filter_broker_ms"]
        npub = r["new_filter_publisher_ms"]
        last = (max(nb, key=int) if nb else None, max(npub, key=int) if npub else None)
        for c in ("popular", "moderate", "esoteric"):
            t.add_row(
                p,
                c,
                str(r["deliveries"]) if c == "popular" else "",
                str(r["equal_reference"]) if c == "popular" else "",
                f"{r['publisher_ms'].get(c, 0):.3f}",
                f"{r['broker_ms'].get(c, 0):.3f}",
                f"{r['excess_ms_mean'].get(c, 0):.3f} ({r['excess_ms_max'].get(c, 0):.2f})",
                str(r["header_bytes_per_subscriber"].get(c)),
                (
                    f"{nb[last[0]]:.3f}{' (sampled)' if r.get('new_filter_broker_sampled') else ''}"
                    f" / {npub[last[1]] if last[1] else 0:.3f}"
                    if c == "popular" and last[0]
                    else ""
                ),
            )
    return t


def _checks(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's goals, measured at the largest workload run."""
    w = rows[-1]
    p = w["profiles"]
    out: dict[str, Any] = {
        "deliveries_equal_reference": all(r["equal_reference"] for r in p.values()),
        "workload": f"{w['filters']} filters / {w['subscriptions']} subscriptions",
    }
    ratios = w.get("steady", {}).get("ratios", {})
    if fast_rv := ratios.get("vcaps-srv-fast/vcaps-rv", {}).get("popular"):
        out["steady_fast_over_rv_broker_popular"] = {
            k: fast_rv[k] for k in ("median", "q1", "q3", "min", "max")
        }
    if rv_plain := ratios.get("vcaps-rv/plain", {}).get("all"):
        out["steady_rv_over_plain_broker"] = {
            k: rv_plain[k] for k in ("median", "q1", "q3", "min", "max")
        }
    if "plain" in p and "vcaps-rv" in p:
        plain = sum(p["plain"]["broker_ms"].values())
        rv = sum(p["vcaps-rv"]["broker_ms"].values())
        out["rv_over_plain_broker_wallclock_sums"] = round(rv / plain, 4) if plain else None
        out["rv_minus_plain_total_ms"] = {
            c: round(p["vcaps-rv"]["total_ms"][c] - p["plain"]["total_ms"][c], 4)
            for c in p["plain"]["total_ms"]
            if c in p["vcaps-rv"]["total_ms"]
        }
    if "vcaps-rv" in p and "vcaps-srv-fast" in p:
        rv = p["vcaps-rv"]["broker_ms"].get("popular", 0)
        fast = p["vcaps-srv-fast"]["broker_ms"].get("popular", 0)
        out["fast_over_rv_broker_popular_wallclock_sums"] = round(fast / rv, 2) if rv else None
    if "srv_sampled" in w:  # the faithful SRV above --srv-max-filters, sampled
        sampled = w["srv_sampled"]
        out["deliveries_equal_reference"] &= sampled["equal_reference"]
        out["srv_sampled_broker_ms"] = sampled["broker_ms"]
        if "vcaps-rv" in p and (rv := p["vcaps-rv"]["broker_ms"].get("popular")):
            out["srv_sampled_over_rv_broker_popular"] = round(
                sampled["broker_ms"].get("popular", 0) / rv, 1
            )
    if "vcaps-rv" in p and "vcaps-srv" in p:
        rv = p["vcaps-rv"]["broker_ms"].get("popular", 0)
        srv = p["vcaps-srv"]["broker_ms"].get("popular", 0)
        out["srv_over_rv_broker_popular"] = round(srv / rv, 1) if rv else None
    return out


def _plot(rows: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pubguard.sim.plotting import plain_log_ticks

    fig, all_axes = plt.subplots(1, 4, figsize=(20, 4.2))
    _plot_steady(all_axes[0], rows[-1])
    axes = all_axes[1:]
    xs = [w["subscriptions"] for w in rows]
    profiles = sorted({p for w in rows for p in w["profiles"]})
    ax = axes[0]
    for p in profiles:
        for c, style in (("popular", "-"), ("esoteric", ":")):
            ys = [w["profiles"].get(p, {}).get("total_ms", {}).get(c) for w in rows]
            pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y]
            if pts:
                ax.plot(*zip(*pts, strict=True), style, marker="o", label=f"{p} {c}")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="subscriptions",
        ylabel="ms per notification",
        title="Fig. 5: publisher + brokers",
    )
    plain_log_ticks(ax, axis="both")
    ax.legend(fontsize=7)
    ax = axes[1]
    w = rows[-1]
    for p in profiles:
        for key, style in (("new_filter_broker_ms", "-"), ("new_filter_publisher_ms", "--")):
            d = w["profiles"].get(p, {}).get(key, {})
            sampled = w["profiles"].get(p, {}).get("new_filter_broker_sampled")
            if d:
                ks = sorted(d, key=int)
                ax.plot(
                    [int(k) for k in ks],
                    [d[k] for k in ks],
                    style,
                    marker=".",
                    label=f"{p} {'broker' if 'broker' in key else 'publisher'}"
                    + (" (sampled)" if "broker" in key and sampled else ""),
                )
    ax.set(
        yscale="log",
        xlabel="existing filters (buckets of 200)",
        ylabel="ms per new filter",
        title=f"Fig. 6 at {w['subscriptions']} subscriptions",
    )
    ax.legend(fontsize=7)
    ax = axes[2]
    for p in profiles:
        if p == "plain":
            continue
        ys = [
            w2["profiles"].get(p, {}).get("header_bytes_per_subscriber", {}).get("popular")
            for w2 in rows
        ]
        pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", label=p)
    ax.axhline(4.0, color="grey", ls=":", label="paper: < 4 B")
    ax.set(
        xscale="log",
        xlabel="subscriptions",
        ylabel="header bytes per receiving subscriber",
        title="Fig. 7 (popular)",
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_steady(ax: Any, w: dict[str, Any]) -> None:
    """The steady figure of the largest workload: per class, the per-notification ratios
    (box: quartiles, whiskers: min-max, line: median) beside the goals."""
    from pubguard.sim.plotting import plain_log_ticks

    ratios = w.get("steady", {}).get("ratios", {})
    stats: list[dict[str, Any]] = []
    for name, per in ratios.items():
        short = "SRV-fast/RV" if name.startswith("vcaps-srv-fast") else "RV/plain"
        for c in CLASS_NAMES:
            if r := per.get(c):
                stats.append(
                    {
                        "med": r["median"],
                        "q1": r["q1"],
                        "q3": r["q3"],
                        "whislo": r["min"],
                        "whishi": r["max"],
                        "label": f"{short}\n{c}",
                    }
                )
    if not stats:
        ax.set_axis_off()
        return
    ax.bxp(stats, showfliers=False)
    if "vcaps-srv-fast/vcaps-rv" in ratios:
        ax.axhline(2.0, color="tab:red", ls=":", label="goal SRV-fast/RV <= 2 (popular)")
    if "vcaps-rv/plain" in ratios:
        ax.axhline(1.1, color="tab:green", ls=":", label="goal RV/plain <= 1.1")
    ax.set(
        yscale="log",
        ylabel="broker CPU ratio per notification",
        title=f"Steady broker CPU ratios at {w['subscriptions']} subscriptions",
    )
    plain_log_ticks(ax, axis="y")
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(fontsize=7)


def register(cli: click.Group) -> None:
    get_group(cli, "experiments", "Reproduce the papers' experiments.").add_command(
        vcaps_experiment
    )
