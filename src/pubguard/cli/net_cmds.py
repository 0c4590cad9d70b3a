"""Network commands: ``broker``, ``cluster up|down|restart|status``, ``publish``, ``subscribe``,
``status`` and ``bench network``.

Examples::

    pubguard cluster up --state ./net            # 7-broker binary tree, CA on first use
    pubguard subscribe --state ./net --broker b3 'price > 10' --count 1
    pubguard publish --state ./net --broker b6 '{"attrs": {"price": 12}}'
    pubguard subscribe --state ./net --broker b3 --profile psguard 'age > 20'  # [keyservice]
    pubguard status --state ./net                # a broker that does not run shows as down
    pubguard cluster up --state ./net            # again: starts the brokers that are down
    pubguard cluster restart --state ./net b2    # stop and start one broker
    pubguard cluster down --state ./net          # every broker of ./net, however started
    pubguard bench network --profile plain --brokers 1 --payload 16 --json
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.table import Table

from pubguard.cli.ca_cmds import show_crl_health, warn_without_ca_passphrase
from pubguard.cli.common import (
    StepProgress,
    check_writable,
    console,
    err_console,
    get_group,
    print_json,
)
from pubguard.errors import ConfigError, InputError, PubguardError, StateError

__all__ = ["NETWORK_PROFILES", "register"]

# net.config.PROFILES, spelled out so that --help needs no import of the network stack
# (tests/cli/test_net_cli_errors.py checks they agree)
NETWORK_PROFILES = (
    "plain",
    "psguard",
    "psguard-paper",
    "eventguard",
    "narada",
    "default",
    "vcaps-rv",
    "vcaps-srv",
    "vcaps-srv-fast",
)

_STATE_DEFAULT = Path("pubguard-cluster")
_STATE = click.option(
    "--state",
    "state",
    type=click.Path(path_type=Path),
    default=_STATE_DEFAULT,
    show_default=True,
    help="Cluster state folder (certificates, broker state, logs).",
)


def _cluster_file(state: Path) -> dict[str, Any]:
    try:
        return json.loads((state / "cluster.json").read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        raise StateError(f"no cluster is running from {state} (pubguard cluster up)") from None


def _entries(state: Path) -> set[str] | None:
    """What the state folder holds before ``cluster up`` (``None``: there is no folder)."""
    return {p.name for p in state.iterdir()} if state.is_dir() else None


def _remove_new(state: Path, before: set[str] | None) -> None:
    """After a failed ``cluster up``: remove what this invocation created in ``state`` (broker
    folders, the PKI made on first use, the folder itself), and nothing that was there."""
    if before is None:
        shutil.rmtree(state, ignore_errors=True)
        return
    for p in state.iterdir() if state.is_dir() else ():
        if p.name in before:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


#: the certificate client commands connect with; each process is a session under it
_CLI_CERT = "cli"
_IDENTITY_HELP = (
    "Session identity, NAME or NAME/SUFFIX (the certificate is NAME's). Default: cli/<random>, "
    "one per process, so that two commands never knock each other off the broker."
)


def _session_identity(identity: str | None) -> str:
    """``identity``, or a fresh ``cli/<random>``: a broker keeps one connection per identity
    and replaces the older one, so every CLI process needs its own."""
    import secrets

    return identity or f"{_CLI_CERT}/{secrets.token_hex(4)}"


async def _client(
    state: Path,
    broker: str,
    identity: str,
    durable: bool = False,
    on_reconnect: Any = None,
    profile: str | None = None,
    keyservice: str | None = None,
) -> Any:
    """A client of ``broker`` (a name, or ``tls://host:port``) speaking ``profile`` (default:
    the one the broker serves), its keys from the cluster's key service (or --keyservice;
    :mod:`pubguard.ops.cluster_client`)."""
    from pubguard.ops.cluster_client import connect_cluster_client

    return await connect_cluster_client(
        state,
        broker,
        identity,
        profile=profile,
        keyservice=keyservice,
        durable=durable,
        on_reconnect=on_reconnect,
    )


def PROFILE_OPTION(f: Any) -> Any:  # noqa: N802  (used as a decorator, like click's)
    """``--profile`` and ``--keyservice`` of the client commands."""
    f = click.option(
        "--keyservice",
        default=None,
        metavar="URL",
        help="The key service, tls://host:port (default: the cluster's, from --state).",
    )(f)
    return click.option(
        "--profile",
        default=None,
        metavar="PROFILE",
        help="Security profile to speak (default: the one the broker serves). Keys, tokens "
        "and permits come from the cluster's key service over mutual TLS.",
    )(f)


def _up_again(state: Path, config: Path | None) -> None:
    """``cluster up`` on a cluster that runs: start the brokers that are down, say which."""
    import asyncio

    from pubguard.net.config import load_cluster_config
    from pubguard.ops.cluster import restart_brokers, restart_keyservice
    from pubguard.ops.cluster_keys import running_keyservice
    from pubguard.ops.hermes_kgm_proc import restart_kgm

    data = _cluster_file(state)
    known = set(data) - {"keyservice"}
    cfg = None if config is None else load_cluster_config(config, state_dir=state)
    if cfg is not None and set(cfg.brokers) != known:
        raise StateError(
            f"a cluster with other brokers runs from {state} (pubguard cluster down first)"
        )
    kgm_port = asyncio.run(restart_kgm(state))  # a [hermes] manager first: brokers join it
    if kgm_port is not None:
        console.print(f"restarted the key-group manager on port {kgm_port}", soft_wrap=True)
    started = asyncio.run(restart_brokers(state))
    if started:
        msg = f"restarted {', '.join(started)}; {len(known)} brokers up in {state}"
    else:
        msg = f"all {len(known)} brokers of {state} already running"
    console.print(msg, soft_wrap=True)
    if "keyservice" in data and running_keyservice(state) is None:
        if cfg is None:  # its secrets come from the config's sources
            raise StateError(
                f"the key service of {state} is down: pubguard cluster up --config FILE "
                "starts it again"
            )
        port = asyncio.run(restart_keyservice(state, cfg))
        console.print(f"restarted the key service on port {port}", soft_wrap=True)


def _status_table(statuses: dict[str, Any]) -> Table:
    t = Table(title="brokers")
    for col in ("broker", "port", "links", "subs", "fwd", "queue", "parked", "drops"):
        t.add_column(col, justify="right" if col not in ("broker", "links", "drops") else "left")
    for name, s in statuses.items():
        if s.get("down"):
            t.add_row(name, str(s.get("port") or "-"), "[red]down[/red]", "", "", "", "", "")
            continue
        if "error" in s:
            t.add_row(name, "-", f"[red]{s['error']}[/red]", "", "", "", "", "")
            continue
        links = ", ".join(
            f"{k}{'' if v['connected'] else ' (down)'}:{v['queue']}"
            for k, v in s["link_state"].items()
            if not k.startswith("c:admin")
        )
        drops = ", ".join(f"{k}={v}" for k, v in s["drops"].items()) or "-"
        if "malicious" in s:  # a research/test broker (docs/resilience.md): said first
            from pubguard.net.malicious_config import status_summary

            drops = f"[red]{status_summary(s['malicious'])}[/red]; {drops}"
        t.add_row(
            name,
            str(s["port"]),
            links,
            str(s["subscriptions"]),
            str(s["forwarded"]),
            str(s["queue"]),
            str(s["parked"]),
            drops,
        )
    return t


def register(cli: click.Group) -> None:
    @cli.command("broker")
    @click.option(
        "--config", "config", type=click.Path(path_type=Path), required=True, help="broker.toml"
    )
    def broker_cmd(config: Path) -> None:
        """Run one broker until interrupted (SIGTERM / Ctrl-C)."""
        from pubguard.net.config import load_broker_config
        from pubguard.net.server.main import serve

        serve(load_broker_config(config))

    cluster = get_group(cli, "cluster", "Start, stop and inspect a local broker network.")

    @cluster.command("up")
    @click.option(
        "--config",
        "config",
        type=click.Path(path_type=Path),
        default=None,
        help="cluster.toml (default: the embedded 7-broker binary tree)",
    )
    @_STATE
    def cluster_up(config: Path | None, state: Path) -> None:
        """Start the brokers of a topology as background processes on loopback (state in
        --state, else in the config's state_dir, else in ./pubguard-cluster). On a cluster
        that runs, start again only the brokers that are down."""
        import asyncio

        from pubguard.net.config import configured_state_dir, load_cluster_config
        from pubguard.ops.cluster import running_brokers
        from pubguard.ops.multipath import cluster_for

        given = click.get_current_context().get_parameter_source("state")
        if config is not None and given is click.core.ParameterSource.DEFAULT:
            state = configured_state_dir(config) or state  # the file's state_dir, if it sets one
        if state.exists() and not state.is_dir():
            raise ConfigError(f"--state {state} is a file, not a folder", key="state")
        if (state / "cluster.json").exists():  # running: start again the brokers that are down
            _up_again(state, config)
            return
        stray = running_brokers(state)
        if stray:  # brokers left running without cluster.json (started by hand)
            raise StateError(
                f"brokers {', '.join(stray)} of {state} are running without a cluster "
                f"(pubguard cluster down --state {state} first)"
            )
        before = _entries(state)

        async def up() -> dict[str, int]:
            c = cluster_for(cfg, detached=True, crl_agent=True)  # [topology] ind: every tree
            try:
                await c.start()
            except BaseException:
                await c.stop()
                raise
            for a in c._admin.values():
                await a.close()
            c.procs.clear()  # keep them running: `cluster down` stops them
            return c.ports

        try:
            cfg = load_cluster_config(config, state_dir=state)
            ports = asyncio.run(up())
        except BaseException:  # a port in use, a bad setting, ^C: leave no half-made cluster
            _remove_new(state, before)
            raise
        for name, port in ports.items():
            console.print(f"{name}  tls://127.0.0.1:{port}")
        hint = "" if state == _STATE_DEFAULT else f" (--state {state} for status, down and clients)"
        console.print(f"{len(ports)} brokers up; state in {state}{hint}", soft_wrap=True)
        if cfg.ind > 1:  # docs/resilience.md: one process per broker, a port per tree
            console.print(f"each broker serves {cfg.ind} trees (T_k in {state}/tree<k>)")
        # hermes profiles get their keys from the [hermes] key-group manager, not a key service
        secure = [p for p in cfg.served if p != "plain" and not p.startswith("hermes-")]
        if secure and cfg.keyservice is None:  # said, never silent
            err_console.print(
                f"warning: no \\[keyservice] in the config: the keys of {', '.join(secure)} "
                "come from a random master secret that ends with this command, so clients in "
                "other shells can speak plain only (docs/deploy.md)",
                style="yellow",
                soft_wrap=True,
            )
        warn_without_ca_passphrase(state)

    @cluster.command("down")
    @_STATE
    def cluster_down(state: Path) -> None:
        """Stop every broker of the state folder, however started (SIGTERM, then SIGKILL)."""
        from pubguard.ops.cluster import stop_cluster

        stopped = stop_cluster(state)
        brokers = [n for n in stopped if n not in ("keyservice", "hermes-kgm")]
        ks = " and the key service" if "keyservice" in stopped else ""
        ks += " and the key-group manager" if "hermes-kgm" in stopped else ""
        if stopped:
            console.print(
                f"stopped {len(brokers)} brokers: {', '.join(brokers)}{ks}", soft_wrap=True
            )
        else:
            console.print("no cluster was running")

    @cluster.command("restart")
    @_STATE
    @click.argument("names", nargs=-1, required=True, metavar="BROKER...")
    def cluster_restart(state: Path, names: tuple[str, ...]) -> None:
        """Stop (if running) and start again the named brokers of a running cluster, from
        their broker.toml and on their ports; waits until the cluster is linked again."""
        import asyncio

        from pubguard.ops.cluster import restart_brokers
        from pubguard.ops.hermes_kgm_proc import KGM_DIR, restart_kgm, restart_material, stop_kgm

        done = []
        if KGM_DIR in names:  # a [hermes] cluster's key-group manager, from its sealed state
            if restart_material(state) is None:  # (its seed checked before it is stopped)
                raise StateError(f"no key-group manager ever ran in {state}")
            stop_kgm(state)
            if asyncio.run(restart_kgm(state)) is not None:
                done.append(KGM_DIR)
        brokers = [n for n in names if n != KGM_DIR]
        if brokers:
            done += asyncio.run(restart_brokers(state, brokers, running_too=True))
        console.print(f"restarted {', '.join(done)}", soft_wrap=True)

    @cluster.command("status")
    @_STATE
    @click.option("--json", "as_json", is_flag=True)
    def cluster_status_cmd(state: Path, as_json: bool) -> None:
        """Each broker's links, tables, queue depths and drop counters."""
        _show_status(state, as_json)

    @cluster.command("demo")
    @click.option("--events", type=click.IntRange(1, 100_000), default=300, show_default=True)
    @click.option("--in-process", is_flag=True, help="Brokers in this process (faster start).")
    @click.option("--json", "as_json", is_flag=True)
    def cluster_demo(events: int, in_process: bool, as_json: bool) -> None:
        """A 7-broker stock-quote market: who received what (checked against the oracle)."""
        import asyncio

        from pubguard.ops.demo.demo import TRADERS, network_demo

        say = None if as_json else (lambda s: console.print(f"[dim]{s}[/dim]"))
        r = asyncio.run(network_demo(events=events, in_process=in_process, say=say))
        if as_json:
            print_json(r.to_json())
        else:
            t = Table(title="who received what")
            for col in ("trader", "broker", "filter", "received", "expected"):
                t.add_column(col)
            for name, broker, text in TRADERS:
                t.add_row(
                    name, broker, text, str(len(r.received[name])), str(len(r.expected[name]))
                )
            console.print(t)
            console.print(_status_table(r.statuses))
            console.print("routing correct" if r.correct else "[red]routing INCORRECT[/red]")
        if not r.correct:
            raise StateError("some trader did not receive exactly its matching quotes")

    @cli.command("status")
    @_STATE
    @click.option("--json", "as_json", is_flag=True)
    def status_cmd(state: Path, as_json: bool) -> None:
        """Each broker's links, subscriptions, queue depths and drop counters."""
        _show_status(state, as_json)

    @cli.command("publish")
    @_STATE
    @click.option("--broker", default="b0", show_default=True)
    @click.option("--identity", default=None, help=_IDENTITY_HELP)
    @PROFILE_OPTION
    @click.argument("events", nargs=-1)
    def publish_cmd(
        state: Path,
        broker: str,
        identity: str | None,
        profile: str | None,
        keyservice: str | None,
        events: tuple[str, ...],
    ) -> None:
        """Publish events given as JSON objects ('{"attrs": {...}}'), or JSON lines on stdin.
        Each is reported published once the broker accepted it; a refusal is an error."""
        import asyncio

        from pubguard.model import event_from_json, parse_json

        if not events and sys.stdin.isatty():  # would wait for input the user did not mean
            raise InputError("give events as arguments, or pipe JSON lines on stdin")
        # (where, line, text): an argument is named by its position, a stdin line by its real
        # number (blank lines count), so an error points at what the user typed
        given: list[tuple[str, int | None, str]]
        if events:
            given = [(f"argument {n}", None, t) for n, t in enumerate(events, 1)]
        else:
            stdin = sys.stdin.read().splitlines()
            given = [("<stdin>", n, t) for n, t in enumerate(stdin, 1) if t.strip()]
        if not given:
            raise InputError("no events to publish (stdin was empty)")
        parsed = []
        for where, line, text in given:
            obj = parse_json(text, path=where, line=line)
            try:
                parsed.append(event_from_json(obj))
            except (ValueError, PubguardError) as exc:
                raise InputError(str(exc), path=where, line=line) from None

        async def run() -> tuple[list[str], PubguardError | None]:
            from pubguard.errors import RefusedError
            from pubguard.ops.cluster_client import advertisements_for

            c = await _client(
                state, broker, _session_identity(identity), profile=profile, keyservice=keyservice
            )
            try:
                for f in advertisements_for(c.scheme.profile, parsed):  # eventguard §4.3
                    await c.advertise(f)
                ids = [await c.publish(e) for e in parsed]  # ProfileNotServedError: none sent
                try:
                    await c.confirm()  # the broker's verdict on each: acks, refusals
                except RefusedError as exc:
                    refused = {e.ref for e in c.errors}
                    return [i for i in ids if i not in refused], exc
                return ids, None
            finally:
                await c.close()

        ids, refusal = asyncio.run(run())
        for eid in ids:
            console.print(f"published {eid}")
        if refusal is not None:
            raise refusal

    @cli.command("subscribe")
    @_STATE
    @click.option("--broker", default="b0", show_default=True)
    @click.option("--identity", default=None, help=_IDENTITY_HELP + " With --durable: cli/<ID>.")
    @click.option(
        "--durable",
        is_flag=True,
        help="Keep the subscription at the broker while this command is away: events that "
        "match meanwhile are delivered when it comes back (needs --sub-id).",
    )
    @click.option("--sub-id", "sub_id", default=None, help="The subscription's stable id.")
    @click.option(
        "--count",
        type=click.IntRange(min=0),
        default=0,
        help="Stop after this many events (0: never).",
    )
    @click.option("--timeout", type=float, default=0.0, help="Stop after this many seconds idle.")
    @PROFILE_OPTION
    @click.argument("filter_text")
    def subscribe_cmd(
        state: Path,
        broker: str,
        identity: str | None,
        profile: str | None,
        keyservice: str | None,
        durable: bool,
        sub_id: str | None,
        count: int,
        timeout: float,
        filter_text: str,
    ) -> None:
        """Print matching events as JSON lines until interrupted (or --count / --timeout).
        A subscriber that is not --durable says on stderr when it reconnected as a new
        session, which may have missed events."""
        import asyncio

        from pubguard.errors import FilterRefusedError, ParseError
        from pubguard.model import Filter

        try:
            f = Filter.parse(filter_text)
        except ParseError as exc:  # say which argument the column counts in
            raise ParseError(f"bad filter {filter_text!r}: {exc}") from None

        if durable and not sub_id:
            raise click.BadParameter(
                "a durable subscription needs --sub-id", param_hint="--durable"
            )
        if durable and identity is None:  # the broker keeps a durable session per identity
            identity = f"{_CLI_CERT}/{sub_id}"

        def reconnected(resumed: bool) -> None:
            if not resumed:  # one line, never wrapped
                click.echo(
                    f"pubguard: reconnected to {broker} as a new session: events published "
                    "while the link was down may have been missed",
                    err=True,
                )

        async def run() -> None:
            c = await _client(
                state,
                broker,
                _session_identity(identity),
                durable,
                on_reconnect=reconnected,
                profile=profile,
                keyservice=keyservice,
            )
            try:
                # subscribed at once after connecting, before any delivery is read: a durable
                # session's deliveries kept while it was away find their subscription
                try:  # ProfileNotServedError, FilterRefusedError: nothing sent
                    sub = await c.subscribe(f, sub_id=sub_id)
                except FilterRefusedError as exc:  # named as the user typed it
                    raise FilterRefusedError(filter_text, exc.identity, exc.detail) from None
                await c.confirm()  # the broker accepted it (RefusedError otherwise)
                err_console.print(f"subscribed to {filter_text!r} at {broker}")
                n = 0
                while count == 0 or n < count:
                    try:
                        d = await sub.next(timeout=timeout or None)
                    except TimeoutError:
                        break
                    print(json.dumps(d.event.to_json()), flush=True)
                    n += 1
            finally:
                await c.close()

        asyncio.run(run())

    bench = get_group(cli, "bench", "Benchmarks (print a table; --json for one JSON object).")

    @bench.command("network")
    @click.option(
        "--profile",
        default="plain",
        show_default=True,
        metavar="PROFILE",
        help=f"One of {', '.join(NETWORK_PROFILES)}.",
    )
    @click.option(
        "--brokers",
        "brokers",
        type=int,
        multiple=True,
        help="Tree sizes (1, 3, 7, 15); repeat; default all four.",
    )
    @click.option(
        "--payload",
        "payloads",
        type=int,
        multiple=True,
        help="Payload bytes; repeat; default 16 and 16384.",
    )
    @click.option("--subscribers", type=click.IntRange(1, 256), default=32, show_default=True)
    @click.option("--in-process", is_flag=True, help="Brokers in this process (quick look).")
    @click.option("--quick", is_flag=True, hidden=True, help="Smoke test: tiny rates and runs.")
    @click.option(
        "--repeat",
        type=click.IntRange(1, 20),
        default=1,
        show_default=True,
        help="Searches per configuration; the median is reported (profile and plain alternate).",
    )
    @click.option(
        "--merkle-batch",
        type=click.IntRange(2, 65536),
        default=16,
        show_default=True,
        help="Publications under one signature in the Merkle runs (the broker "
        "core costs are also reported at 16 and 64).",
    )
    @click.option(
        "--attribute",
        type=click.Choice(["topic", "numeric"]),
        default="topic",
        show_default=True,
        help="What subscriptions and events route on: a topic, or disjoint numeric "
        "ranges (plain, psguard, psguard-paper, default; psguard.txt §5.2.3 "
        "measured both).",
    )
    @click.option(
        "--plot",
        "plot",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Also draw throughput and latency per tree size (PNG).",
    )
    @click.option("--json", "as_json", is_flag=True)
    def bench_network(
        profile: str,
        brokers: tuple[int, ...],
        payloads: tuple[int, ...],
        subscribers: int,
        in_process: bool,
        quick: bool,
        repeat: int,
        merkle_batch: int,
        attribute: str,
        plot: Path | None,
        as_json: bool,
    ) -> None:
        """Max sustained throughput (eventguard.txt §6.2.2) and latency at 80% of it."""
        import asyncio

        from pubguard.net.config import PROFILES
        from pubguard.ops.bench.network import (
            BROKER_COUNTS,
            PAPER,
            check_attribute,
        )
        from pubguard.ops.bench.steady import run_network_bench_steady, steady_lines

        if profile not in PROFILES:
            raise click.BadParameter(
                f"known profiles: {', '.join(PROFILES)}", param_hint="--profile"
            )
        try:
            check_attribute(profile, attribute)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--attribute") from None
        for n in brokers:
            if n not in BROKER_COUNTS:
                raise click.BadParameter("tree sizes are 1, 3, 7 or 15", param_hint="--brokers")
        for p in payloads:
            if not 16 <= p <= 16384:
                raise click.BadParameter("payload must be 16..16384 bytes", param_hint="--payload")
        if plot is not None:  # before minutes of searching, not after
            check_writable(plot, "--plot")
        # minutes of searching: a progress line on a terminal, a line per step in a log
        with StepProgress(f"bench network --profile {profile}", unit="searches done") as steps:
            results = asyncio.run(
                run_network_bench_steady(
                    profile,
                    list(brokers or BROKER_COUNTS),
                    list(payloads or (16, 16384)),
                    in_process=in_process,
                    subscribers=subscribers,
                    quick=quick,
                    repeat=repeat,
                    merkle_batch=merkle_batch,
                    attribute=attribute,
                    on_step=steps.step,
                    on_searches=steps.units,
                )
            )
        if plot is not None:
            from pubguard.ops.bench.plot import plot_network

            try:
                where = "brokers in this process" if in_process else "one process per broker"
                plot_network(
                    results,
                    plot,
                    title=f"pubguard bench network --profile {profile}: "
                    f"{subscribers} subscribers ({attribute}), {where}, loopback, "
                    "shared cores",
                )
            except OSError as exc:
                raise click.ClickException(f"cannot write the plot {plot}: {exc}") from None
            err_console.print(f"plot written to {plot}")
        if as_json:
            print_json(results[0] if len(results) == 1 else {"results": results, **PAPER[profile]})
            return
        for table in _bench_tables(profile, subscribers, results):
            console.print(table)
        for line in _bench_legend(profile, results):
            console.print(f"[dim]{line}[/dim]")
        if "paper" in PAPER[profile]:
            console.print(f"paper: {PAPER[profile]['paper']}")
        for line in steady_lines(results):
            console.print(line)
        if any(r.get("goals") for r in results):
            console.print(_goals_table(results))
        v = results[0].get("client_cost_us")
        if v:
            console.print(
                "client work per event (CPU, in process): "
                + ", ".join(f"{k} {x} us" for k, x in v.items())
            )
        so = results[0].get("subscriber_process_open")
        if so:
            console.print(
                f"opening in one process of {so['subscribers']} subscribers, Merkle "
                f"{so['merkle_batch']}: {so['open_us']} us a delivery, "
                f"{so['signature_checks_per_batch']} signature checks a batch (shared cache)"
            )
        console.print(f"[dim]{results[0]['machine']}[/dim]")


def _short(profile: str, variant: str) -> str:
    """A run's name in the tables: ``merkle`` / ``paper`` for the profile's variants."""
    if variant == f"{profile}-merkle":
        return "merkle"
    return "paper" if variant == "psguard-paper" and profile == "psguard" else variant


def _bench_tables(profile: str, subscribers: int, results: list[dict[str, Any]]) -> list[Table]:
    """Throughput and latency, one row per run (the headline and every variant the bench ran
    beside it: Merkle batches, single-signed, psguard's paper configuration), each with its
    ratios to plain; then the in-process broker costs per publication. Each fits 80 columns."""
    secure = profile != "plain"
    on = results[0].get("attribute", "topic") if results else "topic"
    thr = Table(
        title=f"bench network ({profile}, {subscribers} subscribers on {on}): throughput",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    lat = Table(
        title="latency at 80% of max throughput, and idle", box=box.SIMPLE_HEAD, pad_edge=False
    )
    tcols = ["brokers", "bytes", "run", "max ev/s"]
    tcols += ["plain ev/s", "ratio", "CPU us", "CPU ratio"] if secure else ["CPU us"]
    lcols = ["brokers", "bytes", "run", "p50 ms", "p99 ms", "idle p50"]
    lcols += ["p50 ratio"] if secure else []
    for t, cols in ((thr, tcols), (lat, lcols)):
        for col in cols:
            t.add_column(col, justify="left" if col == "run" else "right", no_wrap=True)

    def cpu(v: Any) -> str:
        return "-" if v is None else f"{v:.0f}"

    def rows(r: dict[str, Any], run: str) -> None:
        head = [str(r["brokers"]), str(r["payload"]), run]
        t = head + [f"{r['max_throughput_eps']:.0f}"]
        if secure:
            t += [f"{r['baseline_max_throughput_eps']:.0f}", str(r["throughput_ratio"])]
        t.append(cpu(r.get("broker_cpu_us_per_event")))
        if secure:
            t.append(str(r.get("broker_cpu_ratio") or "-"))
        thr.add_row(*t)
        la = head + [
            str(r["latency_p50_ms"]),
            str(r.get("latency_p99_ms")),
            str(r.get("latency_idle_p50_ms", "-")),
        ]
        lat.add_row(*(la + [str(r["latency_p50_ratio"])] if secure else la))

    for r in results:
        rows(r, _short(profile, r.get("variant", profile)))
        for v in r.get("variants", ()):
            rows({**r, **v, "latency_idle_p50_ms": "-"}, _short(profile, v["variant"]))
    out = [thr, lat]
    core = results[0].get("broker_core_us") if results else None
    if core:
        out.append(_core_table(profile, core, results[0].get("broker_validation_us") or {}))
    return out


def _goals_table(results: list[dict[str, Any]]) -> Table:
    """Each goal of the profile, per tree size and payload: the goal, our figure, and whether
    it was met (``missed`` when not; ``not measured`` when the run could not tell)."""
    t = Table(title="goals", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("brokers", "bytes", "goal", "ours", "verdict"):
        t.add_column(col, justify="right" if col in ("brokers", "bytes", "ours") else "left")
    for r in results:
        for g in r.get("goals", ()):
            unit = g["unit"] if g["unit"] == "%" else f" {g['unit']}"
            ours = "-" if g["ours"] is None else f"{g['ours']:g}{unit}"
            verdict = {True: "met", False: "[red]missed[/red]", None: "not measured"}[g["met"]]
            goal = f"{g['name']} {g['goal']}"
            t.add_row(str(r["brokers"]), str(r["payload"]), goal, ours, verdict)
    return t


def _core_table(profile: str, core: dict[str, float], valid: dict[str, float]) -> Table:
    """Broker CPU per publication in process: the whole core (decode, guards, matching 32
    subscriptions, routing; ``handle_batch`` of 16) against plain's, and the guards alone."""
    t = Table(title="broker CPU per publication, in process", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("run", "core us", "x plain", "guards us"):
        t.add_column(col, justify="left" if col == "run" else "right", no_wrap=True)
    guards = {profile: valid.get("per_message"), "psguard-paper": valid.get("paper_brokers")}
    plain = core["plain"]
    for k, v in core.items():
        g = valid.get(k, guards.get(k))
        t.add_row(
            _short(profile, k).replace("_", " "),
            f"{v:.1f}",
            f"{v / plain:.2f}",
            "-" if g is None else f"{g:.1f}",
        )
    return t


def _bench_legend(profile: str, results: list[dict[str, Any]]) -> list[str]:
    """What each short run name in the table stands for."""
    seen: dict[str, str] = {}
    for r in results:
        if "label" in r:
            seen[r["variant"]] = r["label"]
        for v in r.get("variants", ()):
            seen[v["variant"]] = v["label"]
    out = [f"{_short(profile, k)}: {v}" for k, v in seen.items()]
    if any(r.get("broker_core_us") for r in results):
        out.append(
            "core us: the whole broker core per publication (decode, guards, matching, "
            "routing; handle_batch of 16); guards us: decode and guards alone; "
            "merkle <n>: one signature per <n> publications"
        )
    return out


def _keyservice_line(ks: dict[str, Any]) -> str:
    """The key service's line under the brokers' table."""
    where = f"keyservice {ks.get('url')} serving {', '.join(ks.get('profiles') or ())}"
    if ks.get("down"):
        return f"{where}: [red]down[/red]"
    if "error" in ks:
        return f"{where}: pid {ks.get('pid')}, [red]{ks['error']}[/red]"
    return f"{where}: pid {ks.get('pid')}, answering ({ks.get('ops')} ops)"


def _show_status(state: Path, as_json: bool) -> None:
    import asyncio

    from pubguard.cli.hermes_cmds import print_kgm_status
    from pubguard.native import describe as native_backend
    from pubguard.ops.cluster import cluster_status
    from pubguard.ops.cluster_keys import keyservice_status
    from pubguard.ops.hermes_kgm_proc import kgm_status

    if not as_json:  # which code runs the hot paths here (pubguard.native)
        console.print(f"backend: {native_backend()}", soft_wrap=True)
    statuses = asyncio.run(cluster_status(state))
    ks = keyservice_status(state)
    kgm = kgm_status(state)  # a [hermes] cluster's key-group manager
    if as_json:
        extra = {"keyservice": ks, "hermes-kgm": kgm}
        print_json({**statuses, **{k: v for k, v in extra.items() if v is not None}})
    else:
        console.print(_status_table(statuses))
        if ks is not None:
            console.print(_keyservice_line(ks), soft_wrap=True)
        if kgm is not None:
            print_kgm_status(kgm)
    if not show_crl_health(state, quiet=as_json):  # an expired CRL refuses every connection
        click.get_current_context().exit(1)
