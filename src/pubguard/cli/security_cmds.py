"""``pubguard experiments flood``: eventguard.txt Fig. 13 (throughput under a flooding attack
with and without the routing guard) and Fig. 3 (how far the flood travels).

The simulation is :mod:`pubguard.sim.flood`; this module parses options, prints a rich table
(or one JSON object with ``--json``) and draws the PNG.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import click
from rich.table import Table

from pubguard.cli.common import console, get_group, print_json, progress
from pubguard.errors import ConfigError, ValidationError

if TYPE_CHECKING:  # the simulation (networkx, the schemes) is imported when the command runs
    from pubguard.sim.flood import FloodParams, PointResult

__all__ = ["register"]

# pubguard.sim.flood.VARIANTS, spelled out so that ``--help`` need not import the simulation
# (tests/cli/test_cli_startup.py checks that the two agree)
VARIANTS: Final = ("guard", "noguard", "plain")

LABELS: Final = {
    "guard": "eventguard, routing guard",
    "noguard": "eventguard, no routing guard",
    "plain": "plain (no security)",
}
COLOURS: Final = {"guard": "tab:blue", "noguard": "tab:red", "plain": "tab:gray"}
# eventguard.txt gives Fig. 13 and Fig. 3 as pictures only: no numbers to put beside ours
PAPER: Final = {
    "figure": "eventguard.txt §6.2.2 Fig. 13 and §4.7 Fig. 3",
    "numbers": None,
    "fig13": "in the absence of routing guards the throughput deteriorates drastically with the "
    "injection of flooding; with EventGuard a much more graceful drop as f_l increases "
    "(plot only, no values in the text)",
    "fig3": "no invalid or duplicate message from the malicious node propagates beyond its "
    "non-malicious neighbours; nodes further away are not hit",
    "setup": "one publisher at the root, 32 subscribers on the leaves of a complete binary tree "
    "(up to 30 nodes), one leaf node floods; ElGamal-512 verify 1.7 ms",
}
NOTES: Final = [
    "throughput = distinct legitimate publications delivered per subscriber per second inside "
    "the window, at the same offered rate for every variant (subscribers behind a malicious "
    "broker are not counted)",
    "sustainable = the paper's §6.2.2 throughput (highest rate at which no broker saturates), "
    "from the simulated per-broker flood arrivals and service times (utilisation law)",
    "broker service times are this implementation's own per-message costs (route, cheap drop, "
    "Ed25519 verify) dilated by --time-scale; a dropped duplicate or banned message costs "
    "check-us because the core decodes a message before the dedup / ban lookups",
    "flood = replayed, forged (fresh id) and bogus (fresh id, junk ciphertext) copies of the "
    "last publication the attacker routed, sent on each of its broker links",
]


def _rates(text: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValidationError(
            f"--flood-rates must be comma-separated numbers, got {text!r}"
        ) from None
    if not rates:
        raise ValidationError("--flood-rates needs at least one rate")
    return rates


def _summary(series: dict[str, list[PointResult]], p: FloodParams) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for v, pts in series.items():
        base = pts[0].throughput if pts[0].flood_rate == 0 else None
        last = pts[-1]
        out[v] = {
            "no_attack_throughput": round(base, 3) if base is not None else None,
            "throughput_at_max_flood": round(last.throughput, 3),
            "relative_at_max_flood": round(last.throughput / base, 4) if base else None,
            "brokers_reached_at_max_flood": len(last.reached),
            "max_hops_reached": max((h for h, n in last.reach_by_hop.items() if n), default=0),
        }
    if "guard" in series:
        g = series["guard"][-1]
        out["guard_contained"] = all(n == 0 for h, n in g.reach_by_hop.items() if h > 1)
    if "guard" in series and "noguard" in series:
        g, n = series["guard"][-1], series["noguard"][-1]
        out["guard_beats_noguard_at_max_flood"] = g.throughput > n.throughput
        out["noguard_spreads_further"] = len(n.reached) > len(g.reached)
    return out


def _doc(series: dict[str, list[PointResult]], p: FloodParams, seconds: float) -> dict[str, Any]:
    rows = []
    for i, f in enumerate(p.flood_rates):
        row: dict[str, Any] = {"flood_rate": f, "flood_ratio": round(f / p.offered_rate, 3)}
        for v, pts in series.items():
            base = pts[0].throughput if pts[0].flood_rate == 0 else None
            d = pts[i].to_json()
            d["relative"] = round(pts[i].throughput / base, 4) if base else None
            row[v] = d
        row["paper"] = None  # Fig. 13 is a plot: see "paper" for its qualitative result
        rows.append(row)
    top = {v: pts[-1] for v, pts in series.items()}
    any_pt = next(iter(top.values()))
    reach = [
        {"hops": h, "brokers": n, **{v: r.reach_by_hop.get(h, 0) for v, r in top.items()}}
        for h, n in any_pt.brokers_by_hop.items()
    ]
    c = p.cost
    return {
        "experiment": "flood",
        "params": {
            "arity": p.arity,
            "depth": p.depth,
            "brokers": len(p.tree()),
            "subscribers_per_leaf": p.subscribers_per_leaf,
            "offered_rate": round(p.offered_rate, 3),
            "load": p.load if p.rate is None else None,
            "flood_rates": list(p.flood_rates),
            "attackers": p.attacker_brokers(),
            "duration": p.duration,
            "warmup": p.warmup,
            "latency": p.latency,
            "cost_us": {"route": c.route_us, "check": c.check_us, "verify": c.verify_us},
            "time_scale": c.scale,
            "seed": p.seed,
        },
        "paper": PAPER,
        "series": rows,
        "reach": {"flood_rate": p.flood_rates[-1], "by_hop": reach},
        "summary": _summary(series, p),
        "seconds": round(seconds, 2),
        "notes": NOTES,
    }


def _plot(doc: dict[str, Any], variants: list[str], out: Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - matplotlib is a dependency
        raise ConfigError(f"matplotlib is needed for the figure: {exc}") from None
    rows = doc["series"]
    xs = [r["flood_rate"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    for ax, key, title in (
        (axes[0], "throughput", "(a) Fig. 13: legitimate throughput delivered"),
        (axes[1], "sustainable", "(b) §6.2.2 throughput: highest rate, no broker saturated"),
    ):
        for v in variants:
            ax.plot(xs, [r[v][key] for r in rows], "o-", color=COLOURS[v], label=LABELS[v])
        ax.set_xlabel("flood rate f_l per attacker link (messages / s)")
        ax.set_ylabel("publications / s" + (" per subscriber" if key == "throughput" else ""))
        ax.set_title(title, fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    axes[0].axhline(doc["params"]["offered_rate"], ls=":", color="k", lw=0.8, label="offered")
    axes[0].legend(fontsize=8, loc="lower left")
    reach = doc["reach"]["by_hop"]
    hops = [r["hops"] for r in reach]
    w = 0.8 / (len(variants) + 1)
    ax = axes[2]
    ax.bar(
        [h - 0.4 + w / 2 for h in hops],
        [r["brokers"] for r in reach],
        w,
        color="none",
        edgecolor="k",
        label="honest brokers at that distance",
    )
    for i, v in enumerate(variants, start=1):
        ax.bar(
            [h - 0.4 + w / 2 + i * w for h in hops],
            [r[v] for r in reach],
            w,
            color=COLOURS[v],
            label=LABELS[v],
        )
    ax.set_xticks(hops)
    ax.set_xlabel("hops from the nearest malicious broker")
    ax.set_ylabel("honest brokers that handled flood traffic")
    ax.set_title(
        f"(c) Fig. 3: how far the flood travels (f_l = {doc['reach']['flood_rate']:g})", fontsize=10
    )
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    p = doc["params"]
    fig.suptitle(
        f"eventguard.txt Fig. 13 / Fig. 3 reproduced: {p['arity']}-ary tree of {p['brokers']} "
        f"brokers, attacker(s) {', '.join(p['attackers'])}, offered {p['offered_rate']:.1f} "
        f"pub/s, virtual time (seed {p['seed']})",
        fontsize=11,
    )
    fig.tight_layout()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110)
    except OSError as exc:
        raise ConfigError(f"cannot write the figure {out}: {exc.strerror}") from None
    finally:
        plt.close(fig)
    return out


def _print(doc: dict[str, Any], variants: list[str]) -> None:
    t = Table(title="eventguard.txt Fig. 13: legitimate throughput under a flooding attack")
    # f_l: flood msgs/s per link; thr: delivered pub/s per subscriber (rel: of f_l = 0);
    # sust: §6.2.2 throughput; reach: honest brokers hit by the flood; util: busiest broker
    for col in ("f_l", "variant", "thr", "rel", "sust", "reach", "util", "lat ms"):
        t.add_column(col, justify="left" if col == "variant" else "right", no_wrap=True)
    for r in doc["series"]:
        for v in variants:
            d = r[v]
            t.add_row(
                f"{r['flood_rate']:g}",
                v,
                f"{d['throughput']:.1f}",
                f"{d['relative']:.0%}" if d["relative"] is not None else "-",
                f"{d['sustainable']:.1f}",
                str(d["reached"]),
                f"{d['max_utilisation']:.2f}",
                f"{d['latency_ms']:.0f}",
            )
        t.add_section()
    console.print(t)
    t2 = Table(
        title=f"Fig. 3: honest brokers reached by flood traffic, f_l = "
        f"{doc['reach']['flood_rate']:g}"
    )
    t2.add_column("hops", justify="right")
    t2.add_column("brokers", justify="right")
    for v in variants:
        t2.add_column(v, justify="right")
    for r in doc["reach"]["by_hop"]:
        t2.add_row(str(r["hops"]), str(r["brokers"]), *(str(r[v]) for v in variants))
    console.print(t2)
    console.print(f"paper: Fig. 13 - {PAPER['fig13']}")
    console.print(f"paper: Fig. 3 - {PAPER['fig3']}")
    console.print(f"figure: {doc['png']}  ({doc['seconds']} s)")
    for n in NOTES:
        console.print(f"[dim]- {n}[/dim]")


@click.command(
    "flood",
    short_help="Throughput under a flooding attack, with and without the routing guard (eventguard Fig 13).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("out/experiments/flood.png"),
    show_default=True,
    help="Where the PNG goes.",
)
@click.option("--arity", type=int, default=2, show_default=True, help="Broker tree arity a.")
@click.option("--depth", type=int, default=4, show_default=True, help="Broker tree depth.")
@click.option("--subscribers-per-leaf", type=int, default=1, show_default=True)
@click.option(
    "--load",
    type=float,
    default=0.8,
    show_default=True,
    help="Offered rate as a fraction of a guarded broker's capacity.",
)
@click.option("--rate", type=float, default=None, help="Offered rate (pub/s); overrides --load.")
@click.option(
    "--flood-rates",
    default="0,25,50,100,200,400",
    show_default=True,
    help="Comma-separated flood rates (messages/s per attacker link).",
)
@click.option("--attackers", type=int, default=1, show_default=True)
@click.option(
    "--attacker-depth",
    type=int,
    default=None,
    help="Depth of the malicious brokers (default: leaves, as in the paper).",
)
@click.option(
    "--duration", type=float, default=1.0, show_default=True, help="Measured virtual seconds."
)
@click.option("--warmup", type=float, default=0.3, show_default=True)
@click.option(
    "--latency", type=float, default=0.035, show_default=True, help="Broker link latency (s)."
)
@click.option("--route-us", type=float, default=80.0, show_default=True)
@click.option("--check-us", type=float, default=55.0, show_default=True)
@click.option(
    "--verify-us",
    type=float,
    default=110.0,
    show_default=True,
    help="Signature verification (the paper's ElGamal: 1700).",
)
@click.option(
    "--time-scale",
    type=float,
    default=100.0,
    show_default=True,
    help="Dilates every broker cost alike.",
)
@click.option("--variants", default=",".join(VARIANTS), show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
def flood(
    as_json: bool,
    out: Path,
    arity: int,
    depth: int,
    subscribers_per_leaf: int,
    load: float,
    rate: float | None,
    flood_rates: str,
    attackers: int,
    attacker_depth: int | None,
    duration: float,
    warmup: float,
    latency: float,
    route_us: float,
    check_us: float,
    verify_us: float,
    time_scale: float,
    variants: str,
    seed: int,
) -> None:
    """eventguard.txt Fig. 13 and Fig. 3: a flooding broker with and without the routing guard."""
    from pubguard.sim.flood import VARIANTS, CostModel, FloodParams, run_flood

    vs = [v.strip() for v in variants.split(",") if v.strip()]
    bad = [v for v in vs if v not in VARIANTS]
    if not vs or bad:
        raise ValidationError(f"--variants must be drawn from {', '.join(VARIANTS)}")
    from pubguard.cli.common import check_writable

    check_writable(out, "--out")  # before the simulation, not after
    params = FloodParams(
        arity=arity,
        depth=depth,
        subscribers_per_leaf=subscribers_per_leaf,
        load=load,
        rate=rate,
        flood_rates=_rates(flood_rates),
        attackers=attackers,
        attacker_depth=attacker_depth,
        duration=duration,
        warmup=warmup,
        latency=latency,
        cost=CostModel(route_us=route_us, check_us=check_us, verify_us=verify_us, scale=time_scale),
        seed=seed,
    )
    t0 = time.perf_counter()
    with progress() as bar:
        task = bar.add_task("flood", total=len(params.flood_rates) * len(vs))
        series = run_flood(params, variants=vs, on_point=lambda _r: bar.advance(task))
    doc = _doc(series, params, time.perf_counter() - t0)
    doc["png"] = str(_plot(doc, vs, out))
    if as_json:
        print_json(doc)
        return
    _print(doc, vs)


def register(cli: click.Group) -> None:
    get_group(cli, "experiments", "Reproduce the papers' experiments.").add_command(flood)
