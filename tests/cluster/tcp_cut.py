"""A TCP forwarder a test can cut: connections to `port` go to `target`, until `cut()`
drops every byte both ways, closes included (connections stay open, as behind a partition);
`cut_matching(needle)` cuts only some; `heal()` lets traffic through again."""

from __future__ import annotations

import asyncio
import threading

from tests.cluster.forwarder import Forwarder, Pair


class TcpCut(Forwarder):
    def __init__(self, target: tuple[str, int]) -> None:
        self._open = threading.Event()
        self._open.set()
        self._cut_needles: set[bytes] = set()
        super().__init__(target)

    async def splice(self, client: Pair, upstream: Pair) -> None:
        (reader, writer), (up_reader, up_writer) = client, upstream
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
