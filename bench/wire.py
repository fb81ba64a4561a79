# bench/wire.py — the benchmark client's hot-path AMQP 0-9-1 codec.
#
# Owns: the byte layout of the bench message body (timestamp + producer tag), the publish
# template (method + content header + body frames encoded once, then copied and patched per
# message), the hand-built ack/nack/deliver frames, and the frame-header scanner both the client
# and the sink use. Everything not on the hot path (handshake, declares, close) goes through
# pamqp instead. Sans-IO: no asyncio, no sockets.
# Talks to: bench.amqp (client connection), bench.sink (do-nothing server), bench.publisher.
# Must never: decode a frame the hot path does not need, or allocate per message what can be
# allocated per batch.
"""Hot-path frame encoding and decoding for the benchmark client and sink.

Frame layout (AMQP 0-9-1 §2.3.5): ``type:u8 | channel:u16 | size:u32 | payload | 0xCE``.
The bench body starts with a 16-byte header, both fields big-endian:
``timestamp:u64`` (ns, ``time.monotonic_ns()``, system-wide on Linux so producer and consumer
processes share the clock) and ``tag:u64`` = ``producer_id << 40 | seq``. PerfTest puts a
timestamp and a sequence number in its bodies the same way
(https://rabbitmq.github.io/rabbitmq-perf-test/stable/htmlsingle/ "Message size").
"""

from __future__ import annotations

import struct
from typing import Any

from pamqp import commands, frame, header

FRAME_END = 0xCE
FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_OVERHEAD = 8  # 7-byte header + frame-end octet
FRAME_HEADER_STRUCT = struct.Struct("!BHI")

BODY_HEADER = struct.Struct("!QQ")  # timestamp ns, tag
BODY_HEADER_SIZE = BODY_HEADER.size  # 16 bytes: the smallest body the bench can send
SEQ_BITS = 40
SEQ_MASK = (1 << SEQ_BITS) - 1
MAX_PRODUCER_ID = (1 << 24) - 1

# Method payload prefixes (class id, method id) the hot path recognises.
DELIVER = b"\x00\x3c\x00\x3c"  # basic.deliver 60/60
ACK = b"\x00\x3c\x00\x50"  # basic.ack 60/80
NACK = b"\x00\x3c\x00\x78"  # basic.nack 60/120
PUBLISH = b"\x00\x3c\x00\x28"  # basic.publish 60/40
RETURN = b"\x00\x3c\x00\x32"  # basic.return 60/50
_ACK_FRAME = struct.Struct("!BHI4sQBB")  # whole ack/nack frame: 21 bytes
_U64 = struct.Struct("!Q")
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"


class FrameError(ValueError):
    """A malformed frame (bad frame-end octet or size over frame_max): AMQP 501 FRAME_ERROR."""


def make_tag(producer_id: int, seq: int) -> int:
    """Pack a producer id (< 2**24) and a per-producer sequence number (< 2**40) into a u64."""
    return (producer_id << SEQ_BITS) | seq


def split_tag(tag: int) -> tuple[int, int]:
    """Inverse of `make_tag`: ``tag -> (producer_id, seq)``."""
    return tag >> SEQ_BITS, tag & SEQ_MASK


def scan(buf: bytes, pos: int, frame_max: int) -> tuple[int, int, int, int] | None:
    """Locate the frame starting at ``buf[pos]``.

    Returns ``(type, channel, payload_start, payload_end)`` or None when more bytes are needed
    (the caller keeps the tail). Raises FrameError for a size above ``frame_max`` or a missing
    0xCE end octet, so "need more bytes" is never confused with "malformed".
    """
    if len(buf) - pos < 7:
        return None
    ftype, channel, size = FRAME_HEADER_STRUCT.unpack_from(buf, pos)
    if size > frame_max:
        raise FrameError(f"frame size {size} exceeds frame_max {frame_max}")
    end = pos + 7 + size
    if end >= len(buf):
        return None
    if buf[end] != FRAME_END:
        raise FrameError(f"frame end octet {buf[end]:#x} at offset {end}, expected 0xce")
    return ftype, channel, pos + 7, end


_ID_PLACEHOLDER = "0" * 16  # a message_id of 16 hex digits, patched per message
_UUID_PLACEHOLDER = "f" * 36  # a Celery task id (uuid text, 36 characters), patched per message
PROPERTY_SHAPES = ("none", "celery")


