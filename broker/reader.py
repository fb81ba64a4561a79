"""The reader: one per connection (RabbitMQ `rabbit_reader.erl`).

Owns: the socket (as an asyncio.Protocol), the protocol header check, the connection
handshake, channel numbers → channel processes, the per-channel command
assemblers, credit towards channels (pausing the socket when blocked), publisher throttling
under resource alarms (`throttle.py`: connection.blocked / unblocked, pausing the socket after
a publish), and the one boundary where hard errors become `connection.close`. The protocol logic itself is sans-IO in
`broker/protocol/`; this module is glue. Heartbeats (sending them, noticing a silent peer)
are `heartbeat.py`'s, started once the connection is tuned; how the connection ends (the
close handshake both ways, lingering, 541 on a crash) is `connection_close.py`'s
`ConnectionClosing`, which the Reader inherits. It never interprets channel methods.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import TYPE_CHECKING, Any

from pamqp import commands
from pamqp.base import Frame

from broker import admission, errors, tls
from broker.channel import CLOSING as CLOSING_CHANNEL
from broker.channel import CMD, FAIL, OPEN, PUBLISHES, ChannelProcess
from broker.channel_handlers import HANDLERS
from broker.connection_close import (
    AWAIT_HEADER,
    CLOSED,
    CLOSING,
    DRAINING,
    HANDSHAKE,
    RUNNING,
    ConnectionClosing,
)
from broker.credit_flow import flow_state
from broker.heartbeat import Heartbeats
from broker.protocol import sasl
from broker.protocol.assembler import Command, CommandAssembler
from broker.protocol.encoding import encode_method
from broker.protocol.framing import (
    HEARTBEAT,
    PROTOCOL_HEADER,
    BadProtocolHeader,
    FrameDecoder,
    check_protocol_header,
    unexpected_frame,
)
from broker.protocol.handshake import ConnectionHandshake
from broker.throttle import BLOCKED, UNBLOCKED, Throttle
from broker.writer import Writer

if TYPE_CHECKING:
    from broker.serving import ServingBroker
    from broker.vhost import VHost

log = logging.getLogger("broker.connection")

C = commands.Connection
MAX_RUN = 256  # publishes handed to a channel in one mailbox message (its drain BATCH)


class Reader(ConnectionClosing, asyncio.Protocol):
    """One client connection. Created by the server for each accepted socket.

    Closing never drops what the client already sent (RabbitMQ `rabbit_reader`): on
    `connection.close` from the client, on a server-side close (hard error, shutdown) and
    when the socket drops, every channel is asked to shut down *after* the commands already
    in its mailbox (`ChannelProcess.shutdown`), so every complete publish the reader has read
    is routed. Frames after the client's `connection.close` are ignored (AMQP 0-9-1
    §1.4.2.1 close); `close-ok` is sent once every channel has finished. When the peer drops
    the TCP connection, whatever the reader has read is processed (an incomplete command is
    discarded); bytes still unread in the kernel's buffer while credit flow paused reading
    are read once credit comes back, up to the end-of-file.
    """

    def __init__(self, broker: ServingBroker[Reader]) -> None:
        self.broker = broker  # the Broker: config, vhosts, users, connection registry
        self.config = broker.config  # BrokerConfig
        self.loop: asyncio.AbstractEventLoop = broker.loop  # the broker's event loop
        self.transport: asyncio.Transport | None = None  # the socket
        self.writer: Writer | None = None  # outbound frame buffer
        self.peer: tuple | None = None  # (host, port) of the client
        self.tls = False  # the connection came in on the amqps listener
        self.peercert: dict | None = None  # the verified client certificate (ssl.getpeercert)
        self.state = AWAIT_HEADER  # AWAIT_HEADER → HANDSHAKE → RUNNING → CLOSING → CLOSED
        self._header_buf = b""  # bytes of the protocol header received so far
        self.decoder = FrameDecoder(self.config.frame_max)  # bytes → frames
        self.handshake: ConnectionHandshake | None = None  # connection.start … open-ok
        self.vhost: VHost | None = None  # VHost after connection.open
        self.frame_max = self.config.frame_max  # negotiated frame_max
        self.channel_max = self.config.channel_max  # negotiated channel_max
        self.capabilities: dict = {}  # client capabilities (consumer_cancel_notify, …)
        self.username = ""  # authenticated user, after connection.open
        self.access_control: Any = None  # broker.access.AccessControl, after connection.open
        self.channels: dict[int, ChannelProcess] = {}  # channel number -> process
        self._assemblers: dict[int, CommandAssembler] = {}  # channel number -> assembler
        self._discarding: set[int] = set()  # channels closed by an assembler error
        self._blocked_on: set[ChannelProcess] = set()  # channels we have no credit for
        self._paused = False  # transport.pause_reading() in effect
        # frames left from a read past this loop turn's slice: reading waits until they are
        # handled, one slice per turn (`_next_slice`)
        self._sliced = False
        self._slice = broker.config.reader_slice  # frames (a publish counts one) per turn
        self._write_blocked = False  # the client is not reading: its socket is not read either
        self._flow_at: float | None = None  # monotonic s credit flow last paused reading
        # resource alarms: connection.blocked / unblocked and the pause after a publish
        self.throttle = Throttle(broker.alarms.active)
        self._last_recv = time.monotonic()  # for the heartbeat timeout
        self.heartbeat = 0  # negotiated heartbeat interval (s), 0 = off
        self._heartbeats: Heartbeats | None = None  # once tuned with a heartbeat
        self._timer: asyncio.TimerHandle | None = None  # the handshake timer
        self._close_timer: asyncio.TimerHandle | None = None  # waits for close-ok
        self._socket_gone = False  # connection_lost ran: finish once channels are done
        self._finished = False  # vhost and broker were told the connection is gone
        self._vhost_released = False  # exclusive queues deleted, vhost told
        self.connected_at = int(time.time() * 1000)  # ms since the epoch (management)
        self.recv_oct = 0  # bytes received (management)
        self.recv_cnt = 0  # socket reads (management)

    # -- asyncio.Protocol -------------------------------------------------------------------
    # asyncio hands a stream protocol a Transport (narrower than the base class's BaseTransport)
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        self.tls = transport.get_extra_info("ssl_object") is not None
        self.peercert = transport.get_extra_info("peercert") if self.tls else None
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:  # e.g. a unix socket in tests
                pass
        self.writer = Writer(transport, self.loop, self.config.writer_flush_threshold)
        self.broker.connections.add(self)
        self.broker.churn.connections_opened += 1
        self._timer = self.loop.call_later(self.config.handshake_timeout, self._handshake_timeout)

    def data_received(self, data: bytes) -> None:
        self._last_recv = time.monotonic()
        self.recv_oct += len(data)
        self.recv_cnt += 1
        if self.state == AWAIT_HEADER:
            data = self._protocol_header(data)
            if not data:
                return
        if self.state == CLOSED:
            return
        self.decoder.feed(data)
        if not self._sliced:
            self._handle_frames()

    def _handle_frames(self) -> bool:
        """Handle what the decoder holds, up to one slice of frames (a basic.publish with
        its content counts one) while the connection runs. What is left waits for the next
        loop turn with reading paused, so that one flooding connection holds the loop for a
        bounded slice while others have work ready, as Erlang's scheduler preempts a busy
        rabbit_reader after its reductions (issue 49). Returns True when frames were left
        for a next slice (`_next_slice` is queued)."""
        decoder = self.decoder
        budget = self._slice if self.state == RUNNING else 1 << 30
        try:
            while True:
                if budget <= 0 and self.state == RUNNING and decoder.buffered:
                    self._sliced = True
                    self._pause()
                    self.loop.call_soon(self._next_slice)
                    return True
                item = decoder.next_frame()
                if item is None:
                    break
                frame = item[1]
                if frame.__class__ is Command:
                    budget -= self._whole_publish(item[0], frame, budget)
                else:
                    self._frame(item[0], frame)
                    budget -= 1
                if self.state == CLOSED:
                    return False
        except errors.HardError as exc:
            if self.state == CLOSING:  # garbage while waiting for close-ok: stop listening
                self._drop()
            else:
                self.connection_error(exc)
                self.state = CLOSING
                self.decoder = FrameDecoder(self.frame_max)  # framing may be lost: start afresh
        except errors.SoftError as exc:  # pragma: no cover - the assembler path handles these
            self.connection_error(exc)
        except Exception as exc:  # noqa: BLE001 - the connection's boundary: 541, log, go on
            self.crashed(exc)
        return False

    def _next_slice(self) -> None:
        """The next slice of frames left from earlier reads; reading resumes once none are
        left (and nothing else holds it paused)."""
        if self.state == CLOSED:
            return
        if not self._handle_frames():
            self._sliced = False
            self._maybe_resume_reading()

    def pause_writing(self) -> None:
        """The transport's write buffer passed its high-water mark (the client is not
        reading): deliveries stop (`Writer.paused`, checked by `ChannelProcess.can_deliver`)
        and, so that nothing else the client provokes (confirms, basic.return, replies) can
        pile up without bound, we stop reading its socket too until it drains. RabbitMQ gets
        the same from TCP back-pressure on its writer and credit flow."""
        if self.writer is not None:
            self.writer.set_paused(True)
        self._write_blocked = True
        if self.state == RUNNING:
            self._pause()

    def resume_writing(self) -> None:
        """The write buffer drained below its low-water mark: deliver and read again."""
        self._write_blocked = False
        if self.writer is not None:
            self.writer.set_paused(False)
        self._maybe_resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        """The socket is gone: channels still finish what they had received (their output
        is dropped), then exclusive queues go and the broker forgets the connection."""
        self.state = CLOSED
        self._socket_gone = True
        for timer in (self._timer, self._close_timer):
            if timer is not None:
                timer.cancel()
        if self._heartbeats is not None:
            self._heartbeats.stop()
        if self.writer is not None:
            self.writer.closed = True
        self._shutdown_channels()
        self._maybe_finish()

    # -- protocol header --------------------------------------------------------------------
    def _protocol_header(self, data: bytes) -> bytes:
        buf = self._header_buf + data
        try:
            ok = check_protocol_header(buf)
        except BadProtocolHeader:
            log.info("bad protocol header from %s: %r", self.peer, buf[:8])
            assert self.transport is not None  # bytes come only after connection_made
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
            heartbeat=self.config.heartbeat, vhost_exists=self.broker.vhosts.__contains__,
            mechanisms=sasl.offered(self.config.auth_mechanisms, self.tls),
            external_identity=tls.external_login_name(self.peercert, self.config))
        for method in self.handshake.start():
            self._send0(method)
        return buf[8:]

    def _authenticate(self, mechanism: str, username: str, password: str) -> bool:
        return admission.authenticate(self.broker, self.peer, mechanism, username, password)

    def _vhost_allowed(self, username: str, vhost: str) -> bool:
        return admission.vhost_allowed(self.broker, self, username, vhost)

    # -- frames -----------------------------------------------------------------------------
    def _frame(self, channel: int, frame: Any) -> None:
        if self.state == CLOSING:
            if channel == 0 and isinstance(frame, (C.CloseOk, C.Close)):
                if isinstance(frame, C.Close):
                    self._send0(C.CloseOk())
                self._drop()
            return
        if self.state == DRAINING:  # the client closed: nothing it sends after counts
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
            # the channel is closing: only close / close-ok matter (§1.5.2.5); the number
            # stays taken until the channel process has finished (a close that crossed ours
            # is answered, and the close-ok that follows still finds the channel)
            if isinstance(frame, commands.Channel.CloseOk):
                if ch.state == CLOSING_CHANNEL:  # the close-ok to our close: number free now
                    self._forget_channel(channel)
                ch.cast((CMD, Command(frame, None, None)))
            elif isinstance(frame, commands.Channel.Close):
                ch.cast((CMD, Command(frame, None, None)))
            return
        try:
            cmd = self._assemblers[channel].feed(frame)
        except errors.SoftError as exc:
            self._assemblers[channel].reset()
            self._discarding.add(channel)
            ch.cast((FAIL, exc))  # after the commands it already has, in order
            return
        if cmd is None:
            return
        ch.cast((CMD, cmd))
        if cmd.method.__class__ is commands.Basic.Publish:
            self._published(ch)

    def _published(self, ch: ChannelProcess, n: int = 1) -> None:
        """`n` publishes went to `ch`: spend reader credit (pause reading when out of it)
        and, under a resource alarm, stop reading after them."""
        if ch.spend_reader_credit(n):
            self._blocked_on.add(ch)
            self._flow_at = time.monotonic()
            self._pause()
        if self.throttle.check:
            self._publish_received()

    def _whole_publish(self, channel: int, cmd: Command, budget: int = MAX_RUN) -> int:
        """A basic.publish the decoder read whole (method, header, body in one pass): straight
        to an open channel whose assembler is idle, as the assembler would have passed it on;
        anything else (a closing channel, a partial command on the channel, a body over
        max_message_size) takes the frames one by one through `_frame`, as received. A run
        takes at most `budget` publishes; returns how many were handled."""
        if self.state == RUNNING and channel not in self._discarding:
            ch = self.channels.get(channel)
            if ch is not None and ch.state == OPEN:
                assembler = self._assemblers[channel]
                max_size = assembler.max_message_size
                # the decoder's whole publishes always carry their header (Command.header
                # is None only for methods without content)
                if assembler.idle and cmd.header.body_size <= max_size:  # type: ignore[union-attr]
                    if self.throttle.check:  # an alarm may stop reading after this one
                        ch.cast((CMD, cmd))
                        self._published(ch)
                        return 1
                    # the whole publishes that follow on this channel in what was read go
                    # as one run (credit is spent for each, as if they came one by one: a
                    # read is handled whole, as RabbitMQ's reader handles it)
                    run = [cmd]
                    take = self.decoder.next_publish
                    oversized = None
                    most = budget if budget < MAX_RUN else MAX_RUN
                    while len(run) < most:
                        more = take(channel)
                        if more is None:
                            break
                        # next_publish answers whole publishes only: the header is set
                        if more.header.body_size > max_size:  # type: ignore[union-attr]
                            oversized = more  # refused through the assembler, after the run
                            break
                        run.append(more)
                    ch.cast((PUBLISHES, run))
                    self._published(ch, len(run))
                    if oversized is not None:
                        return len(run) + self._whole_publish(channel, oversized)
                    return len(run)
        self._frame(channel, cmd.method)
        if self.state == CLOSED:
            return 1
        self._frame(channel, cmd.header)
        if cmd.header.body_size and self.state != CLOSED:  # type: ignore[union-attr]  # as above
            self._frame(channel, cmd.body)
        return 1

    def _pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    # -- resource alarms (throttle.py) -------------------------------------------------------
    def _publish_received(self) -> None:
        """A publish under an alarm (or the first one): stop reading after it (rabbit_reader
        publish_received)."""
        throttle = self.throttle
        send = throttle.publish_received()
        if throttle.blocked:
            self._pause()
        if send is BLOCKED:
            self._send0(C.Blocked(throttle.reason()))

    def alarms_changed(self, alarms: frozenset[str]) -> None:
        """The broker's resource alarms changed (Broker tells every connection): send
        connection.blocked to a connection that has published, or, once every alarm has
        cleared, read again and send connection.unblocked if blocked was sent."""
        throttle = self.throttle
        send = throttle.alarms_changed(alarms)
        if self.state not in (RUNNING, DRAINING) or self.writer is None:
            return
        if send is BLOCKED:
            self._send0(C.Blocked(throttle.reason()))
        elif send is UNBLOCKED:
            self._send0(C.Unblocked())
        if not throttle.blocked:
            self._maybe_resume_reading()

    def flow_state(self) -> str:
        """RabbitMQ's connection state for operations tooling: "blocked" (an alarm stopped
        reading), "blocking" (an alarm is in effect and this connection publishes), "flow"
        (credit flow paused reading now or in the last 5 s), "running", or "starting" /
        "closing" / "closed" around the connection's life."""
        if self.state in (AWAIT_HEADER, HANDSHAKE):
            return "starting"
        if self.state in (CLOSING, DRAINING):
            return "closing"
        if self.state == CLOSED:
            return "closed"
        return self.throttle.state() or flow_state(bool(self._blocked_on), self._flow_at,
                                                    time.monotonic())

    def _open_channel(self, channel: int, frame: Any) -> None:
        """The first frame on a channel number that is not open. RabbitMQ (rabbit_reader
        process_frame) makes the channel, then its command assembler refuses a content
        frame with 505 and the channel refuses any method but channel.open with 504."""
        if not isinstance(frame, Frame):  # a content header or body
            raise errors.amqp_error(errors.UnexpectedFrame,
                                    "expected method frame, got non method frame instead")
        if not isinstance(frame, commands.Channel.Open):
            raise errors.amqp_error(errors.ChannelError, "expected 'channel.open'", frame)
        admission.check_channel_open(self.broker, self, frame)
        ch = ChannelProcess(self, channel, HANDLERS)
        self.broker.churn.channels_opened += 1
        self.channels[channel] = ch
        self.broker.channels_changed(self.username)
        self._assemblers[channel] = CommandAssembler(self.config.max_message_size)
        ch.cast((CMD, Command(frame, None, None)))  # open-ok comes from the channel, in order

    def _forget_channel(self, channel: int) -> None:
        ch = self.channels.pop(channel, None)
        self._assemblers.pop(channel, None)
        self._discarding.discard(channel)
        if ch is not None:
            self._blocked_on.discard(ch)
            assert self.vhost is not None  # channels open only after connection.open
            self.vhost.closed_stats.add(ch.message_stats)  # kept in the vhost's totals
            self.broker.churn.channels_closed += 1
            self.broker.channels_changed(self.username)
            self._maybe_resume_reading()

    def _channel0(self, frame: Any) -> None:
        if frame is HEARTBEAT:
            return
        if self.state == HANDSHAKE:
            hs = self.handshake
            assert hs is not None  # set when the protocol header was accepted
            for method in hs.receive(frame):
                self._send0(method)
            if hs.is_open:
                self._opened()
            return
        if isinstance(frame, C.Close):
            # rabbit_reader: every channel shuts down after what it already received;
            # close-ok once the last one has finished (_maybe_finish)
            self.state = DRAINING
            self._shutdown_channels()
            self._maybe_finish()
        elif isinstance(frame, C.CloseOk):
            self._drop()
        elif isinstance(frame, C.UpdateSecret):
            self._update_secret(frame)
        elif isinstance(frame, (C.Blocked, C.Unblocked)):
            return
        else:
            raise errors.amqp_error(
                errors.ChannelError, "unexpected method in connection state running",
                frame if hasattr(frame, "index") else None)

    def _opened(self) -> None:
        hs = self.handshake
        assert hs is not None  # connection.open-ok was just sent through it
        self.state = RUNNING
        self.vhost = self.broker.vhosts[hs.vhost]
        self.username = hs.username
        self.access_control = self.broker.users.control  # channels check every operation
        self.frame_max = hs.frame_max
        self.decoder.frame_max = hs.frame_max
        self.channel_max = hs.channel_max
        self.heartbeat = hs.heartbeat
        self.capabilities = dict((hs.client_properties or {}).get("capabilities") or {})
        self.throttle.notify = bool(self.capabilities.get("connection.blocked"))
        self.broker.connection_opened(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.heartbeat:
            assert self.writer is not None  # set by connection_made
            self._heartbeats = Heartbeats(self.loop, self.writer, self.heartbeat,
                                          self._running, self._last_received, self._received_now,
                                          self._reading_paused, self._missed_heartbeats)

    def _update_secret(self, frame: Any) -> None:
        """connection.update-secret (RabbitMQ 3.8+, rabbitmq.com/access-control.html): with
        the internal auth backend, whose credentials never expire, RabbitMQ keeps the user as
        it is and answers update-secret-ok (rabbit_access_control:update_state); so do we."""
        log.info("connection %s of user '%s' updated secret, reason: %s",
                 self.peer, self.username, frame.reason)
        self._send0(C.UpdateSecretOk())

    # -- channels' façade -------------------------------------------------------------------
    def grant_credit(self, ch: ChannelProcess, n: int) -> None:
        """A channel handled `n` publishes: give credit back, maybe resume reading."""
        if ch.reader_credit.grant("reader", n):
            self._blocked_on.discard(ch)
        elif ch in self._blocked_on and not ch.reader_credit.blocked:
            self._blocked_on.discard(ch)
        self._maybe_resume_reading()

    def _maybe_resume_reading(self) -> None:
        """Read the socket again once no channel holds us back by credit flow and the
        client reads what we write."""
        if (self._paused and not self._blocked_on and not self._write_blocked
                and not self._sliced and not self.throttle.blocked and self.state == RUNNING):
            self._paused = False
            assert self.transport is not None  # reading was paused on it
            self.transport.resume_reading()

    # -- output -----------------------------------------------------------------------------
    def _send0(self, method: Any) -> None:
        assert self.writer is not None  # set by connection_made, before any frame
        self.writer.send(encode_method(0, method))

    def _send(self, channel: int, method: Any) -> None:
        assert self.writer is not None  # set by connection_made, before any frame
        self.writer.send(encode_method(channel, method))

    # -- timers -----------------------------------------------------------------------------
    def _handshake_timeout(self) -> None:
        self._timer = None
        if self.state in (AWAIT_HEADER, HANDSHAKE):
            log.info("handshake timeout from %s", self.peer)
            self._drop()

    # -- heartbeats (broker/heartbeat.py) ----------------------------------------------------
    def _running(self) -> bool:
        return self.state == RUNNING

    def _last_received(self) -> float:
        return self._last_recv

    def _received_now(self) -> None:
        self._last_recv = time.monotonic()

    def _reading_paused(self) -> bool:
        return self._paused

    def _missed_heartbeats(self) -> None:
        """Two heartbeat intervals without a byte from the peer (AMQP 0-9-1 §4.2.7)."""
        log.warning("missed heartbeats from %s, closing connection", self.peer)
        self._drop()
