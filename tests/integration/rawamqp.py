"""A tiny blocking raw-socket AMQP 0-9-1 client for wire-level integration tests.

Owns one TCP socket. Used by tests that must see (or send) what real clients hide: protocol
headers, heartbeats, malformed frames, methods a client library never sends. It encodes and
decodes with pamqp only; it never interprets broker semantics beyond the handshake.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from pamqp import commands, frame, header, heartbeat
from pamqp.body import ContentBody
from pamqp.common import FieldTable

FRAME_END = b"\xce"
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


class Closed(Exception):
    """The broker closed the TCP connection."""


def plain_response(user: str, password: str) -> str:
    return f"\0{user}\0{password}"


def amqplain_response(user: str, password: str) -> str:
    """AMQPLAIN: a field table without its 4-byte length prefix."""
    from pamqp import encode

    table = encode.field_table({"LOGIN": user, "PASSWORD": password})
    return table[4:].decode("latin-1")


class RawClient:
    """Blocking raw AMQP client: connect, handshake, send frames or bytes, read frames."""

    def __init__(self, host: str, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.timeout = timeout
        self.start: commands.Connection.Start | None = None
        self.tune: commands.Connection.Tune | None = None

    # --- plumbing -------------------------------------------------------------------------
    def close_socket(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_socket()

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, value: Any, channel: int = 0) -> None:
        self.sock.sendall(frame.marshal(value, channel))

    def _recv_more(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no frame from broker in time")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            raise
        except ConnectionResetError as exc:
            raise Closed() from exc
        if not data:
            raise Closed()
        self.buf += data

    def read_raw(self, n: int, timeout: float | None = None) -> bytes:
        """Read exactly n bytes (e.g. a protocol header the server answers with)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while len(self.buf) < n:
            self._recv_more(deadline)
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def read_frame(self, timeout: float | None = None) -> tuple[int, Any]:
        """Next (channel, frame) from the broker; Closed when the socket closes."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            if len(self.buf) >= 7:
                size = struct.unpack(">I", self.buf[3:7])[0]
                if len(self.buf) >= 8 + size:
                    consumed, channel, value = frame.unmarshal(self.buf[: 8 + size])
                    self.buf = self.buf[consumed:]
                    return channel, value
            self._recv_more(deadline)

    def read_frame_bytes(self, timeout: float | None = None) -> tuple[int, int, bytes]:
        """Next frame undecoded, as (frame type, channel, payload): for content whose header
        pamqp cannot decode (e.g. a timestamp outside datetime's range)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while len(self.buf) < 7:
            self._recv_more(deadline)
        ftype, channel, size = struct.unpack(">BHI", self.buf[:7])
        while len(self.buf) < 8 + size:
            self._recv_more(deadline)
        payload, end = self.buf[7 : 7 + size], self.buf[7 + size : 8 + size]
        assert end == FRAME_END, end
        self.buf = self.buf[8 + size :]
        return ftype, channel, payload

    def expect(self, cls: type, channel: int | None = None, timeout: float | None = None) -> Any:
        """Read frames (skipping heartbeats) until one of type `cls`; anything else fails."""
        while True:
            ch, value = self.read_frame(timeout)
            if isinstance(value, heartbeat.Heartbeat):
                continue
            if not isinstance(value, cls):
                raise AssertionError(f"expected {cls.__name__}, got {value!r} on channel {ch}")
            if channel is not None:
                assert ch == channel, (ch, channel)
            return value

    def read_content(self, channel: int, timeout: float | None = None) -> tuple[Any, bytes, int]:
        """After a deliver/get-ok/return: (content header, body, number of body frames)."""
        hdr = self.expect(header.ContentHeader, channel, timeout)
        body = b""
        frames = 0
        while len(body) < hdr.body_size:
            body += self.expect(ContentBody, channel, timeout).value
            frames += 1
        return hdr, body, frames

    def get(
        self, channel: int, queue: str, no_ack: bool = True, timeout: float = 5.0
    ) -> tuple[Any, Any, bytes, int]:
        """basic.get until a message comes (publishes are asynchronous; bounded poll).

        Returns (get-ok, content header, body, number of body frames)."""
        deadline = time.monotonic() + timeout
        while True:
            self.send(commands.Basic.Get(queue=queue, no_ack=no_ack), channel)
            _ch, reply = self.read_frame()
            while isinstance(reply, heartbeat.Heartbeat):
                _ch, reply = self.read_frame()
            if isinstance(reply, commands.Basic.GetOk):
                hdr, body, frames = self.read_content(channel)
                return reply, hdr, body, frames
            if not isinstance(reply, commands.Basic.GetEmpty):
                raise AssertionError(f"expected get-ok or get-empty, got {reply!r}")
            if time.monotonic() > deadline:
                raise AssertionError(f"queue {queue!r} stayed empty for {timeout}s")
            time.sleep(0.01)

    def read_until_connection_close(
        self, timeout: float | None = None
    ) -> commands.Connection.Close:
        """Skip frames until connection.close; answer close-ok; return the close."""
        while True:
            ch, value = self.read_frame(timeout)
            if isinstance(value, commands.Connection.Close):
                try:
                    self.send(commands.Connection.CloseOk())
                except OSError:
                    pass
                return value

    def read_until_channel_close(self, channel: int, timeout: float | None = None) -> Any:
        """Skip frames until channel.close on `channel` (or a connection.close); reply ok."""
        while True:
            ch, value = self.read_frame(timeout)
            if isinstance(value, commands.Connection.Close):
                return value
            if isinstance(value, commands.Channel.Close) and ch == channel:
                self.send(commands.Channel.CloseOk(), channel)
                return value

    def wait_closed(self, timeout: float = 5.0) -> None:
        """Read (discarding) until the broker closes the socket."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._recv_more(deadline)
            except Closed:
                return
            self.buf = b""

    # --- protocol -------------------------------------------------------------------------
    def handshake(
        self,
        user: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        mechanism: str = "PLAIN",
        channel_max: int | None = None,
        frame_max: int | None = None,
        heartbeat_s: int | None = 0,
        capabilities: FieldTable | None = None,
        open_connection: bool = True,
    ) -> commands.Connection.Tune:
        self.send_bytes(PROTOCOL_HEADER)
        self.start = self.expect(commands.Connection.Start)
        if mechanism == "AMQPLAIN":
            response = amqplain_response(user, password)
        else:
            response = plain_response(user, password)
        props: FieldTable = {
            "product": "rawamqp",
            "capabilities": capabilities
            if capabilities is not None
            else {"authentication_failure_close": True},
        }
        self.send(
            commands.Connection.StartOk(
                client_properties=props, mechanism=mechanism, response=response
            )
        )
        self.tune = self.expect(commands.Connection.Tune)
        self.send(
            commands.Connection.TuneOk(
                channel_max=self.tune.channel_max if channel_max is None else channel_max,
                frame_max=self.tune.frame_max if frame_max is None else frame_max,
                heartbeat=self.tune.heartbeat if heartbeat_s is None else heartbeat_s,
            )
        )
        if open_connection:
            self.send(commands.Connection.Open(virtual_host=vhost))
            self.expect(commands.Connection.OpenOk)
        return self.tune

    def open_channel(self, channel: int = 1) -> None:
        self.send(commands.Channel.Open(), channel)
        self.expect(commands.Channel.OpenOk, channel)

    def publish(
        self,
        channel: int,
        body: bytes,
        exchange: str = "",
        routing_key: str = "",
        mandatory: bool = False,
        immediate: bool = False,
        properties: commands.Basic.Properties | None = None,
    ) -> None:
        data = frame.marshal(
            commands.Basic.Publish(
                exchange=exchange, routing_key=routing_key, mandatory=mandatory, immediate=immediate
            ),
            channel,
        )
        data += frame.marshal(
            header.ContentHeader(0, len(body), properties or commands.Basic.Properties()),
            channel,
        )
        if body:
            data += frame.marshal(ContentBody(body), channel)
        self.send_bytes(data)

    def publish_raw_properties(
        self, channel: int, raw_properties: bytes, body: bytes, exchange: str = "",
        routing_key: str = "", mandatory: bool = False,
    ) -> None:
        """basic.publish whose content header carries `raw_properties` (property flags +
        property list) byte for byte, e.g. values pamqp cannot encode or decode."""
        data = frame.marshal(
            commands.Basic.Publish(
                exchange=exchange, routing_key=routing_key, mandatory=mandatory
            ),
            channel,
        )
        fixed = struct.pack(">HHQ", 60, 0, len(body))
        data += raw_frame(2, channel, fixed + raw_properties)
        if body:
            data += frame.marshal(ContentBody(body), channel)
        self.send_bytes(data)

    def read_method_bytes(self, timeout: float | None = None) -> Any:
        """The next method frame (heartbeats skipped), read with read_frame_bytes so content
        after it can be read undecoded too."""
        while True:
            ftype, channel, payload = self.read_frame_bytes(timeout)
            if ftype != 8:
                assert ftype == 1, (ftype, channel, payload)
                return frame.unmarshal(raw_frame(ftype, channel, payload))[2]

    def read_content_bytes(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        """(raw properties, body) of the content after a get-ok, deliver or return, with the
        properties exactly as the broker sent them."""
        ftype, _channel, payload = self.read_frame_bytes(timeout)
        assert ftype == 2, (ftype, payload)
        (size,) = struct.unpack_from(">Q", payload, 4)
        body = b""
        while len(body) < size:
            ftype, _channel, chunk = self.read_frame_bytes(timeout)
            assert ftype == 3, (ftype, chunk)
            body += chunk
        return payload[12:], body

    def get_bytes(
        self, channel: int, queue: str, timeout: float = 5.0
    ) -> tuple[bytes, bytes] | None:
        """basic.get (no_ack) polled until a message comes: its (raw properties, body), or
        None when the queue is still empty at `timeout` (0: ask once)."""
        deadline = time.monotonic() + timeout
        while True:
            self.send(commands.Basic.Get(queue=queue, no_ack=True), channel)
            reply = self.read_method_bytes()
            if isinstance(reply, commands.Basic.GetOk):
                return self.read_content_bytes()
            assert isinstance(reply, commands.Basic.GetEmpty), reply
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.01)

    def close(self) -> None:
        """Client-initiated connection.close and wait for close-ok."""
        self.send(
            commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
        )
        self.expect(commands.Connection.CloseOk)
        self.close_socket()


def raw_frame(frame_type: int, channel: int, payload: bytes, end: bytes = FRAME_END) -> bytes:
    """Hand-built frame: type, channel, size, payload, end octet (possibly wrong)."""
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + end
