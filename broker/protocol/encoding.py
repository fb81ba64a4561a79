# Owns: the AMQP 0-9-1 frame layer's encoding side — frame constants, method arguments and
# content (method + header + body frames) to bytes, and the hand-written basic.deliver
# encoder of the hot path with its caches.
# Talks to: channel and queue processes and the reader (through their writer), which send
# what these return; framing.py (the decoder) uses the constants and `encode_args`.
# Must never: import asyncio, touch a socket, or validate names (RabbitMQ allows any UTF-8).
"""AMQP 0-9-1 encoding: frames and content to bytes (AMQP 0-9-1 §2.3.5, §4.2.3–§4.2.6)."""

from __future__ import annotations

import inspect
import struct
from typing import Any

from pamqp import commands, encode

FRAME_END = 0xCE
FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"
FRAME_MIN_SIZE = 4096
FRAME_OVERHEAD = 8  # 7-byte header + frame-end octet; frame_max counts the whole frame

_FRAME_HDR = struct.Struct(">BHI")
_U16U16 = struct.Struct(">HH")
_HEADER_FIXED = struct.Struct(">HHQ")
_U64_U8 = struct.Struct(">QB")

# class -> ((attribute, amqp type), ...) from pamqp's spec tables.
_COMMANDS: list[Any] = list(commands.INDEX_MAPPING.values())  # pamqp's command classes
ARG_SPECS: dict[Any, tuple[tuple[str, str], ...]] = {
    cls: tuple((name, cls.amqp_type(name)) for name in cls.__slots__)
    for cls in _COMMANDS
}


def _frame(ftype: int, channel: int, payload: bytes) -> bytes:
    return _FRAME_HDR.pack(ftype, channel, len(payload)) + payload + b"\xce"


class LongLong(int):
    """An integer a field table must carry as a signed 64-bit `l`, whatever its size:
    pamqp picks the smallest type, and RabbitMQ checks the type of some arguments (the
    `x-max-hops` of an `x-federation-upstream` exchange must be a long)."""


class SignedInt(int):
    """An integer a field table must carry as a signed 32-bit `I`: the `x-delay` a delayed
    message is delivered with (rabbitmq-delayed-message-exchange sets it as `signedint`,
    and clients such as Spring AMQP read it back as an Integer)."""


_FORCED = (LongLong, SignedInt)


def _forced_value(value: int) -> bytes:
    if type(value) is LongLong:
        return b"l" + struct.pack(">q", value)
    return b"I" + struct.pack(">i", value)


def encode_table(table: dict[str, Any] | None) -> bytes:
    """A field table (AMQP 0-9-1 §4.2.5.5): pamqp's, except that LongLong values go as `l`
    and SignedInt ones as `I`."""
    if not table or not any(type(v) in _FORCED for v in table.values()):
        return encode.field_table(table)  # type: ignore[arg-type]  # pamqp's FieldTable is narrower
    parts = []
    for key, value in table.items():
        name = key.encode()
        parts.append(bytes((len(name),)) + name)
        parts.append(_forced_value(value) if type(value) in _FORCED
                     else encode.encode_table_value(value))
    body = b"".join(parts)
    return struct.pack(">I", len(body)) + body


def encode_args(method: Any) -> bytes:
    """Method arguments per pamqp's spec tables, without pamqp's validate(): RabbitMQ allows
    any UTF-8 exchange/queue name, pamqp's regex does not."""
    out = [_U16U16.pack(method.index >> 16, method.index & 0xFFFF)]
    bits = -1
    bitpos = 0
    for name, amqp_type in ARG_SPECS[type(method)]:
        value = getattr(method, name, None)
        if amqp_type == "bit":
            if bits < 0:
                bits, bitpos = 0, 0
            if value:
                bits |= 1 << bitpos
            bitpos += 1
            if bitpos == 8:
                out.append(bytes((bits,)))
                bits = -1
            continue
        if bits >= 0:
            out.append(bytes((bits,)))
            bits = -1
        out.append(encode_table(value) if amqp_type == "table" else
                   encode.by_type(value, amqp_type))
    if bits >= 0:
        out.append(bytes((bits,)))
    return b"".join(out)


_DEFAULTS: dict[Any, tuple[tuple[str, Any], ...]] = {}


