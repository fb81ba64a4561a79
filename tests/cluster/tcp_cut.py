"""A TCP forwarder a test can cut: connections to `port` go to `target`, until `cut()`
drops every byte both ways, closes included (connections stay open, as behind a partition);
`heal()` lets
traffic through again. Runs its own event loop on a thread."""

from __future__ import annotations

import asyncio
import threading

from tests.cluster.etcd_proc import free_port


class TcpCut:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._writers: set[asyncio.StreamWriter] = set()
        self._open = threading.Event()
        self._open.set()
        self._cut_needles: set[bytes] = set()
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
        seen: list[bytes] = []  # what the client sent first (a member's HELLO names it)

        def passes() -> bool:
            if not self._open.is_set():
                return False
            return not any(needle in b"".join(seen[:1]) for needle in self._cut_needles)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                       from_client: bool) -> None:
            try:
                while data := await src.read(65536):
                    if from_client and not seen:
                        seen.append(data)
                    if passes():  # cut: bytes vanish, as on a dead link
                        dst.write(data)
                        await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                if passes():  # cut: a close does not cross either (no FIN crosses a
                    dst.close()  # partition); close() ends it

        await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))

    def cut_matching(self, needle: bytes) -> None:
        """Cut only the connections whose first bytes from the client contain `needle`
        (a member's id, in its HELLO): one member cut off, the others not."""
        self._cut_needles.add(needle)

    def cut(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()
        self._cut_needles.clear()

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
