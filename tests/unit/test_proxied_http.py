"""A cluster leader's HTTP servers behind a PROXY line (issue 35 item 4): a client a follower
carries reaches the management API and Prometheus through a Unix socket whose first line is
PROXY v1; aiohttp's handler then sees the client's own address as the connection's peer, and
a connection whose first line is not a PROXY line is refused."""

from __future__ import annotations

import asyncio

from aiohttp import web

from broker.cluster.proxy import ProxiedReader, proxy_line


async def _serve(tmp_path):
    async def remote(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peername")
        return web.Response(text=f"{request.remote} {peer[1]}")

    app = web.Application()
    app.router.add_get("/who", remote)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    path = str(tmp_path / "http.sock")
    server = await asyncio.get_running_loop().create_unix_server(
        lambda: ProxiedReader(runner.server, wrap=True), path)
    return runner, server, path


async def _ask(path: str, first: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(first + b"GET /who HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return data


def test_the_http_handler_sees_the_address_of_the_proxy_line(tmp_path):
    async def scenario():
        runner, server, path = await _serve(tmp_path)
        try:
            got = await _ask(path, proxy_line(("203.0.113.7", 40123), ("10.0.0.2", 15672)))
            assert got.startswith(b"HTTP/1.1 200"), got
            assert got.endswith(b"203.0.113.7 40123"), got
            refused = await _ask(path, b"GET / HTTP/1.1\r\n")
            assert refused == b""  # no PROXY line: closed without an answer
        finally:
            server.close()
            await runner.cleanup()

    asyncio.run(scenario())
