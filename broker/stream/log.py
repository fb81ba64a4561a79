"""The append-only log of one stream queue (issue 22; RabbitMQ's streams keep theirs in
osiris segments, rabbitmq.com/streams.html): chunks of entries in segment files, an index
per segment from offset and timestamp to file position, retention by whole segments.

Owns: one stream's directory. Nothing else reads or writes it; it never calls out.

On disk, all integers big-endian:
    <dir>/<FIRST:020d>.segment   chunks, back to back; FIRST is the first offset in the file
        Chunk = Magic "STRC" | Version:u8 (1) | Entries:u32 | FirstOffset:u64
                | Timestamp:u64 (ms since the epoch, never decreasing) | DataSize:u32
                | CRC32:u32 (of Data) | Data
        Data  = Entries x (Size:u32 | Entry), an Entry being opaque bytes (see entry_bytes)
    <dir>/<FIRST:020d>.index     one record per chunk of the segment, in order:
        FirstOffset:u64 | Timestamp:u64 | Position:u64 (of the chunk in the segment)
        | Entries:u32
A chunk's offsets are FirstOffset .. FirstOffset + Entries - 1; offsets are consecutive
across chunks and segments.

Guarantees by call:
    append()  the chunk and its index record handed to the OS (write(2)): they survive a
              process crash (kill -9), not a power cut. Returns the chunk's offsets.
    sync()    fsync of the files appended to since the last sync: what was appended before
              survives a power cut (the stream confirms publishes after this). It may run
              on a worker thread while the owner appends.
    open      (the constructor) recovery: the last segment is checked from its last indexed
              chunk on; a torn or corrupt tail (bad magic, size or CRC) is truncated, in the
              segment and in its index, and logged with the position; an index behind its
              segment is completed from the segment.
Reading: `locate(spec)` turns first / last / next / an offset / a timestamp into an offset by
binary search over the segment list and one index file (O(log n) reads, no scan);
`read_chunk(offset)` returns the entries of the chunk holding `offset`. Memory holds the
segment list and the active segment's tail state only, not the stream.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
import zlib
from dataclasses import dataclass

from broker import replication_hook

log = logging.getLogger("broker.stream")

MAGIC = b"STRC"
VERSION = 1
_CHUNK = struct.Struct(">4sBIQQII")  # magic, version, entries, first, timestamp, size, crc
_INDEX = struct.Struct(">QQQI")  # first offset, timestamp, position, entries
_SIZE = struct.Struct(">I")
DEFAULT_MAX_SEGMENT_SIZE = 500_000_000  # bytes (x-stream-max-segment-size-bytes)

FIRST, LAST, NEXT = "first", "last", "next"


@dataclass
class _Segment:
    first: int  # first offset of the segment
    path: str  # the .segment file
    index: str  # the .index file


@dataclass
class Chunk:
    """A chunk as read back: its first offset, timestamp (ms) and entries."""

    first: int
    timestamp: int
    entries: list[bytes]


class StreamLog:
    """One stream's log in `directory` (created if missing); segments roll over past
    `max_segment_size` bytes."""

    def __init__(self, directory: str, max_segment_size: int = DEFAULT_MAX_SEGMENT_SIZE,
                 fsync: bool = True) -> None:
        self.directory = directory
        self.max_segment_size = max_segment_size
        self.fsync = fsync
        os.makedirs(directory, exist_ok=True)
        self._segments: list[_Segment] = []  # oldest first
        self.next_offset = 0  # the offset the next entry gets
        self._last_chunk = -1  # first offset of the last chunk (-1: none)
        self._last_ts = 0  # timestamp of the last chunk (ms)
        self._fd = -1  # the active segment, append mode
        self._ifd = -1  # its index
        self._size = 0  # bytes in the active segment
        self._written = False  # appended since the last sync began (a hint: skip idle syncs)
        # sync() may run on a worker thread: it and the fd closes (segment roll, close)
        # take this lock, so an fsync never meets a closed or reused descriptor
        self._sync_lock = threading.Lock()
        self._recover()

    # -- opening -----------------------------------------------------------------------------
    def _recover(self) -> None:
        firsts = sorted(int(n.split(".")[0]) for n in os.listdir(self.directory)
                        if n.endswith(".segment"))
        self._segments = [self._segment(f) for f in firsts]
        if not self._segments:
            self._open_segment(0)
            return
        seg = self._segments[-1]
        records = self._index_records(seg)
        pos, offset = 0, seg.first
        if records:  # trust what the index says but the last chunk: check from there
            first, ts, pos, _n = records[-1]
            offset = first
            records = records[:-1]
        with open(seg.path, "rb") as f:
            data_end = os.fstat(f.fileno()).st_size
            good = []
            while True:
                chunk = _read_chunk_at(f, pos, data_end)
                if chunk is None:
                    break
                c, size = chunk
                if c.first != offset:
                    break
                good.append((c.first, c.timestamp, pos, len(c.entries)))
                pos += size
                offset += len(c.entries)
        if pos < data_end:
            log.warning("stream %s: truncating a torn tail of %s at byte %d (of %d)",
                        self.directory, os.path.basename(seg.path), pos, data_end)
            os.truncate(seg.path, pos)
            replication_hook.truncated(seg.path, pos)
        records += good
        index = b"".join(_INDEX.pack(*r) for r in records)
        with open(seg.index, "wb") as out:  # rewritten: consistent with the segment
            out.write(index)
        replication_hook.replaced(seg.index, index)
        self.next_offset = offset
        if records:
            self._last_chunk, self._last_ts = records[-1][0], records[-1][1]
        elif len(self._segments) > 1:  # an empty last segment: the previous one's tail
            prev = self._index_records(self._segments[-2])
            if prev:
                self._last_chunk, self._last_ts = prev[-1][0], prev[-1][1]
        self._fd = os.open(seg.path, os.O_WRONLY | os.O_APPEND)
        self._ifd = os.open(seg.index, os.O_WRONLY | os.O_APPEND)
        self._size = pos

    def _segment(self, first: int) -> _Segment:
        base = os.path.join(self.directory, f"{first:020d}")
        return _Segment(first, base + ".segment", base + ".index")

    def _open_segment(self, first: int) -> None:
        if self._fd >= 0:
            with self._sync_lock:
                if self.fsync:
                    os.fsync(self._fd)
                    os.fsync(self._ifd)
                os.close(self._fd)
                os.close(self._ifd)
        seg = self._segment(first)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        self._fd = os.open(seg.path, flags, 0o644)
        self._ifd = os.open(seg.index, flags, 0o644)
        self._segments.append(seg)
        self._size = 0
        if self.fsync:
            dfd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    @staticmethod
    def _index_records(seg: _Segment) -> list[tuple[int, int, int, int]]:
        try:
            with open(seg.index, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        n = len(data) // _INDEX.size
        return [_INDEX.unpack_from(data, i * _INDEX.size) for i in range(n)]

    # -- writing -----------------------------------------------------------------------------
    def append(self, entries: list[bytes], now_ms: int | None = None) -> tuple[int, int]:
        """Append one chunk of `entries` (at least one); returns (first, last) offset."""
        if not entries:
            raise ValueError("a chunk needs at least one entry")
        if self._size >= self.max_segment_size:
            self._open_segment(self.next_offset)
        ts = max(self._last_ts, int(time.time() * 1000) if now_ms is None else now_ms)
        data = b"".join(_SIZE.pack(len(e)) + e for e in entries)
        first = self.next_offset
        head = _CHUNK.pack(MAGIC, VERSION, len(entries), first, ts, len(data),
                           zlib.crc32(data))
        chunk = head + data
        record = _INDEX.pack(first, ts, self._size, len(entries))
        os.write(self._fd, chunk)
        os.write(self._ifd, record)
        if replication_hook.sink is not None:
            seg = self._segments[-1]
            replication_hook.appended(seg.path, self._size, chunk)
            replication_hook.appended_fd(self._ifd, seg.index, record)
        self._written = True
        self._size += len(head) + len(data)
        self.next_offset = first + len(entries)
        self._last_chunk, self._last_ts = first, ts
        return first, self.next_offset - 1

    def sync(self) -> None:
        """fsync what was appended before this call (no-op with fsync off). Safe to call
        from a worker thread while the owner goes on appending."""
        if not self._written:
            return
        self._written = False  # before the fsync: a later append sets it again
        with self._sync_lock:
            if self.fsync and self._fd >= 0:  # earlier segments were fsynced at the roll
                os.fsync(self._fd)
                os.fsync(self._ifd)

    # -- reading -----------------------------------------------------------------------------
    @property
    def first_offset(self) -> int:
        """The oldest offset still kept (== next_offset when the stream is empty)."""
        return self._segments[0].first if self._segments else self.next_offset

    def locate(self, spec: str | int | tuple[str, int]) -> int:
        """The offset a reader starts at: FIRST, LAST (the first offset of the last chunk),
        NEXT, an offset (clamped to what exists) or ("timestamp", ms): the first chunk
        written at or after that time (NEXT when none)."""
        if spec == FIRST:
            return self.first_offset
        if spec == NEXT:
            return self.next_offset
        if spec == LAST:
            return self._last_chunk if self._last_chunk >= 0 else self.next_offset
        if isinstance(spec, int):
            return min(max(spec, self.first_offset), self.next_offset)
        assert not isinstance(spec, str)  # FIRST, NEXT and LAST are the only strings
        _kind, ms = spec
        # binary search over the segments by the timestamp of their first chunk, then over
        # the chosen segment's index records (timestamps never decrease): O(log n) reads
        segs = self._segments
        lo, hi = 0, len(segs) - 1
        while lo < hi:  # the last segment whose first chunk is at or before `ms`
            mid = (lo + hi + 1) // 2
            first = _index_record(segs[mid].index, 0)
            if first is not None and first[1] <= ms:
                lo = mid
            else:
                hi = mid - 1
        for seg in segs[lo:lo + 2]:  # the answer is in it, or is the next one's first chunk
            found = _first_at_or_after(seg.index, ms)
            if found is not None:
                return found
        return self.next_offset

    def read_chunk(self, offset: int) -> Chunk | None:
        """The chunk that holds `offset`, or None when `offset` is at or past the end (or
        was removed by retention)."""
        if offset >= self.next_offset or offset < self.first_offset:
            return None
        firsts = [s.first for s in self._segments]
        i = _bisect_right(firsts, offset) - 1
        seg = self._segments[i]
        with open(seg.index, "rb") as f:  # binary search over fixed-size records
            n = os.fstat(f.fileno()).st_size // _INDEX.size
            lo, hi = 0, n - 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                f.seek(mid * _INDEX.size)
                if _INDEX.unpack(f.read(_INDEX.size))[0] <= offset:
                    lo = mid
                else:
                    hi = mid - 1
            f.seek(lo * _INDEX.size)
            record = f.read(_INDEX.size)
        if len(record) < _INDEX.size:
            return None
        _first, _ts, pos, _n = _INDEX.unpack(record)
        with open(seg.path, "rb") as f:
            got = _read_chunk_at(f, pos, os.fstat(f.fileno()).st_size)
        return got[0] if got is not None else None

    # -- retention ---------------------------------------------------------------------------
    def total_bytes(self) -> int:
        return sum(os.path.getsize(s.path) for s in self._segments)

    def apply_retention(self, max_bytes: int | None, max_age_ms: int | None,
                        now_ms: int | None = None) -> int:
        """Delete whole segments from the start (never the active one) while the stream
        is over `max_bytes` or a segment's newest chunk is older than `max_age_ms`
        (x-max-length-bytes, x-max-age). Returns how many segments went."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        removed = 0
        while len(self._segments) > 1:
            seg = self._segments[0]
            too_big = max_bytes is not None and self.total_bytes() > max_bytes
            too_old = False
            if max_age_ms is not None:  # the segment's newest chunk: its last index record
                n = os.path.getsize(seg.index) // _INDEX.size
                last = _index_record(seg.index, n - 1) if n else None
                too_old = last is not None and last[1] < now - max_age_ms
            if not (too_big or too_old):
                break
            os.unlink(seg.path)
            os.unlink(seg.index)
            replication_hook.deleted(seg.path)
            replication_hook.deleted(seg.index)
            self._segments.pop(0)
            removed += 1
        return removed

    def close(self) -> None:
        """Sync and close the files."""
        if self._fd >= 0:
            self._written = True
            self.sync()
            with self._sync_lock:
                os.close(self._fd)
                os.close(self._ifd)
                self._fd = self._ifd = -1


