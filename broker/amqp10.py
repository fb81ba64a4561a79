"""AMQP 1.0's type system and message sections, as far as a stream entry needs them
(issue 37 item 3: stream entries are AMQP 1.0 messages, as RabbitMQ stores them).

Owns: encoding and decoding AMQP 1.0 values (OASIS AMQP 1.0 part 1, "Types") and splitting a
bare message into its sections (part 3 §3.2). No I/O, no broker imports.
Must never: lose a value's AMQP type on a round trip (a symbol stays a symbol, a ubyte a
ubyte): values are `(type, value)` pairs, as rabbit_msg_record keeps `{Type, Value}`.

Values: ("null", None), ("boolean", bool), ("ubyte"|"ushort"|"uint"|"ulong"|"byte"|"short"
|"int"|"long", int), ("float"|"double", float), ("timestamp", ms), ("uuid", 16 bytes),
("binary", bytes), ("utf8"|"symbol", str), ("char", str), ("decimal32"|"decimal64"|
"decimal128", raw bytes), ("list", [value]), ("map", [(value, value)]), ("array",
(element type, [python value])), ("described", (descriptor value, value)).

Errors: `DecodeError` for bytes that are not AMQP 1.0 (unknown constructor, short data).
"""

from __future__ import annotations

import struct
from typing import Any

Value = tuple[str, Any]


class DecodeError(ValueError):
    """Bytes that do not decode as AMQP 1.0 values or sections."""


# section descriptors (smallulong codes, part 3 §3.2)
HEADER = 0x70
DELIVERY_ANNOTATIONS = 0x71
MESSAGE_ANNOTATIONS = 0x72
PROPERTIES = 0x73
APPLICATION_PROPERTIES = 0x74
DATA = 0x75
AMQP_SEQUENCE = 0x76
AMQP_VALUE = 0x77
FOOTER = 0x78

PROPERTY_FIELDS = ("message_id", "user_id", "to", "subject", "reply_to", "correlation_id",
                   "content_type", "content_encoding", "absolute_expiry_time",
                   "creation_time", "group_id", "group_sequence", "reply_to_group_id")

_FIXED: dict[int, tuple[str, struct.Struct]] = {
    0x50: ("ubyte", struct.Struct(">B")), 0x60: ("ushort", struct.Struct(">H")),
    0x70: ("uint", struct.Struct(">I")), 0x52: ("uint", struct.Struct(">B")),
    0x80: ("ulong", struct.Struct(">Q")), 0x53: ("ulong", struct.Struct(">B")),
    0x51: ("byte", struct.Struct(">b")), 0x61: ("short", struct.Struct(">h")),
    0x71: ("int", struct.Struct(">i")), 0x54: ("int", struct.Struct(">b")),
    0x81: ("long", struct.Struct(">q")), 0x55: ("long", struct.Struct(">b")),
    0x72: ("float", struct.Struct(">f")), 0x82: ("double", struct.Struct(">d")),
    0x83: ("timestamp", struct.Struct(">q")),
}
_B = struct.Struct(">B")
_I = struct.Struct(">I")


# -- decoding ---------------------------------------------------------------------------------
def decode(data: bytes | memoryview, pos: int = 0) -> tuple[Value, int]:
    """The value at `pos` and the position after it. Raises DecodeError."""
    try:
        return _decode(data, pos)
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise DecodeError(f"bad AMQP 1.0 value at byte {pos}: {exc}") from None


def _decode(d: bytes | memoryview, p: int) -> tuple[Value, int]:
    return _body(d, d[p], p + 1)


