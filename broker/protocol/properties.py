# Owns: the tolerant decoder of content-header properties (property flags + property list) and
# of the field tables / arrays inside them, plus `Timestamp`, the value of a timestamp that
# datetime cannot hold.
# Talked to by: broker/protocol/framing.py `decode_properties`, only after its fast path (pamqp
# per field) raised; broker/storage_codec.py through `decode_properties` on recovery.
# Must never: import asyncio, encode anything, or accept what RabbitMQ's parser rejects
# (truncated lists or tables, trailing bytes, unknown field type tags): those raise ValueError,
# which framing turns into 501 FRAME_ERROR.
"""Tolerant decoding of basic properties (AMQP 0-9-1 §4.2.6.1, §4.2.5.5 field tables).

RabbitMQ keeps a content header's properties as received and decodes them lazily
(rabbit_binary_parser.erl); a well-formed value it can carry is never an error. pamqp raises on
some of those values, so `framing.decode_properties` falls back to `decode_properties_tolerant`
when its fast path fails. The values are the ones pamqp produces wherever pamqp can produce one
(the tolerant path must not change what headers-exchange routing sees), and otherwise:

- a timestamp (the `timestamp` property or a 'T' field value) that pamqp cannot turn into a
  datetime (pamqp reads values above 2**32 as milliseconds; Go's zero `time.Time` is
  -62135596800 s, 0xFFFFFFF187FE2A00 as the unsigned 64-bit wire value) is a `Timestamp`,
  an int holding the unsigned 64-bit value exactly as on the wire;
- a shortstr (property or field-table key) that is not UTF-8 is a str decoded with
  errors="surrogateescape": still a str (it compares unequal to every valid name and sorts with
  other keys), and `.encode("utf-8", "surrogateescape")` gives the wire bytes back. pamqp's own
  longstr ('S') already falls back to bytes; the tolerant path keeps that.

The broker never re-encodes received properties (Message.raw_properties forwards the wire bytes
on deliver, get-ok, return and to storage), so these values need no encoder.

Field types: the tags of the errata table (rabbitmq.com/amqp-0-9-1-errata.html, section 3)
t b B s u I i l f d D S x A T F V, plus the two pamqp also reads, 'L' (signed 64-bit) and
'\\x00' (void), so the tolerant path rejects nothing the fast path accepts.
"""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any

from pamqp import commands
from pamqp import decode as pdecode

from broker.protocol.table_check import DecodeNow, check_headers

Properties = commands.Basic.Properties

_PROPERTY_SPECS = tuple(
    (name, Properties.amqp_type(name), Properties.flags[name]) for name in Properties.__slots__
)
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_DECIMAL = struct.Struct(">BI")  # scale (decimal places), unsigned 32-bit value


class Timestamp(int):
    """An AMQP timestamp that datetime cannot represent: the unsigned 64-bit count of seconds
    since the epoch exactly as received (`_U64.pack(ts)` is the wire form). A plain int
    otherwise, so the headers exchange compares it as RabbitMQ does (integer seconds)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Timestamp({int(self)})"


def _need(end: int, limit: int) -> None:
    if end > limit:
        raise ValueError("truncated")


def _text(raw: bytes) -> str:
    """A shortstr or table key: UTF-8, else surrogate-escaped (see module docstring)."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw.decode("utf-8", "surrogateescape")


def decode_timestamp(data: bytes, pos: int) -> Any:
    """The timestamp in data[pos:pos + 8]: pamqp's datetime when it has one, else Timestamp."""
    try:
        return pdecode.timestamp(data[pos : pos + 8])[1]
    except (ValueError, OverflowError, OSError):  # OSError: fromtimestamp on some platforms
        return Timestamp(_U64.unpack_from(data, pos)[0])


# tag -> (struct, python type applied to the unpacked value or None) for fixed-size values
_FIXED: dict[int, tuple[struct.Struct, Any]] = {
    ord("t"): (_U8, bool),
    ord("b"): (struct.Struct(">b"), None),
    ord("B"): (_U8, None),
    ord("s"): (struct.Struct(">h"), None),
    ord("u"): (_U16, None),
    ord("I"): (struct.Struct(">i"), None),
    ord("i"): (_U32, None),
    ord("l"): (struct.Struct(">q"), None),
    ord("L"): (struct.Struct(">q"), None),  # not in the errata; pamqp reads it as 'l'
    ord("f"): (struct.Struct(">f"), None),
    ord("d"): (struct.Struct(">d"), None),
}
_VOID = (ord("V"), 0)  # pamqp also reads a 0 tag as void


