"""The reader: one per connection (RabbitMQ `rabbit_reader.erl`).

Owns: the socket (as an asyncio.Protocol), the protocol header check, the connection
handshake, heartbeats, channel numbers → channel processes, the per-channel command
assemblers, credit towards channels (pausing the socket when blocked), and the one boundary
where hard errors become `connection.close`. The protocol logic itself is sans-IO in
`broker/protocol/`; this module is glue. It never interprets channel methods.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Any

from pamqp import commands

from broker import errors
from broker.channel import CMD, OPEN, ChannelProcess
from broker.protocol.assembler import Command, CommandAssembler
from broker.protocol.framing import (
    HEARTBEAT,
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    BadProtocolHeader,
    FrameDecoder,
    check_protocol_header,
    encode_method,
    unexpected_frame,
)
from broker.protocol.handshake import SILENT_CLOSE_DELAY, ConnectionHandshake
from broker.writer import Writer

log = logging.getLogger("broker.connection")

C = commands.Connection
CLOSE_OK_TIMEOUT = 3.0  # seconds to wait for connection.close-ok before dropping the socket

AWAIT_HEADER, HANDSHAKE, RUNNING, CLOSING, CLOSED = range(5)


class Reader(asyncio.Protocol):
    """One client connection. Created by the server for each accepted socket."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker  # the Broker: config, vhosts, users, connection registry
        self.config = broker.config  # BrokerConfig
        self.loop: asyncio.AbstractEventLoop = broker.loop  # the broker's event loop
        self.transport: asyncio.Transport | None = None  # the socket
        self.writer: Writer | None = None  # outbound frame buffer
        self.peer: tuple | None = None  # (host, port) of the client
        self.state = AWAIT_HEADER  # AWAIT_HEADER → HANDSHAKE → RUNNING → CLOSING → CLOSED
        self._header_buf = b""  # bytes of the protocol header received so far
        self.decoder = FrameDecoder(self.config.frame_max)  # bytes → frames
        self.handshake: ConnectionHandshake | None = None  # connection.start … open-ok
        self.vhost: Any = None  # VHost after connection.open
        self.frame_max = self.config.frame_max  # negotiated frame_max
        self.channel_max = self.config.channel_max  # negotiated channel_max
        self.capabilities: dict = {}  # client capabilities (consumer_cancel_notify, …)
        self.username = ""  # authenticated user, after connection.open
        self.channels: dict[int, ChannelProcess] = {}  # channel number -> process
        self._assemblers: dict[int, CommandAssembler] = {}  # channel number -> assembler
        self._discarding: set[int] = set()  # channels closed by an assembler error
        self._blocked_on: set[ChannelProcess] = set()  # channels we have no credit for
        self._paused = False  # transport.pause_reading() in effect
        self._last_recv = time.monotonic()  # for the heartbeat timeout
        self._last_send_bytes = 0  # writer.bytes_sent at the last heartbeat check
        self.heartbeat = 0  # negotiated heartbeat interval (s), 0 = off
        self._timer: asyncio.TimerHandle | None = None  # heartbeat / handshake timer
        self._close_timer: asyncio.TimerHandle | None = None  # waits for close-ok

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:  # e.g. a unix socket in tests
                pass
        self.writer = Writer(transport, self.loop, self.config.writer_flush_threshold)
        self.broker.connections.add(self)
        self._timer = self.loop.call_later(self.config.handshake_timeout, self._handshake_timeout)

    def data_received(self, data: bytes) -> None:
        self._last_recv = time.monotonic()
        if self.state == AWAIT_HEADER:
            data = self._protocol_header(data)
            if not data:
                return
        if self.state == CLOSED:
            return
        decoder = self.decoder
        decoder.feed(data)
        try:
            while True:
                item = decoder.next_frame()
                if item is None:
                    break
                self._frame(item[0], item[1])
                if self.state == CLOSED:
                    return
        except errors.HardError as exc:
            if self.state == CLOSING:  # garbage while waiting for close-ok: stop listening
                self._drop()
            else:
                self.connection_error(exc)
                self.state = CLOSING
                self.decoder = FrameDecoder(self.frame_max)  # framing may be lost: start afresh
        except errors.SoftError as exc:  # pragma: no cover - the assembler path handles these
            self.connection_error(exc)

    def pause_writing(self) -> None:
        if self.writer is not None:
            self.writer.set_paused(True)

    def resume_writing(self) -> None:
        if self.writer is not None:
            self.writer.set_paused(False)

    def connection_lost(self, exc: Exception | None) -> None:
        self.state = CLOSED
        for timer in (self._timer, self._close_timer):
            if timer is not None:
                timer.cancel()
        if self.writer is not None:
            self.writer.closed = True
        for ch in list(self.channels.values()):
            ch.terminate()
        self.channels.clear()
        if self.vhost is not None:
            self.vhost.connection_closed(self)
        self.broker.connection_gone(self)

    # -- protocol header --------------------------------------------------------------------
    def _protocol_header(self, data: bytes) -> bytes:
        buf = self._header_buf + data
        try:
            ok = check_protocol_header(buf)
        except BadProtocolHeader:
            log.info("bad protocol header from %s: %r", self.peer, buf[:8])
            self.transport.write(PROTOCOL_HEADER)
            self._drop()
            return b""
        if ok is None:
            self._header_buf = buf
            return b""
        self._header_buf = b""
        self.state = HANDSHAKE
        self.handshake = ConnectionHandshake(
            self.broker.server_properties(), self._authenticate, self._vhost_allowed,
            channel_max=self.config.channel_max, frame_max=self.config.frame_max,
            heartbeat=self.config.heartbeat, vhost_exists=self.broker.vhosts.__contains__)
        for method in self.handshake.start():
            self._send0(method)
        return buf[8:]

    def _authenticate(self, mechanism: str, username: str, password: str) -> bool:
        ok = self.broker.check_user(username, password, self.peer)
        if not ok:
            log.warning("login refused for user %r from %s (%s)", username, self.peer, mechanism)
        return ok

    def _vhost_allowed(self, username: str, vhost: str) -> bool:
        return vhost in self.broker.vhosts

    # -- frames -----------------------------------------------------------------------------
    def _frame(self, channel: int, frame: Any) -> None:
        if self.state == CLOSING:
            if channel == 0 and isinstance(frame, (C.CloseOk, C.Close)):
                if isinstance(frame, C.Close):
                    self._send0(C.CloseOk())
                self._drop()
            return
        if channel == 0:
            self._channel0(frame)
            return
        if self.state != RUNNING:
            raise unexpected_frame(frame)
        ch = self.channels.get(channel)
        if ch is None:
            self._open_channel(channel, frame)
            return
        if channel in self._discarding or ch.state != OPEN:
            # the channel is closing: only close / close-ok matter (§1.5.2.5)
            if isinstance(frame, (commands.Channel.Close, commands.Channel.CloseOk)):
                self._forget_channel(channel)
                ch.cast((CMD, Command(frame, None, None)))
            return
        try:
            cmd = self._assemblers[channel].feed(frame)
        except errors.SoftError as exc:
            self._assemblers[channel].reset()
            self._discarding.add(channel)
            ch.close_with_error(exc)
            return
        if cmd is None:
            return
        ch.cast((CMD, cmd))
        cls = cmd.method.__class__
        if cls is commands.Basic.Publish:
            if ch.spend_reader_credit():
                self._blocked_on.add(ch)
                if not self._paused and self.transport is not None:
                    self._paused = True
                    self.transport.pause_reading()
        elif cls is commands.Channel.Close:
            # the number is free as soon as the client closed it; the process finishes the
            # close (requeue, close-ok) before a reopened channel runs (FIFO scheduling)
            self._forget_channel(channel)

    def _open_channel(self, channel: int, frame: Any) -> None:
        if not isinstance(frame, commands.Channel.Open):
            raise errors.amqp_error(errors.ChannelError, "expected 'channel.open'",
                                    frame if hasattr(frame, "index") else None)
        # RabbitMQ limits the number of open channels, not the channel number
        if self.channel_max and len(self.channels) >= self.channel_max:
            raise errors.amqp_error(
                errors.NotAllowed,
                f"number of channels opened ({len(self.channels)}) has reached the "
                f"negotiated channel_max ({self.channel_max})", frame)
        ch = ChannelProcess(self, channel)
        self.channels[channel] = ch
        self._assemblers[channel] = CommandAssembler(self.config.max_message_size)
        ch.cast((CMD, Command(frame, None, None)))  # open-ok comes from the channel, in order

    def _forget_channel(self, channel: int) -> None:
        ch = self.channels.pop(channel, None)
        self._assemblers.pop(channel, None)
        self._discarding.discard(channel)
        if ch is not None:
            self._blocked_on.discard(ch)
            self._maybe_resume_reading()

    def _channel0(self, frame: Any) -> None:
        if frame is HEARTBEAT:
            return
        if self.state == HANDSHAKE:
            for method in self.handshake.receive(frame):
                self._send0(method)
            if self.handshake.is_open:
                self._opened()
            return
        if isinstance(frame, C.Close):
            self._send0(C.CloseOk())
            self.writer.flush()
            self._drop()
        elif isinstance(frame, C.CloseOk):
            self._drop()
        elif isinstance(frame, (C.Blocked, C.Unblocked, C.UpdateSecret)):
            return
        else:
            raise errors.amqp_error(
                errors.ChannelError, "unexpected method in connection state running",
                frame if hasattr(frame, "index") else None)

    def _opened(self) -> None:
        hs = self.handshake
        self.state = RUNNING
        self.vhost = self.broker.vhosts[hs.vhost]
        self.username = hs.username
        self.frame_max = hs.frame_max
        self.decoder.frame_max = hs.frame_max
        self.channel_max = hs.channel_max
        self.heartbeat = hs.heartbeat
        self.capabilities = dict((hs.client_properties or {}).get("capabilities") or {})
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.heartbeat:
            self._timer = self.loop.call_later(self.heartbeat / 2, self._heartbeat_tick)

    # -- channels' façade -------------------------------------------------------------------
    def grant_credit(self, ch: ChannelProcess, n: int) -> None:
        """A channel handled `n` publishes: give credit back, maybe resume reading."""
        if ch.reader_credit.grant("reader", n):
            self._blocked_on.discard(ch)
        elif ch in self._blocked_on and not ch.reader_credit.blocked:
            self._blocked_on.discard(ch)
        self._maybe_resume_reading()

    def _maybe_resume_reading(self) -> None:
        """Read the socket again once no channel holds us back by credit flow."""
        if self._paused and not self._blocked_on and self.state == RUNNING:
            self._paused = False
            self.transport.resume_reading()

    def channel_closed(self, ch: ChannelProcess) -> None:
        """The channel finished closing: free its number (if the reader has not already)."""
        if self.channels.get(ch.number) is ch:
            self._forget_channel(ch.number)
        ch.stop_process()

    def connection_error(self, exc: Exception) -> None:
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
        """Send connection.close (e.g. 320 at shutdown); the socket is dropped on close-ok or
        after CLOSE_OK_TIMEOUT seconds."""
        if self.state in (CLOSING, CLOSED):
            return
        if self.state == AWAIT_HEADER:
            self._drop()
            return
        self._send0(C.Close(code, text, class_id, method_id))
        self.state = CLOSING
        for ch in list(self.channels.values()):
            ch.terminate()
        self.channels.clear()
        if self._paused:
            self._paused = False
            self.transport.resume_reading()
        self._close_timer = self.loop.call_later(CLOSE_OK_TIMEOUT, self._drop)

    # -- output -----------------------------------------------------------------------------
    def _send0(self, method: Any) -> None:
        self.writer.send(encode_method(0, method))

    def _send(self, channel: int, method: Any) -> None:
        self.writer.send(encode_method(channel, method))

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

    # -- timers -----------------------------------------------------------------------------
    def _handshake_timeout(self) -> None:
        self._timer = None
        if self.state in (AWAIT_HEADER, HANDSHAKE):
            log.info("handshake timeout from %s", self.peer)
            self._drop()

    def _heartbeat_tick(self) -> None:
        """Every heartbeat/2 s: send a heartbeat if we sent nothing since the last tick;
        drop the peer after 2 intervals of silence (AMQP 0-9-1 §4.2.7)."""
        self._timer = None
        if self.state != RUNNING:
            return
        now = time.monotonic()
        if now - self._last_recv > 2 * self.heartbeat:
            log.warning("missed heartbeats from %s, closing connection", self.peer)
            self._drop()
            return
        if self.writer.bytes_sent == self._last_send_bytes and not self.writer.pending:
            self.writer.send(HEARTBEAT_FRAME)
        self._last_send_bytes = self.writer.bytes_sent
        self._timer = self.loop.call_later(self.heartbeat / 2, self._heartbeat_tick)
