"""Valid AMQP 0-9-1 client byte streams and structured mutations of them, for fuzzing the
broker's frame decoder and connection state machine.

Owns: `session_frames()` (one complete, valid client session as a list of frames: protocol
header, handshake, a tour of methods with field tables and content, close), `mutate(frames,
rnd)` (a few structure-aware mutations drawn from `rnd`, a `random.Random`), and
`run_case(host, port, data)` (send a stream, half-close, read until the broker closes).
Used by test_fuzz.py (Hypothesis drives `rnd`) and by `python -m tests.fuzz`.
"""

from __future__ import annotations

import random
import socket
import struct
import time
from dataclasses import dataclass

from pamqp import body, commands, frame, header

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_END = b"\xce"


def _m(method: object, channel: int = 0) -> bytes:
    return frame.marshal(method, channel)


def _content(channel: int, payload: bytes, props: commands.Basic.Properties) -> list[bytes]:
    out = [frame.marshal(header.ContentHeader(0, len(payload), props), channel)]
    if payload:  # an empty body has no body frame (AMQP 0-9-1 §4.2.6)
        out.append(frame.marshal(body.ContentBody(payload), channel))
    return out


def session_frames(tag: str = "f") -> list[bytes]:
    """One valid session (every element one frame, the first the protocol header)."""
    q, x = f"fuzz-q-{tag}", f"fuzz-x-{tag}"
    props = commands.Basic.Properties(
        content_type="text/plain", delivery_mode=2, priority=3, message_id="m1",
        headers={"a": 1, "b": "two", "c": [1, "x", {"d": True}], "e": {"f": 1.5}},
        timestamp=None, correlation_id="c1", reply_to="r", expiration="60000")
    out = [PROTOCOL_HEADER,
           _m(commands.Connection.StartOk(
               client_properties={"product": "fuzz", "capabilities": {"basic.nack": True}},
               mechanism="PLAIN", response="\0guest\0guest")),
           _m(commands.Connection.TuneOk(channel_max=16, frame_max=131072, heartbeat=0)),
           _m(commands.Connection.Open(virtual_host="/")),
           _m(commands.Channel.Open(), 1),
           _m(commands.Basic.Qos(prefetch_count=10), 1),
           _m(commands.Confirm.Select(), 1),
           _m(commands.Exchange.Declare(exchange=x, exchange_type="topic", auto_delete=True,
                                        arguments={"k": "v"}), 1),
           _m(commands.Queue.Declare(queue=q, exclusive=True,
                                     arguments={"x-max-length": 100, "x-queue-mode": "lazy"}), 1),
           _m(commands.Queue.Bind(queue=q, exchange=x, routing_key="a.#"), 1),
           _m(commands.Basic.Publish(exchange=x, routing_key="a.b", mandatory=True), 1),
           *_content(1, b"hello fuzz", props),
           _m(commands.Basic.Publish(exchange="", routing_key=q), 1),
           *_content(1, b"", commands.Basic.Properties()),
           _m(commands.Basic.Get(queue=q), 1),
           _m(commands.Basic.Consume(queue=q, consumer_tag="ct"), 1),
           _m(commands.Basic.Ack(delivery_tag=1), 1),
           _m(commands.Basic.Nack(delivery_tag=2, multiple=False, requeue=True), 1),
           _m(commands.Channel.Open(), 2),
           _m(commands.Tx.Select(), 2),
           _m(commands.Basic.Publish(exchange="", routing_key=q), 2),
           *_content(2, b"x" * 300, commands.Basic.Properties(headers={"n": None})),
           _m(commands.Tx.Commit(), 2),
           _m(commands.Basic.Cancel(consumer_tag="ct"), 1),
           _m(commands.Queue.Purge(queue=q), 1),
           _m(commands.Queue.Unbind(queue=q, exchange=x, routing_key="a.#"), 1),
           _m(commands.Queue.Delete(queue=q), 1),
           _m(commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), 2),
           _m(commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), 1),
           _m(commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)),
           ]
    return out


def _flip(data: bytes, rnd: random.Random) -> bytes:
    if not data:  # an element emptied by an earlier cut
        return data
    b = bytearray(data)
    for _ in range(rnd.randint(1, 3)):
        i = rnd.randrange(len(b))
        b[i] = rnd.choice([0, 0xFF, 0x7F, 0x80, b[i] ^ (1 << rnd.randrange(8)), rnd.randrange(256)])
    return bytes(b)


