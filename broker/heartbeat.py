"""Heartbeats of one connection (AMQP 0-9-1 §4.2.7; RabbitMQ's `rabbit_heartbeat.erl`, the
sender and receiver processes each reader starts once the connection is tuned).

Owns: the heartbeat timer of one connection: every interval/2 s it sends a heartbeat frame
if nothing else went out since the last tick, and it declares the peer dead after two
intervals with nothing received. While the reader does not read its socket (credit flow,
or a client that does not read our output) the silence is ours, not the peer's: the
receive clock is moved on, as rabbit_reader pauses its heartbeat monitor while blocked.
Talks to: the reader, which owns the clock of the last receive and what to do on silence.
Must never: read the socket or close the connection itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.protocol.encoding import HEARTBEAT_FRAME

if TYPE_CHECKING:
    import asyncio

    from broker.writer import Writer


class Heartbeats:
    """The heartbeat sender and monitor of one connection, `interval` s (> 0) apart.

    `running()` says whether the connection is still open (no tick after it is not: the
    timer stops once the connection closes); `last_received()` returns when the peer last
    sent anything (monotonic s) and `received_now()` sets it to now; `reading_paused()` says
    whether the reader has stopped reading; `silent()` is called once, after 2 × interval
    without a byte from the peer."""

    __slots__ = ("_loop", "_writer", "interval", "_last_received", "_received_now",
                 "_reading_paused", "_silent", "_running", "_last_send_bytes", "_timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, writer: Writer, interval: int,
                 running: Callable[[], bool], last_received: Callable[[], float], received_now: Callable[[], None],
                 reading_paused: Callable[[], bool], silent: Callable[[], None]) -> None:
        self._loop = loop  # the broker's event loop, for the timer
        self._writer = writer  # the connection's outbound frames
        self.interval = interval  # negotiated heartbeat (s)
        self._running = running  # the connection is open (not closing or closed)
        self._last_received = last_received  # when the peer last sent a byte
        self._received_now = received_now  # count our own pause as reception
        self._reading_paused = reading_paused  # the reader stopped reading the socket
        self._silent = silent  # the peer missed two heartbeats
        self._last_send_bytes = writer.bytes_sent  # bytes sent at the last tick
        self._timer: asyncio.TimerHandle | None = loop.call_later(interval / 2, self._tick)

    def stop(self) -> None:
        """No more ticks (the connection is closing or gone)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        self._timer = None
        if not self._running():
            return
        now = time.monotonic()
        if self._reading_paused():
            self._received_now()
        elif now - self._last_received() > 2 * self.interval:
            self._silent()
            return
        writer = self._writer
        if writer.bytes_sent == self._last_send_bytes and not writer.pending:
            writer.send(HEARTBEAT_FRAME)
        self._last_send_bytes = writer.bytes_sent
        self._timer = self._loop.call_later(self.interval / 2, self._tick)
