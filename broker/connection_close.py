"""How a connection ends (RabbitMQ `rabbit_reader`'s closing states): the part of the reader
that closes, in every way a connection can close, without losing what the client sent.

Owns: `ConnectionClosing`, mixed into `Reader` (broker/reader.py), and the reader's states.
A server-side close (a hard error, a forced 320, shutdown) sends connection.close and waits
up to `CLOSE_OK_TIMEOUT` s for close-ok; a client's connection.close lets every channel finish
what it had received, then its exclusive queues are deleted and close-ok goes out once every
worker process sees them gone (DRAINING); after close-ok the socket lingers, read and
discarded, until the client closes it (at most the heartbeat interval or `CLOSING_TIMEOUT` s);
once the socket is gone and the last channel has finished, the connection's exclusive queues
are deleted (if they were not yet) and the broker forgets it. An unexpected exception
becomes 541 here. The state it reads is the reader's, declared below for type checkers.
Talks to: the reader's channels (`shutdown`), its vhost (`connection_closed`), the broker
(`connection_gone`). Must never: read frames or decide what a method means.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pamqp import commands

from broker import errors
from broker.protocol.handshake import SILENT_CLOSE_DELAY

if TYPE_CHECKING:
    import asyncio

    from broker.channel import ChannelProcess
    from broker.protocol.assembler import CommandAssembler
    from broker.serving import ServingBroker
    from broker.vhost import VHost
    from broker.writer import Writer

log = logging.getLogger("broker.connection")

C = commands.Connection
CLOSE_OK_TIMEOUT = 3.0  # seconds to wait for connection.close-ok before dropping the socket

def _nothing() -> None:
    pass


# CLOSING: we sent connection.close and wait for close-ok. DRAINING: the client sent
# connection.close; its channels finish what they had received, then close-ok is sent.
AWAIT_HEADER, HANDSHAKE, RUNNING, CLOSING, DRAINING, CLOSED = range(6)
CLOSING_TIMEOUT = 30  # s a client has to close the socket after close-ok (rabbit_reader)


class ConnectionClosing:
    """The closing side of a connection's reader (mixed into `Reader`)."""

    if TYPE_CHECKING:  # the reader's state and calls this side uses
        broker: ServingBroker[Any]
        loop: asyncio.AbstractEventLoop
        transport: asyncio.Transport | None
        writer: Writer | None
        peer: tuple | None
        username: str
        state: int
        vhost: VHost | None
        heartbeat: int
        channels: dict[int, ChannelProcess]
        recv_oct: int
        _assemblers: dict[int, CommandAssembler]
        _blocked_on: set[ChannelProcess]
        _paused: bool
        _close_timer: asyncio.TimerHandle | None
        _socket_gone: bool
        _finished: bool
        _vhost_released: bool

        def _send0(self, method: Any) -> None: ...
        def _forget_channel(self, channel: int) -> None: ...

    def channel_closed(self, ch: ChannelProcess) -> None:
        """The channel finished closing (close-ok exchanged, or shut down with the
        connection): free its number; finish the connection's close if it was the last."""
        if self.channels.get(ch.number) is ch:
            self._forget_channel(ch.number)
        ch.stop_process()
        self._maybe_finish()

    def _shutdown_channels(self) -> None:
        """Ask every channel to finish its mailbox and clean up (RabbitMQ
        rabbit_channel:shutdown); partly assembled commands are dropped."""
        for ch in list(self.channels.values()):
            ch.shutdown()
        self._assemblers.clear()
        self._blocked_on.clear()

    def _maybe_finish(self) -> None:
        """Once no channel is left: after the client's connection.close send close-ok and
        close the socket; after the socket is gone, delete exclusive queues and tell the
        broker."""
        if self.channels:
            return
        if self.state == DRAINING and not self._vhost_released:
            # close-ok once the exclusive queues are gone for every other connection
            self._release_vhost(self._close_ok)
        if self._socket_gone and not self._finished:
            self._finished = True
            self._release_vhost()
            if self.vhost is not None:  # kept in the vhost's recv_oct / send_oct
                self.vhost.closed_octets[0] += self.recv_oct
                self.vhost.closed_octets[1] += self.writer.bytes_sent if self.writer else 0
            self.broker.connection_gone(self)

    def _release_vhost(self, then: Callable[[], None] | None = None) -> None:
        """Delete our exclusive queues and leave the vhost (once); `then()` once every
        process of the broker sees them gone (VHost.release_connection)."""
        if self.vhost is not None and not self._vhost_released:
            self._vhost_released = True
            self.vhost.release_connection(self, then or _nothing)
        elif then is not None:
            then()

    def release_exclusive(self) -> None:
        """The connection is closing: delete its exclusive queues now rather than once
        its last channel has finished (broker/workers/runtime.py asks, for a client that
        reconnected faster than that)."""
        self._release_vhost()

    def _close_ok(self) -> None:
        if self.state == DRAINING and not self._socket_gone:
            self._send0(C.CloseOk())
            self._linger()

    def _linger(self) -> None:
        """close-ok is out: as RabbitMQ (rabbit_reader close_connection), the client closes
        the socket (AMQP 0-9-1: close-ok tells the recipient it may close it); until it does
        we read and discard what it still sends — a client may have queued frames on other
        channels behind its connection.close (amqplib's round-robin writer does), and
        closing with unread data would reset the connection under it — for at most the
        heartbeat interval or CLOSING_TIMEOUT seconds, whichever is shorter."""
        if self.writer is not None:
            self.writer.flush()
        self.state = CLOSED
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self._paused:
            self._paused = False
            transport.resume_reading()
        timeout = self.heartbeat if 0 < self.heartbeat < CLOSING_TIMEOUT else CLOSING_TIMEOUT
        self._close_timer = self.loop.call_later(timeout, self._drop)

    def crashed(self, exc: BaseException) -> None:
        """An unexpected exception in this connection or one of its channels: log the
        traceback and close the connection with 541 INTERNAL_ERROR, as RabbitMQ does for a
        non-AMQP exit (rabbit_binary_generator:map_exception); other connections go on."""
        log.error("unexpected error on connection %s", self.peer, exc_info=exc)
        self.connection_error(errors.amqp_error(
            errors.InternalError, "unexpected error in the broker (see its log)"))

    def connection_error(self, exc: errors.AMQPError) -> None:
        """Hard error: connection.close with the error, then wait for close-ok."""
        code, text, class_id, method_id = errors.close_args(exc)
        log.warning("closing connection %s: %s", self.peer, text)
        if getattr(exc, "silent_close", False):
            # RabbitMQ sends no connection.close before the handshake allows it: it waits,
            # then drops the socket (rabbit_reader handshake errors)
            self.state = CLOSING
            self._close_timer = self.loop.call_later(SILENT_CLOSE_DELAY, self._drop)
            return
        self.close(code, text, class_id, method_id)

    def close(self, code: int, text: str, class_id: int = 0, method_id: int = 0) -> None:
        """Send connection.close (e.g. 320 at shutdown); channels finish what they had
        received; the socket is dropped on close-ok or after CLOSE_OK_TIMEOUT seconds."""
        if self.state in (CLOSING, DRAINING, CLOSED):
            return
        if self.state == AWAIT_HEADER:
            self._drop()
            return
        self._send0(C.Close(code, text, class_id, method_id))
        self.state = CLOSING
        self._shutdown_channels()
        if self._paused:
            self._paused = False
            assert self.transport is not None  # reading was paused on it
            self.transport.resume_reading()
        self._close_timer = self.loop.call_later(CLOSE_OK_TIMEOUT, self._drop)

    def abort(self) -> None:
        """Drop the socket at once (shutdown after the grace period)."""
        if self.transport is not None:
            self.transport.abort()
        self.state = CLOSED

    def _drop(self) -> None:
        if self.writer is not None:
            self.writer.flush()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self.state = CLOSED
