"""The police scenario's printout for ``pubguard demo --scenario police``
(:mod:`pubguard.ops.demo.police`): what each broker could read, what each subscriber got."""

from __future__ import annotations

from rich import box
from rich.table import Table

from pubguard.cli.common import console
from pubguard.ops.demo.police import PoliceResult

__all__ = ["print_police"]


def print_police(r: PoliceResult) -> None:
    t = Table(title="What each broker could read (hermes-attribute)", box=box.SIMPLE_HEAVY)
    for col in (
        "broker",
        "domain",
        "role",
        "key groups (attributes)",
        "plaintext in its files",
        "frames",
    ):
        t.add_column(col)
    for b in r.brokers:
        t.add_row(
            b.name,
            b.domain,
            b.role or "-",
            ", ".join(b.readable) or "none: routes by type id",
            ", ".join(b.plaintext_found) or "none",
            str(b.publications_routed),
        )
    console.print(t)
    for who, events in r.got.items():
        ok = sorted(map(repr, events)) == sorted(map(repr, r.want[who]))
        console.print(
            f"[bold]{who}[/bold] received {len(events)} event(s), {'as' if ok else 'NOT as'} the reference matcher and capability say:"
        )
        for e in events[:4]:
            console.print(f"   {e}")
    console.print(
        f"rendezvous node {r.rendezvous}; brokers in no key group: {', '.join(r.unauthorised) or 'none'}"
    )


def run_police(*, events: int, seed: int, as_json: bool) -> None:
    """``pubguard demo --scenario police``: run, print, and fail (one line) if wrong."""
    import asyncio
    import time

    from pubguard.cli.common import print_json
    from pubguard.errors import StateError
    from pubguard.ops.demo.police import police_demo

    t0 = time.perf_counter()

    def say(s: str) -> None:
        if not as_json:
            console.print(f"[dim]{s}[/dim]")

    r = asyncio.run(police_demo(events=events, seed=seed, say=say))
    secs = round(time.perf_counter() - t0, 1)
    if as_json:
        print_json({"police": r.to_json(), "seconds": secs})
    else:
        print_police(r)
        console.print(f"demo finished in {secs} s; every broker and the key-group manager stopped")
    if not r.correct:
        raise StateError("some subscriber did not receive exactly its authorised events")
    if not r.clean:
        raise StateError("a broker holds plaintext of an attribute it may not read")
