# Owns: adding one long-valued header to an encoded property list without decoding it (the
# x-stream-offset of a stream delivery, the x-delivery-count of a quorum queue's), and
# finding, reading and replacing one top-level header in place (a delayed message's x-delay).
# Talks to: encoding.py and framing.py, only when the fast path cannot apply.
# Must never: change any other property or header a client sent.
"""Add a header to encoded basic properties (AMQP 0-9-1 §4.2.6.1 property list, §4.2.5.5
field table) the way RabbitMQ's `rabbit_basic:add_header/4` does for the headers the broker
itself sets on a delivery: a `long` (type `l`, signed 64-bit) under the given name, replacing
a header of that name the publisher set."""

from __future__ import annotations

import struct

from broker.protocol.encoding import LongLong, encode_properties
from broker.protocol.framing import decode_properties
from broker.protocol.table_check import FIXED_SIZE

_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_FLAGS = struct.Struct(">H")


def with_long_header(raw: bytes, name: str, value: int) -> bytes:
    """Encoded properties `raw` (flags + list) with header `name` = `value` as a long.

    The field is appended to the table, or a table is inserted after content-type and
    content-encoding when there was none: the other bytes are kept as received. When the
    name's bytes already occur in `raw` (the publisher may have set the header) or a second
    flags word is present (not in 0-9-1), the properties are decoded, the header replaced
    and encoded again."""
    key = name.encode()
    flags = raw[0] << 8 | raw[1]
    if raw[1] & 1 or key in raw:
        props = decode_properties(raw)
        props.headers = {**(props.headers or {}), name: LongLong(value)}
        return encode_properties(props)
    pos = 2
    for flag in (0x8000, 0x4000):  # content-type, content-encoding come first
        if flags & flag:
            pos += 1 + raw[pos]
    field = b"".join((bytes((len(key),)), key, b"l", _I64.pack(value)))
    if flags & 0x2000:
        (size,) = _U32.unpack_from(raw, pos)
        end = pos + 4 + size
        return b"".join((raw[:pos], _U32.pack(size + len(field)), raw[pos + 4:end], field,
                         raw[end:]))
    return b"".join((_FLAGS.pack(flags | 0x2000), raw[2:pos], _U32.pack(len(field)), field,
                     raw[pos:]))


_VARIABLE = frozenset(b"SxFA")  # field types whose value is a u32 length and that many bytes


def find_header(raw: bytes, name: str) -> tuple[int, int, int, int] | None:
    """Where top-level header `name` is in encoded properties `raw`, without decoding them:
    (its type tag, where its tag byte is, where its value ends, where the table's length
    is), or None when there is no headers table, no such header, a second flags word, or a
    field type this walk does not know (the caller then decodes)."""
    flags = raw[0] << 8 | raw[1]
    if raw[1] & 1 or not flags & 0x2000:
        return None
    pos = 2
    for flag in (0x8000, 0x4000):  # content-type, content-encoding come first
        if flags & flag:
            pos += 1 + raw[pos]
    length_at = pos
    (size,) = _U32.unpack_from(raw, pos)
    pos += 4
    end = pos + size
    key = name.encode()
    while pos < end:
        klen = raw[pos]
        field = raw[pos + 1:pos + 1 + klen]
        pos += 1 + klen
        tag_at = pos
        tag = raw[pos]
        pos += 1
        fixed = FIXED_SIZE.get(tag)
        if fixed is not None:
            value_end = pos + fixed
        elif tag in _VARIABLE:
            value_end = pos + 4 + _U32.unpack_from(raw, pos)[0]
        else:
            return None
        if field == key:
            return tag, tag_at, value_end, length_at
        pos = value_end
    return None


_INTS = {ord("b"): ">b", ord("B"): ">B", ord("s"): ">h", ord("u"): ">H", ord("I"): ">i",
         ord("i"): ">I", ord("l"): ">q", ord("L"): ">Q"}
_FLOATS = {ord("f"): ">f", ord("d"): ">d"}


def header_value(raw: bytes, where: tuple[int, int, int, int]) -> int | float | bytes | None:
    """The value `find_header` found, for the types a delay may have: an integer type as
    int, float/double as float, a long string or byte array as bytes; None for others."""
    tag, tag_at, value_end, _length_at = where
    if tag in _INTS:
        return struct.unpack_from(_INTS[tag], raw, tag_at + 1)[0]  # type: ignore[no-any-return]
    if tag in _FLOATS:
        return struct.unpack_from(_FLOATS[tag], raw, tag_at + 1)[0]  # type: ignore[no-any-return]
    if tag in (ord("S"), ord("x")):
        return raw[tag_at + 5:value_end]
    return None


def replace_header(raw: bytes, where: tuple[int, int, int, int], tag: bytes,
                   value: bytes) -> bytes:
    """`raw` with the header `find_header` found set to type `tag` and encoded `value`; the
    other bytes as they were, the table's length adjusted."""
    _tag, tag_at, value_end, length_at = where
    (size,) = _U32.unpack_from(raw, length_at)
    size += 1 + len(value) - (value_end - tag_at)
    return b"".join((raw[:length_at], _U32.pack(size), raw[length_at + 4:tag_at], tag, value,
                     raw[value_end:]))
