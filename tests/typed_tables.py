"""A typed reader of AMQP 0-9-1 field tables for tests that check the type tag of every
field (pika and pamqp decode values and drop the tags): RabbitMQ's field types, including
its `x` (byte array) and unsigned variants."""

from __future__ import annotations

import struct
from typing import Any


def typed_table(data: bytes) -> list[tuple[str, str, Any]]:
    """The entries of an encoded table (without its length) as (name, type tag, value);
    tables and arrays nest as lists of the same shape."""
    out = []
    pos = 0
    while pos < len(data):
        n = data[pos]
        name = data[pos + 1:pos + 1 + n].decode()
        tag, value, pos = _typed_value(data, pos + 1 + n)
        out.append((name, tag, value))
    return out


_FIXED = {"t": ">?", "b": ">b", "B": ">B", "s": ">h", "u": ">H", "I": ">i", "i": ">I",
          "l": ">q", "L": ">Q", "T": ">Q", "f": ">f", "d": ">d"}


def _typed_value(data: bytes, pos: int) -> tuple[str, Any, int]:
    tag = chr(data[pos])
    pos += 1
    if tag in _FIXED:
        fmt = _FIXED[tag]
        return tag, struct.unpack_from(fmt, data, pos)[0], pos + struct.calcsize(fmt)
    if tag == "V":
        return tag, None, pos
    (n,) = struct.unpack_from(">I", data, pos)
    chunk = data[pos + 4:pos + 4 + n]
    if tag in ("S", "x"):
        return tag, chunk, pos + 4 + n
    if tag == "F":
        return tag, typed_table(chunk), pos + 4 + n
    assert tag == "A", tag
    items = []
    p = 0
    while p < len(chunk):
        t, v, p = _typed_value(chunk, p)
        items.append((t, v))
    return tag, items, pos + 4 + n


def plain(entries: list[tuple[str, str, Any]]) -> dict[str, Any]:
    """A typed table's values without the tags (as a client library decodes them)."""
    def value(tag: str, v: Any) -> Any:
        if tag == "F":
            return plain(v)
        if tag == "A":
            return [value(t, x) for t, x in v]
        return v.decode() if tag == "S" else v
    return {name: value(tag, v) for name, tag, v in entries}


def longstrs(*items: str) -> list[tuple[str, bytes]]:
    """An array's items, all longstr."""
    return [("S", s.encode()) for s in items]