def decode_value(data: bytes, pos: int, end: int) -> tuple[Any, int]:
    """One field value (type tag + value) at data[pos:end] -> (value, position after it).
    ValueError when truncated or the tag is unknown."""
    _need(pos + 1, end)
    tag = data[pos]
    pos += 1
    fixed = _FIXED.get(tag)
    if fixed is not None:
        fmt, convert = fixed
        _need(pos + fmt.size, end)
        value = fmt.unpack_from(data, pos)[0]
        return (convert(value) if convert is not None else value), pos + fmt.size
    if tag in (0x53, 0x78):  # 'S' longstr, 'x' byte array
        _need(pos + 4, end)
        stop = pos + 4 + _U32.unpack_from(data, pos)[0]
        _need(stop, end)
        raw = data[pos + 4 : stop]
        if tag == 0x78:
            return bytearray(raw), stop
        try:
            return raw.decode(), stop
        except UnicodeDecodeError:
            return raw, stop  # pamqp's longstr fallback
    if tag == 0x46:  # 'F'
        return decode_table(data, pos, end)
    if tag == 0x41:  # 'A'
        return decode_array(data, pos, end)
    if tag == 0x54:  # 'T'
        _need(pos + 8, end)
        return decode_timestamp(data, pos), pos + 8
    if tag == 0x44:  # 'D'
        _need(pos + 5, end)
        scale, unscaled = _DECIMAL.unpack_from(data, pos)
        return Decimal(unscaled).scaleb(-scale), pos + 5
    if tag in _VOID:
        return None, pos
    raise ValueError(f"unknown field type {tag:#x}")


def decode_table(data: bytes, pos: int, end: int) -> tuple[dict[str, Any], int]:
    """A field table (u32 byte length, then key shortstr + field value pairs) at data[pos:end]
    -> (dict, position after it). Every pair must lie inside the table's length."""
    _need(pos + 4, end)
    stop = pos + 4 + _U32.unpack_from(data, pos)[0]
    _need(stop, end)
    pos += 4
    table = {}
    while pos < stop:
        key_end = pos + 1 + data[pos]
        _need(key_end, stop)
        key = _text(data[pos + 1 : key_end])
        value, pos = decode_value(data, key_end, stop)
        table[key] = value
    return table, stop


def decode_array(data: bytes, pos: int, end: int) -> tuple[list[Any], int]:
    """A field array (u32 byte length, then field values) at data[pos:end] -> (list, end)."""
    _need(pos + 4, end)
    stop = pos + 4 + _U32.unpack_from(data, pos)[0]
    _need(stop, end)
    pos += 4
    array = []
    while pos < stop:
        value, pos = decode_value(data, pos, stop)
        array.append(value)
    return array, stop


def read_property_flags(raw: bytes) -> tuple[int, int]:
    """The property flags (16-bit words, bit 0 set = another word follows; AMQP 0-9-1
    §4.2.6.1) as one int, and the offset of the property list. Raises ValueError when the
    flags are truncated."""
    flags = 0
    pos = 0
    word = 0
    end = len(raw)
    while True:
        _need(pos + 2, end)
        partial = _U16.unpack_from(raw, pos)[0]
        pos += 2
        flags |= partial << (16 * word)
        word += 1
        if not partial & 1:
            return flags, pos


def decode_properties_tolerant(raw: bytes) -> Properties:
    """Property flags + property list -> Basic.Properties, never raising on a value that is
    well-formed on the wire (see the module docstring for the values chosen).

    Raises ValueError (or RecursionError for hostile nesting) when the flags or the list are
    truncated, bytes are left over, or a field table holds an unknown type tag.
    """
    end = len(raw)
    flags, pos = read_property_flags(raw)
    props = Properties()
    for name, amqp_type, flag in _PROPERTY_SPECS:
        if not flags & flag:
            continue
        value: Any
        if amqp_type == "shortstr":
            _need(pos + 1, end)
            stop = pos + 1 + raw[pos]
            _need(stop, end)
            value = _text(raw[pos + 1 : stop])
            pos = stop
        elif amqp_type == "octet":
            _need(pos + 1, end)
            value = raw[pos]
            pos += 1
        elif amqp_type == "table":
            value, pos = decode_table(raw, pos, end)
        elif amqp_type == "timestamp":
            _need(pos + 8, end)
            value = decode_timestamp(raw, pos)
            pos += 8
        else:  # pragma: no cover - Basic.Properties has only the four types above
            raise ValueError(f"property type {amqp_type}")
        setattr(props, name, value)
    if pos != end:
        raise ValueError("trailing bytes")
    return props