def build_method(cls: Any, **fields: Any) -> Any:
    """A pamqp command instance of `cls` with `fields`, others at their defaults, without
    pamqp's validate(): pamqp's name pattern refuses names RabbitMQ accepts (any UTF-8 up to
    255 bytes: 'café', 'orders*', 'q?', a tab), and `Queue.DeclareOk`, `Basic.GetOk` and
    `Basic.Return` echo such names back (issue 8). Unknown field names raise TypeError."""
    defaults = _DEFAULTS.get(cls)
    if defaults is None:
        params = inspect.signature(cls.__init__).parameters
        defaults = _DEFAULTS[cls] = tuple(
            (name, params[name].default) for name in cls.__slots__ if name in params)
    method = cls.__new__(cls)
    for name, default in defaults:
        setattr(method, name, fields.pop(name, default))
    if fields:
        raise TypeError(f"{cls.__name__} has no field(s) {sorted(fields)}")
    return method


def encode_method(channel: int, method: Any) -> bytes:
    """One method frame for a pamqp command instance (AMQP 0-9-1 §4.2.4). Field values are
    not validated (the broker's own names may be any UTF-8); a value of the wrong type
    raises TypeError/ValueError from pamqp's encoders."""
    return _frame(FRAME_METHOD, channel, encode_args(method))


_HEADERS_FLAG = 0x2000  # basic property flags: content-type 0x8000, -encoding 0x4000, headers


def encode_properties(properties: commands.Basic.Properties) -> bytes:
    """raw_properties (property flags + property list) of a pamqp Basic.Properties; a
    LongLong in the headers table is encoded as a long (`l`), a SignedInt as `I`."""
    headers = properties.headers
    if not headers or not any(type(v) in _FORCED for v in headers.values()):
        return properties.marshal()
    properties.headers = None
    try:
        raw = properties.marshal()
    finally:
        properties.headers = headers
    flags = struct.unpack_from(">H", raw)[0]
    pos = 2
    for flag in (0x8000, 0x4000):  # content-type, content-encoding: shortstrs before headers
        if flags & flag:
            pos += 1 + raw[pos]
    return (struct.pack(">H", flags | _HEADERS_FLAG) + raw[2:pos] + encode_table(headers)
            + raw[pos:])


def _content_frames(
    channel: int, class_id: int, raw_properties: bytes, body: bytes, frame_max: int
) -> list[bytes | memoryview]:
    size = len(body)
    parts: list[bytes | memoryview] = [
        _FRAME_HDR.pack(FRAME_HEADER, channel, 12 + len(raw_properties)),
        _HEADER_FIXED.pack(class_id, 0, size),
        raw_properties,
        b"\xce",
    ]
    chunk = frame_max - FRAME_OVERHEAD if frame_max else size
    if size <= chunk:
        if size:
            parts += (_FRAME_HDR.pack(FRAME_BODY, channel, size), body, b"\xce")
        return parts
    view = memoryview(body)
    for start in range(0, size, chunk):
        piece = view[start : start + chunk]
        parts += (_FRAME_HDR.pack(FRAME_BODY, channel, len(piece)), piece, b"\xce")
    return parts


def encode_content_raw(
    channel: int, method: Any, raw_properties: bytes, body: bytes, frame_max: int
) -> bytes:
    """Method frame + content header frame + body frames (each payload <= frame_max - 8;
    none when body is empty), with properties already encoded (`encode_properties`).
    AMQP 0-9-1 §4.2.6."""
    parts: list[bytes | memoryview] = [_frame(FRAME_METHOD, channel, encode_args(method))]
    parts += _content_frames(channel, method.index >> 16, raw_properties, body, frame_max)
    return b"".join(parts)


def encode_content(
    channel: int,
    method: Any,
    properties: commands.Basic.Properties,
    body: bytes,
    frame_max: int,
) -> bytes:
    """Like encode_content_raw, with a pamqp Basic.Properties object."""
    return encode_content_raw(channel, method, properties.marshal(), body, frame_max)


_DELIVER_ID = _U16U16.pack(60, 60)
_METHOD_FRAME_HDR = struct.Struct(">BHI")
# frame-end of the method frame, then the content header frame's header and fixed fields
_END_AND_HEADER = struct.Struct(">BBHIHHQ")
_END_AND_BODY_HDR = struct.Struct(">BBHI")
# (consumer tag, exchange, routing key) -> (the arguments before the delivery tag, after it)
_DELIVER_PARTS: dict[tuple[str, str, str], tuple[bytes, bytes]] = {}
_DELIVER_PARTS_MAX = 4096
# the last single-body-frame delivery encoded: (raw_properties, body size, channel, consumer
# tag, routing key, exchange, bytes before the delivery tag, bytes between it and the body,
# the encoded exchange and routing key); the next delivery of a run differs only in its
# tag, redelivered flag and body, or also in its properties
_LAST_DELIVER: list[Any] = [None, -1, -1, "", "", "", b"", b"", b""]


