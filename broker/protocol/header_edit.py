# Owns: adding one long-valued header to an encoded property list without decoding it (the
# x-stream-offset of a stream delivery, the x-delivery-count of a quorum queue's).
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
