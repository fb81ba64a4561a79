"""A link between two worker processes of one broker: an ordered stream of batches over a
Unix socket, one write per loop turn (docs/multicore.md).

Owns: the asyncio glue around `broker.workers.framing`: items sent during one loop turn
leave as one frame at the end of the turn (a batch crosses a process boundary in under 1 µs
a message, one message at a time costs 3–4 µs: bench/micro/interprocess.py); received frames
are handed to `on_batch` in order; the socket's back-pressure is reported (`writable`,
`on_pause` / `on_resume`) so that senders stop reading their clients, as credit flow does;
the peer's death (the socket closed or reset) is reported once (`on_lost`). Talks to: the
worker that owns it. Must never: decide what an item means, or drop, reorder or merge items:
what `send` took in one order, `on_batch` gives in that order, or the link is lost.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Any, cast

from broker.workers.framing import DEFAULT_MAX_FRAME, BatchDecoder, FrameError, encode_batch

log = logging.getLogger("broker.workers")

HIGH_WATER = 4 * 1024 * 1024  # bytes buffered in the transport before senders are paused
LOW_WATER = 1024 * 1024  # ... and resumed


def _ignore() -> None:
    return None


class Link(asyncio.Protocol):
    """One end of a link. `send(item)` queues an item (any picklable value); the items queued
    in one loop turn go out as one frame when the turn ends (or at once with `flush()`).
    `on_batch(items)` is called with each received batch, in order. After `on_lost(exc)`
    (exc None for an orderly close by the peer) the link sends and receives nothing more.

    `writable` is False while the transport holds more than HIGH_WATER bytes that the peer
    has not read; `on_pause()` / `on_resume()` are called as it turns False / True."""

    def __init__(self, on_batch: Callable[[list[Any]], None],
                 on_lost: Callable[[BaseException | None], None],
                 on_pause: Callable[[], None] = _ignore,
                 on_resume: Callable[[], None] = _ignore,
                 max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.on_batch = on_batch  # called with each received batch, in order
        self.on_lost = on_lost  # called once when the link is gone
        self.on_pause = on_pause  # the peer reads slower than we send: stop producing
        self.on_resume = on_resume  # the transport drained below LOW_WATER
        self.writable = True  # False between on_pause and on_resume
        self.closed = False  # True once lost or closed: send() raises
        self.batches_sent = 0  # frames written (each one loop turn's items)
        self.items_sent = 0  # items written
        self._decoder = BatchDecoder(max_frame)  # received bytes -> batches
        self._out: list[Any] = []  # items queued this loop turn
        self._flush_handle: asyncio.Handle | None = None  # the end-of-turn flush, if queued
        self._transport: asyncio.Transport | None = None

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast("asyncio.Transport", transport)  # uvloop's is no subclass
        self._transport.set_write_buffer_limits(high=HIGH_WATER, low=LOW_WATER)
        if self._out:  # sent before the loop made the connection (uvloop makes it a turn
            self.flush()  # after create_unix_connection returns)

    def data_received(self, data: bytes) -> None:
        try:
            batches = self._decoder.feed(data)
        except FrameError as exc:
            log.error("worker link: %s; closing it", exc)
            self._lose(exc)
            return
        for items in batches:
            self.on_batch(items)

    def pause_writing(self) -> None:
        self.writable = False
        self.on_pause()

    def resume_writing(self) -> None:
        self.writable = True
        self.on_resume()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lose(exc)

    # -- sending -------------------------------------------------------------------------------
    def send(self, item: Any) -> None:
        """Queue `item` for the end of this loop turn. ConnectionError once the link is lost."""
        if self.closed:
            raise ConnectionError("worker link is closed")
        self._out.append(item)
        if self._flush_handle is None and self._transport is not None:
            self._flush_handle = asyncio.get_running_loop().call_soon(self.flush)

    def last_queued(self) -> Any:
        """The last item `send` queued this loop turn (not written yet), or None: a sender
        may add to it in place (a list it holds) instead of queuing one more item."""
        return self._out[-1] if self._out else None

    def flush(self) -> None:
        """Write the queued items now, as one frame."""
        self._flush_handle = None
        if not self._out or self._transport is None or self.closed:
            return
        items, self._out = self._out, []
        self._transport.write(encode_batch(items))
        self.batches_sent += 1
        self.items_sent += len(items)

    def close(self) -> None:
        """Flush what is queued and close the socket; the peer sees an orderly close."""
        if self.closed:
            return
        self.flush()
        if self._transport is not None:
            self._transport.close()

    def _lose(self, exc: BaseException | None) -> None:
        if self.closed:
            return
        self.closed = True
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._out = []
        if self._transport is not None and not self._transport.is_closing():
            self._transport.abort()
        self.on_lost(exc)


async def open_link(sock: socket.socket, link: Link) -> Link:
    """Wrap one end of a connected Unix socket (`socket.socketpair()`, or one inherited from
    the supervisor) in `link` on the running loop. The link is built first so that its
    callbacks can name it: the peer's first batch may arrive before this returns."""
    loop = asyncio.get_running_loop()
    await loop.create_unix_connection(lambda: link, sock=sock)
    return link
