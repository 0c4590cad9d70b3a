"""``python -m tests.security.secure_broker --config broker.toml --keys keys.json --profiles
default [--capture]``: one broker process serving the secure profiles, with a frame capture.

It runs the ordinary broker (``pubguard.net.server.main``) with two things installed that
only the security tests want:

- the broker's schemes come from :func:`pubguard.schemes.registry.build_registry` over the
  public :class:`~pubguard.schemes.registry.BrokerKeys` in ``--keys`` (replay state in the
  broker's own database, as the server passes it, so it survives a ``kill -9``);
- with ``--capture``, every frame the broker decodes is appended, re-encoded, to
  ``<state_dir>/capture.in`` and every frame it encodes to ``<state_dir>/capture.out``: what a
  curious broker sees of the network, readable back with ``FrameDecoder``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pubguard.net.conn as io_conn
import pubguard.net.server.server as server_mod
from pubguard.net.config import load_broker_config
from pubguard.net.server.main import serve
from pubguard.schemes.registry import BrokerKeys, build_registry
from pubguard.wire.framing import FrameDecoder, encode_frame


def install_profiles(keys: BrokerKeys, profiles: list[str], state_dir: Path) -> None:
    def schemes_for(*_args: Any, replay_db: Any = None, **_kw: Any) -> Any:
        # the server passes its own database for the replay state (it commits with each
        # batch); without one, <state_dir>/replay.db
        return build_registry(
            ["plain", *profiles], keys, now=time.time(), state_dir=state_dir, replay_db=replay_db
        )

    server_mod.schemes_for = schemes_for  # type: ignore[assignment]


def install_capture(state_dir: Path) -> None:
    """Tee what every link of this broker reads and writes after TLS decryption: frames as
    decoded (re-encoded, so ``capture.in`` reads back with ``FrameDecoder``) and the bytes
    written to each connection (``capture.out``). Both go through ``net/conn.py``'s
    :class:`FrameConnection`, which every broker link (clients, children, the parent) uses."""
    fin = (state_dir / "capture.in").open("ab", buffering=0)
    fout = (state_dir / "capture.out").open("ab", buffering=0)

    class TeeDecoder(FrameDecoder):
        def feed(self, data: bytes) -> list[dict[str, Any]]:
            frames = super().feed(data)
            if frames:
                fin.write(b"".join(encode_frame(f) for f in frames))
            return frames

    write = io_conn.FrameConnection.write

    def tee_write(self: io_conn.FrameConnection, data: bytes) -> None:
        fout.write(bytes(data))
        write(self, data)

    io_conn.FrameDecoder = TeeDecoder  # type: ignore[misc]
    io_conn.FrameConnection.write = tee_write  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="secure-broker")
    ap.add_argument("--config", required=True, type=Path)
    ap.add_argument("--keys", required=True, type=Path)
    ap.add_argument("--profiles", default="default")
    ap.add_argument("--capture", action="store_true")
    ap.add_argument("-v", "--verbose", action="count", default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    config = load_broker_config(args.config)
    install_profiles(BrokerKeys.load(args.keys), args.profiles.split(","), config.state_dir)
    if args.capture:
        install_capture(config.state_dir)
    serve(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
