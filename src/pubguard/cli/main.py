"""Entry point of the ``pubguard`` command.

Command modules are listed in ``COMMAND_MODULES``; each exposes ``register(group)``. Every
:class:`~pubguard.errors.PubguardError` that escapes a command becomes one line on stderr and
exit status 1 (2 for usage errors, as click does); so does an ``OSError`` (a state path that
is a file, a read-only folder), naming the path. A reader that goes away (``pubguard match ... |
head``) ends the command quietly with status 141 (128 + SIGPIPE), as a Unix tool killed by
SIGPIPE does: no message, no traceback. SIGPIPE itself stays ignored (Python's default), so a
broker writing to a peer that closed its socket gets ``EPIPE`` instead of dying.
"""

from __future__ import annotations

import errno
import importlib
import logging
import os
import signal
import sys
from typing import Final, NoReturn

import click

from pubguard import __version__
from pubguard.errors import PubguardError
from pubguard.native import describe

__all__ = ["cli", "main"]

COMMAND_MODULES: tuple[str, ...] = (
    "pubguard.cli.match_cmds",  # match, bench match
    "pubguard.cli.broker_bench_cmds",
    "pubguard.cli.workload_cmds",  # workload generate
    "pubguard.cli.keys_cmds",  # keys ..., bench keys
    "pubguard.cli.native_cmds",  # bench tokens (Python and native backends)
    "pubguard.cli.signature_cmds",  # bench signatures (Ed25519 batch verification)
    "pubguard.cli.experiment_cmds",  # experiments psguard-cost-ratio, bench kmc-oft
    "pubguard.cli.scaling_cmds",  # experiments scaling
    "pubguard.cli.vcaps_cmds",  # experiments vcaps
    "pubguard.cli.net_cmds",  # broker, cluster, publish, subscribe, status, bench network
    "pubguard.cli.soak_cmd",  # cluster soak
    "pubguard.cli.pipeline_cmds",  # pipeline ..., spark-cluster, bench pipeline
    "pubguard.cli.demo_cmd",  # demo
    "pubguard.cli.security_cmds",  # experiments flood
    "pubguard.cli.keyservice_cmds",  # keyservice serve
    "pubguard.cli.ca_cmds",  # ca renew-crl, ca crl-agent, ca crl-status
    "pubguard.cli.resilience_cmds",  # experiments resilience, psguard-entropy
    "pubguard.cli.pubsub_cmds",  # advertise, unsubscribe
    "pubguard.cli.identity_cmds",  # identity issue, keyservice new-secret
    "pubguard.cli.hermes_cmds",  # experiments hermes
)


#: the status a shell reports for a process killed by SIGPIPE (``yes | head``: 141)
READER_GONE_STATUS: Final = 128 + signal.SIGPIPE


def _reader_gone() -> NoReturn:
    """stdout's reader went away: end quietly with the SIGPIPE status. stdout is pointed at
    /dev/null first, so the interpreter's final flush of what is still buffered cannot fail
    again (and print "Exception ignored ... BrokenPipeError" on its way out)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # a stdout without a descriptor (a test's capture)
        pass
    raise SystemExit(READER_GONE_STATUS)


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> object:
        try:
            rv = super().invoke(ctx)
            sys.stdout.flush()  # a pipe closed after the last write is found here, not at exit
            return rv
        except BrokenPipeError:
            _reader_gone()
        except PubguardError as exc:
            click.echo(f"pubguard: error: {exc}", err=True)
            ctx.exit(1)
        except OSError as exc:
            if exc.errno == errno.EPIPE:  # raised as a plain OSError by some writers
                _reader_gone()
            # the environment, not pubguard: a state path that is a file,
            # a read-only or missing folder, a full disk; say which path, no traceback
            where = f"{exc.filename}: " if exc.filename else ""
            click.echo(f"pubguard: error: {where}{exc.strerror or exc}", err=True)
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("pubguard: interrupted", err=True)
            ctx.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__, prog_name="pubguard", message=f"%(prog)s %(version)s, backend: {describe()}"
)
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """pubguard: secure content-based publish/subscribe."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _register() -> None:
    for mod in COMMAND_MODULES:
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name == mod:  # a command module not written yet
                continue
            raise
        m.register(cli)


_register()


def main() -> None:
    cli(prog_name="pubguard")


if __name__ == "__main__":  # pragma: no cover
    main()
