"""``python -m pubguard.net.broker_main --config broker.toml``: run one broker process.

This is what ``pubguard broker`` and the local cluster start. SIGTERM and SIGINT stop the
broker cleanly (links told ``bye``, state closed); ``kill -9`` is survivable by design.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from pubguard.errors import PubguardError
from pubguard.net.config import BrokerConfig, load_broker_config
from pubguard.net.server import run_broker

__all__ = ["main", "serve"]


async def _serve(config: BrokerConfig) -> None:
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)  # type: ignore[union-attr]
    try:
        await run_broker(config)
    except asyncio.CancelledError:
        pass


def serve(config: BrokerConfig) -> None:
    """Run ``config``'s broker in this process until SIGTERM / SIGINT."""
    asyncio.run(_serve(config))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="pubguard-broker")
    ap.add_argument("--config", required=True, type=Path)
    ap.add_argument("-v", "--verbose", action="count", default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        serve(load_broker_config(args.config))
    except PubguardError as exc:
        print(f"pubguard: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
