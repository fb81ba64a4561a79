# spark_jobs.amqp.stream_protocol: the `amqp` source's stream reads over the RabbitMQ Stream
# protocol (option streamPort): the stream's tail from stream_stats and one chunk, and an
# offset range read chunk by chunk, each entry decoded as the AMQP 0-9-1 path would deliver
# it. The same offsets as over AMQP 0-9-1, so micro-batches replay exactly as before.
# Talked to by spark_jobs.amqp.stream_reader (driver: tail, first offsets; executors: ranges).
# Must never log credentials, or return part of a range as if it were all of it.

from __future__ import annotations

import datetime as dt
import socket
import ssl
import struct
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

from broker.stream import osiris_chunk as oc
from broker.stream.message_record import decode_message
from broker.stream_protocol.core import string as _s
from broker.stream_protocol.core import string_map as _map
from spark_jobs.amqp.deadline import BatchTimeout
from spark_jobs.amqp.options import AmqpOptions, redact
from spark_jobs.amqp.reader import _header_value

OK = 1
CREDIT = 10  # chunks in flight per subscription


class StreamProtocolError(ConnectionError):
    """The stream server refused a request (PROTOCOL.adoc's response code) or closed."""


class StreamSocket:
    """One blocking stream protocol connection with every wait bounded by `timeout_s`
    (socket.timeout becomes deadline.BatchTimeout naming what was awaited)."""

    def __init__(self, options: AmqpOptions, port: int, timeout_s: float, name: str) -> None:
        uri = options.uris[0]
        parts = urllib.parse.urlsplit(uri)
        host = parts.hostname or "127.0.0.1"
        self.what = f"the stream protocol on {host}:{port} ({redact(uri)})"
        self.timeout_s = timeout_s
        sock = socket.create_connection((host, port), timeout=timeout_s)
        if parts.scheme == "amqps":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        sock.settimeout(timeout_s)
        self.sock = sock
        self.buf = bytearray()
        self.corr = 0
        user = urllib.parse.unquote(parts.username) if parts.username else (
            options._username or "guest")
        password = urllib.parse.unquote(parts.password) if parts.password else (
            options._password or "guest")
        vhost = urllib.parse.unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
        self.request(17, _map({"connection_name": name, "product": "spark_jobs.amqp"}))
        self.request(18, b"")
        self.request(19, _s("PLAIN") + struct.pack(">i", len(user) + len(password) + 2)
                     + b"\0" + user.encode() + b"\0" + password.encode())
        tune = self.next_frame("tune")
        frame_max = struct.unpack_from(">I", tune, 4)[0]
        self._send(struct.pack(">HHII", 0x8014, 1, frame_max, 0))
        self.request(21, _s(vhost))

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def _send(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">I", len(payload)) + payload)

    def next_frame(self, waiting_for: str) -> bytes:
        """The next frame (without its size), reading as needed."""
        while True:
            if len(self.buf) >= 4:
                size = int.from_bytes(self.buf[:4], "big")
                if len(self.buf) >= 4 + size:
                    frame = bytes(self.buf[4:4 + size])
                    del self.buf[:4 + size]
                    key = struct.unpack_from(">H", frame)[0]
                    if key == 23:  # heartbeat
                        continue
                    if key == 22:  # the server closes
                        code = struct.unpack_from(">H", frame, 8)[0]
                        raise StreamProtocolError(f"{self.what}: closed by the server "
                                                  f"(code {code}) waiting for {waiting_for}")
                    return frame
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                raise BatchTimeout(f"no progress for {self.timeout_s:g} s on {self.what}: "
                                   f"waiting for {waiting_for}") from None
            if not data:
                raise StreamProtocolError(f"{self.what}: connection closed waiting for "
                                          f"{waiting_for}")
            self.buf += data

    def request(self, key: int, body: bytes) -> bytes:
        """Request `key` with a fresh correlation id; its response frame (frames of other
        kinds that arrive first are skipped). Raises StreamProtocolError unless OK."""
        self.corr += 1
        self._send(struct.pack(">HHI", key, 1, self.corr) + body)
        while True:
            frame = self.next_frame(f"the answer to command {key}")
            k, _v, corr = struct.unpack_from(">HHI", frame)
            if k == key | 0x8000 and corr == self.corr:
                code = struct.unpack_from(">H", frame, 8)[0]
                if code != OK:
                    raise StreamProtocolError(f"{self.what}: command {key} answered with "
                                              f"response code {code}")
                return frame

    def subscribe(self, stream: str, kind: int, value: int | None = None,
                  credit: int = CREDIT) -> None:
        """Subscription 1 from offset specification `kind` (1 first, 2 last, 3 next,
        4 offset, 5 timestamp ms) with `credit` chunks."""
        spec = struct.pack(">H", kind) + (struct.pack(">q", value) if kind in (4, 5) else b"")
        self.request(7, struct.pack(">B", 1) + _s(stream) + spec + struct.pack(">H", credit)
                     + _map({}))

    def chunk(self, waiting_for: str) -> tuple[oc.ChunkHeader, bytes]:
        """The next delivered chunk (its header and data entries) for subscription 1; one
        credit is given back for it."""
        while True:
            frame = self.next_frame(waiting_for)
            key, version = struct.unpack_from(">HH", frame)
            if key != 8:
                continue
            start = 5 + (8 if version == 2 else 0)
            h = oc.read_header(frame, start)
            data = frame[len(frame) - h.data_length:]  # whether or not a bloom filter came
            self._send(struct.pack(">HHBH", 9, 1, 1, 1))
            return h, data

    def stats(self, stream: str) -> dict[str, int]:
        """stream_stats: first_chunk_id, committed_chunk_id (-1 when empty)."""
        frame = self.request(28, _s(stream))
        n = struct.unpack_from(">I", frame, 10)[0]
        pos, out = 14, {}
        for _ in range(n):
            klen = struct.unpack_from(">H", frame, pos)[0]
            k = frame[pos + 2:pos + 2 + klen].decode()
            out[k] = struct.unpack_from(">q", frame, pos + 2 + klen)[0]
            pos += 2 + klen + 8
        return out


