"""Reading one replication frame (broker/cluster/wire.py) from an asyncio stream."""

from __future__ import annotations

import asyncio

from broker.cluster import wire


async def read_frame(reader: asyncio.StreamReader, within: float | None) -> tuple[int, bytes]:
    """The next (kind, payload); `within` s at most (None: no bound). ProtocolError for a
    frame over wire.MAX_FRAME, IncompleteReadError at EOF, TimeoutError when late."""

    async def read() -> tuple[int, bytes]:
        head = await reader.readexactly(5)
        kind, size = head[0], int.from_bytes(head[1:], "big")
        if size > wire.MAX_FRAME:
            raise wire.ProtocolError(f"frame of {size} bytes")
        return kind, await reader.readexactly(size)

    if within is None:
        return await read()
    return await asyncio.wait_for(read(), within)
