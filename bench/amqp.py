# bench/amqp.py — the benchmark's own asyncio AMQP 0-9-1 client connection.
#
# Owns: one TCP connection (an asyncio.Protocol): handshake, channel open/close, synchronous
# RPCs (declare, qos, consume, confirm.select), and the hot-path frame loop that hands
# deliveries and confirms to per-channel handlers without decoding anything else.
# Talks to: bench.wire (hot codec), pamqp (everything else), bench.publisher / bench.consumer
# (they install handlers on a Channel), bench.topology (admin declares).
# Must never: block the loop, wait without a bound, or decode deliveries through pamqp.
"""Minimal AMQP 0-9-1 client for the benchmark (not a general-purpose client)."""

from __future__ import annotations

import asyncio
import struct
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pamqp import commands, frame, header
from pamqp.base import Frame
from pamqp.exceptions import UnmarshalingException

from bench import batch, wire

Connection_ = commands.Connection
_HEAD = struct.Struct("!BHIHHQ")  # content header frame: type, channel, size, class, weight, size
_BODY = struct.Struct("!BHIQQ")  # body frame header + the bench's timestamp and tag
_U64 = struct.Struct("!Q")


class AMQPError(Exception):
    """The broker closed the connection or a channel, or the socket was lost.

    ``reply_code`` is the AMQP reply code (e.g. 320 CONNECTION_FORCED, 404 NOT_FOUND) or 0
    for a lost socket.
    """

    def __init__(self, reply_code: int, text: str) -> None:
        super().__init__(f"{reply_code} {text}" if reply_code else text)
        self.reply_code = reply_code


@dataclass(frozen=True)
class URI:
    """Parsed ``amqp://user:pass@host:port/vhost`` (vhost percent-decoded, '' path -> '/')."""

    host: str
    port: int
    user: str
    password: str
    vhost: str

    @classmethod
    def parse(cls, uri: str) -> URI:
        u = urllib.parse.urlparse(uri)
        if u.scheme != "amqp":
            raise ValueError(f"only amqp:// URIs are supported, got {uri!r}")
        path = u.path[1:] if u.path.startswith("/") else u.path
        vhost = urllib.parse.unquote(path) if u.path else "/"
        return cls(
            host=u.hostname or "127.0.0.1",
            port=u.port or 5672,
            user=urllib.parse.unquote(u.username or "guest"),
            password=urllib.parse.unquote(u.password or "guest"),
            vhost=vhost or "/",
        )

    def redacted(self) -> str:
        """The URI with the password replaced by '***' (for reports)."""
        vhost = urllib.parse.quote(self.vhost, safe="")
        return f"amqp://{self.user}:***@{self.host}:{self.port}/{vhost}"


