"""The stream log format of releases before issue 37, read once to convert it (issue 37 item
3: "streams written by the previous release are converted at first start").

Owns: reading that format; nothing writes it any more. broker/stream/log.py calls
`convert` when it opens a directory whose segments are in it.
Must never: delete the old files before the new ones are complete and fsynced.

The old layout (integers big-endian):
    <dir>/<FIRST:020d>.segment   Chunk = Magic "STRC" | Version:u8 (1) | Entries:u32
        | FirstOffset:u64 | Timestamp:u64 (ms) | DataSize:u32 | CRC32:u32 | Data,
        Data = Entries × (Size:u32 | Entry)
    <dir>/<FIRST:020d>.index     FirstOffset:u64 | Timestamp:u64 | Position:u64 | Entries:u32
An entry was ExchangeLen:u8 | Exchange | KeyLen:u8 | RoutingKey | PropsLen:u32 | encoded
0-9-1 properties | Body.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable, Iterator

MAGIC = b"STRC"
_CHUNK = struct.Struct(">4sBIQQII")
_SIZE = struct.Struct(">I")


def finish_interrupted(directory: str) -> None:
    """Complete a conversion a crash interrupted: between the two renames (only `.v1` and
    a complete `.v2` exist) the new directory takes its name; after them the old copy goes;
    before them the partial `.v2` goes and the conversion runs again."""
    base = directory.rstrip("/")
    old, new = base + ".v1", base + ".v2"
    if not os.path.exists(base) and os.path.isdir(new):
        os.rename(new, base)
    for leftover in (old, new):
        if os.path.isdir(leftover):
            for name in os.listdir(leftover):
                os.unlink(os.path.join(leftover, name))
            os.rmdir(leftover)


def is_v1(directory: str) -> bool:
    """True when `directory` holds a segment in the old format."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return False
    for name in names:
        if name.endswith(".segment"):
            with open(os.path.join(directory, name), "rb") as f:
                head = f.read(4)
            if head == MAGIC:
                return True
    return False


def chunks(directory: str) -> Iterator[tuple[int, int, list[bytes]]]:
    """(first offset, timestamp ms, entries) of every intact chunk, oldest first; a torn or
    corrupt chunk ends its segment (as the old recovery truncated it)."""
    firsts = sorted(int(n.split(".")[0]) for n in os.listdir(directory)
                    if n.endswith(".segment"))
    for first in firsts:
        with open(os.path.join(directory, f"{first:020d}.segment"), "rb") as f:
            data = f.read()
        pos = 0
        while pos + _CHUNK.size <= len(data):
            magic, version, n, chunk_first, ts, size, crc = _CHUNK.unpack_from(data, pos)
            end = pos + _CHUNK.size + size
            if magic != MAGIC or version != 1 or end > len(data):
                break
            body = data[pos + _CHUNK.size:end]
            if zlib.crc32(body) != crc:
                break
            entries, i = [], 0
            for _ in range(n):
                (length,) = _SIZE.unpack_from(body, i)
                entries.append(body[i + 4:i + 4 + length])
                i += 4 + length
            yield chunk_first, ts, entries
            pos = end


def entry_parts(entry: bytes) -> tuple[str, str, bytes, bytes]:
    """(exchange, routing key, encoded properties, body) of an old entry."""
    i = entry[0] + 1
    exchange = entry[1:i].decode()
    j = i + 1 + entry[i]
    routing_key = entry[i + 1:j].decode()
    (n,) = _SIZE.unpack_from(entry, j)
    return exchange, routing_key, entry[j + 4:j + 4 + n], entry[j + 4 + n:]


def convert(directory: str,
            write: Callable[[str, list[tuple[int, int, list[bytes]]], int], None],
            convert_entry: Callable[[bytes], bytes]) -> int:
    """Convert the old log in `directory`: `write(new_dir, chunks, start)` writes the new
    format into a sibling directory from [(first, timestamp, converted entries)], its one
    segment starting at offset `start` (the first chunk's, or the old last segment's when
    retention left no chunk, so that offsets go on where they were); then the old
    directory is moved aside and the new one takes its name, the old one is removed.
    Returns the chunks converted. A crash at any point leaves a state
    `finish_interrupted` completes (the new directory is fsynced before the renames)."""
    todo = [(first, ts, [convert_entry(e) for e in entries])
            for first, ts, entries in chunks(directory)]
    firsts = sorted(int(n.split(".")[0]) for n in os.listdir(directory)
                    if n.endswith(".segment"))
    start = todo[0][0] if todo else (firsts[-1] if firsts else 0)
    new = directory.rstrip("/") + ".v2"
    old = directory.rstrip("/") + ".v1"
    if os.path.exists(new):
        for name in os.listdir(new):
            os.unlink(os.path.join(new, name))
    else:
        os.makedirs(new)
    write(new, todo, start)
    os.rename(directory, old)
    os.rename(new, directory)
    parent = os.open(os.path.dirname(directory.rstrip("/")) or ".", os.O_RDONLY)
    try:
        os.fsync(parent)
    finally:
        os.close(parent)
    for name in os.listdir(old):
        os.unlink(os.path.join(old, name))
    os.rmdir(old)
    return len(todo)