def celery_properties(persistent: bool) -> commands.Basic.Properties:
    """The properties of a Celery 5 task message (task protocol 2, as kombu publishes
    `add.delay(2, 2)`): content type and encoding, the task id as `correlation_id` and in
    the `headers` table (`id`, `root_id`) beside a dozen more fields (voids, an array, a
    nested table), and the caller's result queue as `reply_to`. The task id is
    `_UUID_PLACEHOLDER` here; `PublishTemplate` gives every message its own.
    Source: celery/app/amqp.py `as_task_v2` (the headers Celery 5.3 sends)."""
    task_id = _UUID_PLACEHOLDER
    headers = {
        "lang": "py", "task": "tasks.add", "id": task_id, "shadow": None, "eta": None,
        "expires": None, "group": None, "group_index": None, "retries": 0,
        "timelimit": [None, None], "root_id": task_id, "parent_id": None,
        "argsrepr": "(2, 2)", "kwargsrepr": "{}", "origin": "gen4242@bench-host",
        "ignore_result": False, "replaced_task_nesting": 0, "stamped_headers": None,
        "stamps": {"bench": "celery-shape"},
    }
    return commands.Basic.Properties(
        content_type="application/json", content_encoding="utf-8", headers=headers,
        delivery_mode=2 if persistent else 1, priority=0, correlation_id=task_id,
        reply_to="8e6f2d3c-6b8f-3c1a-9d5e-0a1b2c3d4e5f")


def _uuid_text(tag: int) -> bytes:
    """36 bytes of uuid text, distinct per tag."""
    h = b"%032x" % tag
    return h[:8] + b"-" + h[8:12] + b"-" + h[12:16] + b"-" + h[16:20] + b"-" + h[20:]


