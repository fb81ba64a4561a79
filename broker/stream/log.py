"""The append-only log of one stream queue (issue 22; RabbitMQ's streams keep theirs in
osiris segments, rabbitmq.com/streams.html): chunks of entries in segment files, an index
per segment from offset and timestamp to file position, retention by whole segments.

Owns: one stream's directory. Nothing else reads or writes it; it never calls out.

On disk, osiris's layout (issue 37 item 3; osiris_log.erl), integers big-endian:
    <dir>/<FIRST:020d>.segment   "OSIL" | Version:u32 (1) | chunks back to back, each as
        broker/stream/osiris_chunk.py lays it out (48-byte header, bloom filter, data
        entries, trailer); FIRST is the first offset in the file
    <dir>/<FIRST:020d>.index     "OSII" | Version:u32 (1) | one 29-byte record per chunk:
        ChunkId:u64 | Timestamp:i64 (ms) | Epoch:u64 | FilePos:u32 | ChunkType:u8
A chunk's offsets are ChunkId .. ChunkId + NumRecords - 1 (a sub-batch entry holds several
records, a tracking chunk one); offsets are consecutive across chunks and segments.
Entries are AMQP 1.0 messages for the broker (broker/stream/message_record.py) and any
bytes for the log. A directory in the previous release's format is converted when it is
opened (broker/stream/log_v1.py).

Guarantees by call:
    append()  the chunk and its index record handed to the OS (write(2)): they survive a
              process crash (kill -9), not a power cut. Returns the chunk's offsets.
    sync()    fsync of the segment appended to since the last sync: what was appended before
              survives a power cut (the stream confirms publishes after this). It may run
              on a worker thread while the owner appends. The index is not fsynced: it is
              derived from the segment, and recovery rebuilds its tail.
    open      (the constructor) recovery: the last segment is checked from its last indexed
              chunk on (index records at the tail that name no such chunk are dropped first,
              back to the segment's start if need be); a torn or corrupt tail (bad header,
              size or CRC) is truncated, in the segment and in its index, and logged with the
              position; an index behind its segment is completed from the segment.
Reading: `locate(spec)` turns first / last / next / an offset / a timestamp into an offset by
binary search over the segment list and one index file (O(log n) reads, no scan);
`read_chunk(offset)` returns the records of the chunk holding `offset`, `read_raw(offset)`
its bytes as stored. Memory holds the segment list and the active segment's tail state only,
not the stream.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import broker.stream.log_v1 as log_v1
import broker.stream.osiris_chunk as oc
from broker import replication_hook

log = logging.getLogger("broker.stream")

LOG_HEADER = b"OSIL" + (1).to_bytes(4, "big")
IDX_HEADER = b"OSII" + (1).to_bytes(4, "big")
READ_FDS = 8  # segments a log keeps open for reading
_INDEX = struct.Struct(">QqQIB")  # chunk id, timestamp, epoch, file position, chunk type
DEFAULT_MAX_SEGMENT_SIZE = 500_000_000  # bytes (x-stream-max-segment-size-bytes)

FIRST, LAST, NEXT = "first", "last", "next"


@dataclass
class _Segment:
    first: int  # first offset of the segment
    path: str  # the .segment file
    index: str  # the .index file


@dataclass
class Chunk:
    """A chunk as read back: its first offset, timestamp (ms) and one item per offset it
    holds: the record's bytes, or None where nothing can be delivered (a tracking chunk, a
    compressed sub-batch this broker cannot open)."""

    first: int
    timestamp: int
    entries: list[bytes | None]
    chunk_type: int = oc.CHNK_USER


class StreamLog:
    """One stream's log in `directory` (created if missing); segments roll over past
    `max_segment_size` bytes."""

    def __init__(self, directory: str, max_segment_size: int = DEFAULT_MAX_SEGMENT_SIZE,
                 fsync: bool = True,
                 convert_entry: Callable[[bytes], bytes] | None = None) -> None:
        """`convert_entry` turns an entry of the previous release's format into this one's
        when the directory holds that format (the stream queue passes the 0-9-1 → AMQP 1.0
        conversion); without it such a directory is converted with entries unchanged."""
        self.directory = directory
        self.max_segment_size = max_segment_size
        self.fsync = fsync
        log_v1.finish_interrupted(directory)
        if log_v1.is_v1(directory):
            n = log_v1.convert(directory, self._write_converted, convert_entry or bytes)
            log.info("stream %s: converted %d chunks from the previous release's format",
                     directory, n)
        os.makedirs(directory, exist_ok=True)
        self._segments: list[_Segment] = []  # oldest first
        self.next_offset = 0  # the offset the next entry gets
        self._last_chunk = -1  # first offset of the last chunk (-1: none)
        self.last_written_chunk = -1  # id of the last chunk of any type (osiris last_chunk_id)
        self._last_ts = 0  # timestamp of the last chunk (ms)
        self._fd = -1  # the active segment, append mode
        self._ifd = -1  # its index
        self._size = 0  # bytes in the active segment
        self._written = False  # appended since the last sync began (a hint: skip idle syncs)
        # sync() may run on a worker thread: it and the fd closes (segment roll, close)
        # take this lock, so an fsync never meets a closed or reused descriptor
        self._sync_lock = threading.Lock()
        # osiris's tracking: publisher reference -> last publishing id stored (deduplication)
        # and consumer reference -> stored offset; rebuilt at open from the last segment's
        # snapshot chunk, its delta chunks and its user chunks' trailers
        self.sequences: dict[str, int] = {}
        self.offsets: dict[str, int] = {}
        # the next chunk's first offset -> (segment, position), learnt by read_raw
        self._after: dict[int, tuple[_Segment, int]] = {}
        # read descriptors of the segments read last (path -> fd, at most READ_FDS): a
        # chunk is read with two pread(2)s, not an open, two seeks, two reads and a close
        self._read_fds: dict[str, int] = {}
        self._recover()
        self._recover_tracking()

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
        pos, offset = len(LOG_HEADER), seg.first
        with open(seg.path, "rb") as f:
            data_end = os.fstat(f.fileno()).st_size
            if data_end < len(LOG_HEADER) or f.read(len(LOG_HEADER)) != LOG_HEADER:
                pos = 0  # not even a header: the file is rewritten below
                records = []
            # trust the index but its tail: sync() fsyncs the segment, not the index, so
            # after a power cut the index's last records may be missing or not match a
            # chunk; drop those that do not, then check the segment from the last one on
            while records:
                offset, _ts, _epoch, pos, _t = records.pop()
                h = _check_chunk_at(f, pos, data_end)
                if h is not None and h.chunk_id == offset:
                    break
                pos, offset = len(LOG_HEADER), seg.first
            good = []
            while pos >= len(LOG_HEADER):
                h = _check_chunk_at(f, pos, data_end)
                if h is None or h.chunk_id != offset:
                    break
                good.append((h.chunk_id, h.timestamp, h.epoch, pos, h.chunk_type))
                pos += h.size
                offset += h.num_records
        if pos < data_end or pos < len(LOG_HEADER):
            log.warning("stream %s: truncating a torn tail of %s at byte %d (of %d)",
                        self.directory, os.path.basename(seg.path), pos, data_end)
            if pos < len(LOG_HEADER):
                with open(seg.path, "wb") as out:
                    out.write(LOG_HEADER)
                replication_hook.replaced(seg.path, LOG_HEADER)
                pos = len(LOG_HEADER)
            else:
                os.truncate(seg.path, pos)
                replication_hook.truncated(seg.path, pos)
        records += good
        index = IDX_HEADER + b"".join(_INDEX.pack(*r) for r in records)
        with open(seg.index, "wb") as out:  # rewritten: consistent with the segment
            out.write(index)
        replication_hook.replaced(seg.index, index)
        self.next_offset = offset
        tail = records or (self._index_records(self._segments[-2])
                           if len(self._segments) > 1 else [])
        if tail:  # an empty last segment: the previous one's tail
            self._last_ts = tail[-1][1]
            self.last_written_chunk = tail[-1][0]
        user = [r for r in records if r[4] == oc.CHNK_USER]
        if not user and len(self._segments) > 1:
            user = [r for r in self._index_records(self._segments[-2]) if r[4] == oc.CHNK_USER]
        if user:
            self._last_chunk = user[-1][0]  # LAST: the last chunk of messages
        self._fd = os.open(seg.path, os.O_WRONLY | os.O_APPEND)
        self._ifd = os.open(seg.index, os.O_WRONLY | os.O_APPEND)
        self._size = pos

    def _segment(self, first: int) -> _Segment:
        base = os.path.join(self.directory, f"{first:020d}")
        return _Segment(first, base + ".segment", base + ".index")

    def _recover_tracking(self) -> None:
        """Tracking as the last segment holds it: its first chunk's snapshot, then every
        delta chunk and user chunk trailer in order (osiris_log:recover_tracking)."""
        seg = self._segments[-1]
        with open(seg.path, "rb") as f:
            for _chid, _ts, _ep, pos, ctype in self._index_records(seg):
                f.seek(pos)
                try:
                    h = oc.read_header(f.read(oc.HEADER_SIZE))
                except oc.ChunkError:
                    break
                if ctype == oc.CHNK_USER:
                    if not h.trailer_length:
                        continue
                    f.seek(pos + h.data_start + h.data_length)
                    seqs, offs = oc.parse_tracking(f.read(h.trailer_length))
                else:
                    seqs, offs = oc.parse_tracking(_tracking_data(f, pos, h),
                                                   snapshot=ctype == oc.CHNK_TRK_SNAPSHOT)
                for ref, v in seqs.items():
                    self.sequences[ref] = v[1] if isinstance(v, tuple) else v
                self.offsets.update(offs)

    def _open_segment(self, first: int) -> None:
        if self._fd >= 0:
            with self._sync_lock:
                if self.fsync:
                    os.fsync(self._fd)
                    os.fsync(self._ifd)
                os.close(self._fd)
                os.close(self._ifd)
        seg = self._segment(first)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC
        self._fd = os.open(seg.path, flags, 0o644)
        self._ifd = os.open(seg.index, flags, 0o644)
        os.write(self._fd, LOG_HEADER)
        os.write(self._ifd, IDX_HEADER)
        if replication_hook.sink is not None:
            replication_hook.replaced(seg.path, LOG_HEADER)
            replication_hook.replaced(seg.index, IDX_HEADER)
        self._segments.append(seg)
        self._size = len(LOG_HEADER)
        if self.fsync:
            dfd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    @staticmethod
    def _index_records(seg: _Segment) -> list[tuple[int, int, int, int, int]]:
        """(chunk id, timestamp, epoch, position, chunk type) of every indexed chunk."""
        try:
            with open(seg.index, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        if data[:len(IDX_HEADER)] != IDX_HEADER:
            return []
        h = len(IDX_HEADER)
        n = (len(data) - h) // _INDEX.size
        return [_INDEX.unpack_from(data, h + i * _INDEX.size) for i in range(n)]

    # -- writing -----------------------------------------------------------------------------
    def append(self, entries: list[bytes], now_ms: int | None = None) -> tuple[int, int]:
        """Append one chunk of simple `entries` (at least one); returns (first, last)
        offset."""
        if not entries:
            raise ValueError("a chunk needs at least one entry")
        return self.append_chunk([(None, e) for e in entries], now_ms)

    def append_chunk(self, entries: Sequence[oc.ChunkItem], now_ms: int | None = None,
                     chunk_type: int = oc.CHNK_USER, sequences: dict[str, int] | None = None,
                     filter_size: int = oc.DEFAULT_FILTER_SIZE) -> tuple[int, int]:
        """Append one chunk of `entries` ((filter value or None, record or SubBatch), or
        an osiris_chunk.EntryBlock of simple records laid out already);
        `sequences` {publisher reference: last publishing id in the chunk} goes in its
        trailer and into `self.sequences`. Returns (first, last) offset. The chunk's
        timestamp never goes back (ms)."""
        if self._size >= self.max_segment_size:
            self._open_segment(self.next_offset)
            self._write_snapshot(now_ms)
        trailer = b""
        if sequences:
            trailer = oc.tracking_entries(sequences=sequences)
            self.sequences.update(sequences)
        return self._write_chunk(entries, now_ms, chunk_type, trailer, filter_size)

    def store_offsets(self, offsets: dict[str, int], now_ms: int | None = None) -> int:
        """Store consumer offsets {reference: offset} (store_offset) as a tracking delta
        chunk, which takes one offset as osiris's do; returns that offset."""
        self.offsets.update(offsets)
        if self._size >= self.max_segment_size:
            self._open_segment(self.next_offset)
            self._write_snapshot(now_ms)
            return self.next_offset - 1  # the snapshot holds them
        first, _last = self._write_chunk(
            [(None, oc.tracking_entries(offsets=offsets))], now_ms, oc.CHNK_TRK_DELTA, b"",
            oc.DEFAULT_FILTER_SIZE)
        return first

    def _write_snapshot(self, now_ms: int | None) -> None:
        """The first chunk of a new segment: every tracked sequence and offset, so that
        retention deleting older segments loses none of them (osiris's tracking snapshot,
        osiris_log:evaluate_tracking_snapshot/2; offsets below the stream's first offset are
        dropped as osiris drops them)."""
        if not self.sequences and not self.offsets:
            return  # osiris writes none while nothing is tracked
        first = self.first_offset
        offsets = {r: o for r, o in self.offsets.items() if o >= first}
        self.offsets = offsets
        snap = oc.tracking_entries(
            snapshot_sequences={r: (self._last_chunk, q) for r, q in self.sequences.items()},
            offsets=offsets)
        self._write_chunk([(None, snap)], now_ms, oc.CHNK_TRK_SNAPSHOT, b"",
                          oc.DEFAULT_FILTER_SIZE)

    def _write_chunk(self, entries: Sequence[oc.ChunkItem], now_ms: int | None,
                     chunk_type: int, trailer: bytes, filter_size: int) -> tuple[int, int]:
        ts = max(self._last_ts, int(time.time() * 1000) if now_ms is None else now_ms)
        first = self.next_offset
        pieces, records = oc.encode_chunk(entries, first, ts, oc.FIRST_EPOCH, chunk_type,
                                          trailer, filter_size)
        chunk = b"".join(pieces)
        record = _INDEX.pack(first, ts, oc.FIRST_EPOCH, self._size, chunk_type)
        os.write(self._fd, chunk)
        os.write(self._ifd, record)
        if replication_hook.sink is not None:
            seg = self._segments[-1]
            replication_hook.appended(seg.path, self._size, chunk)
            replication_hook.appended_fd(self._ifd, seg.index, record)
        self._written = True
        self._size += len(chunk)
        self.next_offset = first + records
        self.last_written_chunk = first
        self._last_ts = ts
        if chunk_type == oc.CHNK_USER:
            self._last_chunk = first
        return first, self.next_offset - 1

    @staticmethod
    def _write_converted(directory: str, chunks: list[tuple[int, int, list[bytes]]],
                         start: int) -> None:
        """Write the converted chunks of an old log into `directory` in this format: one
        segment from offset `start`, fsynced with its directory."""
        base = os.path.join(directory, f"{start:020d}")
        seg, idx = bytearray(LOG_HEADER), bytearray(IDX_HEADER)
        for chunk_first, ts, entries in chunks:
            pieces, _n = oc.encode_chunk([(None, e) for e in entries], chunk_first, ts)
            idx += _INDEX.pack(chunk_first, ts, oc.FIRST_EPOCH, len(seg), oc.CHNK_USER)
            for piece in pieces:
                seg += piece
        for path, data in ((base + ".segment", seg), (base + ".index", idx)):
            with open(path, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def sync(self) -> None:
        """fsync what was appended before this call (no-op with fsync off). Safe to call
        from a worker thread while the owner goes on appending."""
        if not self._written:
            return
        self._written = False  # before the fsync: a later append sets it again
        with self._sync_lock:
            if self.fsync and self._fd >= 0:  # earlier segments were fsynced at the roll
                # the segment only: the index is derived from it, and recovery completes
                # an index behind its segment (one fsync, not two, per group commit: 12 B
                # publishes over the stream protocol 3.18 M -> 3.61 M msg/s)
                os.fsync(self._fd)

    # -- reading -----------------------------------------------------------------------------
    @property
    def last_chunk(self) -> int:
        """The first offset of the last chunk of messages (-1: none): deliver v2's
        committed chunk id on one broker."""
        return self._last_chunk

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

    def _chunk_position(self, offset: int) -> tuple[_Segment, int] | None:
        """The segment and file position of the chunk holding `offset` (binary search over
        its index's fixed-size records), or None when it is not there."""
        if offset >= self.next_offset or offset < self.first_offset:
            return None
        firsts = [s.first for s in self._segments]
        seg = self._segments[_bisect_right(firsts, offset) - 1]
        h = len(IDX_HEADER)
        with open(seg.index, "rb") as f:
            n = (os.fstat(f.fileno()).st_size - h) // _INDEX.size
            if n <= 0:
                return None
            lo, hi = 0, n - 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                f.seek(h + mid * _INDEX.size)
                if _INDEX.unpack(f.read(_INDEX.size))[0] <= offset:
                    lo = mid
                else:
                    hi = mid - 1
            f.seek(h + lo * _INDEX.size)
            record = f.read(_INDEX.size)
        if len(record) < _INDEX.size:
            return None
        return seg, _INDEX.unpack(record)[3]

    def read_raw(self, offset: int) -> tuple[oc.ChunkHeader, bytes] | None:
        """The header and the bytes as stored of the chunk starting at or holding `offset`
        (what a Deliver frame carries), or None when it is not there. The data CRC is not
        checked here: recovery checks the tail at open and the rest was written by this
        process, and osiris sends chunks unchecked too (its clients check the CRC). A
        reader going through the log in order finds each next chunk without a search."""
        where = self._after.get(offset)
        if where is not None:
            got = self._read_chunk_at(where[0], where[1])
            if got is not None and got[0].chunk_id == offset:
                self._remember_next(where[0], where[1], got[0])
                return got
        where = self._chunk_position(offset)
        if where is None:
            return None
        got = self._read_chunk_at(where[0], where[1])
        if got is not None:
            self._remember_next(where[0], where[1], got[0])
        return got

    def _read_chunk_at(self, seg: _Segment, pos: int) -> tuple[oc.ChunkHeader, bytes] | None:
        """(header, bytes) of the whole chunk at `pos` of `seg`'s file, or None when no
        whole chunk is there (the end of the segment, or a segment retention deleted)."""
        fd = self._read_fds.get(seg.path)
        try:
            if fd is None:
                if len(self._read_fds) >= READ_FDS:
                    os.close(self._read_fds.pop(next(iter(self._read_fds))))
                fd = self._read_fds[seg.path] = os.open(seg.path, os.O_RDONLY)
            h = oc.read_header(os.pread(fd, oc.HEADER_SIZE, pos))
            raw = os.pread(fd, h.size, pos)  # the header again: one copy of the chunk
        except (oc.ChunkError, FileNotFoundError):
            return None
        if len(raw) < h.size:
            return None
        return h, raw

    def _close_read_fd(self, path: str) -> None:
        fd = self._read_fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def _remember_next(self, seg: _Segment, pos: int, h: oc.ChunkHeader) -> None:
        """Where the chunk after `h` starts, if it is in the same segment (bounded map)."""
        if len(self._after) >= 4096:
            self._after.clear()
        self._after[h.chunk_id + h.num_records] = (seg, pos + h.size)

    def read_chunk(self, offset: int) -> Chunk | None:
        """The chunk that holds `offset`, or None when `offset` is at or past the end (or
        was removed by retention)."""
        got = self.read_raw(offset)
        if got is None:
            return None
        h, data = got
        return Chunk(h.chunk_id, h.timestamp, _records(h, data), h.chunk_type)

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
                n = (os.path.getsize(seg.index) - len(IDX_HEADER)) // _INDEX.size
                last = _index_record(seg.index, n - 1) if n > 0 else None
                too_old = last is not None and last[1] < now - max_age_ms
            if not (too_big or too_old):
                break
            self._close_read_fd(seg.path)
            os.unlink(seg.path)
            os.unlink(seg.index)
            replication_hook.deleted(seg.path)
            replication_hook.deleted(seg.index)
            self._segments.pop(0)
            removed += 1
        if removed:
            self._after.clear()
        return removed

    def close(self) -> None:
        """Sync and close the files."""
        for path in list(self._read_fds):
            self._close_read_fd(path)
        if self._fd >= 0:
            self._written = True
            self.sync()
            with self._sync_lock:
                os.close(self._fd)
                os.close(self._ifd)
                self._fd = self._ifd = -1


def _index_record(path: str, i: int) -> tuple[int, int, int, int, int] | None:
    """Record `i` of an index file (None past its end or when the file is gone)."""
    try:
        with open(path, "rb") as f:
            f.seek(len(IDX_HEADER) + i * _INDEX.size)
            raw = f.read(_INDEX.size)
    except FileNotFoundError:
        return None
    return _INDEX.unpack(raw) if len(raw) == _INDEX.size else None


def _first_at_or_after(path: str, ms: int) -> int | None:
    """The first offset of the first chunk of this index written at or after `ms`, by
    binary search over its fixed-size records; None when there is none."""
    try:
        n = (os.path.getsize(path) - len(IDX_HEADER)) // _INDEX.size
    except FileNotFoundError:
        return None
    lo, hi = 0, max(n, 0)
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


def _check_chunk_at(f: object, pos: int, end: int) -> oc.ChunkHeader | None:
    """The header of the chunk at `pos` of an open segment file if a whole, intact chunk
    (header, sizes, data CRC) is there, else None."""
    if pos + oc.HEADER_SIZE > end:
        return None
    f.seek(pos)  # type: ignore[attr-defined]
    head = f.read(oc.HEADER_SIZE)  # type: ignore[attr-defined]
    try:
        h = oc.read_header(head)
    except oc.ChunkError:
        return None
    if pos + h.size > end:
        return None
    f.seek(pos)  # type: ignore[attr-defined]
    try:
        return oc.check(f.read(h.size))  # type: ignore[attr-defined]
    except oc.ChunkError:
        return None


def _tracking_data(f: object, pos: int, h: oc.ChunkHeader) -> bytes:
    """The tracking entries a delta or snapshot chunk holds (its data entries joined)."""
    f.seek(pos)  # type: ignore[attr-defined]
    raw = f.read(h.size)  # type: ignore[attr-defined]
    return b"".join(e for e in oc.entries(raw, h) if isinstance(e, bytes))


def _records(h: oc.ChunkHeader, data: bytes) -> list[bytes | None]:
    """One item per offset of a chunk: the records of a user chunk (an uncompressed or
    gzip sub-batch opened, another compression as None per record: RabbitMQ's AMQP readers
    cannot open those either), None for a tracking chunk."""
    if h.chunk_type != oc.CHNK_USER:
        return [None] * h.num_records
    out: list[bytes | None] = []
    for entry in oc.entries(data, h):
        if isinstance(entry, oc.SubBatch):
            try:
                out.extend(oc.sub_batch_records(entry))
            except oc.ChunkError:
                out.extend([None] * entry.records)
        else:
            out.append(entry)
    return out
