# bench/stream_client.py — a RabbitMQ Stream protocol client built for throughput.
#
# Owns: the client side of the frames the stream benchmark needs (peer properties, SASL
# PLAIN, tune, open, create/delete stream, declare publisher, publish v1, subscribe, credit,
# close) and two loops: publish with a window of unconfirmed messages, and read a stream from
# `first` counting records per chunk.
# Talks to: any stream server (this broker, RabbitMQ's rabbitmq_stream, bench.stream_sink)
# over TCP; numpy to lay out a batch of messages in one pass.
# Must never: parse a message it consumes (chunks are counted from their headers, as a
# client that hands chunks to an application does before decoding), or block the loop.
"""Stream protocol benchmark client (PROTOCOL.adoc of rabbitmq-server's rabbitmq_stream).

Messages are AMQP 1.0 messages of one data section (what RabbitMQ's stream PerfTest and
rstream send): `size` bytes of body, the first 8 of which carry the message's sequence
number, so no two bodies are equal. A publish frame carries `batch` messages (100, the Java
client's default batch size). Errors: `StreamError` when the server answers a request with a
response code other than OK (1), or closes the connection.
"""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any

import numpy as np

from broker.stream_protocol.core import string as _s
from broker.stream_protocol.core import string_map as _map

OK = 1
_FRAME = struct.Struct(">IHHI")  # size, key, version, correlation id
_PUBLISH = struct.Struct(">IHHBI")  # size, key 2, version 1, publisher id, count
_CREDIT = struct.Struct(">IHHBH")  # size, key 9, version 1, subscription id, credit


class StreamError(RuntimeError):
    """A request answered with response code `code` (PROTOCOL.adoc's table), or a close."""

    def __init__(self, what: str, code: int) -> None:
        super().__init__(f"{what}: response code {code}")
        self.code = code


def amqp_data_prefix(size: int) -> bytes:
    """The AMQP 1.0 bytes before a `size`-byte body: a data section (descriptor 0x75)."""
    if size < 256:
        return b"\x00\x53\x75\xa0" + bytes([size])
    return b"\x00\x53\x75\xb0" + struct.pack(">I", size)


class Batch:
    """`n` messages of `size` body bytes laid out as a publish frame's entries
    (publishing id u64, length i32, AMQP 1.0 message); `frame(publisher_id, first_id)`
    fills in the ids and sequence numbers and returns the whole frame."""

    def __init__(self, n: int, size: int) -> None:
        prefix = amqp_data_prefix(size)
        seq = min(8, size)
        self.dtype = np.dtype([("id", ">u8"), ("len", ">i4"), ("pre", f"V{len(prefix)}"),
                               ("seq", f"V{seq}"), ("rest", f"V{size - seq}")]
                              if size > seq else
                              [("id", ">u8"), ("len", ">i4"), ("pre", f"V{len(prefix)}"),
                               ("seq", f"V{seq}")])
        record = (b"\0" * 8 + struct.pack(">i", len(prefix) + size) + prefix + b"\0" * seq
                  + b"x" * (size - seq))
        self.arr = np.frombuffer(bytearray(record * n), dtype=self.dtype)
        self.n = n
        self.seq_bytes = seq
        self.ids = np.arange(n, dtype=np.uint64)

    def frame(self, publisher_id: int, first_id: int) -> bytes:
        ids = self.ids + np.uint64(first_id)
        self.arr["id"] = ids
        if self.seq_bytes == 8:
            self.arr["seq"] = ids.astype(">u8").view("V8")
        body = self.arr.tobytes()
        return _PUBLISH.pack(len(body) + 9, 2, 1, publisher_id, self.n) + body


