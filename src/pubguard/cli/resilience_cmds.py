"""``pubguard experiments resilience`` (eventguard.txt §5, Figs. 5, 6, 8-10 and the analytic
numbers) and ``pubguard experiments psguard-entropy`` (psguard.txt §4.2, Figs. 6-8).

The simulations are :mod:`pubguard.sim.resilience`, :mod:`pubguard.sim.entropy`,
:mod:`pubguard.sim.canary` and :mod:`pubguard.sim.resilience_report`; the sweeps run as Spark
jobs (:mod:`pubguard.pipeline.sweeps`, ``--master`` as elsewhere). Output: a table (or one
JSON object with ``--json``) with the paper's values beside ours, and a PNG.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Final

import click
from rich.table import Table

from pubguard.cli.common import check_writable, console, get_group, print_json
from pubguard.errors import ValidationError

__all__ = ["register"]

PS_FULL: Final = tuple(round(0.05 * i, 2) for i in range(11))  # 0 .. 0.5
PS_QUICK: Final = (0.0, 0.1, 0.3, 0.5)


def _spark(master: str) -> Any:
    from pubguard.pipeline.session import get_spark

    return get_spark(master=master, app_name="pubguard-experiments")


def _resilience_doc(master: str, seed: int, quick: bool) -> dict[str, Any]:
    from random import Random

    from pubguard.overlay.tree import ary_tree
    from pubguard.pipeline.sweeps import run_sweep
    from pubguard.sim.canary import canary_scan
    from pubguard.sim.eventguard_load import (
        PAPER_TABLE2_MS,
        PAPER_TABLE3_BYTES,
        fig7_load,
        measure_costs,
    )
    from pubguard.sim.malicious import place_malicious
    from pubguard.sim.resilience import EVENTGUARD_SETUP, run_resilience
    from pubguard.sim.resilience_report import (
        analytic_numbers,
        fig5_points,
        fig8_cost,
        flood_share,
    )

    base = replace(EVENTGUARD_SETUP, seed=seed)
    ps = PS_FULL
    if quick:
        base = replace(base, nodes=1023, subscribers=1024, publishers=8, runs=2)
        ps = PS_QUICK
    arities, a10, inds = (2, 4, 8), 4, (1, 2, 3, 4)
    points = [replace(base, arity=a, ind=1, p=p) for a in arities for p in ps]
    points += [replace(base, arity=a10, ind=i, p=p) for i in inds for p in ps]
    nss = (256, 1024) if quick else (256, 1024, 8192)
    points += fig5_points(base, ps, nss)
    tree = ary_tree(2, 4 if quick else 5)  # real cores: 31 / 63 brokers
    scans = []
    for p in ps[1:]:
        bad = place_malicious(tree, round(p * (len(tree) - 1)), Random(seed), exclude=[tree.root])
        for prof in ("plain", "eventguard"):
            r = canary_scan(tree, bad, profile=prof, events=5 if quick else 20, seed=seed)
            scans.append({"p": p, **r})
    flood = flood_share(base, ps[1:], (4, 16))
    fig8 = fig8_cost((2, 4, 8), 1000, (1, 10, 100, 500, 1000), (1, 2, 3), seed, 3 if quick else 10)
    ours = measure_costs(50 if quick else 300, seed)
    shares = (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99)
    # the Spark sweep last: the in-process simulations above run before the JVM gateway
    # and pyarrow are loaded into this process
    res = run_sweep(_spark(master), run_resilience, points)
    n9, n10 = len(arities) * len(ps), len(inds) * len(ps)
    fig9, fig10, fig5 = res[:n9], res[n9 : n9 + n10], res[n9 + n10 :]
    track = max(abs(r["resilience"] - r["analytic"]) for r in fig9 + fig10)
    return {
        "experiment": "resilience",
        "setup": {k: v for k, v in asdict(base).items() if k not in ("p", "ind", "arity")},
        "analytic": analytic_numbers(),
        "fig5_plain": [
            {
                "NS": r["nodes"] // 2 + 1,
                "p": r["p"],
                "h": r["h"],
                "exposed": round(1 - r["resilience"], 4),
                "analytic": round(1 - r["analytic"], 4),
            }
            for r in fig5
        ],
        "fig5_canary_scan": scans,
        "fig6_flood_share": flood,
        "fig8_cost": fig8,
        "table2_ms": {
            k: {"paper": round(v, 4), "ours": ours["table2_ms"].get(k)}
            for k, v in PAPER_TABLE2_MS.items()
        },
        "table3_bytes": {
            "paper": PAPER_TABLE3_BYTES,
            "ours_publication": ours["table3_publication_bytes"],
        },
        "fig7": {
            "paper_costs": fig7_load(PAPER_TABLE2_MS, shares),
            "our_costs": fig7_load(ours["table2_ms"], shares),
        },
        "fig9": _rows(fig9),
        "fig10": _rows(fig10),
        "max_abs_sim_minus_analytic": round(track, 4),
        "paper": {
            "fig5": "plain loses confidentiality/integrity on 1 - (1 - p)^h; EventGuard on none",
            "fig6": "clustered malicious nodes hurt much less than sparse ones (plot only)",
            "fig9_10": "resilience rises with a and with ind (plot only); Pr(succ) formula §5.2",
        },
    }


def _rows(res: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items() if k != "per_run"}
        for r in res
    ]


def _plot_resilience(doc: dict[str, Any], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 3, figsize=(15, 8.5))
    a5, a6, a8, a9, a10, a7 = ax.ravel()
    for ns in sorted({r["NS"] for r in doc["fig5_plain"]}):
        rows = [r for r in doc["fig5_plain"] if r["NS"] == ns]
        a5.plot([r["p"] for r in rows], [r["exposed"] for r in rows], "o-", label=f"plain NS={ns}")
    eg = [r for r in doc["fig5_canary_scan"] if r["profile"] == "eventguard"]
    a5.plot(
        [r["p"] for r in eg], [r["fraction_exposed"] for r in eg], "k^-", label="EventGuard (scan)"
    )
    a5.set(title="Fig. 5: messages exposed", xlabel="p", ylabel="fraction")
    for key in [k for k in doc["fig6_flood_share"][0] if k != "p" and ":" not in k]:
        a6.plot(
            [r["p"] for r in doc["fig6_flood_share"]],
            [r[key] for r in doc["fig6_flood_share"]],
            "o-",
            label=key,
        )
    a6.set(title="Fig. 6: bandwidth on flood messages", xlabel="p", ylabel="fraction")
    for a in sorted({r["a"] for r in doc["fig8_cost"]}):
        rows = [r for r in doc["fig8_cost"] if r["a"] == a]
        a8.plot([r["N_w"] for r in rows], [r["messages"] for r in rows], "o-", label=f"a={a}")
        a8.plot([r["N_w"] for r in rows], [r["bound"] for r in rows], ":", color="gray")
    a8.set(
        title="Fig. 8: messages per publication (NS=1000)",
        xlabel="N(w)",
        ylabel="messages",
        xscale="log",
        yscale="log",
    )
    for key, axis, title in (("arity", a9, "Fig. 9 (ind=1)"), ("ind", a10, "Fig. 10 (a=4)")):
        fig_rows = doc["fig9" if axis is a9 else "fig10"]
        for v in sorted({r[key] for r in fig_rows}):
            rows = [r for r in fig_rows if r[key] == v]
            line = axis.plot(
                [r["p"] for r in rows], [r["resilience"] for r in rows], "o-", label=f"{key}={v}"
            )
            axis.plot(
                [r["p"] for r in rows],
                [r["analytic"] for r in rows],
                ":",
                color=line[0].get_color(),
            )
        axis.set(title=f"{title}: resilience (dotted: analytic)", xlabel="p", ylabel="resilience")
    for a in (a5, a6, a8, a9, a10):
        a.legend(fontsize=7)
    for key, style in (("paper_costs", "-"), ("our_costs", "--")):
        rows = doc["fig7"][key]
        for ent, colour in zip(("ms", "publisher", "subscriber", "node"), "bgrk", strict=True):
            a7.plot(
                [r["share_subscriptions"] for r in rows],
                [r[f"{ent}_relative"] for r in rows],
                style,
                color=colour,
                label=f"{ent} ({key.split('_')[0]})",
            )
    a7.set(title="Fig. 7: relative load (Table 2 model)", xlabel="(un)subscription share")
    a7.legend(fontsize=6)
    fig.tight_layout()
    png = out / "resilience.png"
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def _print_resilience(doc: dict[str, Any]) -> None:
    t = Table(title="eventguard.txt §5 analytic numbers")
    for c in ("quantity", "ours", "paper"):
        t.add_column(c)
    for k, v in doc["analytic"].items():
        t.add_row(k, str(v["ours"]), str(v["paper"]))
    console.print(t)
    t = Table(title="Figs. 9-10: simulated resilience vs 1 - (1 - (1 - p)^h)^ind")
    for c in ("fig", "a", "ind", "h", "p", "simulated", "analytic"):
        t.add_column(c, justify="right")
    for fig in ("fig9", "fig10"):
        for r in doc[fig]:
            t.add_row(
                fig,
                str(r["arity"]),
                str(r["ind"]),
                str(r["h"]),
                f"{r['p']:.2f}",
                f"{r['resilience']:.3f}",
                f"{r['analytic']:.3f}",
            )
    console.print(t)
    console.print(f"max |simulated - analytic| = {doc['max_abs_sim_minus_analytic']}")
    t = Table(title="Table 2: cost per operation (ms)")
    for c in ("operation", "paper", "ours"):
        t.add_column(c, justify="right")
    for k, v in doc["table2_ms"].items():
        t.add_row(k, f"{v['paper']:.3f}", "-" if v["ours"] is None else f"{v['ours']:.3f}")
    console.print(t)
    b = doc["table3_bytes"]["ours_publication"]
    console.print(
        f"Table 3: a publication grows by {b['added']} bytes (paper "
        f"{doc['table3_bytes']['paper']['publication']})"
    )
    flood = doc["fig6_flood_share"]
    keys = [k for k in flood[0] if k != "p" and ":" not in k] if flood else []
    t = Table(title="Fig. 6: share of bandwidth on flood messages (mean over runs)")
    for c in ("p", *keys):
        t.add_column(c, justify="right")
    for r in flood:
        t.add_row(f"{r['p']:.2f}", *(f"{r[k]:.4f}" for k in keys))
    console.print(t)
    eg = [r["exposed"] for r in doc["fig5_canary_scan"] if r["profile"] == "eventguard"]
    console.print(f"Fig. 5 canary scan: EventGuard deliveries exposed = {sum(eg)}")
    console.print(f"figure: {doc['png']}")


@click.command(
    "resilience", short_help="eventguard.txt §5: Figs 5-10 and the analytic numbers (JSON + PNG)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("out/experiments"),
    show_default=True,
)
@click.option("--master", default="local[*]", show_default=True, help="Spark master for the sweep.")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--quick", is_flag=True, help="Smaller network and fewer points (smoke test).")
def resilience(as_json: bool, out: Path, master: str, seed: int, quick: bool) -> None:
    """eventguard.txt §5: Figs. 5, 6, 8, 9, 10 and the analytic numbers (JSON/table + PNG)."""
    check_writable(out / "resilience.png", "--out")
    t0 = time.perf_counter()
    doc = _resilience_doc(master, seed, quick)
    doc["png"] = str(_plot_resilience(doc, out))
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    if as_json:
        print_json(doc)
    else:
        _print_resilience(doc)


# -- psguard-entropy ---------------------------------------------------------------------------


def _plot_entropy(doc: dict[str, Any], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = doc["points"]
    x = [r["ind_max"] for r in rows]
    fig, (a6, a7, a8) = plt.subplots(1, 3, figsize=(15, 4.5))
    for axis in (a6, a7):
        axis.axhline(rows[0]["S_max"], color="gray", ls="--", label="S_max")
        axis.axhline(rows[0]["S_act"], color="gray", ls=":", label="S_act")
        axis.set(xlabel="ind_max", ylabel="entropy")
    a6.plot(x, [r["S_app_noncollusive"] for r in rows], "o-", label="S_app (mean per node)")
    a6.set(title="Fig. 6: non-collusive")
    for f in rows[0]["S_app_collusive"]:
        a7.plot(x, [r["S_app_collusive"][f] for r in rows], "o-", label=f"{float(f):.0%} collude")
    a7.set(title="Fig. 7: collusive")
    a8.plot(x, [r["cost_messages"] for r in rows], "o-", label="setup messages")
    a8.plot(x, [r["cost_paths"] for r in rows], "s-", label="paths per token")
    a8.set(
        title="Fig. 8: construction cost (ind_max = 1 is 1)",
        xlabel="ind_max",
        ylabel="relative cost",
    )
    for axis in (a6, a7, a8):
        axis.legend(fontsize=7)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    png = out / "psguard-entropy.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


@click.command(
    "psguard-entropy", short_help="psguard.txt §4.2: S_app against ind_max, Figs 6-8 (JSON + PNG)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("out/experiments"),
    show_default=True,
)
@click.option("--master", default="local[*]", show_default=True, help="Spark master for the sweep.")
@click.option("--arity", type=int, default=10, show_default=True)
@click.option("--depth", type=int, default=3, show_default=True)
@click.option(
    "--tau", type=float, default=None, help="ind_t = round(tau * lambda_t) (default 655)."
)
@click.option("--ind-max", "ind_max", type=int, default=10, show_default=True)
@click.option("--events", type=int, default=200_000, show_default=True)
@click.option(
    "--tokens-per-subscriber",
    "per_sub",
    type=click.IntRange(1, 128),
    default=32,
    show_default=True,
    help="Topics each subscriber picks by Zipf (psguard.txt §5: 32).",
)
@click.option("--seed", type=int, default=1, show_default=True)
def psguard_entropy(
    as_json: bool,
    out: Path,
    master: str,
    arity: int,
    depth: int,
    tau: float | None,
    ind_max: int,
    events: int,
    per_sub: int,
    seed: int,
) -> None:
    """psguard.txt §4.2: S_app vs ind_max (Figs. 6-7) and construction cost (Fig. 8)."""
    from pubguard.pipeline.sweeps import run_sweep
    from pubguard.sim.entropy import DEFAULT_TAU, PSGUARD_PAPER, EntropySetup, entropy_point

    if not 1 <= ind_max <= arity:
        raise ValidationError("--ind-max must be in 1 .. --arity (G^ind needs ind <= a)")
    check_writable(out / "psguard-entropy.png", "--out")
    t0 = time.perf_counter()
    setup = EntropySetup(
        arity=arity,
        depth=depth,
        tau=tau or DEFAULT_TAU,
        events=events,
        tokens_per_subscriber=per_sub,
        seed=seed,
    )
    rows = run_sweep(_spark(master), entropy_point, [(setup, i) for i in range(1, ind_max + 1)])
    base_msgs, base_paths = rows[0]["setup_messages"], rows[0]["paths_per_token_mean"]
    for r in rows:
        r["cost_messages"] = round(r["setup_messages"] / base_msgs, 3)
        r["cost_paths"] = round(r["paths_per_token_mean"] / base_paths, 3)
        for k, v in list(r.items()):
            if isinstance(v, float):
                r[k] = round(float(v), 4)
        r["S_app_collusive"] = {f: round(v, 4) for f, v in r["S_app_collusive"].items()}
    last = rows[-1]
    doc: dict[str, Any] = {
        "experiment": "psguard-entropy",
        "setup": asdict(setup),
        "points": rows,
        "ours_vs_paper": {
            "S_max": [last["S_max"], PSGUARD_PAPER["S_max"]],
            "S_act": [round(float(last["S_act_exact"]), 4), PSGUARD_PAPER["S_act"]],
            "tokens_on_ind_max_paths": [last["tokens_at_ind_max"], 12],
            "tokens_below_2_paths": [last["tokens_below_2"], 48],
            "cost_ratio_ind_max_5": [rows[4]["cost_paths"] if len(rows) >= 5 else None, 3.0],
        },
        "notes": [
            "S_app non-collusive = mean over routing nodes of the entropy of the tokens each "
            "routed itself; colluders pool distinct events (ids)",
            "at ind = 1 a node's S_app is H(lambda | tokens it routes): above S_act only if "
            "it misses popular tokens; nodes_routing_top_token and nodes_above_S_act show "
            "why ours stays below (docs/resilience.md)",
            "cost_paths = paths set up per token (the paper's count), cost_messages = "
            "subscription messages (edges of each token's spanning subtree x ind_t)",
        ],
    }
    doc["png"] = str(_plot_entropy(doc, out))
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    if as_json:
        print_json(doc)
        return
    t = Table(title="psguard.txt Figs. 6-8")
    for c in (
        "ind_max",
        "S_app",
        *(f"S_app {float(f):.0%}" for f in rows[0]["S_app_collusive"]),
        "S_act",
        "S_max",
        "cost (paths)",
        "cost (msgs)",
    ):
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(
            str(r["ind_max"]),
            f"{r['S_app_noncollusive']:.3f}",
            *(f"{v:.3f}" for v in r["S_app_collusive"].values()),
            f"{r['S_act']:.3f}",
            f"{r['S_max']:.3f}",
            f"{r['cost_paths']:.2f}",
            f"{r['cost_messages']:.2f}",
        )
    console.print(t)
    for k, (ours, paper) in doc["ours_vs_paper"].items():
        console.print(f"{k}: ours {ours}, paper {paper}")
    console.print(f"figure: {doc['png']}")


def register(cli: click.Group) -> None:
    group = get_group(cli, "experiments", "Reproduce the papers' experiments.")
    group.add_command(resilience)
    group.add_command(psguard_entropy)