def _deliver_parts(consumer_tag: str, exchange: str, routing_key: str) -> tuple[bytes, bytes]:
    ctag = consumer_tag.encode()
    exch = exchange.encode()
    rkey = routing_key.encode()
    if len(ctag) > 255 or len(exch) > 255 or len(rkey) > 255:
        raise ValueError("shortstr longer than 255 bytes")
    parts = (_DELIVER_ID + bytes((len(ctag),)) + ctag,
             bytes((len(exch),)) + exch + bytes((len(rkey),)) + rkey)
    if len(_DELIVER_PARTS) >= _DELIVER_PARTS_MAX:
        _DELIVER_PARTS.clear()
    _DELIVER_PARTS[(consumer_tag, exchange, routing_key)] = parts
    return parts


def _after_tag(tail: bytes, channel: int, raw_properties: bytes, size: int) -> bytes:
    """A one-body-frame delivery's bytes between its delivery tag and its body: the rest of
    the method frame (`tail`: redelivered placeholder excluded; exchange and key), the
    content header frame and the body frame's header."""
    return b"".join((
        tail,
        _END_AND_HEADER.pack(FRAME_END, FRAME_HEADER, channel, 12 + len(raw_properties),
                             60, 0, size),
        raw_properties,
        _END_AND_BODY_HDR.pack(FRAME_END, FRAME_BODY, channel, size)))


def encode_deliver(
    channel: int,
    consumer_tag: str,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    raw_properties: bytes,
    body: bytes,
    frame_max: int,
) -> bytes:
    """basic.deliver + content header + body frames, hand-encoded (the broker's hottest
    encode path; byte-for-byte equal to pamqp's output, see tests/unit/test_framing.py).
    The encoded consumer tag, exchange and routing key are kept per (tag, exchange, key),
    and all but the tag and body of the last delivery (same properties object, body size,
    channel, tag, exchange and key), so a run of alike deliveries encodes only the tag, and
    one whose properties differ only its header frame. Strings longer than 255 bytes raise
    ValueError (shortstr)."""
    size = len(body)
    last = _LAST_DELIVER
    if (last[1] == size and last[2] == channel and last[3] == consumer_tag
            and last[4] == routing_key and last[5] == exchange
            and (not frame_max or size <= frame_max - FRAME_OVERHEAD)):  # one body frame
        if last[0] is raw_properties:
            return b"".join((last[6], _U64_U8.pack(delivery_tag, 1 if redelivered else 0),
                             last[7], body, b"\xce"))
        # the same consumer, exchange, key and body size, other properties (a message_id
        # each): only the content header frame is new
        after = _after_tag(last[8], channel, raw_properties, size)
        last[0] = raw_properties
        last[7] = after
        return b"".join((last[6], _U64_U8.pack(delivery_tag, 1 if redelivered else 0),
                         after, body, b"\xce"))
    parts = _DELIVER_PARTS.get((consumer_tag, exchange, routing_key))
    if parts is None:
        parts = _deliver_parts(consumer_tag, exchange, routing_key)
    head, tail = parts
    if size and (not frame_max or size <= frame_max - FRAME_OVERHEAD):
        before = _METHOD_FRAME_HDR.pack(FRAME_METHOD, channel, len(head) + len(tail) + 9) + head
        after = _after_tag(tail, channel, raw_properties, size)
        _LAST_DELIVER[:] = (raw_properties, size, channel, consumer_tag, routing_key, exchange,
                            before, after, tail)
        return b"".join((before, _U64_U8.pack(delivery_tag, 1 if redelivered else 0), after,
                         body, b"\xce"))
    out: list[bytes | memoryview] = [
        _METHOD_FRAME_HDR.pack(FRAME_METHOD, channel, len(head) + len(tail) + 9), head,
        _U64_U8.pack(delivery_tag, 1 if redelivered else 0), tail, b"\xce"]
    out += _content_frames(channel, 60, raw_properties, body, frame_max)
    return b"".join(out)
