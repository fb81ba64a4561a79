"""Chunks laid out as osiris lays them out (issue 37 item 3): the unit a stream stores, reads
and sends, so that a Deliver frame carries a stored chunk without re-encoding it.

Owns: the byte layout of one chunk (header, bloom filter, data entries, trailer), of its
entries (simple and sub-batch), of the tracking trailer (publisher sequences for
deduplication, consumer offsets) and the bloom filter over filter values. No files: the
stream log (broker/stream/log.py) writes and reads the bytes.
Must never: touch a record's bytes on the way to a consumer (a chunk goes out as stored).

Source: osiris 1.x `src/osiris_log.erl` (format comment, make_chunk/7, write_chunk),
`src/osiris_tracking.erl` (trailer and snapshot entries), `src/osiris_bloom.erl`.

Chunk (integers big-endian, 48-byte header):
    Magic:4 (5) | Version:4 (0) | ChunkType:u8 | NumEntries:u16 | NumRecords:u32
    | Timestamp:i64 (ms) | Epoch:u64 | ChunkId:u64 (the first record's offset)
    | DataCRC:u32 (zlib CRC-32 of the data entries) | DataLength:u32 | TrailerLength:u32
    | BloomSize:u8 | Reserved:u24 | Bloom (BloomSize bytes) | Data | Trailer
Data entry: simple  = 0:1 | Length:u31 | Record
            batch   = 1:1 | Compression:3 | 0:4 | NumRecords:u16 | UncompressedLength:u32
                      | Length:u32 | Body (records as a sub-batch: Length:u32 | Record …,
                      compressed as a whole)
Trailer / tracking entry = Type:u8 (0 sequence, 1 offset, 2 timestamp) | IdSize:u8 | Id
    | Value:u64 (i64 for timestamps); a snapshot's sequence entries hold ChunkId:u64 before
    the sequence.

Bloom filter: osiris hashes filter values with erlang:phash2, which only the broker reads
(clients skip BloomSize bytes), so this broker uses its own hash pair (CRC-32 of the value
and of the value prefixed with a byte) over the same bit layout: bit 0 marks entries without
a filter value; no bloom is written when no entry has one.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter

MAGIC = 5
VERSION = 0
MAGIC_VERSION = (MAGIC << 4) | VERSION
# the epoch of a stream's first writer: rabbit_stream_coordinator elects its first leader in
# epoch 1, and every chunk a single-node RabbitMQ writes carries it
FIRST_EPOCH = 1
CHNK_USER = 0
CHNK_TRK_DELTA = 1
CHNK_TRK_SNAPSHOT = 2
HEADER = struct.Struct(">BBHIqQQIIIB3x")
HEADER_SIZE = HEADER.size  # 48
DEFAULT_FILTER_SIZE = 16  # bytes of bloom filter (osiris: 16..255)

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4

TRK_SEQUENCE = 0
TRK_OFFSET = 1
TRK_TIMESTAMP = 2

_SIMPLE = struct.Struct(">I")
_BATCH = struct.Struct(">BHII")  # flag+compression, records, uncompressed length, length
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")


class ChunkError(ValueError):
    """Bytes that are not a well-formed chunk (bad magic, sizes, CRC or entry)."""


@dataclass(slots=True, frozen=True)
class SubBatch:
    """A sub-batch entry as a publisher sent it: `records` inside, `compression` (one of
    COMPRESSION_*), `uncompressed_length` (bytes) and `data` (the body, stored as is)."""

    records: int
    compression: int
    uncompressed_length: int
    data: bytes


Entry = bytes | SubBatch  # one data entry: a simple record or a sub-batch
FilteredEntry = tuple[str | None, Entry]  # (filter value or None, entry)


@dataclass(slots=True, frozen=True)
class EntryBlock:
    """`count` simple entries of one length, without filter values, already laid out as a
    chunk's data holds them: each `stride` bytes (Length:u31 with the top bit 0, then the
    record), `data` = count × stride bytes. A publish frame whose messages all have one
    length becomes one in a few C copies instead of a step per message
    (broker/stream_protocol/core.py); `head`/`tail` split it at an entry boundary when a
    chunk ends inside it."""

    count: int
    stride: int
    data: bytes

    def head(self, k: int) -> EntryBlock:
        """The first `k` entries (0 < k < count)."""
        return EntryBlock(k, self.stride, self.data[:k * self.stride])

    def tail(self, k: int) -> EntryBlock:
        """The entries after the first `k` (0 < k < count)."""
        return EntryBlock(self.count - k, self.stride, self.data[k * self.stride:])


ChunkItem = FilteredEntry | EntryBlock  # what encode_chunk takes: one entry, or a block of them


@dataclass(slots=True, frozen=True)
class ChunkHeader:
    """A chunk's header fields; `size` is the whole chunk in bytes (header, bloom, data,
    trailer)."""

    chunk_type: int
    num_entries: int
    num_records: int
    timestamp: int
    epoch: int
    chunk_id: int
    crc: int
    data_length: int
    trailer_length: int
    bloom_size: int

    @property
    def size(self) -> int:
        return HEADER_SIZE + self.bloom_size + self.data_length + self.trailer_length

    @property
    def data_start(self) -> int:
        return HEADER_SIZE + self.bloom_size


def read_header(buf: bytes | memoryview, pos: int = 0) -> ChunkHeader:
    """The header at `pos`. Raises ChunkError for a short buffer or a bad magic/version."""
    if len(buf) - pos < HEADER_SIZE:
        raise ChunkError(f"{len(buf) - pos} bytes, a chunk header has {HEADER_SIZE}")
    mv, ctype, entries, records, ts, epoch, chid, crc, dlen, tlen, bloom = HEADER.unpack_from(
        buf, pos)
    if mv != MAGIC_VERSION:
        raise ChunkError(f"magic/version byte {mv:#04x}, expected {MAGIC_VERSION:#04x}")
    return ChunkHeader(ctype, entries, records, ts, epoch, chid, crc, dlen, tlen, bloom)


# -- bloom filter ------------------------------------------------------------------------------
def _hashes(value: bytes, bits: int) -> tuple[int, int]:
    if not value:
        return 0, 0
    return (zlib.crc32(value) % (bits - 1) + 1, zlib.crc32(b"\x01" + value) % (bits - 1) + 1)


def bloom(values: Iterable[str | None], size: int = DEFAULT_FILTER_SIZE) -> bytes:
    """The bloom filter of a chunk whose entries carry `values` (None: no filter value);
    b"" when none has one (osiris writes no filter then). Bit n is bit 7 - n % 8 of byte
    n // 8, as Erlang's bitstrings number them."""
    seen = {v.encode() if v else b"" for v in values}
    if not seen or seen == {b""}:
        return b""
    bits = size * 8
    out = bytearray(size)
    for v in seen:
        for h in set(_hashes(v, bits)):
            out[h // 8] |= 0x80 >> (h % 8)
    return bytes(out)


def bloom_may_contain(bloom_bytes: bytes, values: Iterable[str], match_unfiltered: bool) -> bool:
    """True when a chunk with this filter may hold an entry matching one of `values` (or,
    with `match_unfiltered`, an entry without a filter value). A chunk without a filter holds
    only unfiltered entries."""
    if not bloom_bytes:
        return match_unfiltered
    bits = len(bloom_bytes) * 8

    def is_set(h: int) -> bool:
        return bool(bloom_bytes[h // 8] & (0x80 >> (h % 8)))

    if match_unfiltered and is_set(0):
        return True
    for v in values:
        h1, h2 = _hashes(v.encode(), bits)
        if h1 and is_set(h1) and is_set(h2):
            return True
    return False


# -- encoding ---------------------------------------------------------------------------------
def encode_chunk(entries: Sequence[ChunkItem], chunk_id: int, timestamp: int,
                 epoch: int = FIRST_EPOCH,
                 chunk_type: int = CHNK_USER, trailer: bytes = b"",
                 filter_size: int = DEFAULT_FILTER_SIZE) -> tuple[list[bytes], int]:
    """A chunk as pieces to write back to back, and the records it holds. `entries`:
    [(filter value or None, record bytes or SubBatch)], any of them possibly an EntryBlock
    (entries laid out already); `timestamp` in ms; `trailer`: tracking entries (see
    `tracking_entries`). At most 65 535 entries (NumEntries is a u16)."""
    if len(entries) == 1 and entries[0].__class__ is EntryBlock:  # one publish frame's block
        block: EntryBlock = entries[0]  # type: ignore[assignment]
        data, num, records, bl = block.data, block.count, block.count, b""
    else:
        try:  # simple records only (the usual case): sizes and bodies interleaved in C loops
            bodies = list(map(_second, entries))  # type: ignore[arg-type]
            sizes = map(_SIMPLE.pack, map(len, bodies))
            data = b"".join(chain.from_iterable(zip(sizes, bodies, strict=True)))
            num = records = len(bodies)
            filters: Iterable[str | None] = map(_first, entries)  # type: ignore[arg-type]
        except TypeError:  # a sub-batch (it has no len) or a block (no item 1) among them
            data, num, records = _mixed_data(entries)
            filters = [e[0] if e.__class__ is tuple else None for e in entries]  # type: ignore[index]
        filters = list(filters)
        bl = bloom(filters, filter_size) if any(filters) else b""
    head = HEADER.pack(MAGIC_VERSION, chunk_type, num, records, timestamp, epoch,
                       chunk_id, zlib.crc32(data), len(data), len(trailer), len(bl))
    return [head, bl, data, trailer], records


def _mixed_data(entries: Sequence[ChunkItem]) -> tuple[bytes, int, int]:
    """(data, entries, records) of entries among which are sub-batches or blocks."""
    parts: list[bytes] = []
    num = records = 0
    for item in entries:
        if isinstance(item, EntryBlock):
            parts.append(item.data)
            num += item.count
            records += item.count
            continue
        e = item[1]
        num += 1
        if isinstance(e, SubBatch):
            parts += (_BATCH.pack(0x80 | (e.compression & 0x7) << 4, e.records,
                                  e.uncompressed_length, len(e.data)), e.data)
            records += e.records
        else:
            parts += (_SIMPLE.pack(len(e)), e)
            records += 1
    return b"".join(parts), num, records


_first = itemgetter(0)  # a FilteredEntry's filter value
_second = itemgetter(1)  # its entry


# -- decoding ---------------------------------------------------------------------------------
def check(buf: bytes | memoryview, pos: int = 0) -> ChunkHeader:
    """The header of the chunk at `pos` after checking that the whole chunk is there and
    its data CRC matches. Raises ChunkError otherwise (a torn or corrupt tail)."""
    h = read_header(buf, pos)
    if len(buf) - pos < h.size:
        raise ChunkError(f"chunk {h.chunk_id} needs {h.size} bytes, {len(buf) - pos} left")
    start = pos + h.data_start
    if zlib.crc32(buf[start:start + h.data_length]) != h.crc:
        raise ChunkError(f"chunk {h.chunk_id}: data CRC mismatch")
    return h


def entries(buf: bytes | memoryview, h: ChunkHeader, pos: int = 0) -> Iterator[Entry]:
    """The data entries of the chunk at `pos` whose header is `h`, in order. Raises
    ChunkError for an entry running past the data."""
    p = pos + h.data_start
    end = p + h.data_length
    for _ in range(h.num_entries):
        if p + 4 > end:
            raise ChunkError(f"chunk {h.chunk_id}: entry header past the data")
        first = buf[p]
        if first & 0x80:
            if p + _BATCH.size > end:
                raise ChunkError(f"chunk {h.chunk_id}: sub-batch header past the data")
            flag, n, unc, length = _BATCH.unpack_from(buf, p)
            p += _BATCH.size
            if p + length > end:
                raise ChunkError(f"chunk {h.chunk_id}: sub-batch past the data")
            yield SubBatch(n, (flag >> 4) & 0x7, unc, bytes(buf[p:p + length]))
            p += length
        else:
            (length,) = _SIMPLE.unpack_from(buf, p)
            p += 4
            if p + length > end:
                raise ChunkError(f"chunk {h.chunk_id}: record past the data")
            yield bytes(buf[p:p + length])
            p += length


def sub_batch_records(batch: SubBatch) -> list[bytes]:
    """The records of a sub-batch (Length:u32 | Record, …), decompressed where this broker
    can (none, gzip). Raises ChunkError for another compression or a malformed body."""
    if batch.compression == COMPRESSION_NONE:
        body = batch.data
    elif batch.compression == COMPRESSION_GZIP:
        try:
            body = zlib.decompress(batch.data, 16 + zlib.MAX_WBITS)
        except zlib.error as exc:
            raise ChunkError(f"gzip sub-batch: {exc}") from None
    else:
        raise ChunkError(f"sub-batch compression {batch.compression} is not supported")
    out = []
    p = 0
    for _ in range(batch.records):
        if p + 4 > len(body):
            raise ChunkError("sub-batch record header past its body")
        (n,) = _SIMPLE.unpack_from(body, p)
        p += 4
        if p + n > len(body):
            raise ChunkError("sub-batch record past its body")
        out.append(body[p:p + n])
        p += n
    return out


# -- tracking --------------------------------------------------------------------------------
def tracking_entries(sequences: dict[str, int] | None = None,
                     offsets: dict[str, int] | None = None,
                     snapshot_sequences: dict[str, tuple[int, int]] | None = None) -> bytes:
    """Tracking entries: a chunk trailer's (or delta's) `sequences` {publisher reference:
    last publishing id} and `offsets` {consumer reference: offset}; a snapshot's
    `snapshot_sequences` {reference: (chunk id, publishing id)}. References are at most
    255 bytes (osiris: 256, but the size is one byte)."""
    out = []
    for ref, (chid, seq) in (snapshot_sequences or {}).items():
        r = ref.encode()
        out.append(bytes((TRK_SEQUENCE, len(r))) + r + _U64.pack(chid) + _U64.pack(seq))
    for ref, seq in (sequences or {}).items():
        r = ref.encode()
        out.append(bytes((TRK_SEQUENCE, len(r))) + r + _U64.pack(seq))
    for ref, off in (offsets or {}).items():
        r = ref.encode()
        out.append(bytes((TRK_OFFSET, len(r))) + r + _U64.pack(off))
    return b"".join(out)


def parse_tracking(data: bytes | memoryview, snapshot: bool = False
                   ) -> tuple[dict[str, int | tuple[int, int]], dict[str, int]]:
    """(sequences, offsets) of tracking entries; with `snapshot`, a sequence is
    (chunk id, publishing id). Timestamp entries are read and dropped. Raises ChunkError for
    a malformed entry."""
    seqs: dict[str, int | tuple[int, int]] = {}
    offs: dict[str, int] = {}
    p = 0
    n = len(data)
    while p < n:
        if p + 2 > n:
            raise ChunkError("tracking entry header cut short")
        kind, size = data[p], data[p + 1]
        p += 2
        ref = bytes(data[p:p + size]).decode(errors="replace")
        p += size
        if kind == TRK_SEQUENCE and snapshot:
            if p + 16 > n:
                raise ChunkError("tracking snapshot entry cut short")
            seqs[ref] = (_U64.unpack_from(data, p)[0], _U64.unpack_from(data, p + 8)[0])
            p += 16
            continue
        if p + 8 > n:
            raise ChunkError("tracking entry cut short")
        value = _U64.unpack_from(data, p)[0]
        p += 8
        if kind == TRK_SEQUENCE:
            seqs[ref] = value
        elif kind == TRK_OFFSET:
            offs[ref] = value
        elif kind != TRK_TIMESTAMP:
            raise ChunkError(f"unknown tracking type {kind}")
    return seqs, offs