def _set_size(data: bytes, rnd: random.Random) -> bytes:
    if len(data) < 8:
        return data
    size = rnd.choice([0, 1, len(data) - 8 + 1, len(data) - 8 - 1, 0x7FFFFFFF, 0xFFFFFFFF,
                       rnd.randrange(1 << 20)])
    return data[:3] + struct.pack(">I", max(0, size)) + data[7:]


def _set_channel(data: bytes, rnd: random.Random) -> bytes:
    if len(data) < 8:
        return data
    return data[:1] + struct.pack(">H", rnd.choice([0, 1, 2, 3, 15, 16, 17, 65535])) + data[3:]


def _set_type(data: bytes, rnd: random.Random) -> bytes:
    if len(data) < 8:
        return data
    return bytes([rnd.choice([0, 1, 2, 3, 4, 8, 9, 255])]) + data[1:]


def _payload_garbage(data: bytes, rnd: random.Random) -> bytes:
    """Keep the frame envelope (type, channel, size, frame-end) right, garble the payload:
    exercises the method/argument/table decoders rather than the framing."""
    if len(data) < 8:
        return data
    payload = bytearray(data[7:-1])
    if not payload:
        return data
    start = rnd.randrange(len(payload))
    for i in range(start, min(len(payload), start + rnd.randint(1, 8))):
        payload[i] = rnd.randrange(256)
    return data[:7] + bytes(payload) + data[-1:]


def _truncate_payload(data: bytes, rnd: random.Random) -> bytes:
    """A frame whose payload is cut short but whose envelope is consistent again."""
    if len(data) < 9:
        return data
    payload = data[7:-1][: rnd.randrange(len(data) - 8)]
    return data[:3] + struct.pack(">I", len(payload)) + payload + FRAME_END


def mutate(frames: list[bytes], rnd: random.Random) -> list[bytes]:
    """1-3 mutations: drop / duplicate / swap / reorder frames, flip bytes, wrong size,
    channel or type, garbled payload, truncated payload, random bytes inserted, the stream
    cut short."""
    out = list(frames)
    for _ in range(rnd.randint(1, 3)):
        op = rnd.randrange(11)
        i = rnd.randrange(len(out))
        if op == 0 and len(out) > 1:
            del out[i]
        elif op == 1:
            out.insert(i, out[i])
        elif op == 2:
            j = rnd.randrange(len(out))
            out[i], out[j] = out[j], out[i]
        elif op == 3:
            out[i] = _flip(out[i], rnd)
        elif op == 4:
            out[i] = _set_size(out[i], rnd)
        elif op == 5:
            out[i] = _set_channel(out[i], rnd)
        elif op == 6:
            out[i] = _set_type(out[i], rnd)
        elif op == 7:
            out[i] = _payload_garbage(out[i], rnd)
        elif op == 8:
            out[i] = _truncate_payload(out[i], rnd)
        elif op == 9:
            out.insert(i, rnd.randbytes(rnd.randint(1, 40)))
        else:
            out = out[: i + 1]
            out[-1] = out[-1][: rnd.randrange(len(out[-1]) + 1)]
    return out


@dataclass
class Outcome:
    """What the broker did with one stream: `closed` (it closed the socket within the
    timeout), `reply_code` of its connection.close (None if it sent none), `seconds`."""

    closed: bool
    reply_code: int | None
    seconds: float


def _close_code(data: bytes) -> int | None:
    """The reply code of the first connection.close (class 10, method 50) on channel 0 in
    the broker's output, scanning whole frames."""
    pos = 0
    if data.startswith(b"AMQP"):
        return None  # the broker answered a bad protocol header with its own
    while pos + 7 <= len(data):
        ftype, channel, size = struct.unpack_from(">BHI", data, pos)
        if pos + 8 + size > len(data):
            break
        if ftype == 1 and channel == 0 and size >= 6:
            cls, meth = struct.unpack_from(">HH", data, pos + 7)
            if (cls, meth) == (10, 50):
                return struct.unpack_from(">H", data, pos + 11)[0]
        pos += 8 + size
    return None


def run_case(host: str, port: int, data: bytes, timeout: float = 5.0) -> Outcome:
    """Send `data`, half-close, read until the broker closes the socket (or `timeout`)."""
    t = time.monotonic()
    got = bytearray()
    with socket.create_connection((host, port), timeout=timeout) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the broker may close first (e.g. after a bad header)
        deadline = t + timeout
        closed = False
        while time.monotonic() < deadline:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            except OSError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            got += chunk
    return Outcome(closed, _close_code(bytes(got)), time.monotonic() - t)
