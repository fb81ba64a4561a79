# Owns: the AMQP 0-9-1 client connection shovels use to reach a broker (this one or another):
# handshake (PLAIN), one channel, synchronous RPCs, consuming with raw content, publishing
# with raw properties and publisher confirms.
# Talked to by: broker/shovel/link.py.
# Must never: change a message's properties (they are forwarded as received, bytes for bytes),
# block the event loop, or wait without a bound.
"""A small asyncio AMQP 0-9-1 client on the broker's own codec.

Why not aiormq or aio-pika (both well kept): their `basic_publish` gives every message
without a `message_id` a random one, and a shovel must deliver what it consumed unchanged
(rabbit_amqp091_shovel forwards the properties as they are). This client reuses the broker's
frame decoder (which keeps a content header's properties encoded) and encoder, so a shovelled
message's properties are forwarded byte for byte unless the shovel is told to change them.

`Client.connect(uri)` → a connected client with channel 1 open. Errors: `ClientError` with
the AMQP reply code of a connection.close or channel.close (0 for a lost or refused socket,
or a timeout).
"""

from __future__ import annotations

import asyncio
import errno
import socket
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pamqp import commands

from broker import __version__
from broker.protocol.encoding import encode_content_raw, encode_method
from broker.protocol.framing import (
    HEARTBEAT,
    PROTOCOL_HEADER,
    ContentHeader,
    FrameDecoder,
)
from broker.shovel.endpoint import EndpointError

RPC_TIMEOUT = 30.0  # s: longest a synchronous method may wait for its reply
CONNECT_TIMEOUT = 15.0  # s: TCP connect + handshake


class ClientError(EndpointError):
    """The peer closed the connection or the channel (reply_code), or the socket failed (0).
    `reason` is the short form RabbitMQ's link status shows for a socket error (Erlang's
    inet atoms: "econnrefused", "timeout", ...), else None."""

    def __init__(self, reply_code: int, text: str, reason: str | None = None) -> None:
        super().__init__(f"{reply_code} {text}" if reply_code else text)
        self.reply_code = reply_code
        self.reason = reason


@dataclass(frozen=True)
class Endpoint:
    """A parsed `amqp://user:password@host:port/vhost` (vhost percent-decoded; no path is
    vhost "/", as amqp_uri parses it)."""

    host: str
    port: int
    user: str
    password: str
    vhost: str

    @classmethod
    def parse(cls, uri: str) -> Endpoint:
        """ValueError for anything but an amqp:// URI with a host."""
        u = urllib.parse.urlparse(uri)
        if u.scheme != "amqp" or not u.hostname:
            raise ValueError(f"not an amqp:// URI with a host: {redact(uri)}")
        path = u.path[1:] if u.path.startswith("/") else u.path
        return cls(u.hostname, u.port or 5672, urllib.parse.unquote(u.username or "guest"),
                   urllib.parse.unquote(u.password or "guest"),
                   urllib.parse.unquote(path) if path else "/")


async def close_clients(*clients: Client | None) -> None:
    """Close each client that is there (connection.close, a bounded wait, then the socket)."""
    for client in clients:
        if client is not None:
            await client.close()


async def cancel_task(task: asyncio.Task[None] | None) -> None:
    """Cancel a link's task and wait for it to end."""
    if task is not None:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass


def _inet_reason(exc: BaseException) -> str:
    """Erlang's name for a socket error ("econnrefused", "ehostunreach", "timeout", "nxdomain")."""
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, socket.gaierror):
        return "nxdomain"
    if isinstance(exc, OSError) and exc.errno is not None and exc.errno in errno.errorcode:
        return errno.errorcode[exc.errno].lower()
    return type(exc).__name__


def redact(uri: str) -> str:
    """The URI without its password (what status and logs show, as RabbitMQ's)."""
    u = urllib.parse.urlparse(uri)
    if u.password is None:
        return uri
    netloc = u.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urllib.parse.urlunparse(u._replace(netloc=f"{user}@{netloc[1]}"))


# what a consumer callback gets: (delivery tag, redelivered, exchange, routing key, the content
# header (raw properties kept), body)
Delivery = tuple[int, bool, str, str, ContentHeader, bytes]


