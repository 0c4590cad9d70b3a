"""``pubguard bench signatures``: one Ed25519 signature per publication, verified one by one
with pyca and as native batches (:mod:`pubguard.ops.bench.signatures`)."""

from __future__ import annotations

import click
from rich.table import Table

from pubguard.cli.common import console, get_group, print_json

__all__ = ["register"]


@click.command(
    "signatures",
    help="Ed25519 verification per publication (Merkle batch 1): pyca one by one vs the "
    "native batch, at several batch sizes, with the paper's verify figure.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--quick", is_flag=True, help="Few iterations (smoke test; noisy numbers).")
@click.option("--seed", type=int, default=1, show_default=True)
def bench_signatures(as_json: bool, quick: bool, seed: int) -> None:
    from pubguard.ops.bench.signatures import signature_batches

    r = signature_batches(quick=quick, seed=seed)
    if as_json:
        print_json(r)
        return
    t = Table(title=f"one signature per publication: us per publication ({r['backend_active']})")
    for col in ("batch", "pyca", "native batch", "with 1 forged", "speedup", "paper (ElGamal)"):
        t.add_column(col, justify="right")
    for x in r["rows"]:
        nat = x.get("batch_us")
        t.add_row(
            str(x["batch"]),
            f"{x['pyca_us']:.1f}",
            "-" if nat is None else f"{nat:.1f}",
            "-" if nat is None else f"{x['forged_batch_us']:.1f}",
            "-" if nat is None else f"{x['speedup']:.1f}x",
            f"{x['paper_verify_us']:.0f}",
        )
    console.print(t)
    console.print(r["paper"])


def register(cli: click.Group) -> None:
    get_group(cli, "bench", "Benchmarks (paper figures beside ours).").add_command(bench_signatures)
