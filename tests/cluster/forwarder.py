"""A TCP forwarder on its own event loop and thread, for the fault tests: connections to
`port` go to `target`; a subclass's `splice(client, upstream)` carries the bytes (tcp_cut.py
drops them while cut, tcp_delay.py holds them). `close()` closes every connection."""

from __future__ import annotations

import asyncio
import threading

from tests.cluster.etcd_proc import free_port

Pair = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Forwarder:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port))
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        await self.splice((reader, writer), (up_reader, up_writer))

    async def splice(self, client: Pair, upstream: Pair) -> None:
        raise NotImplementedError

    def close(self) -> None:
        async def shut() -> None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            await asyncio.sleep(0.1)  # the closes complete
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
