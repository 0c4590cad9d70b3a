"""net.conn.FrameConnection over real sockets on 127.0.0.1 (no TLS: the TLS links are covered by
the cluster, crash and fuzz tests), and net.loop.run on either event loop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pubguard.errors import FrameError
from pubguard.net import loop as io_loop
from pubguard.net.conn import FrameConnection, PeerClosed, open_frame_connection
from pubguard.wire.framing import encode_frame


async def _pair() -> tuple[FrameConnection, FrameConnection, asyncio.AbstractServer]:
    accepted: asyncio.Future[FrameConnection] = asyncio.get_running_loop().create_future()
    server = await asyncio.get_running_loop().create_server(
        lambda: FrameConnection(accepted.set_result), "127.0.0.1", 0
    )
    port = server.sockets[0].getsockname()[1]
    client = await open_frame_connection("127.0.0.1", port, ssl=None)
    return await accepted, client, server


def test_frames_reach_the_handler_then_a_bad_frame_ends_the_connection() -> None:
    async def main() -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
        srv, cli, server = await _pair()
        cli.write(encode_frame({"t": "hb"}) + encode_frame({"t": "a", "u": 1}))
        first = await srv.next_frames(5)
        got: list[dict[str, Any]] = []
        cli.write(encode_frame({"t": "a", "u": 2}) + b"\x00\x00\x00\x05\x09garb")
        try:
            await asyncio.wait_for(srv.run(got.extend, []), 5)
            why = "no error"
        except FrameError as exc:
            why = str(exc)
        cli.write(encode_frame({"t": "a", "u": 3}))  # ignored: reading stopped
        await asyncio.sleep(0.05)
        srv.close()
        cli.close()
        server.close()
        return first, got, why

    first, got, why = asyncio.run(main())
    assert first == [{"t": "hb"}, {"t": "a", "u": 1}]
    assert got == [{"t": "a", "u": 2}]  # the frame before the bad one was handled
    assert "wire version" in why


def test_an_exception_in_the_handler_ends_run_and_eof_is_peer_closed() -> None:
    async def main() -> tuple[str, str]:
        srv, cli, server = await _pair()

        def boom(frames: list[dict[str, Any]]) -> None:
            if frames:
                raise FrameError("refused by the handler")

        cli.write(encode_frame({"t": "hb"}))
        try:
            await asyncio.wait_for(srv.run(boom, []), 5)
            a = "no error"
        except FrameError as exc:
            a = str(exc)
        srv2, cli2, server2 = await _pair()
        cli2.close()
        try:
            await asyncio.wait_for(srv2.run(lambda f: None, []), 5)
            b = "no error"
        except PeerClosed:
            b = "peer closed"
        for c in (srv, cli, srv2):
            c.close()
        server.close()
        server2.close()
        return a, b

    assert asyncio.run(main()) == ("refused by the handler", "peer closed")


def test_drain_waits_while_the_transport_is_paused() -> None:
    async def main() -> tuple[bool, bool]:
        srv, cli, server = await _pair()
        assert cli.transport is not None
        cli.transport.set_write_buffer_limits(high=1024, low=0)
        srv.transport.pause_reading()  # type: ignore[union-attr]
        blob = encode_frame({"b": b"x" * 200_000})
        for _ in range(40):  # more than the socket buffers hold
            cli.write(blob)
        drained = asyncio.ensure_future(cli.drain())
        await asyncio.sleep(0.05)
        waited = not drained.done()
        got: list[dict[str, Any]] = []
        srv.transport.resume_reading()  # type: ignore[union-attr]
        run = asyncio.ensure_future(srv.run(got.extend, []))
        await asyncio.wait_for(drained, 10)
        cli.close()
        with pytest.raises(PeerClosed):
            await asyncio.wait_for(run, 10)
        srv.close()
        server.close()
        return waited, len(got) == 40

    assert asyncio.run(main()) == (True, True)


def test_io_loop_runs_on_uvloop_when_installed_unless_switched_off(monkeypatch) -> None:
    async def loop_module() -> str:
        return type(asyncio.get_running_loop()).__module__

    try:
        import uvloop  # noqa: F401

        expected = "uvloop"
    except ImportError:
        expected = "asyncio"
    assert io_loop.run(loop_module()).split(".")[0] == expected
    monkeypatch.setenv(io_loop.ENV, "0")
    assert io_loop.run(loop_module()).startswith("asyncio")