class StreamClient(asyncio.Protocol):
    """One connection. `await StreamClient.connect(host, port, ...)` does the handshake."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.corr = 0
        self.waiters: dict[int, asyncio.Future] = {}
        self.tuned: asyncio.Future = asyncio.get_running_loop().create_future()
        self.closed: asyncio.Future = asyncio.get_running_loop().create_future()
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.confirmed = 0  # messages confirmed
        self.errored = 0  # messages answered with publish_error
        self.progress = asyncio.Event()  # set on every confirm or delivery
        self.records = 0  # records delivered
        self.chunks = 0
        self.credit_sub: int | None = None  # give back one credit per chunk on this subscription

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(exc)
        for w in self.waiters.values():
            if not w.done():
                w.set_exception(StreamError("connection closed", 0))
        self.can_write.set()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        end = len(buf)
        unpack = _FRAME.unpack_from
        while end - pos >= 8:
            size = int.from_bytes(buf[pos:pos + 4], "big")
            if end - pos - 4 < size:
                break
            key = (buf[pos + 4] << 8) | buf[pos + 5]
            if key == 3:  # publish_confirm: publisher id, count, ids
                self.confirmed += int.from_bytes(buf[pos + 9:pos + 13], "big")
                self.progress.set()
            elif key == 8:  # deliver: subscription id [committed u64 in v2], chunk
                version = buf[pos + 7]
                at = pos + 9 + (8 if version == 2 else 0)
                self.records += int.from_bytes(buf[at + 4:at + 8], "big")
                self.chunks += 1
                if self.credit_sub is not None and self.transport is not None:
                    self.transport.write(_CREDIT.pack(7, 9, 1, self.credit_sub, 1))
                self.progress.set()
            elif key == 4:  # publish_error: publisher id, count, (id, code)*
                self.errored += int.from_bytes(buf[pos + 9:pos + 13], "big")
                self.progress.set()
            elif key == 20:  # tune from the server: answer with no heartbeat
                frame_max = int.from_bytes(buf[pos + 8:pos + 12], "big")
                self._write(struct.pack(">IHHII", 12, 0x8014, 1, frame_max, 0))
                if not self.tuned.done():
                    self.tuned.set_result(frame_max)
            elif key == 22:  # close from the server
                code = int.from_bytes(buf[pos + 12:pos + 14], "big")
                corr = int.from_bytes(buf[pos + 8:pos + 12], "big")
                self._write(struct.pack(">IHHIH", 10, 0x8016, 1, corr, OK))
                if not self.closed.done():
                    self.closed.set_result(StreamError("closed by the server", code))
            elif key & 0x8000:
                _s2, _k, _v, corr = unpack(buf, pos)
                w = self.waiters.pop(corr, None)
                if w is not None and not w.done():
                    w.set_result(bytes(buf[pos + 4:pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]

    # -- requests ----------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    async def request(self, key: int, body: bytes, what: str, wait_s: float = 30) -> bytes:
        """Send request `key` with `body` after a fresh correlation id; the response frame
        (from its key). Raises StreamError unless the response code is OK."""
        self.corr += 1
        fut = asyncio.get_running_loop().create_future()
        self.waiters[self.corr] = fut
        payload = struct.pack(">HHI", key, 1, self.corr) + body
        self._write(struct.pack(">I", len(payload)) + payload)
        frame = await asyncio.wait_for(fut, wait_s)
        code = struct.unpack_from(">H", frame, 8)[0]
        if code != OK:
            raise StreamError(what, code)
        return frame

    @classmethod
    async def connect(cls, host: str, port: int, username: str = "guest",
                      password: str = "guest", vhost: str = "/",
                      name: str = "bench") -> StreamClient:
        loop = asyncio.get_running_loop()
        _t, c = await loop.create_connection(cls, host, port)
        await c.request(17, _map({"product": "bench.stream_client", "connection_name": name}),
                        "peer_properties")
        await c.request(18, b"", "sasl_handshake")
        await c.request(19, _s("PLAIN") + struct.pack(">i", len(username) + len(password) + 2)
                        + b"\0" + username.encode() + b"\0" + password.encode(),
                        "sasl_authenticate")
        await asyncio.wait_for(c.tuned, 30)
        await c.request(21, _s(vhost), "open")
        return c

    async def create_stream(self, name: str, arguments: dict[str, str] | None = None) -> None:
        await self.request(13, _s(name) + _map(arguments or {}), "create_stream")

    async def delete_stream(self, name: str) -> None:
        await self.request(14, _s(name), "delete_stream")

    async def declare_publisher(self, publisher_id: int, stream: str,
                                reference: str = "") -> None:
        await self.request(1, struct.pack(">B", publisher_id) + _s(reference) + _s(stream),
                           "declare_publisher")

    async def subscribe_first(self, subscription_id: int, stream: str, credit: int) -> None:
        """Subscribe from `first` with `credit` chunks; each chunk received gives one back."""
        self.credit_sub = subscription_id
        await self.request(7, struct.pack(">B", subscription_id) + _s(stream)
                           + struct.pack(">HH", 1, credit) + _map({}), "subscribe")

    async def close(self) -> None:
        try:
            await self.request(22, struct.pack(">H", OK) + _s("bye"), "close", wait_s=5)
        except (TimeoutError, StreamError, ConnectionError):
            pass
        if self.transport is not None:
            self.transport.close()

    # -- the two loops -----------------------------------------------------------------------
    async def _next_progress(self) -> None:
        """Wait for the next confirm or delivery, or one second."""
        self.progress.clear()
        try:
            await asyncio.wait_for(self.progress.wait(), 1)
        except TimeoutError:
            pass

    async def publish_for(self, seconds: float, size: int, publisher_id: int = 1,
                          batch: int = 100, window: int = 10_000) -> dict[str, float]:
        """Publish `size`-byte messages for `seconds` with at most `window` unconfirmed,
        then wait (up to 60 s) for the last confirms. Returns published, confirmed, errored
        and the confirmed rate (msg/s) over the time from the first send to the last
        confirm."""
        b = Batch(batch, size)
        sent = 0
        start = time.perf_counter()
        stop = start + seconds
        write = self._write
        while True:
            if sent - self.confirmed - self.errored >= window:
                self.progress.clear()
                await self.progress.wait()
                continue
            if not self.can_write.is_set():
                await self.can_write.wait()
            write(b.frame(publisher_id, sent + 1))
            sent += batch
            if sent % (batch * 16) == 0:
                if time.perf_counter() >= stop:
                    break
                await asyncio.sleep(0)  # let confirms in
            if self.closed.done():
                raise StreamError("publishing", getattr(self.closed.result(), "code", 0))
        deadline = time.perf_counter() + 60
        while self.confirmed + self.errored < sent and time.perf_counter() < deadline:
            await self._next_progress()
        elapsed = time.perf_counter() - start
        return {"published": sent, "confirmed": self.confirmed, "errored": self.errored,
                "seconds": round(elapsed, 3), "rate": round(self.confirmed / elapsed, 1)}

    async def consume(self, stream: str, target: int, seconds: float,
                      credit: int = 10) -> dict[str, float]:
        """Read `stream` from `first` until `target` records arrived or `seconds` passed.
        Returns records, chunks and the rate (records/s)."""
        start = time.perf_counter()
        await self.subscribe_first(1, stream, credit)
        deadline = start + seconds
        while self.records < target and time.perf_counter() < deadline:
            await self._next_progress()
        elapsed = time.perf_counter() - start
        return {"records": self.records, "chunks": self.chunks, "seconds": round(elapsed, 3),
                "rate": round(self.records / elapsed, 1)}