def _records(h: oc.ChunkHeader, data: bytes) -> Iterator[tuple[int, bytes]]:
    """(offset, record) of every record of a chunk, sub-batches expanded."""
    header = oc.ChunkHeader(h.chunk_type, h.num_entries, h.num_records, h.timestamp, h.epoch,
                            h.chunk_id, h.crc, h.data_length, 0, 0)
    off = h.chunk_id
    for entry in oc.entries(bytes(oc.HEADER_SIZE) + data, header):
        if isinstance(entry, oc.SubBatch):
            for rec in oc.sub_batch_records(entry):
                yield off, rec
                off += 1
        else:
            yield off, entry
            off += 1


def row(stream: str, offset: int, record: bytes) -> tuple:
    """One stream entry as a row of reader.SCHEMA, as an AMQP 0-9-1 consumer would get it:
    body, routing key, exchange, message id, correlation id, headers (as strings),
    timestamp, redelivered (false), and the stream offset in the delivery_tag column (and
    in the header x-stream-offset, as on AMQP 0-9-1)."""
    exchange, routing_key, props, body = decode_message(record, stream)
    # an AMQP 0-9-1 delivery from a stream carries its offset in the header x-stream-offset
    headers = {str(k): _header_value(v) for k, v in (props.headers or {}).items()}
    headers["x-stream-offset"] = str(offset)
    ts: Any = props.timestamp
    if isinstance(ts, (int, float)):
        ts = dt.datetime.fromtimestamp(ts, tz=dt.UTC)
    elif isinstance(ts, dt.datetime) and ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.UTC)
    return (bytes(body), routing_key, exchange, props.message_id, props.correlation_id,
            headers, ts, False, offset)


def tail(options: AmqpOptions) -> int | None:
    """The stream's next offset, or None when it is empty: stream_stats gives the last
    committed chunk, and reading that one chunk gives its last offset."""
    stream = options.require_queue()
    s = StreamSocket(options, port_of(options), options.batch_timeout_s,
                     "spark-amqp-stream-tail")
    try:
        committed = s.stats(stream).get("committed_chunk_id", -1)
        if committed < 0:
            return None
        s.subscribe(stream, 4, committed, credit=1)
        h, _data = s.chunk(f"chunk {committed} of stream '{stream}'")
        return h.chunk_id + h.num_records
    finally:
        s.close()


def first_at(options: AmqpOptions, kind: int, value: int | None = None) -> int | None:
    """The first offset a subscription from `kind` (1 first, 5 timestamp ms) gets, or None
    when the stream has nothing there yet."""
    stream = options.require_queue()
    s = StreamSocket(options, port_of(options), options.batch_timeout_s,
                     "spark-amqp-stream-first")
    try:
        if s.stats(stream).get("committed_chunk_id", -1) < 0:
            return None
        s.subscribe(stream, kind, value, credit=1)
        s.sock.settimeout(max(0.05, options.fetch_wait_ms / 1000))
        try:
            h, data = s.chunk(f"the first chunk of stream '{stream}'")
        except BatchTimeout:
            return None
        if kind == 5 and value is not None:
            return h.chunk_id  # osiris starts a timestamp subscription at a chunk boundary
        return next((off for off, _ in _records(h, data)), h.chunk_id)
    finally:
        s.close()


def port_of(options: AmqpOptions) -> int:
    """The streamPort option (only called when it is set)."""
    if options.stream_port is None:
        raise ValueError("the stream protocol needs option streamPort")
    return options.stream_port


def read_range(options: AmqpOptions, start: int, end: int) -> Iterator[tuple]:
    """The rows of offsets [start, end), in order; a subscription from offset `start`
    (the chunk holding it comes whole: earlier offsets are skipped).

    Errors: deadline.BatchTimeout when no chunk comes for batchTimeoutMs before offset
    end - 1 arrived (the task fails rather than return part of the range)."""
    if end <= start:
        return
    stream = options.require_queue()
    s = StreamSocket(options, port_of(options), options.batch_timeout_s,
                     "spark-amqp-stream-reader")
    try:
        s.subscribe(stream, 4, start)
        last = start - 1
        started = time.monotonic()
        while last < end - 1:
            h, data = s.chunk(f"offsets [{max(start, last + 1)}, {end}) of stream "
                              f"'{stream}' (read for {time.monotonic() - started:.0f} s)")
            for off, rec in _records(h, data):
                if off >= end:
                    break
                if off >= start:
                    yield row(stream, off, rec)
                last = off
    finally:
        s.close()


__all__ = ["StreamProtocolError", "first_at", "read_range", "row", "tail"]
