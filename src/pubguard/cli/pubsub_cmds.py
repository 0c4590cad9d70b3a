"""``advertise`` and ``unsubscribe``: the client commands beside ``publish`` / ``subscribe``,
in any profile the broker serves (``--profile``; keys from the cluster's key service); and
``cluster url NAME``, where a broker or the key service of a running cluster listens.

Examples::

    pubguard advertise --state ./net --broker b6 --profile eventguard --durable \\
        --adv-id ward 'topic = "cardiology"'
    pubguard unsubscribe --state ./net --broker b3 --profile default --sub-id night \\
        'topic = "cardiology" && age > 20'

A durable advertisement (``--durable --adv-id ID``, session ``cli/ID``) stays at the broker
after the command ends, as a durable subscription does; without ``--durable`` the command
advertises, waits for the broker's verdict and withdraws on exit (a check of the permit).
``unsubscribe`` withdraws the durable subscription ``--sub-id`` (made by ``subscribe --durable
--sub-id ID``, session ``cli/ID``) with the scheme's proof (eventguard.txt §4.5: the usb
permit; the default profile's signed withdrawal), so its broker stops keeping events for it.
"""

from __future__ import annotations

from pathlib import Path

import click

from pubguard.cli.common import console, get_group
from pubguard.cli.net_cmds import _CLI_CERT, _STATE, PROFILE_OPTION, _client, _session_identity

__all__ = ["register"]


def register(cli: click.Group) -> None:
    cluster = get_group(cli, "cluster", "Start, stop and inspect a local broker network.")

    @cluster.command("url")
    @_STATE
    @click.argument("name")
    def cluster_url(state: Path, name: str) -> None:
        """Print where broker NAME (or the keyservice) of a running cluster listens, as
        tls://host:port (for --broker / --keyservice, and another domain's broker.toml)."""
        import json

        from pubguard.errors import StateError
        from pubguard.net.config import load_broker_config

        try:
            data = json.loads((state / "cluster.json").read_text())
        except (OSError, ValueError):
            raise StateError(f"no cluster is running from {state} (pubguard cluster up)") from None
        info = data.get(name)
        if info is None:
            raise StateError(f"the cluster in {state} has no broker or service {name!r}")
        if "url" in info:
            click.echo(info["url"])
            return
        host = load_broker_config(info["config"]).host
        click.echo(f"tls://{host}:{info['port']}")

    @cli.command("advertise")
    @_STATE
    @click.option("--broker", default="b0", show_default=True)
    @click.option("--identity", default=None, help="Session identity (default: cli/<random>).")
    @click.option("--durable", is_flag=True, help="Keep it at the broker (needs --adv-id).")
    @click.option("--adv-id", "adv_id", default=None, help="The advertisement's stable id.")
    @PROFILE_OPTION
    @click.argument("filter_text")
    def advertise_cmd(
        state: Path,
        broker: str,
        identity: str | None,
        durable: bool,
        adv_id: str | None,
        profile: str | None,
        keyservice: str | None,
        filter_text: str,
    ) -> None:
        """Advertise what this publisher will publish (a filter); a refusal is one line."""
        import asyncio

        from pubguard.errors import ParseError
        from pubguard.model import Filter

        try:
            f = Filter.parse(filter_text)
        except ParseError as exc:
            raise ParseError(f"bad filter {filter_text!r}: {exc}") from None
        if durable and not adv_id:
            raise click.BadParameter(
                "a durable advertisement needs --adv-id", param_hint="--durable"
            )
        if durable and identity is None:
            identity = f"{_CLI_CERT}/{adv_id}"

        async def run() -> str:
            c = await _client(
                state,
                broker,
                _session_identity(identity),
                durable,
                profile=profile,
                keyservice=keyservice,
            )
            try:
                aid = await c.advertise(f, adv_id=adv_id)
                await c.confirm()  # the broker's verdict (RefusedError otherwise)
                return aid
            finally:
                await c.close()

        aid = asyncio.run(run())
        kept = " (kept at the broker)" if durable else ""
        console.print(f"advertised {aid}: {filter_text}{kept}", soft_wrap=True)

    @cli.command("unsubscribe")
    @_STATE
    @click.option("--broker", default="b0", show_default=True)
    @click.option("--identity", default=None, help="Session identity (default: cli/<SUB-ID>).")
    @click.option("--sub-id", "sub_id", required=True, help="The durable subscription's id.")
    @PROFILE_OPTION
    @click.argument("filter_text")
    def unsubscribe_cmd(
        state: Path,
        broker: str,
        identity: str | None,
        sub_id: str,
        profile: str | None,
        keyservice: str | None,
        filter_text: str,
    ) -> None:
        """Withdraw the durable subscription --sub-id (its FILTER as subscribed: the
        withdrawal proof covers it)."""
        import asyncio

        from pubguard.errors import ParseError
        from pubguard.model import Filter

        try:
            f = Filter.parse(filter_text)
        except ParseError as exc:
            raise ParseError(f"bad filter {filter_text!r}: {exc}") from None

        async def run() -> None:
            who = identity or f"{_CLI_CERT}/{sub_id}"
            c = await _client(state, broker, who, True, profile=profile, keyservice=keyservice)
            try:
                # the session resumes; the subscription is named again so the client holds
                # it (the broker replaces it in place), then withdrawn with its proof
                sub = await c.subscribe(f, sub_id=sub_id)
                await c.unsubscribe(sub)
                await c.confirm()
            finally:
                await c.close()

        asyncio.run(run())
        console.print(f"unsubscribed {sub_id} at {broker}", soft_wrap=True)
