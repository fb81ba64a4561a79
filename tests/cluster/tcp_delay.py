"""A TCP forwarder that holds every chunk `delay` seconds before passing it on, both ways,
in order (a slow link to etcd)."""

from __future__ import annotations

import asyncio

from tests.cluster.forwarder import Forwarder, Pair


class TcpDelay(Forwarder):
    def __init__(self, target: tuple[str, int], delay: float) -> None:
        self.delay = delay
        super().__init__(target)

    async def splice(self, client: Pair, upstream: Pair) -> None:
        (reader, writer), (up_reader, up_writer) = client, upstream
        loop = asyncio.get_running_loop()

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