class Channel:
    """One open channel. Handlers are plain callables set by the publisher or consumer:

    - ``on_deliver(delivery_tag, ts_ns, tag, body_size, now_ns)`` per complete message,
    - ``on_confirm(delivery_tag, multiple, nack, now_ns)`` per basic.ack / basic.nack,
    - ``on_return(reply_code)`` per basic.return (mandatory publish routed nowhere),
    - ``on_deliver_run(records, body_size, now_ns)`` for a run of same-shaped deliveries
      decoded at once (numpy records from bench.batch; optional).
    """

    def __init__(self, conn: Connection, channel_id: int) -> None:
        self.conn = conn
        self.id = channel_id
        self.on_deliver: Callable[[int, int, int, int, int], None] | None = None
        self.on_confirm: Callable[[int, bool, bool, int], None] | None = None
        self.on_return: Callable[[int], None] | None = None
        self.on_deliver_run: Callable[[Any, int, int], None] | None = None
        self.error: AMQPError | None = None
        self.closed = False  # closed by us (channel.close-ok received)
        self._waiter: tuple[tuple[type, ...], asyncio.Future[Any]] | None = None

    async def rpc(self, method: Frame, *replies: type, timeout: float = 30.0) -> Any:  # noqa: ASYNC109
        """Send ``method`` and await the first frame of a type in ``replies`` (bounded)."""
        if self.error is not None:
            raise self.error
        fut: asyncio.Future[Any] = self.conn.loop.create_future()
        self._waiter = (replies, fut)
        self.conn.write(frame.marshal(method, self.id))
        try:
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._waiter = None

    async def close(self, within: float = 5.0) -> None:
        """channel.close, await close-ok (bounded). Raises AMQPError / TimeoutError. After it,
        ``closed`` is true and ``error`` stays None (a local close is not an error)."""
        await self.rpc(commands.Channel.Close(200, "bye", 0, 0), commands.Channel.CloseOk,
                       timeout=within)
        self.closed = True

    def send(self, method: Frame) -> None:
        """Send a method without waiting for a reply."""
        self.conn.write(frame.marshal(method, self.id))

    def _resolve(self, value: Frame) -> bool:
        if self._waiter and isinstance(value, self._waiter[0]) and not self._waiter[1].done():
            self._waiter[1].set_result(value)
            return True
        return False

    def _fail(self, err: AMQPError) -> None:
        self.error = err
        if self._waiter and not self._waiter[1].done():
            self._waiter[1].set_exception(err)