def _index_record(path: str, i: int) -> tuple[int, int, int, int] | None:
    """Record `i` of an index file (None past its end or when the file is gone)."""
    try:
        with open(path, "rb") as f:
            f.seek(i * _INDEX.size)
            raw = f.read(_INDEX.size)
    except FileNotFoundError:
        return None
    return _INDEX.unpack(raw) if len(raw) == _INDEX.size else None


def _first_at_or_after(path: str, ms: int) -> int | None:
    """The first offset of the first chunk of this index written at or after `ms`, by
    binary search over its fixed-size records; None when there is none."""
    try:
        n = os.path.getsize(path) // _INDEX.size
    except FileNotFoundError:
        return None
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        record = _index_record(path, mid)
        if record is not None and record[1] >= ms:
            hi = mid
        else:
            lo = mid + 1
    record = _index_record(path, lo) if lo < n else None
    return record[0] if record is not None else None


def _bisect_right(values: list[int], x: int) -> int:
    lo, hi = 0, len(values)
    while lo < hi:
        mid = (lo + hi) // 2
        if x < values[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _read_chunk_at(f: object, pos: int, end: int) -> tuple[Chunk, int] | None:
    """The chunk at `pos` of an open segment file and its size in bytes, or None if what is
    there is not a whole, intact chunk."""
    if pos + _CHUNK.size > end:
        return None
    f.seek(pos)  # type: ignore[attr-defined]
    head = f.read(_CHUNK.size)  # type: ignore[attr-defined]
    magic, version, n, first, ts, size, crc = _CHUNK.unpack(head)
    if magic != MAGIC or version != VERSION or pos + _CHUNK.size + size > end:
        return None
    data = f.read(size)  # type: ignore[attr-defined]
    if len(data) != size or zlib.crc32(data) != crc:
        return None
    entries, i = [], 0
    for _ in range(n):
        if i + 4 > size:
            return None
        (length,) = _SIZE.unpack_from(data, i)
        entries.append(data[i + 4:i + 4 + length])
        i += 4 + length
    if i != size:
        return None
    return Chunk(first, ts, entries), _CHUNK.size + size
