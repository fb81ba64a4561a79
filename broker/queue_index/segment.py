"""Byte format of queue index segment files (`<N>.idx`), after RabbitMQ's v1
`rabbit_queue_index.erl` segment records, framed in checksummed blocks.

Owns: encoding one fold's worth of entries for a segment and loading a segment file.
`index.QueueIndex` decides what to append; this module keeps no state.

Segment N holds seq ids [N * 16384, (N + 1) * 16384) (`SEGMENT_ENTRY_COUNT`); an entry names
its seq id relative to the segment start (RelSeq, 14 bits). The file is a sequence of blocks,
one per journal fold, all integers big-endian:

    Block:   BlockLen:u32 | CRC32:u32 (of Entries) | Entries:BlockLen bytes
    Entries, RabbitMQ's v1 segment records:
      publish          1:1 | IsPersistent:1 | RelSeq:14 | MsgId:16 | Expiry:u64 (µs, 0 = none)
                       | Size:u32 | EmbeddedSize:u32 | Embedded:EmbeddedSize bytes
      deliver or ack   0:2 | RelSeq:14             (2 bytes: the first such entry for a RelSeq
                                                    is its deliver, the second its ack)

A block that runs past EOF or fails its CRC (a fold interrupted by a crash, a zeroed tail) ends
the valid part of the file; the journal still holds those entries (it is truncated only after
the segment is fsynced), so recovery truncates the block and replays the journal.

Durability: a fold writes and fsyncs every touched segment before truncating the journal.
"""

from __future__ import annotations

import os
import struct
import zlib

from broker.queue_index.journal import PubRecord

SEGMENT_ENTRY_COUNT = 16384
REL_SEQ_BITS = 14
_BLOCK = struct.Struct(">II")
_PUB = struct.Struct(">H16sQII")  # prefix+rel_seq, msg_id, expiry, size, embedded_size
_REL = struct.Struct(">H")


class SegEntry:
    """State of one seq id as far as a segment (plus journal) knows it.

    pub: the PubRecord, or None if the publish is elsewhere (orphan during recovery).
    delivered / acked: a deliver / ack entry was seen.
    """

    __slots__ = ("pub", "delivered", "acked")

    def __init__(self, pub: PubRecord | None = None, delivered: bool = False, acked: bool = False):
        self.pub = pub
        self.delivered = delivered
        self.acked = acked

    def __repr__(self) -> str:
        return f"SegEntry({self.pub!r}, delivered={self.delivered}, acked={self.acked})"


def segment_of(seq_id: int) -> int:
    """Segment number holding `seq_id`."""
    return seq_id // SEGMENT_ENTRY_COUNT


def next_segment_boundary(seq_id: int) -> int:
    """First seq id of the segment after the one holding `seq_id`."""
    return (seq_id // SEGMENT_ENTRY_COUNT + 1) * SEGMENT_ENTRY_COUNT


def file_name(seg: int) -> str:
    """`<N>.idx`."""
    return f"{seg}.idx"


def encode_block(seg: int, entries: list[tuple[int, SegEntry]]) -> bytes:
    """One block for segment `seg` from (seq_id, what to add) pairs in seq order: the publish
    if `pub` is set, then a deliver entry if `delivered`, then an ack entry if `acked`."""
    parts = []
    base = seg * SEGMENT_ENTRY_COUNT
    for seq_id, e in entries:
        rel = seq_id - base
        if not 0 <= rel < SEGMENT_ENTRY_COUNT:
            raise ValueError(f"seq_id {seq_id} is not in segment {seg}")
        if e.pub is not None:
            p = e.pub
            head = 0x8000 | (0x4000 if p.is_persistent else 0) | rel
            parts.append(_PUB.pack(head, p.msg_id, p.expiry_us, p.size, len(p.embedded)))
            parts.append(p.embedded)
        if e.delivered:
            parts.append(_REL.pack(rel))
        if e.acked:
            parts.append(_REL.pack(rel))
    body = b"".join(parts)
    return _BLOCK.pack(len(body), zlib.crc32(body)) + body


def parse(seg: int, data: bytes | memoryview) -> tuple[dict[int, SegEntry], int]:
    """Parse a segment file's bytes; returns ({seq_id: SegEntry}, valid_end offset)."""
    out: dict[int, SegEntry] = {}
    base = seg * SEGMENT_ENTRY_COUNT
    pos = 0
    end = len(data)
    while pos + _BLOCK.size <= end:
        length, crc = _BLOCK.unpack_from(data, pos)
        stop = pos + _BLOCK.size + length
        if length == 0 or stop > end or zlib.crc32(data[pos + _BLOCK.size : stop]) != crc:
            break
        i = pos + _BLOCK.size
        while i < stop:
            (head,) = _REL.unpack_from(data, i)
            rel = head & 0x3FFF
            e = out.get(base + rel)
            if e is None:
                e = out[base + rel] = SegEntry()
            if head & 0x8000:
                _h, msg_id, expiry, size, emb = _PUB.unpack_from(data, i)
                i += _PUB.size
                e.pub = PubRecord(msg_id, bool(head & 0x4000), expiry, size, bytes(data[i : i + emb]))
                i += emb
            else:
                i += _REL.size
                if e.delivered:
                    e.acked = True
                else:
                    e.delivered = True
        pos = stop
    return out, pos


def load(directory: str, seg: int) -> tuple[dict[int, SegEntry], int, int]:
    """Read segment `seg` of `directory`: (entries, valid_end, file_size); empty if absent."""
    try:
        with open(os.path.join(directory, file_name(seg)), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return {}, 0, 0
    entries, valid_end = parse(seg, data)
    return entries, valid_end, len(data)


def list_segments(directory: str) -> list[int]:
    """Numbers of the `.idx` files in `directory`, ascending."""
    nums = []
    for name in os.listdir(directory):
        stem, dot, ext = name.partition(".")
        if dot and ext == "idx" and stem.isdigit():
            nums.append(int(stem))
    return sorted(nums)