class Connection(asyncio.Protocol):
    """A client connection. Create with ``await Connection.open(uri, name)``.

    ``blocked`` follows connection.blocked/unblocked (RabbitMQ resource alarms); ``unblocked``
    and ``writable`` are Events publishers await. ``closed`` is set when the connection ends;
    ``error`` then holds why (None after a clean local close).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.frame_max = 131072
        self.channels: dict[int, Channel] = {}
        self.ch0 = Channel(self, 0)
        self.blocked = False
        self.blocked_since = 0.0
        self.blocked_seconds = 0.0  # total time spent blocked (s)
        self.unblocked = asyncio.Event()
        self.unblocked.set()
        self.writable = asyncio.Event()
        self.writable.set()
        self.closed = asyncio.Event()
        self.error: AMQPError | None = None
        self._buf = b""
        self._out: list[bytes] = []  # frames queued during one data_received, flushed at its end
        self._content: Channel | None = None  # channel whose content frames are arriving
        self._content_left = 0  # body bytes still expected for the current message
        self._content_first = False  # next body frame is the message's first
        self._content_deliver = False  # current content belongs to a delivery (vs a return)
        self._dtag = 0
        self._ts = 0
        self._tag = 0
        self._size = 0
        self._closing = False
        self.close_ok = False  # the broker answered our connection.close

    @classmethod
    async def open(cls, uri: URI, name: str, within: float = 30.0) -> Connection:
        """Connect, run the handshake (PLAIN auth, announce connection.blocked), open vhost."""
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: cls(loop), uri.host, uri.port), within
        )
        await asyncio.wait_for(conn._handshake(uri, name), within)
        return conn

    async def _handshake(self, uri: URI, name: str) -> None:
        fut: asyncio.Future[Any] = self.loop.create_future()
        self.ch0._waiter = ((Connection_.Start,), fut)
        self.write(header.ProtocolHeader().marshal())
        await fut
        props = {
            "product": "bench",
            "connection_name": name,
            "capabilities": {
                "connection.blocked": True,
                "publisher_confirms": True,
                "basic.nack": True,
                "consumer_cancel_notify": True,
            },
        }
        response = f"\0{uri.user}\0{uri.password}"
        tune = await self.ch0.rpc(
            Connection_.StartOk(client_properties=props, mechanism="PLAIN", response=response),
            Connection_.Tune,
        )
        self.frame_max = min(tune.frame_max or 131072, 131072)
        self.ch0.send(Connection_.TuneOk(tune.channel_max or 2047, self.frame_max, 0))
        await self.ch0.rpc(Connection_.Open(virtual_host=uri.vhost), Connection_.OpenOk)

    async def channel(self) -> Channel:
        """Open the next channel (ids from 1)."""
        ch = Channel(self, len(self.channels) + 1)
        self.channels[ch.id] = ch
        await ch.rpc(commands.Channel.Open(), commands.Channel.OpenOk)
        return ch

    async def close(self, within: float = 5.0) -> bool:
        """connection.close (sent once, at once, behind what is already buffered), then await
        the broker's close-ok for at most ``within`` s; the socket is closed on close-ok and
        aborted on timeout. Safe to call again (e.g. after a cancelled call): it only waits.

        Returns True when close-ok arrived, False otherwise (timeout, or the broker closed
        the connection or the socket first).
        """
        if self.transport is None:
            return False
        if not self.closed.is_set():
            self.send_close()
            try:
                await asyncio.wait_for(self.closed.wait(), within)
            except TimeoutError:
                self.transport.abort()
        return self.close_ok

    def send_close(self) -> None:
        """Write connection.close now (once), behind everything already written; ``close()``
        then awaits the close-ok."""
        if not self._closing:
            self._closing = True
            self.write(frame.marshal(Connection_.Close(200, "bye", 0, 0), 0))

    def write(self, data: bytes | bytearray) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    # asyncio.Protocol -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        transport.set_write_buffer_limits(high=512 * 1024)

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.error is None and not self._closing:
            self.error = AMQPError(0, f"connection lost: {exc or 'closed by peer'}")
        err = self.error or AMQPError(0, "connection closed")
        for ch in [self.ch0, *self.channels.values()]:
            ch._fail(err)
        self.writable.set()
        self.unblocked.set()
        self.closed.set()

    def data_received(self, data: bytes) -> None:  # noqa: C901 - the hot loop, kept flat
        buf = self._buf + data if self._buf else data
        now = time.monotonic_ns()
        pos = 0
        n = len(buf)
        unpack = wire.FRAME_HEADER_STRUCT.unpack_from
        head_unpack = _HEAD.unpack_from
        body_unpack = _BODY.unpack_from
        u64 = _U64.unpack_from
        channels = self.channels
        while n - pos >= 7:
            ftype, chan, size = unpack(buf, pos)
            start = pos + 7
            end = start + size
            if end >= n:
                if size > self.frame_max:
                    self._protocol_error(f"frame size {size} exceeds frame_max")
                    return
                break
            if buf[end] != 0xCE:
                self._protocol_error(f"bad frame end at offset {end}")
                return
            pos = end + 1
            if ftype == 3:  # body
                if self._content_first:
                    self._content_first = False
                    if self._content_deliver and size >= wire.BODY_HEADER_SIZE:
                        self._ts, self._tag = wire.BODY_HEADER.unpack_from(buf, start)
                self._content_left -= size
                if self._content_left <= 0 and self._content is not None:
                    self._content_done(now)
            elif ftype == 1:
                sig = buf[start : start + 4]
                if sig == wire.DELIVER:
                    dtag = u64(buf, start + 5 + buf[start + 4])[0]
                    # Fast path: header and a single body frame already in the buffer ->
                    # decode the whole message with two more unpacks instead of running the
                    # state machine (selftest: 370k -> 520k msg/s per process at 16 B).
                    if n - pos >= 46 and buf[pos] == 2:
                        _, _, hsize, _, _, body_size = head_unpack(buf, pos)
                        bpos = pos + 8 + hsize
                        if n - bpos >= 23 and buf[bpos] == 3:
                            _, _, bsize, ts, tag = body_unpack(buf, bpos)
                            bend = bpos + 7 + bsize
                            if (bsize == body_size and bsize >= 16 and bend < n
                                    and buf[bend] == 0xCE):
                                ch = channels.get(chan)
                                if ch is not None and ch.on_deliver is not None:
                                    ch.on_deliver(dtag, ts, tag, body_size, now)
                                # Then the same-shaped deliveries that follow, in one numpy
                                # pass (selftest: ~0.5M -> several M msg/s at 16 B).
                                if ch is not None and ch.on_deliver_run is not None:
                                    fstart = start - 7
                                    recs = batch.decode_run(buf, bend + 1, chan, pos - fstart,
                                                            buf[start + 4], bpos - pos,
                                                            bend + 1 - bpos)
                                    if recs is not None:
                                        ch.on_deliver_run(recs, body_size, now)
                                        bend += len(recs) * (bend + 1 - fstart)
                                pos = bend + 1
                                continue
                    self._content = channels.get(chan)
                    self._content_deliver = True
                    self._dtag = dtag
                elif sig == wire.ACK or sig == wire.NACK:
                    ch = channels.get(chan)
                    if ch is not None and ch.on_confirm is not None:
                        dtag, multiple = wire.parse_ack(buf, start)
                        ch.on_confirm(dtag, multiple, sig == wire.NACK, now)
                else:
                    self._slow_frame(buf[pos - size - 8 : pos], chan)
            elif ftype == 2:
                self._size = self._content_left = wire.parse_header_body_size(buf, start)
                self._content_first = True
                if self._content_left == 0 and self._content is not None:
                    self._content_done(now)
            elif ftype == 8:
                pass  # heartbeats are negotiated off (0); tolerate stray ones
            else:
                self._protocol_error(f"unexpected frame type {ftype}")
                return
        self._buf = buf[pos:] if pos < n else b""
        if self._out:
            out = self._out
            self._out = []
            self.write(b"".join(out))

    def queue_frame(self, data: bytes) -> None:
        """Queue a frame to be written once the current data_received batch is handled."""
        self._out.append(data)

    def _content_done(self, now: int) -> None:
        ch = self._content
        self._content = None
        if ch is None:
            return
        if self._content_deliver:
            if ch.on_deliver is not None:
                ch.on_deliver(self._dtag, self._ts, self._tag, self._size, now)
        elif ch.on_return is not None:
            ch.on_return(self._dtag)

    def _slow_frame(self, raw: bytes, chan: int) -> None:
        try:
            _, _, value = frame.unmarshal(raw)
        except UnmarshalingException as exc:
            self._protocol_error(f"cannot decode frame: {exc}")
            return
        ch = self.ch0 if chan == 0 else self.channels.get(chan)
        if isinstance(value, commands.Basic.Return):
            self._content = ch
            self._content_deliver = False
            self._dtag = value.reply_code
        elif isinstance(value, Connection_.Blocked):
            self.blocked = True
            self.blocked_since = time.monotonic()
            self.unblocked.clear()
        elif isinstance(value, Connection_.Unblocked):
            if self.blocked:
                self.blocked_seconds += time.monotonic() - self.blocked_since
            self.blocked = False
            self.unblocked.set()
        elif isinstance(value, Connection_.CloseOk):
            self.close_ok = True
            if self.transport is not None:
                self.transport.close()
        elif isinstance(value, Connection_.Close):
            self.error = AMQPError(value.reply_code, value.reply_text)
            self.write(frame.marshal(Connection_.CloseOk(), 0))
            if self.transport is not None:
                self.transport.close()
        elif isinstance(value, commands.Channel.Close) and ch is not None:
            self.write(frame.marshal(commands.Channel.CloseOk(), chan))
            ch._fail(AMQPError(value.reply_code, value.reply_text))
        elif isinstance(value, commands.Basic.Cancel) and ch is not None:
            ch._fail(AMQPError(0, f"consumer {value.consumer_tag} cancelled by broker"))
        elif ch is not None:
            ch._resolve(value)

    def _protocol_error(self, text: str) -> None:
        self.error = AMQPError(501, f"FRAME_ERROR - {text}")
        if self.transport is not None:
            self.transport.abort()
