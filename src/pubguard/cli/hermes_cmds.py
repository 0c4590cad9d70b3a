"""``pubguard experiments hermes``: hermes-encrypted-access-control.txt Figs. 6-8 and the OFT
scaling of §4.1 (:mod:`pubguard.ops.bench.hermes`), JSON with the paper's values beside ours,
a table, and PNG plots. ``pubguard hermes up``: a cluster with a ``[hermes]`` table (the type
owner's key-group manager process beside the brokers, :mod:`pubguard.ops.hermes_cluster`) in
the foreground (``pubguard cluster up`` runs the same file detached); ``pubguard hermes
police-toml``: Fig. 1's network as such a file; ``pubguard hermes kgm``: the manager process
itself (:mod:`pubguard.ops.hermes_kgm_proc`, started by the commands above)."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.table import Table

from pubguard.cli.common import console, get_group, print_json

__all__ = ["print_kgm_status", "register"]


def _table(title: str, rows: list[dict], cols: list[str]) -> Table:
    t = Table(title=title)
    for c in cols:
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(*("-" if r.get(c) is None else str(r.get(c)) for c in cols))
    return t


@click.command(
    "hermes", short_help="Hermes Figs 6-8 and OFT scaling: throughput, cache, hops (JSON + PNG)."
)
@click.option("--small", is_flag=True, help="Tiny sizes (seconds; what the test suite runs).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("hermes-experiments"),
    show_default=True,
    help="Folder for results.json and the PNG plots.",
)
@click.option(
    "--events", type=click.IntRange(1, 1_000_000), default=None, help="Events per run (Figs. 6-7)."
)
@click.option(
    "--runs", type=click.IntRange(1, 100), default=None, help="Runs averaged (Figs. 6-7)."
)
@click.option(
    "--figures",
    default="6,7,8,oft",
    show_default=True,
    help="Which to measure, comma-separated (6, 7, 8, oft).",
)
def experiments_hermes(
    small: bool, as_json: bool, out: Path, events: int | None, runs: int | None, figures: str
) -> None:
    """Hermes Figs. 6-8 and OFT scaling: plaintext vs event vs attribute encryption."""
    from pubguard.ops.bench.hermes import FIGURES, plot_all, run_all

    picked = tuple(f.strip() for f in figures.split(",") if f.strip())
    if not picked or not set(picked) <= set(FIGURES):
        raise click.UsageError(f"--figures takes some of {', '.join(FIGURES)}")
    res = run_all(small=small, events=events, runs=runs, figures=picked)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=1))
    res["plots"] = [str(p) for p in plot_all(res, out)]
    if as_json:
        print_json(res)
        return
    cols6 = [
        "attributes",
        "plain_eps",
        "hermes-event_eps",
        "hermes-attribute_eps",
        "event_ratio",
        "attribute_ratio",
        "paper_attribute_ratio",
    ]
    if "fig6" in res:
        console.print(
            _table("Fig. 6 end to end (events/s; ratio to plaintext)", res["fig6"], cols6)
        )
    cols7 = [
        "attributes",
        "plain_eps",
        "hermes-event_eps",
        "hermes-attribute_eps",
        "event_overhead",
        "attribute_overhead",
        "paper_overhead",
    ]
    if "fig7" in res:
        console.print(_table("Fig. 7 domain internal with the plaintext cache", res["fig7"], cols7))
    cols8 = [
        "groups",
        "attribute_hops",
        "emulation_hops",
        "emulation_all_hops",
        "paper_attribute_hops",
        "paper_emulation_hops",
    ]
    if "fig8" in res:
        console.print(
            _table("Fig. 8 hops per publication (2,000-broker overlay model)", res["fig8"], cols8)
        )
    colso = ["members", "join_us", "leave_us", "join_updates", "leave_updates", "member_path"]
    if "oft" in res:
        console.print(_table("OFT scaling (§4.1)", res["oft"]["rows"], colso))
        console.print(f"log2 n fits: {res['oft']['fit_a_log2n_plus_b']}")
    console.print(f"load average while measuring: {res['load_average']}")
    for k, v in res["goals"].items():
        console.print(
            f"goal {k}: ours {v['ours']} vs goal {v['goal']} -> {'met' if v['met'] else 'NOT met'}"
        )
    console.print(f"results and plots in {out}")


@click.command("police-toml", short_help="Print the police scenario (Fig 1) as a cluster.toml.")
def hermes_police_toml() -> None:
    """Print the police scenario of Fig. 1 as a cluster.toml (for `pubguard hermes up`)."""
    from pubguard.ops.demo.police import police_rendezvous, police_toml

    click.echo(police_toml(police_rendezvous()), nl=False)


@click.command("up")
@click.option(
    "--config",
    "config",
    required=True,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="A cluster.toml with a [hermes] table.",
)
@click.option(
    "--for",
    "seconds",
    type=click.FloatRange(0, None),
    default=None,
    help="Stop after this many seconds (default: at Ctrl-C).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the deployment as one JSON object.")
def hermes_up(config: Path, seconds: float | None, as_json: bool) -> None:
    """Run a Hermes cluster in the foreground: its brokers, and the type owner's key-group
    manager, which admits each broker the [hermes] table grants attributes to."""
    import asyncio

    from pubguard.errors import ConfigError
    from pubguard.net.config import load_cluster_config
    from pubguard.ops.cluster import LocalCluster

    cfg = load_cluster_config(config)
    if cfg.hermes is None:
        raise ConfigError(f"{config}: no [hermes] table", key="hermes")
    poll = cfg.hermes.poll

    async def run() -> dict:
        cluster = LocalCluster(cfg)
        try:
            await cluster.start()
            assert cluster.hermes is not None
            await asyncio.sleep(min(1.0, 2 * poll))  # a poll: the groups settle
            out = cluster.hermes.summary()
            out["brokers"] = {
                b: {
                    "port": cluster.ports.get(b),
                    "domain": cfg.settings(b).get("domain", ""),
                }
                for b in cfg.brokers
            }
            if as_json:
                print_json(out)
            else:
                _print_deployment(out)
            if not as_json:
                console.print(f"state in {cluster.state_dir}", soft_wrap=True)
            if seconds is None:
                console.print("running; Ctrl-C stops every broker and the manager")
                await asyncio.Event().wait()
            else:
                await asyncio.sleep(seconds)
            return out
        finally:
            await cluster.stop()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
    if not as_json:
        console.print(f"stopped {len(cfg.brokers)} brokers and the key-group manager")


@click.command("kgm", short_help="Serve a type's key-group manager (started by cluster up).")
@click.option(
    "--dir",
    "folder",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The manager's folder: type.json (the owner-signed type), kgm.db (sealed state).",
)
@click.option(
    "--pki",
    "pki_root",
    required=True,
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="The cluster's CA and identities.",
)
@click.option("--name", required=True, help="The manager's TLS identity (<owner>-kgm).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True)
@click.option(
    "--profiles",
    default="hermes-attribute",
    show_default=True,
    help="Comma-separated: hermes-event, hermes-attribute.",
)
@click.option(
    "--grace",
    type=click.FloatRange(0, None, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds a superseded group key still opens (hermes §4.2).",
)
@click.option("--parent-pid", type=int, default=None, help="Stop when this process is gone.")
def hermes_kgm(
    folder: Path,
    pki_root: Path,
    name: str,
    host: str,
    port: int,
    profiles: str,
    grace: float,
    parent_pid: int | None,
) -> None:
    """Serve the key-group manager of the type in --dir behind mutual TLS; its state is
    sealed under the key in $PUBGUARD_HERMES_KGM_STORAGE (pubguard.ops.hermes_kgm_proc)."""
    import asyncio

    from pubguard.ops.hermes_kgm_proc import serve_kgm

    asyncio.run(
        serve_kgm(
            folder,
            pki_root=pki_root,
            name=name,
            host=host,
            port=port,
            profiles=tuple(p.strip() for p in profiles.split(",") if p.strip()),
            grace=grace,
            parent_pid=parent_pid,
        )
    )


#: ``--state``: the cluster's state folder (``cluster up``'s)
_STATE = click.option(
    "--state",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("pubguard-cluster"),
    show_default=True,
    help="The cluster's state folder.",
)


@click.command("revoke", short_help="Revoke a broker's capability at the key-group manager.")
@_STATE
@click.option("--broker", default=None, help="Revoke every capability this broker holds.")
@click.option("--serial", type=int, default=None, help="Or one capability serial.")
def hermes_revoke(state: Path, broker: str | None, serial: int | None) -> None:
    """As the type owner ($PUBGUARD_HERMES_OWNER), revoke capabilities: recorded in the
    owner's signed revocation list, which every later `cluster up` honours, and at the running
    key-group manager, which evicts the holders and refreshes their groups (hermes §4.2)."""
    from pubguard.ops.hermes_kgm_proc import revoke_at_kgm
    from pubguard.ops.hermes_revocations import REVOCATIONS_FILE

    out = revoke_at_kgm(state, broker=broker, serial=serial)
    what = broker if broker is not None else f"serial {serial}"
    now = (
        f"{out['rekeys']} rekey broadcasts"
        if out["running"]
        else "the key-group manager is down: it applies the list when it starts"
    )
    console.print(
        f"revoked {what}: {len(out['revoked'])} capabilities, {now}; kept in "
        f"{state / 'hermes-kgm' / REVOCATIONS_FILE} (signed by the type owner"
        + (f", {broker} stays out after a re-issue)" if broker is not None else ")"),
        soft_wrap=True,
    )


@click.command("readmit", short_help="Take back a broker's revocation (the type owner).")
@_STATE
@click.option("--broker", required=True, help="The revoked broker to readmit.")
def hermes_readmit(state: Path, broker: str) -> None:
    """As the type owner ($PUBGUARD_HERMES_OWNER), remove a broker from the signed revocation
    list. It is issued capabilities again at the next `cluster down` / `cluster up`."""
    from pubguard.ops.hermes_kgm_proc import readmit_at_kgm

    rl = readmit_at_kgm(state, broker)
    left = ", ".join(rl.holders) or "none"
    console.print(
        f"readmitted {broker}: capabilities again from the next cluster down / up "
        f"(still revoked: {left})",
        soft_wrap=True,
    )


def print_kgm_status(kgm: dict) -> None:
    """``cluster status``: the key-group manager's line and, per profile, its groups (an
    attribute's name, ``*`` for the type's), their members and current epoch."""
    where = f"key-group manager {kgm.get('name')} {kgm.get('url')}"
    if kgm.get("down"):
        console.print(f"{where}: [red]down[/red] (pubguard cluster up starts it again)")
        return
    if "error" in kgm:
        console.print(f"{where}: pid {kgm.get('pid')}, [red]{kgm['error']}[/red]", soft_wrap=True)
        return
    console.print(
        f"{where}: pid {kgm.get('pid')}, type {kgm.get('type')} of {kgm.get('owner')}",
        soft_wrap=True,
    )
    for profile, info in kgm.get("profiles", {}).items():
        if info.get("revoked"):
            console.print(
                f"revoked by the type owner ({profile}): {', '.join(info['revoked'])}",
                soft_wrap=True,
            )
        t = Table(title=f"key groups ({profile})")
        for c in ("group", "epoch", "members"):
            t.add_column(c)
        for g, gi in info.get("groups", {}).items():
            t.add_row(g, str(gi.get("epoch")), ", ".join(gi.get("members", [])) or "-")
        console.print(t)


def _print_deployment(out: dict) -> None:
    console.print(
        f"type {out['type']} of {out['owner']} (id {out['type_id'][:16]}…); key-group manager "
        f"{out['kgm']['name']} (domain {out['kgm']['domain'] or '-'}) on port {out['kgm']['port']}"
    )
    t = Table(title=f"brokers (rendezvous node: {out['rendezvous']})")
    for c in ("broker", "domain", "port", "may read", "in key groups"):
        t.add_column(c)
    members = {b for ms in out["members"].values() for b in ms}
    revoked = set(out.get("revoked", ()))
    for b, info in out["brokers"].items():
        nothing = (
            "nothing (revoked by the owner)" if b in revoked else "nothing (routes by type id)"
        )
        t.add_row(
            b,
            info["domain"] or "-",
            str(info["port"]),
            ", ".join(out["readable"][b]) or nothing,
            "yes" if b in members else "no",
        )
    console.print(t)


def register(cli: click.Group) -> None:
    get_group(cli, "experiments", "Reproduce the papers' experiments.").add_command(
        experiments_hermes
    )
    group = get_group(cli, "hermes", "Hermes clusters: brokers encrypt (docs/hermes.md).")
    group.add_command(hermes_up)
    group.add_command(hermes_kgm)
    group.add_command(hermes_revoke)
    group.add_command(hermes_readmit)
    group.add_command(hermes_police_toml)
