"""A TCP forwarder that holds every chunk `delay` seconds before passing it on, both ways,
in order (a slow link to etcd); runs its own event loop on a thread."""

from __future__ import annotations

import asyncio
import threading

from tests.cluster.etcd_proc import free_port


class TcpDelay:
    def __init__(self, target: tuple[str, int], delay: float) -> None:
        self.target = target
        self.delay = delay
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
        loop = asyncio.get_running_loop()
        self._writers.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

            async def send() -> None:
                while True:
                    due, data = await queue.get()
                    await asyncio.sleep(max(0.0, due - loop.time()))
                    if not data:
                        dst.close()
                        return
                    dst.write(data)
                    await dst.drain()

            sender = asyncio.create_task(send())
            try:
                while data := await src.read(65536):
                    queue.put_nowait((loop.time() + self.delay, data))
            except (ConnectionError, OSError):
                pass
            queue.put_nowait((loop.time() + self.delay, b""))
            await asyncio.gather(sender, return_exceptions=True)

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

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
