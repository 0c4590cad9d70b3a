"""``python -m pubguard.net.server.main --config broker.toml``: run one broker process.

This is what ``pubguard broker`` and the local cluster start. SIGTERM and SIGINT stop the
broker cleanly (links told ``bye``, state closed); ``kill -9`` is survivable by design.
With ``--parent-pid PID`` the broker also stops when that process goes away (the demo, the
benchmarks and the tests start brokers this way, so a killed parent leaves nothing running;
``pubguard cluster up`` starts detached brokers without it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

from pubguard.errors import ConfigError, PubguardError
from pubguard.net import gc_tuning
from pubguard.net.config import BrokerConfig, load_broker_config
from pubguard.net.server.multitree import run_host

__all__ = ["PARENT_POLL_S", "PROFILE_ENV", "main", "serve"]

PROFILE_ENV = "PUBGUARD_BROKER_PROFILE"
PARENT_POLL_S = 1.0  # how often a tied broker checks that its parent is still there


async def _watch_parent(parent_pid: int, task: asyncio.Task[None]) -> None:
    while os.getppid() == parent_pid:
        await asyncio.sleep(PARENT_POLL_S)
    logging.getLogger("pubguard.broker").warning("parent %d is gone: stopping", parent_pid)
    task.cancel()


async def _tune_when_ready(ready: asyncio.Event) -> None:
    await ready.wait()
    gc_tuning.tune_for_server()  # start-up done: this process is a broker from now on


async def _serve(config: BrokerConfig, parent_pid: int | None = None) -> None:
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    watcher = None
    if parent_pid is not None:
        watcher = asyncio.create_task(_watch_parent(parent_pid, task))
    ready = asyncio.Event()
    tuner = asyncio.create_task(_tune_when_ready(ready))
    try:
        await run_host(config, ready=ready)  # every relabelled tree it lists
    except asyncio.CancelledError:
        pass
    finally:
        tuner.cancel()
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher


def serve(config: BrokerConfig, parent_pid: int | None = None) -> None:
    """Run ``config``'s broker in this process until SIGTERM / SIGINT (or its parent exits).

    With ``PUBGUARD_BROKER_PROFILE=DIR`` in the environment the broker runs under cProfile and
    writes ``DIR/<name>.prof`` when it stops (for finding where a benchmark's time goes)."""
    try:
        _serve_maybe_profiled(config, parent_pid)
    except OSError as exc:  # cannot listen (bad host, port in use) or reach its state files
        where = exc.filename or f"listen address {config.host}:{config.port}"
        # asyncio wraps bind errors in a long message; the errno says it in two words
        code = exc.errno or 0
        why = os.strerror(code) if code > 0 else (exc.strerror or str(exc))
        raise ConfigError(f"broker {config.name}: {where}: {why}") from None


def _serve_maybe_profiled(config: BrokerConfig, parent_pid: int | None) -> None:
    out = os.environ.get(PROFILE_ENV)
    if not out:
        asyncio.run(_serve(config, parent_pid))
        return
    import cProfile

    prof = cProfile.Profile()
    try:
        prof.runcall(asyncio.run, _serve(config, parent_pid))
    finally:
        Path(out).mkdir(parents=True, exist_ok=True)
        prof.dump_stats(str(Path(out) / f"{config.name}.prof"))


def _env_verbosity() -> int:
    raw = os.environ.get("PUBGUARD_BROKER_VERBOSE", "0").strip() or "0"
    return int(raw) if raw.isdigit() else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="pubguard-broker")
    ap.add_argument("--config", required=True, type=Path)
    ap.add_argument("--parent-pid", type=int, default=None)
    ap.add_argument("-v", "--verbose", action="count", default=0)
    args = ap.parse_args(argv)
    # PUBGUARD_BROKER_VERBOSE=1|2 does the same for brokers started by a cluster (logs every
    # drop with its reason, op and message id at 2)
    verbose = args.verbose + _env_verbosity()
    logging.basicConfig(
        level=logging.WARNING - 10 * min(verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        serve(load_broker_config(args.config), args.parent_pid)
    except PubguardError as exc:
        print(f"pubguard: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