def _body(d: bytes | memoryview, c: int, p: int) -> tuple[Value, int]:
    """The value of constructor `c` whose bytes start at `p` (arrays share one
    constructor among their elements)."""
    if c == 0x00:
        desc, p = _decode(d, p)
        val, p = _decode(d, p)
        return ("described", (desc, val)), p
    fixed = _FIXED.get(c)
    if fixed is not None:
        name, s = fixed
        if p + s.size > len(d):
            raise DecodeError(f"{name} cut short at byte {p}")
        return (name, s.unpack_from(d, p)[0]), p + s.size
    if c == 0x40:
        return ("null", None), p
    if c == 0x41:
        return ("boolean", True), p
    if c == 0x42:
        return ("boolean", False), p
    if c == 0x56:
        return ("boolean", d[p] != 0), p + 1
    if c == 0x43:
        return ("uint", 0), p
    if c == 0x44:
        return ("ulong", 0), p
    if c == 0x45:
        return ("list", []), p
    if c == 0x98:
        return ("uuid", _take(d, p, 16)), p + 16
    if c == 0x73:
        return ("char", chr(_I.unpack_from(d, p)[0])), p + 4
    if c in _DECIMALS:
        name, n = _DECIMALS[c]
        return (name, _take(d, p, n)), p + n
    if c in (0xA0, 0xA1, 0xA3, 0xB0, 0xB1, 0xB3):
        if c & 0x10:
            n, p = _I.unpack_from(d, p)[0], p + 4
        else:
            n, p = d[p], p + 1
        raw = _take(d, p, n)
        kind = c & 0x0F
        if kind == 0:
            return ("binary", raw), p + n
        return ("utf8" if kind == 1 else "symbol", raw.decode()), p + n
    if c in (0xC0, 0xD0, 0xC1, 0xD1):
        if c & 0x10:
            size, count = _I.unpack_from(d, p)[0], _I.unpack_from(d, p + 4)[0]
            p += 8
            end = p + size - 4
        else:
            size, count = d[p], d[p + 1]
            p += 2
            end = p + size - 1
        if end > len(d):
            raise DecodeError(f"compound of {size} bytes past the data")
        items = []
        for _ in range(count):
            v, p = _decode(d, p)
            items.append(v)
        if c in (0xC1, 0xD1):
            if count % 2:
                raise DecodeError("map with an odd number of items")
            return ("map", list(zip(items[::2], items[1::2], strict=True))), p
        return ("list", items), p
    if c in (0xE0, 0xF0):
        if c & 0x10:
            count = _I.unpack_from(d, p + 4)[0]
            p += 8
        else:
            count = d[p + 1]
            p += 2
        ctor = d[p]
        p += 1
        out = []
        name = "unknown"
        for _ in range(count):
            (name, v), p = _body(d, ctor, p)
            out.append(v)
        return ("array", (name if count else _CTOR_NAMES.get(ctor, "unknown"), out)), p
    raise DecodeError(f"unknown AMQP 1.0 constructor {c:#04x} at byte {p - 1}")


_DECIMALS = {0x74: ("decimal32", 4), 0x84: ("decimal64", 8), 0x94: ("decimal128", 16)}
_CTOR_NAMES = {**{c: n for c, (n, _s) in _FIXED.items()}, 0x40: "null", 0x56: "boolean",
               0x98: "uuid", 0xA0: "binary", 0xB0: "binary", 0xA1: "utf8", 0xB1: "utf8",
               0xA3: "symbol", 0xB3: "symbol"}


def _take(d: bytes | memoryview, p: int, n: int) -> bytes:
    if p + n > len(d):
        raise DecodeError(f"{n} bytes wanted at {p}, data has {len(d)}")
    return bytes(d[p:p + n])


# -- encoding ---------------------------------------------------------------------------------
_ENC_FIXED = {"ubyte": (0x50, ">B"), "ushort": (0x60, ">H"), "uint": (0x70, ">I"),
              "ulong": (0x80, ">Q"), "byte": (0x51, ">b"), "short": (0x61, ">h"),
              "int": (0x71, ">i"), "long": (0x81, ">q"), "float": (0x72, ">f"),
              "double": (0x82, ">d"), "timestamp": (0x83, ">q")}
_ELEMENT = {"boolean": 0x56, "uuid": 0x98, "binary": 0xB0, "utf8": 0xB1, "symbol": 0xB3,
            "null": 0x40}