class Client(asyncio.Protocol):
    """One connection with channel 1 open. Use `connect`."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(0)
        self.frame_max = 131072
        self.closed: asyncio.Future[ClientError] = asyncio.get_running_loop().create_future()
        self._waiter: tuple[type, asyncio.Future[Any]] | None = None
        self._content: list[Any] | None = None  # a delivery being assembled
        self.on_delivery: Callable[[Delivery], None] | None = None
        self.on_confirm: Callable[[int, bool, bool], None] | None = None  # tag, multiple, ack
        self.publish_seq = 0  # last publish's sequence number in confirm mode
        self.server_properties: dict[str, Any] = {}  # from connection.start (cluster_name…)
        self.product = "pybroker shovel"  # client property `product` (set before connect)

    # -- setup -------------------------------------------------------------------------------
    @classmethod
    async def connect(cls, endpoint: Endpoint, name: str,
                      product: str = "pybroker shovel") -> Client:
        """Connect, log in (PLAIN), open `endpoint.vhost` and channel 1; `name` is the
        connection_name client property (management shows it), `product` the product
        property. ClientError on failure."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                _t, client = await loop.create_connection(cls, endpoint.host, endpoint.port)
                client.product = product
                try:
                    await client._handshake(endpoint, name)
                except BaseException:  # refused, timed out or cancelled: drop the socket
                    client.abort()
                    raise
        except (OSError, TimeoutError) as exc:
            raise ClientError(0, f"cannot connect to {endpoint.host}:{endpoint.port}: "
                                 f"{exc or type(exc).__name__}", _inet_reason(exc)) from None
        return client

    async def _handshake(self, ep: Endpoint, name: str) -> None:
        self._write(PROTOCOL_HEADER)
        start = await self._expect(commands.Connection.Start)
        self.server_properties = dict(start.server_properties or {})
        props: dict[str, Any] = {"product": self.product, "version": __version__,
                 "connection_name": name,
                 "capabilities": {"publisher_confirms": True, "consumer_cancel_notify": True}}
        self.send(0, commands.Connection.StartOk(
            client_properties=props, mechanism="PLAIN",
            response=f"\0{ep.user}\0{ep.password}"))
        tune = await self._expect(commands.Connection.Tune)
        self.frame_max = tune.frame_max or 131072
        self.decoder.frame_max = self.frame_max
        self.send(0, commands.Connection.TuneOk(channel_max=tune.channel_max or 2047,
                                                frame_max=self.frame_max, heartbeat=0))
        await self.rpc(0, commands.Connection.Open(virtual_host=ep.vhost),
                       commands.Connection.OpenOk)
        await self.rpc(1, commands.Channel.Open(), commands.Channel.OpenOk)

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ClientError(0, f"connection lost: {exc}" if exc else "connection lost"))

    def data_received(self, data: bytes) -> None:
        decoder = self.decoder
        decoder.feed(data)
        try:
            while (item := decoder.next_frame()) is not None:
                self._frame(*item)
        except Exception as exc:  # noqa: BLE001 - a broken peer: drop the connection
            self._fail(ClientError(0, f"bad frame from the peer: {exc}"))
            self.abort()

    def _frame(self, channel: int, frame: Any) -> None:
        if frame is HEARTBEAT:
            return
        content = self._content
        if content is not None:  # header and body frames of a delivery
            if isinstance(frame, ContentHeader):
                content.append(frame)
                content.append([])
                if frame.body_size == 0:
                    self._delivered()
            else:
                content[2].append(bytes(frame))
                if sum(map(len, content[2])) >= content[1].body_size:
                    self._delivered()
            return
        cls = type(frame)
        if cls is commands.Basic.Deliver:
            self._content = [frame]
        elif cls is commands.Basic.Ack or cls is commands.Basic.Nack:
            if self.on_confirm is not None:
                self.on_confirm(frame.delivery_tag, frame.multiple, cls is commands.Basic.Ack)
        elif cls is commands.Connection.Close:
            self.send(0, commands.Connection.CloseOk())
            self._fail(ClientError(frame.reply_code, frame.reply_text))
            self.abort()
        elif cls is commands.Channel.Close:
            self.send(channel, commands.Channel.CloseOk())
            err = ClientError(frame.reply_code, frame.reply_text)
            waiter = self._waiter
            if channel != 1 and waiter is not None:  # a side channel's check failed
                self._waiter = None
                if not waiter[1].done():
                    waiter[1].set_exception(err)
            else:
                self._fail(err)
                self.abort()
        elif cls is commands.Basic.Cancel:  # the source queue was deleted
            self._fail(ClientError(0, "consumer cancelled by the peer (queue deleted)"))
            self.abort()
        elif self._waiter is not None and isinstance(frame, self._waiter[0]):
            _cls, fut = self._waiter
            self._waiter = None
            if not fut.done():
                fut.set_result(frame)

    def _delivered(self) -> None:
        method, hdr, parts = self._content  # type: ignore[misc]
        self._content = None
        if self.on_delivery is not None:
            self.on_delivery((method.delivery_tag, method.redelivered, method.exchange,
                              method.routing_key, hdr, b"".join(parts)))

    def _fail(self, err: ClientError) -> None:
        if not self.closed.done():
            self.closed.set_result(err)
        if self._waiter is not None:
            fut = self._waiter[1]
            self._waiter = None
            if not fut.done():
                fut.set_exception(err)

    # -- sending -----------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def send(self, channel: int, method: Any) -> None:
        self._write(encode_method(channel, method))

    async def _expect(self, cls: type, send: tuple[int, Any] | None = None) -> Any:
        """Wait (bounded) for a frame of class `cls`, after sending `send` (channel,
        method) if given. ClientError when the connection closes or on time-out."""
        if self.closed.done():
            raise self.closed.result()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiter = (cls, fut)
        if send is not None:
            self.send(*send)
        try:
            async with asyncio.timeout(RPC_TIMEOUT):
                return await fut
        except TimeoutError:
            raise ClientError(0, f"no {cls.__name__} within {RPC_TIMEOUT} s") from None

    async def rpc(self, channel: int, method: Any, reply: type) -> Any:
        """Send `method`, wait for `reply` (one synchronous method at a time)."""
        return await self._expect(reply, (channel, method))

    def publish(self, exchange: str, routing_key: str, raw_properties: bytes,
                body: bytes) -> int:
        """basic.publish on channel 1; returns its sequence number (meaningful after
        confirm.select)."""
        method = commands.Basic.Publish(exchange=exchange, routing_key=routing_key)
        self._write(encode_content_raw(1, method, raw_properties, body, self.frame_max))
        self.publish_seq += 1
        return self.publish_seq

    def ack(self, delivery_tag: int, multiple: bool = False) -> None:
        self.send(1, commands.Basic.Ack(delivery_tag=delivery_tag, multiple=multiple))

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    async def close(self) -> None:
        """connection.close and a bounded wait for close-ok, then drop the socket."""
        if not self.closed.done():
            try:
                async with asyncio.timeout(2):
                    await self._expect(commands.Connection.CloseOk, (0, commands.Connection.Close(
                        reply_code=200, reply_text="Goodbye", class_id=0, method_id=0)))
            except (TimeoutError, ClientError):
                pass
        self._fail(ClientError(0, "closed"))
        self.abort()