class PublishTemplate:
    """One message of one publishing channel, encoded once: publish + header + body frames.

    ``build(n, ts_ns, first_tag)`` returns n consecutive messages in one bytearray, each a copy of
    the template with its 16-byte body header patched (tags first_tag .. first_tag+n-1). Bodies
    larger than ``frame_max - 8`` are split into several body frames; the bench header is always
    in the first. ``body_size`` in bytes (>= 16); ``delivery_mode`` 2 = persistent. With
    ``message_id`` every message carries its tag as a 16-hex-digit message_id property; with
    ``properties="celery"`` the properties of a Celery task message (`celery_properties`)
    whose task id (in three places) is distinct per message. ``delay_ms``: the header
    ``x-delay`` with that value (a delayed exchange holds the message that long), and the
    body's timestamp is the due time (send time + delay): the consumer then measures
    lateness. ``dedup_header``: the header ``x-deduplication-header`` carries the message's
    own id (a deduplicating exchange or queue then sees no duplicate).
    """

    def __init__(
        self,
        channel: int,
        exchange: str,
        routing_key: str,
        body_size: int,
        *,
        persistent: bool = False,
        mandatory: bool = False,
        frame_max: int = 131072,
        priority: int | None = None,
        message_id: bool = False,
        properties: str = "none",
        delay_ms: int = 0,
        dedup_header: bool = False,
    ) -> None:
        if body_size < BODY_HEADER_SIZE:
            raise ValueError(f"body size must be >= {BODY_HEADER_SIZE} bytes, got {body_size}")
        method = frame.marshal(
            commands.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=mandatory),
            channel,
        )
        if properties not in PROPERTY_SHAPES:
            raise ValueError(f"properties must be one of {PROPERTY_SHAPES}, got {properties!r}")
        if properties == "celery":
            props = celery_properties(persistent)
            if priority is not None:
                props.priority = priority
        else:
            props = commands.Basic.Properties(delivery_mode=2 if persistent else 1,
                                              priority=priority)
        if message_id or dedup_header:
            props.message_id = _ID_PLACEHOLDER
        if dedup_header:  # the same 16 hex digits as the message_id, distinct per message
            props.headers = {**(props.headers or {}), "x-deduplication-header": _ID_PLACEHOLDER}
        if delay_ms:  # an x-delayed-message exchange holds it (issue 50)
            props.headers = {**(props.headers or {}), "x-delay": delay_ms}
        head = frame.marshal(header.ContentHeader(0, body_size, props), channel)
        # where the per-message ids are in the template: (offset, 16 = message_id digits or
        # 36 = task-id uuid text), patched per message
        self.id_fields: list[tuple[int, int]] = []
        for placeholder in (_ID_PLACEHOLDER, _UUID_PLACEHOLDER):
            raw = placeholder.encode()
            at = head.find(raw)
            while at >= 0:
                self.id_fields.append((len(method) + at, len(raw)))
                at = head.find(raw, at + len(raw))
        chunk = frame_max - FRAME_OVERHEAD
        body = bytes(body_size)
        parts = [method, head]
        for start in range(0, body_size, chunk):
            piece = body[start : start + chunk]
            parts.append(FRAME_HEADER_STRUCT.pack(FRAME_BODY, channel, len(piece)))
            parts.append(piece)
            parts.append(b"\xce")
        self.data = b"".join(parts)
        self.size = len(self.data)  # bytes on the wire per message
        self.body_offset = len(method) + len(head) + 7  # where the bench header goes
        self.body_size = body_size
        # a delayed message's body carries its due time, so the consumer's latency is its
        # lateness (the delay itself would swamp the histogram's 1 % resolution)
        self.ts_offset_ns = delay_ms * 1_000_000

    @property
    def batch(self) -> int:
        """Messages per write: about 64 KiB, at most 256 (bigger batches allocate slower)."""
        return max(1, min(256, 65536 // self.size))

    def build(self, n: int, ts_ns: int, first_tag: int, ts_step_ns: int = 0) -> bytearray:
        """n messages with tags ``first_tag + i`` and timestamps ``ts_ns + i * ts_step_ns``
        (each one's scheduled send time in an open-loop run); one allocation."""
        buf = bytearray(self.data * n)
        pack_into = BODY_HEADER.pack_into
        off = self.body_offset
        step = self.size
        ts_ns += self.ts_offset_ns
        for i in range(n):
            pack_into(buf, off, ts_ns + i * ts_step_ns, first_tag + i)
            off += step
        if self.id_fields:
            self._patch_ids(buf, range(first_tag, first_tag + n))
        return buf

    def _patch_ids(self, buf: bytearray, tags: Any) -> None:
        """Give message i the ids of its tag: 16 hex digits of message_id, uuid text of a
        task id."""
        base = 0
        fields = self.id_fields
        for tag in tags:
            digits = b"%016x" % tag
            task_id = _uuid_text(tag) if any(n == 36 for _o, n in fields) else b""
            for off, n in fields:
                buf[base + off:base + off + n] = digits if n == 16 else task_id
            base += self.size

    def build_tags(self, tags: list[int], ts_ns: int) -> bytearray:
        """One message per tag in ``tags`` (used for resends, where tags are not consecutive)."""
        buf = bytearray(self.data * len(tags))
        off = self.body_offset
        ts_ns += self.ts_offset_ns
        for tag in tags:
            BODY_HEADER.pack_into(buf, off, ts_ns, tag)
            off += self.size
        if self.id_fields:
            self._patch_ids(buf, tags)
        return buf


def ack_frame(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    """basic.ack frame (21 bytes), built without pamqp for the consumer's hot path."""
    return _ACK_FRAME.pack(FRAME_METHOD, channel, 13, ACK, delivery_tag, int(multiple), FRAME_END)


def nack_frame(channel: int, delivery_tag: int, multiple: bool, requeue: bool = False) -> bytes:
    """basic.nack frame (21 bytes)."""
    bits = int(multiple) | (int(requeue) << 1)
    return _ACK_FRAME.pack(FRAME_METHOD, channel, 13, NACK, delivery_tag, bits, FRAME_END)


def parse_ack(buf: bytes, start: int) -> tuple[int, bool]:
    """basic.ack / basic.nack payload at ``start`` -> (delivery_tag, multiple)."""
    return _U64.unpack_from(buf, start + 4)[0], bool(buf[start + 12] & 1)


def parse_deliver_tag(buf: bytes, start: int) -> int:
    """basic.deliver payload at ``start`` -> delivery_tag (skips the consumer_tag shortstr)."""
    return _U64.unpack_from(buf, start + 5 + buf[start + 4])[0]


def parse_header_body_size(buf: bytes, start: int) -> int:
    """Content header payload at ``start`` -> body_size in bytes (class:u16 weight:u16 size:u64)."""
    return _U64.unpack_from(buf, start + 4)[0]


class DeliverEncoder:
    """basic.deliver frames for one consumer (used by the sink): the bytes before and after the
    delivery_tag are fixed, so a deliver frame is ``prefix + u64 + suffix``."""

    def __init__(self, channel: int, consumer_tag: str, exchange: str, routing_key: str) -> None:
        whole = frame.marshal(
            commands.Basic.Deliver(consumer_tag, 1, False, exchange, routing_key), channel
        )
        at = 7 + 4 + 1 + len(consumer_tag.encode())
        self.prefix = whole[:at]
        self.suffix = whole[at + 8 :]

    def encode(self, delivery_tag: int) -> bytes:
        return self.prefix + _U64.pack(delivery_tag) + self.suffix
