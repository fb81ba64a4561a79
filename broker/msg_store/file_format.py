"""Byte format of message-store files (`<N>.rdq`), after RabbitMQ's `rabbit_msg_file.erl`.

Owns: encoding one record, scanning a file, spotting a torn tail. Used by `store.py` and
`gc.py`; never keeps state and never decides what is live (that is the store index's job).

Record (integers big-endian):

    Size:u64 | MsgId:16 bytes | Body:(Size - 16) bytes | 0xFF

Total on disk = Size + 9 bytes. Records are appended back to back from offset 0; there is no
file header. A file is valid up to the first record that runs past EOF, has Size < 16
(a zeroed tail reads as Size 0), or whose trailing byte is not 0xFF: that record and
everything after it is a torn tail, which recovery truncates (and logs the offset).

Durability: a record is durable once the bytes were written *and* the file was fsynced; the
store reports `msg_on_disk` only after that fsync.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

SIZE_BYTES = 8  # the u64 Size field
MSG_ID_BYTES = 16
TRAILER = 0xFF
OVERHEAD = SIZE_BYTES + MSG_ID_BYTES + 1  # bytes on disk beyond the body: 25
_SIZE = struct.Struct(">Q")


def encode_record(msg_id: bytes, body: bytes) -> bytes:
    """One record for `body` under the 16-byte `msg_id`; len = len(body) + 25."""
    if len(msg_id) != MSG_ID_BYTES:
        raise ValueError(f"msg_id must be {MSG_ID_BYTES} bytes, got {len(msg_id)}")
    return b"".join((_SIZE.pack(MSG_ID_BYTES + len(body)), msg_id, body, b"\xff"))


def record_total_size(body_len: int) -> int:
    """Bytes on disk for a body of `body_len` bytes (Size + 9)."""
    return body_len + OVERHEAD


def body_of(record: bytes | memoryview) -> bytes:
    """The body of one whole record (as read at its offset, `total_size` bytes long)."""
    return bytes(record[SIZE_BYTES + MSG_ID_BYTES : -1])


@dataclass(frozen=True, slots=True)
class ScannedRecord:
    """A whole, well-formed record found by `scan`: offset and total_size in bytes."""

    msg_id: bytes
    offset: int
    total_size: int


def scan_bytes(data: bytes | memoryview) -> tuple[list[ScannedRecord], int]:
    """Parse every well-formed record in `data`; returns (records, valid_end).

    valid_end is the offset of the first torn/zeroed record (== len(data) when the file is
    whole); bytes from there on are not records.
    """
    records: list[ScannedRecord] = []
    pos = 0
    end = len(data)
    while pos + SIZE_BYTES <= end:
        (size,) = _SIZE.unpack_from(data, pos)
        total = size + SIZE_BYTES + 1
        if size < MSG_ID_BYTES or pos + total > end or data[pos + total - 1] != TRAILER:
            break
        msg_id = bytes(data[pos + SIZE_BYTES : pos + SIZE_BYTES + MSG_ID_BYTES])
        records.append(ScannedRecord(msg_id, pos, total))
        pos += total
    return records, pos


def scan_file(path: str) -> tuple[list[ScannedRecord], int, int]:
    """Scan the file at `path`; returns (records, valid_end, file_size) in bytes."""
    with open(path, "rb") as f:
        data = f.read()
    records, valid_end = scan_bytes(data)
    return records, valid_end, len(data)


def iter_records(path: str) -> Iterator[tuple[ScannedRecord, bytes]]:
    """(record, body) for each well-formed record of `path`, in file order (used by GC)."""
    with open(path, "rb") as f:
        data = f.read()
    records, _ = scan_bytes(data)
    view = memoryview(data)
    for rec in records:
        yield rec, body_of(view[rec.offset : rec.offset + rec.total_size])


def file_name(file_num: int) -> str:
    """`<N>.rdq`."""
    return f"{file_num}.rdq"


def list_files(directory: str) -> list[int]:
    """Numbers of the `.rdq` files in `directory`, ascending."""
    nums = []
    for name in os.listdir(directory):
        stem, dot, ext = name.partition(".")
        if dot and ext == "rdq" and stem.isdigit():
            nums.append(int(stem))
    return sorted(nums)