# (delivery_mode, priority, expiration, user_id, reply_to): the properties the broker itself
# reads while routing and queueing a message; None where absent
HotFields = tuple[Any, Any, Any, Any, Any]

_NO_HOT: HotFields = (None, None, None, None, None)
_HEADERS_FLAG = Properties.flags["headers"]


def _shortstr(raw: bytes, pos: int) -> tuple[str, int]:
    """The shortstr at raw[pos] (UTF-8, else surrogate-escaped) and the offset after it; an
    overrun is caught by the caller's final length check."""
    stop = pos + 1 + raw[pos]
    return _text(raw[pos + 1 : stop]), stop


def scan_properties(raw: bytes) -> HotFields | None:
    """The broker's hot properties from property flags + property list without building a
    `Basic.Properties`: (delivery_mode, priority, expiration, user_id, reply_to). RabbitMQ's
    channel decodes the list of every publish (rabbit_binary_parser) and refuses a malformed
    one; this broker checks it and keeps it encoded (Message decodes it on first use).

    A `headers` table is checked (broker/protocol/table_check.py), not decoded. Returns None
    when the caller must decode the list at once: the table holds a top-level `CC` or `BCC`
    key (sender-selected distribution routes by them and strips BCC) or nests past 32
    levels. Otherwise the whole list is checked as `decode_properties_tolerant` checks it
    (every length inside the list, no bytes left over; shortstrs need not be UTF-8,
    timestamps may be anything), and ValueError is raised exactly when that decoder would
    raise. About 0.3 µs for a typical list (bench/micro/
    codec.py) against 1.4 µs for the full decode; about 1 µs for a Celery task's headers
    (a learnt layout; 4-5 µs walked) against 25 µs to decode them.
    """
    try:
        if raw[1] & 1:  # a second flags word: properties beyond the 14 of 0-9-1
            flags, pos = read_property_flags(raw)
        else:
            flags = raw[0] << 8 | raw[1]
            pos = 2
        if not flags:
            if len(raw) != 2:
                raise ValueError("trailing bytes")
            return _NO_HOT
        delivery_mode = priority = expiration = user_id = reply_to = None
        if flags & 0x8000:  # content_type
            pos += 1 + raw[pos]
        if flags & 0x4000:  # content_encoding
            pos += 1 + raw[pos]
        if flags & _HEADERS_FLAG:
            try:
                pos = check_headers(raw, pos, len(raw))
            except DecodeNow:  # a CC or BCC key, or deep nesting
                return None
        if flags & 0x1000:
            delivery_mode = raw[pos]
            pos += 1
        if flags & 0x0800:
            priority = raw[pos]
            pos += 1
        if flags & 0x0400:  # correlation_id
            pos += 1 + raw[pos]
        if flags & 0x0200:
            reply_to, pos = _shortstr(raw, pos)
        if flags & 0x0100:
            expiration, pos = _shortstr(raw, pos)
        if flags & 0x0080:  # message_id
            pos += 1 + raw[pos]
        if flags & 0x0040:  # timestamp
            pos += 8
        if flags & 0x0020:  # type
            pos += 1 + raw[pos]
        if flags & 0x0010:
            user_id, pos = _shortstr(raw, pos)
        if flags & 0x0008:  # app_id
            pos += 1 + raw[pos]
        if flags & 0x0004:  # cluster_id
            pos += 1 + raw[pos]
    except IndexError:
        raise ValueError("truncated") from None
    if pos != len(raw):
        raise ValueError("truncated" if pos > len(raw) else "trailing bytes")
    return delivery_mode, priority, expiration, user_id, reply_to


def hot_fields(props: Properties) -> HotFields:
    """The same five fields from decoded properties."""
    return props.delivery_mode, props.priority, props.expiration, props.user_id, props.reply_to
