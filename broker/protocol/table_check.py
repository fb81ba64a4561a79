# Owns: checking an encoded field table (a message's headers) without decoding it, and the
# cache of table shapes that makes a repeated shape cost one regular-expression match.
# Talked to by: broker/protocol/properties.py `scan_properties`, on every publish that carries
# a headers table.
# Must never: accept what `properties.decode_table` refuses, decode values, or grow without
# bound (every cache here is capped and cleared when full).
"""Field tables checked, not decoded (AMQP 0-9-1 §4.2.5.5; issue 26).

RabbitMQ's channel decodes a publish's properties (rabbit_binary_parser) and refuses a
malformed list; this broker keeps them encoded and only checks them: `check_headers` walks
the table's lengths and type tags and raises ValueError exactly where the decoder would.

Publishers repeat their header layout: a Celery task message has the same keys, types and
string lengths every time, only the task id's characters differ. After the same layout (its
keys, type tags and every length field, with the table's own length) has been seen twice,
it is compiled into a regular expression of literal structure bytes and `.{n}` gaps for
values, and a table of that length that matches it is valid without a walk: about 0.6 µs
against 4-5 µs for the Celery table. A match implies the walk's result, because the walk's
every decision reads only bytes the pattern holds literally; a table that does not match is
walked as usual. Layouts are learnt only for tables of at most `MAX_SEGMENTS` pieces, so a
peer cannot make the broker compile large patterns.
"""

from __future__ import annotations

import re
import struct

_U32 = struct.Struct(">I")

# field type tag -> size in bytes of the values of fixed size (the tags `decode_value` reads)
_FIXED_SIZE = {ord(tag): size for tag, size in (
    ("t", 1), ("b", 1), ("B", 1), ("s", 2), ("u", 2), ("I", 4), ("i", 4), ("f", 4),
    ("l", 8), ("L", 8), ("d", 8), ("T", 8), ("D", 5), ("V", 0), ("\x00", 0))}
FIXED_SIZE = _FIXED_SIZE  # public: broker/protocol/header_edit.py walks tables with it
# tables and arrays nested deeper than this are left to the full decoder (which refuses
# hostile nesting with RecursionError → 501): the walk then accepts nothing it would refuse
MAX_SKIP_DEPTH = 32
# sender-selected distribution's keys (rabbitmq.com/sender-selected.html): a top-level CC or
# BCC changes routing, so such a table is decoded at once
_SELECTED_KEYS = (b"CC", b"BCC")
MAX_SEGMENTS = 128  # literal pieces and gaps of a layout that may be learnt
_CAP = 256  # entries of each cache below before it is cleared

_patterns: dict[int, re.Pattern[bytes]] = {}  # table length (bytes) -> its learnt layout
_pending: dict[int, tuple[bytes | int, ...]] = {}  # table length -> the last layout seen once
_seen: set[int] = set()  # table lengths seen once


class DecodeNow(ValueError):  # noqa: N818 - a signal, not an error
    """Not an error: the table nests past MAX_SKIP_DEPTH or holds a top-level CC/BCC key,
    so the caller decodes the properties in full instead."""


def check_headers(data: bytes, pos: int, end: int) -> int:
    """Check the headers table at data[pos:end]: the position after it. Raises ValueError
    where `properties.decode_table` would (truncated, a pair past the table's length, an
    unknown field type tag), DecodeNow (a ValueError) where the caller must decode it."""
    if pos + 4 > end:
        raise ValueError("truncated")
    size: int = 4 + _U32.unpack_from(data, pos)[0]
    stop = pos + size
    if stop > end:
        raise ValueError("truncated")
    pattern = _patterns.get(size)
    if pattern is not None and pattern.fullmatch(data, pos, stop) is not None:
        return stop
    if size in _seen:  # a length seen before: note the layout, to learn it if it repeats
        layout: list[bytes | int] = []
        _walk(data, pos, end, 0, True, layout)
        _learn(size, layout)
    else:
        _walk(data, pos, end, 0, True, None)
        if len(_seen) >= _CAP * 4:
            _seen.clear()
        _seen.add(size)
    return stop


def learnt_layout(data: bytes, pos: int, stop: int) -> bytes | None:
    """The regular expression (source, without flags; it wants DOTALL) of the learnt layout
    of the table at data[pos:stop] when one is learnt for its length and the table matches
    it, else None. `publish_template` embeds it in a whole-publish template."""
    pattern = _patterns.get(stop - pos)
    if pattern is None or pattern.fullmatch(data, pos, stop) is None:
        return None
    return pattern.pattern[4:]  # without the leading (?s)


def _learn(size: int, layout: list[bytes | int]) -> None:
    """A layout walked for a table of `size` bytes: compiled once it came twice running."""
    if len(layout) > MAX_SEGMENTS:
        return
    key = tuple(layout)
    if _pending.get(size) != key:
        if len(_pending) >= _CAP:
            _pending.clear()
        _pending[size] = key
        return
    if len(_patterns) >= _CAP:
        _patterns.clear()
    _patterns[size] = re.compile(b"(?s)" + b"".join(
        re.escape(piece) if isinstance(piece, bytes) else b".{%d}" % piece
        for piece in layout if piece != 0))


def _walk(data: bytes, pos: int, end: int, depth: int, keyed: bool,
          layout: list[bytes | int] | None) -> int:
    """Walk the table (`keyed`) or array at data[pos:end] without decoding it: the position
    after it. With `layout`, append its structure: the bytes every decision reads (lengths,
    keys, type tags) and, as ints, the sizes of the value bytes between them."""
    if pos + 4 > end:
        raise ValueError("truncated")
    stop: int = pos + 4 + _U32.unpack_from(data, pos)[0]
    if stop > end:
        raise ValueError("truncated")
    if layout is not None:
        layout.append(data[pos:pos + 4])
    pos += 4
    fixed = _FIXED_SIZE
    while pos < stop:
        start = pos
        if keyed:
            pos += 1 + data[pos]  # the key shortstr
            if pos >= stop:
                raise ValueError("truncated")
            if depth == 0 and data[start + 1:pos] in _SELECTED_KEYS:
                raise DecodeNow("CC or BCC")
        tag = data[pos]
        pos += 1
        size = fixed.get(tag)
        if size is not None:
            if layout is not None:
                layout.append(data[start:pos])
                layout.append(size)
            pos += size
        elif tag == 0x53 or tag == 0x78:  # 'S' longstr, 'x' byte array
            if pos + 4 > stop:
                raise ValueError("truncated")
            n = _U32.unpack_from(data, pos)[0]
            if layout is not None:
                layout.append(data[start:pos + 4])
                layout.append(n)
            pos += 4 + n
        elif tag == 0x46 or tag == 0x41:  # 'F' table, 'A' array
            if depth >= MAX_SKIP_DEPTH:
                raise DecodeNow("nested too deep to walk")
            if layout is not None:
                layout.append(data[start:pos])
            pos = _walk(data, pos, stop, depth + 1, tag == 0x46, layout)
        else:
            raise ValueError(f"unknown field type {tag:#x}")
        if pos > stop:
            raise ValueError("truncated")
    return stop