def encode(v: Value) -> bytes:
    """The bytes of a `(type, value)` pair (the smallest encoding for variable widths and
    small integers). Raises ValueError for an unknown type."""
    t, x = v
    if t in _ENC_FIXED:
        code, fmt = _ENC_FIXED[t]
        if t == "uint" and 0 <= x <= 255:
            return b"\x43" if x == 0 else bytes((0x52, x))
        if t == "ulong" and 0 <= x <= 255:
            return b"\x44" if x == 0 else bytes((0x53, x))
        if t == "int" and -128 <= x <= 127:
            return struct.pack(">Bb", 0x54, x)
        if t == "long" and -128 <= x <= 127:
            return struct.pack(">Bb", 0x55, x)
        return bytes((code,)) + struct.pack(fmt, x)
    if t == "null":
        return b"\x40"
    if t == "boolean":
        return b"\x41" if x else b"\x42"
    if t in ("binary", "utf8", "symbol"):
        raw = x if t == "binary" else x.encode()
        kind = {"binary": 0, "utf8": 1, "symbol": 3}[t]
        if len(raw) < 256:
            return bytes((0xA0 | kind, len(raw))) + raw
        return bytes((0xB0 | kind,)) + _I.pack(len(raw)) + raw
    if t == "uuid":
        return b"\x98" + bytes(x)
    if t == "char":
        return b"\x73" + _I.pack(ord(x))
    if t in ("decimal32", "decimal64", "decimal128"):
        return bytes(({"decimal32": 0x74, "decimal64": 0x84, "decimal128": 0x94}[t],)) + x
    if t == "described":
        desc, val = x
        return b"\x00" + encode(desc) + encode(val)
    if t == "list":
        if not x:
            return b"\x45"
        return _compound(0xC0, 0xD0, b"".join(map(encode, x)), len(x))
    if t == "map":
        body = b"".join(encode(k) + encode(val) for k, val in x)
        return _compound(0xC1, 0xD1, body, 2 * len(x))
    if t == "array":
        elem, items = x
        return _array(elem, items)
    raise ValueError(f"cannot encode AMQP 1.0 type {t!r}")


def _compound(small: int, large: int, body: bytes, count: int) -> bytes:
    if len(body) + 1 < 256 and count < 256:
        return bytes((small, len(body) + 1, count)) + body
    return bytes((large,)) + _I.pack(len(body) + 4) + _I.pack(count) + body


def _array(elem: str, items: list) -> bytes:
    if elem in _ENC_FIXED:
        code, fmt = _ENC_FIXED[elem]
        body = bytes((code,)) + b"".join(struct.pack(fmt, i) for i in items)
    elif elem in ("binary", "utf8", "symbol"):
        body = bytes((_ELEMENT[elem],)) + b"".join(
            _I.pack(len(r)) + r for r in (i if elem == "binary" else i.encode() for i in items))
    elif elem == "boolean":
        body = b"\x56" + bytes(1 if i else 0 for i in items)
    elif elem == "uuid":
        body = b"\x98" + b"".join(items)
    else:
        raise ValueError(f"cannot encode an array of {elem!r}")
    return b"\xf0" + _I.pack(len(body) + 4) + _I.pack(len(items)) + body


# -- messages ---------------------------------------------------------------------------------
def section(code: int, value: Value) -> bytes:
    """One message section: the described value with descriptor smallulong `code`."""
    return b"\x00\x53" + bytes((code,)) + encode(value)


def sections(data: bytes | memoryview) -> list[tuple[int, Value]]:
    """The sections of a bare (or annotated) message: [(descriptor code, value)]. A
    descriptor given as a symbol (amqp:data:binary …) is mapped to its code. Raises
    DecodeError for bytes that are not a sequence of described sections."""
    out = []
    p = 0
    n = len(data)
    while p < n:
        v, p = decode(data, p)
        if v[0] != "described":
            raise DecodeError(f"a message section must be described, not {v[0]}")
        desc, val = v[1]
        code = desc[1] if desc[0] == "ulong" else _SYMBOLIC.get(desc[1])
        if code is None:
            raise DecodeError(f"unknown section descriptor {desc!r}")
        out.append((code, val))
    return out


_SYMBOLIC = {"amqp:header:list": HEADER, "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
             "amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
             "amqp:properties:list": PROPERTIES,
             "amqp:application-properties:map": APPLICATION_PROPERTIES,
             "amqp:data:binary": DATA, "amqp:amqp-sequence:list": AMQP_SEQUENCE,
             "amqp:amqp-value:*": AMQP_VALUE, "amqp:footer:map": FOOTER}
