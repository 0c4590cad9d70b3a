"""The Spark dissemination step of ``make demo`` (issue 6, item 4).

:func:`run_demo` generates a small psguard workload, runs the pipeline end to end on a local
session and prints the stage summary and a few opened deliveries beside the ciphertext the
executors handled. ``pubguard demo`` calls it last (``pubguard.cli.demo_cmd``).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["run_demo"]


def run_demo(
    out_dir: Path | str | None = None,
    *,
    master: str = "local[*]",
    mode: str = "randomized",
    seed: int = 7,
    rows: int = 3,
    console: Any = None,
) -> dict[str, Any]:
    import pyarrow.parquet as pq
    from rich.console import Console
    from rich.table import Table

    from pubguard.pipeline.opener import read_opened
    from pubguard.pipeline.run import run_pipeline
    from pubguard.pipeline.session import get_spark
    from pubguard.sim.workloads import generate

    con = console or Console()
    root = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="pubguard-demo-spark-"))
    wl = root / "workload"
    if not wl.exists():
        generate("psguard", wl, seed=seed, subscribers=8, events=200, topics_per_subscriber=16)
    spark = get_spark(master=master, app_name="pubguard-demo")
    con.rule(f"Spark dissemination ({mode} tokens, {master})")
    summary = run_pipeline(
        spark,
        wl,
        root / "out",
        mode=mode,
        progress=lambda s, m: con.print(f"  [bold]{s:>9}[/] {m}"),
    )
    t = Table(title="stage seconds")
    for k in summary["seconds"]:
        t.add_column(k, justify="right")
    t.add_row(*(f"{v:.2f}" for v in summary["seconds"].values()))
    con.print(t)
    opened = read_opened(root / "out" / "opened").head(rows)
    outbox = pq.read_table(str(root / "out" / "outbox")).to_pandas()
    side = Table(title="what a subscriber opened  |  what the executors handled")
    side.add_column("subscriber / event")
    side.add_column("opened (trusted side)")
    side.add_column("executor view (hint, payload ciphertext)")
    for _, r in opened.iterrows():
        cipher = outbox[(outbox.event_id == r["event_id"])].iloc[0]
        side.add_row(
            f"{r['subscriber']} / {r['event_id']}",
            json.dumps(json.loads(r["attrs"]))[:60],
            f"{bytes(cipher['hint'])[:12].hex()}... {bytes(cipher['payload'])[:12].hex()}...",
        )
    con.print(side)
    con.print(
        f"{summary['deliveries']} deliveries to {summary['subscribers']} subscribers; "
        f"drops: {summary['drops'] or 'none'}; output in {root / 'out'}"
    )
    return summary
