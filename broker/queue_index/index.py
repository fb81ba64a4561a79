"""The per-queue index (RabbitMQ `rabbit_queue_index.erl`, the v1 "journal + segments" index).

Owns: one queue's directory `queues/<md5-base36 of vhost+queue>/` with `journal.jif`
(`journal.py` format), segments `<N>.idx` (`segment.py` format) and, after a clean shutdown,
`clean.terms`. The variable queue is its only caller; it never touches the message store
(recovery gets a `contains(msg_id)` function instead). Reading the files without a live
index (replaying a journal, loading a segment, counting store references at boot) is
`files.py`'s job; this module buffers, syncs, folds and writes the terms.

clean.terms (integers big-endian): Magic "QITERMS1" | NextSeqId:u64 | Count:u64 | Bytes:u64
| NSeg:u32 | NSeg x (Seg:u32 | Unacked:u32) | CRC32:u32 of everything before. Written by
`terminate` after the journal is folded; read and deleted by `recover`.

Guarantees by call:
    publish/deliver/ack  entry appended to a RAM buffer and to the in-RAM journal map. An ack
                         of a seq_id whose publish entry is still only in RAM drops that
                         seq_id's buffered entries and its journal-map entry instead: nothing
                         about it is ever written (RabbitMQ's modern classic queues: "a message
                         consumed and acked before its batch is written is never written"), and
                         its msg_id is never reported to on_sync (the caller confirms a message
                         when it is acked). Journal replay folds each seq_id's entries into
                         flags, so the order of entries in the file does not matter.
    flush()              buffers written to journal.jif (write(2)).
    sync()               buffered entries written to journal.jif and fsynced, both on a
                         shared worker thread (write(2) of gathered pieces, then fsync); then
                         `on_sync(msg_ids)` gets every msg_id published with confirm=True
                         before the call and not dropped by an ack (from that worker thread).
    fold()               journal entries appended to segments, segments fsynced, fully acked
                         segments deleted, on_sync called at once; the journal's truncation
                         (then its fsync) queued for the worker behind earlier writes.
                         Runs when the journal passes max_journal_entries (or its publishes
                         carry more than max_journal_bytes of embedded messages), when the variable
                         queue pages to delta, and at terminate. It runs on the caller's thread.
    terminate()          fold + clean.terms: the next recover() skips the replay.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import shutil
import struct
import threading
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from broker import replication_hook
from broker.durable_io import fsync_dir, write_atomically
from broker.queue_index import journal as jf
from broker.queue_index import segment as sf
from broker.queue_index.files import (
    ABSENT,
    JOURNAL,
    load_journal,
    load_segment,
    segments_with_journal,
)
from broker.queue_index.journal import PubRecord
from broker.queue_index.segment import SegEntry, segment_of

log = logging.getLogger("broker.queue")

MAX_JOURNAL_ENTRIES = 32768  # queue_index_max_journal_entries
# Embedded bytes the in-RAM journal may hold before a fold (our addition; RabbitMQ's v1 index
# counts entries only). 32768 entries of 1 KB embedded messages kept ~45 MB per queue in RAM
# (10 lazy queues x 100k x 1 KB: 457 MB RSS after the fill, 144 MB with folds every 8192
# entries at the same fill rate); with 4 KB messages it would be ~135 MB per queue.
MAX_JOURNAL_BYTES = 8 * 1024 * 1024
TERMS = "clean.terms"
_MAGIC = b"QITERMS1"
_TERMS_HEAD = struct.Struct(">8sQQQI")
_TERMS_SEG = struct.Struct(">II")

_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="qi-fsync")
        return _POOL


@dataclass(slots=True)
class Recovered:
    """What `recover` found: clean (terms used), count of un-acked messages, their body bytes,
    the lowest seq id that may hold one (delta start) and the next seq id to use."""

    clean: bool
    count: int
    bytes: int
    low_seq_id: int
    next_seq_id: int


@dataclass(slots=True)
class ReadEntry:
    """One un-acked publish returned by `read`: seq_id, pub (PubRecord), delivered."""

    seq_id: int
    pub: PubRecord
    delivered: bool


class QueueIndex:
    """Index of one queue. Args: directory (the queue's own dir); on_sync(msg_ids) callback;
    max_journal_entries (32768); max_journal_bytes (8 MiB of embedded messages); fsync (False
    in fast tests). Call `recover()` or `erase()`
    once before use. Source: rabbit_queue_index.erl."""

    def __init__(
        self,
        directory: str,
        on_sync: Callable[[list[bytes]], None] | None = None,
        *,
        max_journal_entries: int = MAX_JOURNAL_ENTRIES,
        max_journal_bytes: int = MAX_JOURNAL_BYTES,
        fsync: bool = True,
    ) -> None:
        self.directory = directory  # this queue's directory
        self.on_sync = on_sync  # told which confirm-owed msg_ids are durable
        self.max_journal_entries = max_journal_entries  # fold past this many entries
        self.max_journal_bytes = max_journal_bytes  # ...or past this many embedded bytes
        self.fsync = fsync  # fsync journal/segments (off only in tests/transient use)
        self._journal: dict[int, SegEntry] = {}  # seq_id -> entries not yet in segments
        self._journal_count = 0  # entries (pub/del/ack each 1) in the journal
        self._journal_bytes = 0  # embedded message bytes held by the journal's publishes
        self._seg_unacked: Counter[int] = Counter()  # segment -> un-acked publishes
        # Unwritten journal entries, in two parts. _pending: seq_id -> PubRecord of publishes
        # not written yet, encoded only at flush so an ack can drop them without ever paying
        # for the encoding (paper benchmark: ~45 % of publishes are acked before the flush);
        # _pending_delivered: those of them already delivered. _buf: encoded entries of every
        # other seq_id (publish already in the file).
        self._pending: dict[int, PubRecord] = {}
        self._pending_delivered: set[int] = set()
        self._buf = bytearray()
        self._fd = -1  # journal.jif, append mode
        # the fsync worker's handoff (_sync_queue, _syncing); everything else, _unconfirmed
        # included, belongs to the caller's thread (the queue process)
        self._lock = threading.Lock()
        # confirm-owed publishes since the last sync(): seq_id -> msg_id (an ack dropping the
        # unwritten publish removes it; a dict keeps that O(1))
        self._unconfirmed: dict[int, bytes] = {}
        # ...of which lazy (publish(lazy=True)): they do not make needs_sync() true
        self._lazy: set[int] = set()
        # (journal pieces to write, msg_ids to confirm after the fsync) for the worker
        self._sync_queue: list[tuple[list[Any], list[bytes]] | None] = []  # None: truncate
        self._syncing = False  # an fsync job is running
        self._dirty = False  # journal bytes written since the last fsync was started
        self._idle = threading.Condition(self._lock)

    # -- boot ------------------------------------------------------------------------------
    def erase(self) -> None:
        """Start empty (a new or non-durable queue): remove any old files."""
        shutil.rmtree(self.directory, ignore_errors=True)
        replication_hook.deleted(self.directory)
        os.makedirs(self.directory)
        self._open_journal()

    def recover(self, contains: Callable[[bytes], bool] | None = None) -> Recovered:
        """Load an existing directory (or start empty if there is none).

        With clean.terms (clean shutdown) the counts are trusted. Otherwise (unclean) the
        journal is replayed over the segments: torn tails are truncated and logged, orphaned
        deliver/ack entries ignored, transient publishes dropped, persistent ones whose body
        is neither embedded nor `contains(msg_id)` in the store dropped with a warning, and
        every survivor marked delivered (it is redelivered). The result is folded at once.
        """
        os.makedirs(self.directory, exist_ok=True)
        terms = self._read_terms()
        jpath = os.path.join(self.directory, JOURNAL)
        if terms is not None and (not os.path.exists(jpath) or not os.path.getsize(jpath)):
            next_seq, count, nbytes, seg_unacked = terms
            self._seg_unacked = Counter(seg_unacked)
            self._open_journal()
            low = min((s for s, n in seg_unacked.items() if n), default=next_seq // sf.SEGMENT_ENTRY_COUNT)
            return Recovered(True, count, nbytes, low * sf.SEGMENT_ENTRY_COUNT, next_seq)
        return self._recover_dirty(contains)

    def _read_terms(self) -> tuple[int, int, int, dict[int, int]] | None:
        path = os.path.join(self.directory, TERMS)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        os.unlink(path)
        replication_hook.deleted(path)
        if len(data) < _TERMS_HEAD.size + 4 or zlib.crc32(data[:-4]) != int.from_bytes(data[-4:], "big"):
            log.warning("%s: recovery terms damaged; replaying", self.directory)
            return None
        magic, next_seq, count, nbytes, nseg = _TERMS_HEAD.unpack_from(data, 0)
        if magic != _MAGIC:
            return None
        segs = {}
        for i in range(nseg):
            s, n = _TERMS_SEG.unpack_from(data, _TERMS_HEAD.size + i * _TERMS_SEG.size)
            segs[s] = n
        return next_seq, count, nbytes, segs

    def _recover_dirty(self, contains: Callable[[bytes], bool] | None) -> Recovered:
        replay = load_journal(os.path.join(self.directory, JOURNAL), truncate=True)
        self._open_journal()
        count = nbytes = next_seq = 0
        low = None
        # One segment (with its journal entries) at a time: RAM holds one segment's entries,
        # not the whole queue (10 x 100k x 1 KB kill -9 restart: 206 MB RSS after boot when
        # every queue was loaded whole). What a segment lacks is appended to it at once; the
        # journal is truncated only after the last segment, as in fold().
        for seg, journal, on_disk in segments_with_journal(self.directory, replay, True):
            todo: list[tuple[int, SegEntry]] = []
            unacked = 0
            for seq in sorted(on_disk.keys() | journal.keys()):
                old = on_disk.get(seq, ABSENT)
                new = journal.get(seq, ABSENT)
                pub = old.pub or new.pub
                delivered = old.delivered or new.delivered
                acked = old.acked or new.acked
                next_seq = seq + 1
                if pub is None:
                    log.info("%s: ignoring orphaned deliver/ack of seq_id %d", self.directory, seq)
                    continue
                if not acked:
                    delivered = True  # a survivor is redelivered
                    if not pub.is_persistent:
                        acked = True
                    elif not pub.embedded and contains is not None and not contains(pub.msg_id):
                        log.warning(
                            "%s: message %s (seq_id %d) lost: body missing from the message "
                            "store", self.directory, pub.msg_id.hex(), seq,
                        )
                        acked = True
                    else:
                        count += 1
                        nbytes += pub.size
                        low = seq if low is None else low
                        unacked += 1
                add_pub = old.pub is None
                if add_pub and acked:
                    continue  # publish and ack both only in the journal: never reaches the segment
                diff = SegEntry(pub if add_pub else None, delivered and not old.delivered,
                                acked and not old.acked)
                if diff.pub or diff.delivered or diff.acked:
                    todo.append((seq, diff))
            if unacked:
                self._seg_unacked[seg] = unacked
                if todo:
                    self._append_block(seg, todo)
            else:
                path = os.path.join(self.directory, sf.file_name(seg))
                if os.path.exists(path):
                    os.unlink(path)
                    replication_hook.deleted(path)
        self._truncate_journal()
        return Recovered(False, count, nbytes, low if low is not None else next_seq, next_seq)

    @property
    def _journal_path(self) -> str:
        return os.path.join(self.directory, JOURNAL)

    def _open_journal(self) -> None:
        self._fd = os.open(
            os.path.join(self.directory, JOURNAL), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
        )

    # -- entries ---------------------------------------------------------------------------
    def publish(self, seq_id: int, pub: PubRecord, confirm: bool = False,
                delivered: bool = False, lazy: bool = False) -> None:
        """Record a publish (PubRecord: msg_id, is_persistent, expiry µs, size, embedded),
        and with `delivered` its deliver entry too (publish_delivered: one call, not two).
        With confirm, pub.msg_id goes to on_sync after the next fsync covering it; with
        `lazy` too, that confirm does not make `needs_sync()` true: it waits for the queue's
        periodic sync (or an ack that drops the unwritten publish), not the next loop turn."""
        self._pending[seq_id] = pub
        e = self._journal.get(seq_id)
        if e is None:
            self._journal[seq_id] = SegEntry(pub, delivered)
        else:
            e.pub = pub
            e.delivered = e.delivered or delivered
        if delivered:
            self._pending_delivered.add(seq_id)
        self._seg_unacked[segment_of(seq_id)] += 1
        self._journal_bytes += len(pub.embedded)
        if confirm:
            self._unconfirmed[seq_id] = pub.msg_id
            if lazy:
                self._lazy.add(seq_id)
        self._count_entry(2 if delivered else 1)

    def deliver(self, seq_ids: Iterable[int]) -> None:
        """Record deliveries (once per seq id; the variable queue checks is_delivered)."""
        pending = self._pending
        for seq_id in seq_ids:
            if seq_id in pending:
                self._pending_delivered.add(seq_id)
            else:
                self._buf += jf.encode_deliver(seq_id)
            e = self._journal.get(seq_id)
            if e is None:
                self._journal[seq_id] = SegEntry(None, True)
            else:
                e.delivered = True
            self._count_entry()

    def ack(self, seq_ids: Iterable[int]) -> None:
        """Record acks (each after its deliver: segments tell deliver from ack by order). An
        ack of a seq_id whose publish is not written yet drops its entries (module docstring)."""
        pending = self._pending
        for seq_id in seq_ids:
            if pending.pop(seq_id, None) is not None:
                self._pending_delivered.discard(seq_id)
                self._drop_unwritten(seq_id)
                continue
            self._buf += jf.encode_ack(seq_id)
            e = self._journal.get(seq_id)
            if e is None:
                self._journal[seq_id] = SegEntry(None, False, True)
            elif e.pub is not None:
                # its publish is in the journal file too: a fold would skip it, and read()
                # would too (nothing of it is in a segment); the file keeps all three entries
                del self._journal[seq_id]
                self._journal_bytes -= len(e.pub.embedded)
            else:
                e.acked = True
            self._seg_unacked[segment_of(seq_id)] -= 1
            self._count_entry()

    def _drop_unwritten(self, seq_id: int) -> None:
        """Undo what publish (and deliver) recorded for `seq_id`, whose bytes were never
        written: journal-map entry, entry count, embedded bytes, the segment's un-acked count
        (publish +1, this ack -1) and any owed confirm."""
        e = self._journal.pop(seq_id)
        self._journal_count -= 1 + e.delivered
        if e.pub is not None:
            self._journal_bytes -= len(e.pub.embedded)
        self._seg_unacked[segment_of(seq_id)] -= 1
        if self._unconfirmed:
            self._unconfirmed.pop(seq_id, None)
            self._lazy.discard(seq_id)

    def _count_entry(self, n: int = 1) -> None:
        self._journal_count += n
        if (self._journal_count > self.max_journal_entries
                or self._journal_bytes > self.max_journal_bytes):
            self.fold()

    # -- reading ---------------------------------------------------------------------------
    def read(self, start: int, end: int) -> list[ReadEntry]:
        """Un-acked publishes with start <= seq_id < end, in seq order; the range must lie in
        one segment (use `segment.next_segment_boundary`). Reads that segment's file."""
        seg = segment_of(start)
        if end > sf.next_segment_boundary(start):
            raise ValueError("read range spans segments")
        entries = load_segment(self.directory, seg, truncate=False)
        for seq, j in self._journal.items():
            if start <= seq < end:
                e = entries.get(seq)
                if e is None:
                    entries[seq] = SegEntry(j.pub, j.delivered, j.acked)
                else:
                    e.pub = j.pub or e.pub
                    e.delivered = e.delivered or j.delivered
                    e.acked = e.acked or j.acked
        return [
            ReadEntry(seq, e.pub, e.delivered)
            for seq, e in sorted(entries.items())
            if start <= seq < end and e.pub is not None and not e.acked
        ]

    # -- durability ------------------------------------------------------------------------
    def _take_parts(self) -> list[Any]:
        """The buffered entries as writev pieces (publishes encoded now), buffers emptied."""
        parts: list[Any] = []
        if self._pending:
            delivered = self._pending_delivered
            add = parts.extend
            publish_parts = jf.publish_parts
            encode_deliver = jf.encode_deliver
            for seq_id, pub in self._pending.items():
                add(publish_parts(seq_id, pub))
                if seq_id in delivered:
                    parts.append(encode_deliver(seq_id))
            # emptied in place: ack() and deliver() hold these across _count_entry(), which
            # may fold (and so flush) in the middle of their loop
            self._pending.clear()
            self._pending_delivered.clear()
        if self._buf:
            parts.append(self._buf)
            self._buf = bytearray()
        return parts

    def flush(self) -> None:
        """Write buffered journal entries to journal.jif (no fsync). While the worker has
        jobs the write joins its queue, behind any journal truncation a fold queued."""
        parts = self._take_parts()
        if not parts:
            return
        self._dirty = True
        with self._lock:
            if self._syncing:
                self._sync_queue.append((parts, []))
                return
        _write_all(self._fd, parts, self._journal_path)

    def _take_unconfirmed(self) -> list[bytes]:
        """The msg_ids owed a confirm so far (lazy ones too), forgotten here: the sync or
        fold that covers them reports them."""
        owed = list(self._unconfirmed.values())
        self._unconfirmed = {}
        self._lazy = set()
        return owed

    def needs_sync(self) -> bool:
        """True while msg_ids published with confirm=True (and not lazy) wait for an fsync."""
        return len(self._unconfirmed) > len(self._lazy)

    def sync(self) -> None:
        """Write what is buffered and fsync the journal, both on a worker thread (the write
        is a copy into the page cache that the queue process need not wait for), then report
        to on_sync. Without owed confirms it still fsyncs what was written since the last
        fsync (the queue process's 200 ms idle sync); with nothing written it does nothing.
        Without fsync the write happens here and on_sync is called at once."""
        if not self.fsync:
            self.flush()
            self._dirty = False
            ready = self._take_unconfirmed()
            if self.on_sync is not None and ready:
                self.on_sync(ready)
            return
        parts = self._take_parts()
        if not parts and not self._unconfirmed and not self._dirty:
            return
        self._dirty = False
        batch = self._take_unconfirmed()
        self._submit((parts, batch))

    def _submit(self, job: tuple[list[Any], list[bytes]] | None) -> None:
        """Queue `job` for the worker ((parts, batch), or None: truncate the journal) and
        start the worker if it is idle."""
        with self._lock:
            self._sync_queue.append(job)
            if not self._syncing:
                self._syncing = True
                _pool().submit(self._sync_worker)

    def _sync_worker(self) -> None:
        """Worker thread: run the queued jobs in order — write a job's pieces, or truncate
        the journal (a fold's last step) — then one fsync for all of them, then report their
        batches. The journal descriptor stays open meanwhile: terminate and delete wait for
        the worker first (wait_for_sync)."""
        while True:
            with self._lock:
                if not self._sync_queue:
                    self._syncing = False
                    self._idle.notify_all()
                    return
                jobs, self._sync_queue = self._sync_queue, []
            try:
                for job in jobs:
                    if job is None:
                        os.ftruncate(self._fd, 0)
                        replication_hook.truncated(self._journal_path, 0)
                    elif job[0]:
                        _write_all(self._fd, job[0], self._journal_path)
                os.fsync(self._fd)
            except OSError:
                # the queue is left without those confirms, as a queue whose disk fails is
                # in RabbitMQ; its publishers see no confirm rather than a false one
                log.exception("queue index %s: journal write or fsync failed", self.directory)
                continue
            if self.on_sync is not None:
                for job in jobs:
                    if job is not None and job[1]:
                        self.on_sync(job[1])

    def wait_for_sync(self, timeout: float = 10.0) -> None:
        """Block until the worker has no job (tests, terminate, delete)."""
        with self._lock:
            self._idle.wait_for(lambda: not self._syncing, timeout)

    def fold(self) -> None:
        """Move the RAM journal into the segments and empty it.

        On the caller's thread: fully acked segments deleted, each segment's new entries
        appended as one block and fsynced, the directory fsynced if a segment file was
        created or deleted; confirms owed are reported (their publishes are in fsynced
        segments now). The journal file's truncation is a job for the worker, queued behind
        every journal write before it and followed by its fsync, so the caller never waits
        for a running journal fsync nor fsyncs the journal itself (issue 36: on the loop,
        the wait and the three fsyncs cost 22 ms per fold at the paper's shape, 2.7 folds a
        second). Buffered entries are written first (by the worker while it has jobs), so an
        ack of a publish still in the journal file is not lost to a crash before the
        truncation. A crash before the truncation is durable
        leaves the old journal over segments holding the same entries: replay is
        idempotent (`recover`). Without fsync everything happens here."""
        self.flush()  # written, or queued for the worker ahead of the truncation
        if self.fsync and self._syncing and any(
                n <= 0 for n in self._seg_unacked.values()):
            # a segment is deleted below: an earlier truncation must be durable first, or a
            # crash could bring back journal entries naming the deleted segment's messages
            self.wait_for_sync()
        by_seg: dict[int, list[tuple[int, SegEntry]]] = {}
        for seq in sorted(self._journal):
            by_seg.setdefault(segment_of(seq), []).append((seq, self._journal[seq]))
        dir_changed = False
        # fully acked segments go, whether or not the journal still names them (an ack of a
        # publish still in the journal has already left the RAM map, see ack())
        for seg in [seg for seg, n in self._seg_unacked.items() if n <= 0]:
            del self._seg_unacked[seg]
            path = os.path.join(self.directory, sf.file_name(seg))
            if os.path.exists(path):
                os.unlink(path)
                replication_hook.deleted(path)
                dir_changed = True
        for seg, entries in by_seg.items():
            if seg not in self._seg_unacked:
                continue  # just deleted
            # a publish, deliver and ack all still in the journal never reach the segment
            todo = [(s, e) for s, e in entries if not (e.pub is not None and e.acked)]
            if todo:
                dir_changed |= self._append_block(seg, todo)
        if self.fsync:
            if dir_changed:
                fsync_dir(self.directory)
            self._submit(None)
        else:
            os.ftruncate(self._fd, 0)
            replication_hook.truncated(self._journal_path, 0)
        self._journal = {}
        self._journal_count = 0
        self._journal_bytes = 0
        self._dirty = False
        ready = self._take_unconfirmed()
        if ready and self.on_sync is not None:
            self.on_sync(ready)

    def _append_block(self, seg: int, entries: list[tuple[int, SegEntry]]) -> bool:
        """Append one block to segment `seg` and fsync it (fold, dirty recovery); True if
        the segment file was created (its directory needs an fsync)."""
        path = os.path.join(self.directory, sf.file_name(seg))
        created = not os.path.exists(path)
        block = sf.encode_block(seg, entries)
        with open(path, "ab") as f:
            f.write(block)
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())
            replication_hook.appended(path, f.tell() - len(block), block)
        return created

    def _truncate_journal(self) -> None:
        """Empty journal.jif (after its entries reached fsynced segments) and the RAM map."""
        os.ftruncate(self._fd, 0)
        replication_hook.truncated(self._journal_path, 0)
        if self.fsync:
            os.fsync(self._fd)
            fsync_dir(self.directory)
        self._journal = {}
        self._journal_count = 0
        self._journal_bytes = 0
        self._dirty = False

    def journal_entries(self) -> int:
        """Entries in the journal now (tests)."""
        return self._journal_count

    # -- shutdown --------------------------------------------------------------------------
    def terminate(self, count: int, nbytes: int, next_seq_id: int) -> None:
        """Clean shutdown: fold, then write clean.terms with the queue's un-acked `count`,
        their body bytes `nbytes` and `next_seq_id`."""
        self.fold()
        self.wait_for_sync()
        os.close(self._fd)
        self._fd = -1
        segs = {s: n for s, n in self._seg_unacked.items() if n > 0}
        data = _TERMS_HEAD.pack(_MAGIC, next_seq_id, count, nbytes, len(segs)) + b"".join(
            _TERMS_SEG.pack(s, n) for s, n in sorted(segs.items())
        )
        data += zlib.crc32(data).to_bytes(4, "big")
        write_atomically(self.directory, TERMS, data, self.fsync)

    def close_abruptly(self) -> None:
        """Drop descriptors without flushing (tests simulate a crash)."""
        self.wait_for_sync()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        """The queue is deleted: remove the directory."""
        self.wait_for_sync()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        shutil.rmtree(self.directory, ignore_errors=True)
        replication_hook.deleted(self.directory)


_IOV_MAX = 1024  # Linux UIO_MAXIOV: buffers one writev(2) may take


def _write_all(fd: int, parts: list[bytes], path: str) -> None:
    """Append `parts` to `fd` with gathered writes (writev), IOV_MAX buffers at a time; a
    short write (a signal, a full disk) finishes with plain writes of what is left."""
    for start in range(0, len(parts), _IOV_MAX):
        chunk = parts[start:start + _IOV_MAX]
        done = os.writev(fd, chunk)
        total = sum(map(len, chunk))
        if done < total:
            rest = b"".join(chunk)[done:]
            while rest:
                rest = rest[os.write(fd, rest):]
    if replication_hook.sink is not None:
        replication_hook.appended_fd(fd, path, b"".join(parts))
