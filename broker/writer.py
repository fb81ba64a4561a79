"""Per-connection writer: the outbound frame buffer (RabbitMQ `rabbit_writer.erl`).

Owns: bytes queued for one socket. Channels and queue processes hand it encoded frames with
`send`; it coalesces everything queued during one loop turn into one `transport.write` (as
RabbitMQ's writer flushes when its mailbox empties), or earlier once `flush_threshold` bytes are
waiting. Tracks the transport's write backpressure (`paused`) so deliveries can stop while the
client does not read. Never encodes frames and never reads the socket.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Writer:
    """Coalescing writer for one connection.

    `send(data)`: queue bytes (already framed). `flush()`: write everything now.
    `paused`: the transport's buffer is above its high-water mark (set by the reader's
    pause_writing/resume_writing); `on_resume` callbacks run when it drains.
    """

    __slots__ = ("_transport", "_loop", "_buf", "_size", "_scheduled", "_threshold", "paused",
                 "_on_resume", "closed", "bytes_sent", "writes")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop,
                 flush_threshold: int = 262144) -> None:
        self._transport = transport  # the connection's socket transport
        self._loop = loop  # for scheduling the end-of-turn flush
        self._buf: list[bytes] = []  # frames waiting for the flush
        self._size = 0  # bytes in _buf
        self._scheduled = False  # a flush is queued with call_soon
        self._threshold = flush_threshold  # flush early past this many bytes
        self.paused = False  # transport asked us to stop writing (client not reading)
        self._on_resume: list[Callable[[], None]] = []  # run when the transport drains
        self.closed = False  # after close(): sends are dropped
        self.bytes_sent = 0  # total bytes handed to the transport (stats)
        self.writes = 0  # transport writes (send_cnt in the management API)

    def send(self, data: bytes) -> None:
        if self.closed:
            return
        self._buf.append(data)
        self._size += len(data)
        if self._size >= self._threshold:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        if not self._buf or self.closed:
            return
        data = self._buf[0] if len(self._buf) == 1 else b"".join(self._buf)
        self._buf = []
        self._size = 0
        self.bytes_sent += len(data)
        self.writes += 1
        self._transport.write(data)

    def pending_bytes(self) -> int:
        """Bytes queued and not yet handed to the transport."""
        return self._size

    @property
    def pending(self) -> bool:
        """Frames are queued but not yet written."""
        return bool(self._buf)

    def add_resume_callback(self, fn: Callable[[], None]) -> None:
        """Run `fn` once the transport has drained (after pause_writing)."""
        self._on_resume.append(fn)

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        if not paused:
            callbacks, self._on_resume = self._on_resume, []
            for fn in callbacks:
                fn()

    def close(self) -> None:
        """Flush what is queued and stop accepting frames."""
        self.flush()
        self.closed = True
