"""One message store (RabbitMQ `rabbit_msg_store.erl`) and the per-vhost pair of them.

Owns: the `<N>.rdq` files of one directory, the msg_id index with ref counts, the write
buffer, fsync batching and `msg_on_disk` confirms, the clean-shutdown snapshot, and starting
GC (`gc.py`). Queue processes (through the variable queue) call `write`/`read`/`remove`;
nothing else touches the files. It never calls into a queue except through the `on_disk`
callback a client registered.

On disk (see `file_format.py` for the record bytes):
    <dir>/<N>.rdq      records appended in order; a new file once the current one passes
                       `file_size_limit` bytes (16 MiB).
    <dir>/<N>.rdt      a GC output being written; deleted at boot if found.
    <dir>/clean.dot    clean-shutdown snapshot, all integers big-endian:
        Magic "RDQSNAP1" | FileCount:u32 | FileCount x (FileNum:u32 | FileSize:u64 | Valid:u64)
        | EntryCount:u64 | EntryCount x (MsgId:16 | RefCount:u32 | FileNum:u32 | Offset:u64
        | TotalSize:u32) | CRC32:u32 (of every byte before it)
      Written by `close()`, read and deleted by `recover()`.

Guarantees by call:
    write()   record appended to a RAM buffer (1 MiB); readable at once; not on disk.
    flush()   buffer handed to the OS (write(2)); survives a process crash, not a power cut.
    sync()    flush, then fsync of every file written since the last fsync on a worker thread;
              after that fsync each client's `on_disk(msg_ids)` is called with the msg_ids it
              wrote before the sync (RabbitMQ's `msg_on_disk`). With fsync=False the callback
              runs at once, inside sync().
    close()   everything fsynced, snapshot written: the next `recover()` skips the scan.

Credit flow (msg_store_credit_disc_bound, docs/architecture.md §1): a client that registered an
`on_credit(n)` callback and writes with `flow=True` gets, after the sync that covers those
writes (after its fsync on the fsync thread; inside `sync()` without fsync), `on_credit(n)`
with how many of them are done. The writer spends one credit per such write, so a store that
cannot keep up (a slow disk) leaves its writers blocked. RabbitMQ's store grants the credit
when its process handles the write; ours handles writes inline, so the work a slow disk
delays is the sync, and that is where the credit comes back.

Threading model: every public method is synchronous and is called from the event-loop thread
(queue processes). One lock guards the index, the file summaries and the write buffer. Two
worker threads: an fsync thread (group commit: while one fsync runs, later syncs queue up and
share the next one) and a GC thread. `on_disk` callbacks run on the fsync thread (or inside
`sync()` when fsync=False), so a client must only record the ids and wake its process
thread-safely (e.g. `loop.call_soon_threadsafe`). When an asyncio loop is running, `write`
schedules the flush itself: `sync` on the next loop turn when a client waits for a confirm
(the "mailbox empty" point), else `sync` after `flush_interval` (25 ms). Without a running loop
nothing is scheduled and the caller calls `flush`/`sync`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import shutil
import struct
import threading
import zlib
from collections.abc import Callable, Iterable, Mapping

from broker import replication_hook
from broker.durable_io import fsync_dir, write_atomically
from broker.msg_store import file_format as ff
from broker.msg_store.index import FileSummary, IndexEntry, StoreIndex

log = logging.getLogger("broker.store")

MiB = 1024 * 1024
FILE_SIZE_LIMIT = 16 * MiB  # msg_store_file_size_limit
WRITE_BUFFER_SIZE = 1 * MiB  # flush the buffer once it holds this many bytes
FLUSH_INTERVAL = 0.025  # seconds: the 25 ms flush timer
GARBAGE_FRACTION = 0.5  # GC once garbage passes this share of all bytes...
GC_MIN_FILES = 2  # ...and all bytes pass this many file limits
SNAPSHOT = "clean.dot"
_MAGIC = b"RDQSNAP1"
_SNAP_FILE = struct.Struct(">IQQ")
_SNAP_ENTRY = struct.Struct(">16sIIQI")

OnDisk = Callable[[list[bytes]], None]
RefCounts = Mapping[bytes, int]


class MessageStore:
    """A directory of `.rdq` files holding message bodies by 16-byte msg_id.

    Args: directory (created if missing); file_size_limit in bytes (16 MiB); fsync: fsync before
    confirming (False for the transient store and fast tests); write_buffer_size in bytes;
    flush_interval in seconds; gc: allow garbage collection. Call `recover()` (or `wipe()`)
    once before use. Source: rabbit_msg_store.erl.
    """

    def __init__(
        self,
        directory: str,
        *,
        file_size_limit: int = FILE_SIZE_LIMIT,
        fsync: bool = True,
        write_buffer_size: int = WRITE_BUFFER_SIZE,
        flush_interval: float = FLUSH_INTERVAL,
        gc: bool = True,
    ) -> None:
        self.directory = directory  # holds <N>.rdq and clean.dot
        self.file_size_limit = file_size_limit  # roll to a new file past this many bytes
        self.fsync = fsync  # fsync before on_disk callbacks
        self.write_buffer_size = write_buffer_size  # bytes buffered before a write(2)
        self.flush_interval = flush_interval  # seconds between timer flushes
        self.gc_enabled = gc  # tests of recovery switch GC off
        os.makedirs(directory, exist_ok=True)
        self._lock = threading.RLock()  # index, summaries, buffer, read fds, pending confirms
        self._index = StoreIndex()  # msg_id -> IndexEntry
        self._summaries: dict[int, FileSummary] = {}  # file number -> totals
        self._total_size = 0  # sum of file_size over all files (bytes)
        self._total_valid = 0  # sum of valid_total_size (bytes)
        self._cur = 0  # number of the file being appended to
        self._cur_fd = -1  # write descriptor of the current file
        self._cur_flushed = 0  # bytes of the current file already written to the fd
        self._buf = bytearray()  # unflushed bytes; they start at offset _cur_flushed
        self._read_fds: dict[int, int] = {}  # file number -> cached read descriptor
        self._dirty: set[int] = set()  # files written since the last fsync snapshot
        self._dir_dirty = False  # a file was created: the directory needs an fsync too
        self._clients: dict[int, OnDisk] = {}  # client id -> on_disk callback
        self._next_client = 0
        self._pending: dict[int, list[bytes]] = {}  # client -> msg_ids awaiting fsync
        self._credit_cbs: dict[int, Callable[[int], None]] = {}  # client -> on_credit
        self._flow: dict[int, int] = {}  # client -> flow writes since the last sync
        self._sync_queue: list[tuple[set[int], bool, dict[int, list[bytes]], dict[int, int]]] = []
        self._stall: threading.Event | None = None  # syncs wait for it (stall_syncs)
        self._fsync_running = False  # a worker is fsyncing; later syncs wait in _sync_queue
        self._fsync_idle = threading.Condition(self._lock)
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="store-fsync")
        self._gc_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="store-gc")
        self._gc_future: concurrent.futures.Future[None] | None = None
        self._closing = False  # stops the GC loop between combinations
        self._timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self._timer_is_sync = False  # the pending timer is the loop-turn sync, not the 25 ms one
        self._timer_loop: asyncio.AbstractEventLoop | None = None  # loop owning _timer
        self._open = False

    # -- boot ------------------------------------------------------------------------------
    def recover(self, ref_counts: RefCounts | Callable[[], RefCounts] | None = None) -> bool:
        """Load the store at boot; returns True when the clean snapshot was used.

        With a valid `clean.dot` (clean shutdown, file sizes unchanged) the snapshot is trusted
        and `ref_counts` is not consulted. Otherwise every `.rdq` is scanned (torn tails
        truncated and logged) and a record is live iff its msg_id is in `ref_counts`
        (msg_id -> number of queue-index entries referring to it, e.g.
        `queue_index.index.count_store_refs(queues_dir)`; pass a callable to compute it only
        when the scan finds a record). ref_counts=None keeps every scanned record with ref
        count 1.
        """
        for name in os.listdir(self.directory):
            if name.endswith(".rdt"):
                os.unlink(os.path.join(self.directory, name))
        files = ff.list_files(self.directory)
        clean = self._load_snapshot(files)
        if not clean:
            self._scan(files, ref_counts)
        self._open_current(files[-1] if files else 0)
        return clean

    def wipe(self) -> None:
        """Delete every file and start empty (the transient store at boot)."""
        shutil.rmtree(self.directory, ignore_errors=True)
        replication_hook.deleted(self.directory)
        os.makedirs(self.directory, exist_ok=True)
        self._open_current(0)

    def _open_current(self, num: int) -> None:
        self._cur = num
        path = self._path(num)
        self._cur_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._cur_flushed = os.fstat(self._cur_fd).st_size
        if num not in self._summaries:
            self._summaries[num] = FileSummary(0, self._cur_flushed)
            self._total_size += self._cur_flushed
        self._dir_dirty = True
        self._open = True

    def _load_snapshot(self, files: list[int]) -> bool:
        path = os.path.join(self.directory, SNAPSHOT)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return False
        os.unlink(path)  # a crash from now on must not trust it
        if self.fsync:
            fsync_dir(self.directory)
        if len(data) < len(_MAGIC) + 16 or data[:8] != _MAGIC:
            log.warning("%s: snapshot has a bad header; scanning", self.directory)
            return False
        if zlib.crc32(data[:-4]) != struct.unpack_from(">I", data, len(data) - 4)[0]:
            log.warning("%s: snapshot checksum mismatch; scanning", self.directory)
            return False
        pos = 8
        (nfiles,) = struct.unpack_from(">I", data, pos)
        pos += 4
        summaries = {}
        for _ in range(nfiles):
            num, size, valid = _SNAP_FILE.unpack_from(data, pos)
            pos += _SNAP_FILE.size
            summaries[num] = FileSummary(valid, size)
        if sorted(summaries) != files or any(
            os.path.getsize(self._path(n)) != s.file_size for n, s in summaries.items()
        ):
            log.warning("%s: files changed since the snapshot; scanning", self.directory)
            return False
        (nentries,) = struct.unpack_from(">Q", data, pos)
        pos += 8
        for _ in range(nentries):
            msg_id, ref, num, off, total = _SNAP_ENTRY.unpack_from(data, pos)
            pos += _SNAP_ENTRY.size
            self._index.insert(msg_id, IndexEntry(ref, num, off, total))
        self._summaries = summaries
        self._total_size = sum(s.file_size for s in summaries.values())
        self._total_valid = sum(s.valid_total_size for s in summaries.values())
        return True

    def _scan(self, files: list[int],
              ref_counts: RefCounts | Callable[[], RefCounts] | None) -> None:
        # A callable is called only once a record is found: with every message embedded in
        # the queue indexes the store is empty and walking every index for ref counts (a full
        # second read of them) is skipped (kill -9 restart, 10 x 100k x 1 KB: 33 % of boot).
        counts = None if callable(ref_counts) else ref_counts
        for num in files:
            path = self._path(num)
            records, valid_end, size = ff.scan_file(path)
            if valid_end < size:
                log.warning(
                    "%s: torn record at offset %d (file size %d); truncating",
                    path, valid_end, size,
                )
                os.truncate(path, valid_end)
            summary = FileSummary(0, valid_end)
            if records and callable(ref_counts):
                counts, ref_counts = ref_counts(), None
            for rec in records:
                if rec.msg_id in self._index:
                    continue  # a duplicate left by an interrupted GC: garbage
                ref = 1 if counts is None else counts.get(rec.msg_id, 0)
                if ref > 0:
                    self._index.insert(rec.msg_id, IndexEntry(ref, num, rec.offset, rec.total_size))
                    summary.valid_total_size += rec.total_size
            self._summaries[num] = summary
            self._total_size += summary.file_size
            self._total_valid += summary.valid_total_size

    # -- clients ---------------------------------------------------------------------------
    def register_client(self, on_disk: OnDisk,
                        on_credit: Callable[[int], None] | None = None) -> int:
        """Register a writer's `on_disk(msg_ids)` callback (and, for credit flow, its
        `on_credit(n)`); returns the client id to pass to `write`. The callbacks run on the
        fsync worker thread (see the module docstring)."""
        with self._lock:
            self._next_client += 1
            self._clients[self._next_client] = on_disk
            if on_credit is not None:
                self._credit_cbs[self._next_client] = on_credit
            return self._next_client

    def unregister_client(self, client: int) -> None:
        """Stop confirming to `client` (its queue terminated)."""
        with self._lock:
            self._clients.pop(client, None)
            self._pending.pop(client, None)
            self._credit_cbs.pop(client, None)
            self._flow.pop(client, None)

    # -- the hot path ----------------------------------------------------------------------
    def write(self, msg_id: bytes, body: bytes, client: int | None = None,
              flow: int | None = None) -> None:
        """Store `body` under `msg_id` (or bump its ref count if present). With `client`, the
        msg_id is reported to that client's on_disk callback after the next fsync; with
        `flow` (a client id), that client's on_credit gets 1 more after the next sync."""
        with self._lock:
            if flow is not None:
                self._flow[flow] = self._flow.get(flow, 0) + 1
            entry = self._index.lookup(msg_id)
            if entry is not None:
                entry.ref_count += 1
            else:
                record = ff.encode_record(msg_id, body)
                size = len(record)
                cur_size = self._cur_flushed + len(self._buf)
                if cur_size > 0 and cur_size + size > self.file_size_limit:
                    self._roll()
                    cur_size = 0
                self._index.insert(msg_id, IndexEntry(1, self._cur, cur_size, size))
                self._buf += record
                summary = self._summaries[self._cur]
                summary.valid_total_size += size
                summary.file_size += size
                self._total_size += size
                self._total_valid += size
                self._dirty.add(self._cur)
                if len(self._buf) >= self.write_buffer_size:
                    self._flush_locked()
            if client is not None:
                self._pending.setdefault(client, []).append(msg_id)
            self._schedule(client is not None)

    def read(self, msg_id: bytes) -> bytes | None:
        """The body stored under `msg_id`, or None if it is not in the store."""
        with self._lock:
            entry = self._index.lookup(msg_id)
            if entry is None:
                return None
            if entry.file == self._cur and entry.offset >= self._cur_flushed:
                start = entry.offset - self._cur_flushed
                record = bytes(self._buf[start : start + entry.total_size])
            else:
                fd = self._read_fd(entry.file)
                record = os.pread(fd, entry.total_size, entry.offset)
        if len(record) != entry.total_size or record[-1] != ff.TRAILER:
            raise OSError(f"{self.directory}: bad record for {msg_id.hex()} in {entry.file}.rdq")
        return ff.body_of(record)

    def contains(self, msg_id: bytes) -> bool:
        """True if `msg_id` has a body in the store."""
        with self._lock:
            return msg_id in self._index

    def ref_count(self, msg_id: bytes) -> int:
        """Current ref count of `msg_id` (0 if absent)."""
        with self._lock:
            entry = self._index.lookup(msg_id)
            return 0 if entry is None else entry.ref_count

    def remove(self, msg_ids: Iterable[bytes]) -> None:
        """Drop one reference per msg_id; at 0 the record becomes garbage of its file (a file
        left with no live data is deleted; GC may start). Unknown ids are ignored."""
        with self._lock:
            for msg_id in msg_ids:
                entry = self._index.lookup(msg_id)
                if entry is None:
                    continue
                entry.ref_count -= 1
                if entry.ref_count > 0:
                    continue
                self._index.delete(msg_id)
                summary = self._summaries[entry.file]
                summary.valid_total_size -= entry.total_size
                self._total_valid -= entry.total_size
                if summary.valid_total_size == 0 and entry.file != self._cur and not summary.locked:
                    self._delete_file(entry.file)
            self._maybe_gc()

    # -- buffering and fsync ---------------------------------------------------------------
    def flush(self) -> None:
        """Hand the write buffer to the OS (no fsync)."""
        with self._lock:
            self._flush_locked()

    def needs_sync(self, client: int | None = None) -> bool:
        """True when `client` (or, with None, any client) waits for an on_disk confirm that
        no sync has started yet."""
        with self._lock:
            if client is not None:
                return bool(self._pending.get(client))
            return any(self._pending.values())

    def sync(self) -> None:
        """Flush, then fsync on the worker thread and call the on_disk callbacks (see module
        docstring). Returns at once."""
        with self._lock:
            self._flush_locked()
            if not self._dirty and not self._pending and not self._flow:
                return
            batch = (self._dirty, self._dir_dirty, self._pending, self._flow)
            self._dirty, self._dir_dirty, self._pending, self._flow = set(), False, {}, {}
            if not self.fsync and self._stall is None:
                callbacks = [(self._clients.get(c), ids) for c, ids in batch[2].items()]
                credits = [(self._credit_cbs.get(c), n) for c, n in batch[3].items()]
            else:
                self._sync_queue.append(batch)
                if not self._fsync_running:
                    self._fsync_running = True
                    self._pool.submit(self._fsync_worker)
                return
        for cb, ids in callbacks:
            if cb is not None and ids:
                cb(ids)
        for credit_cb, n in credits:
            if credit_cb is not None and n:
                credit_cb(n)

    def stall_syncs(self, gate: threading.Event) -> None:
        """Make every later sync wait, on the fsync thread, until `gate` is set: the store
        behaves as on a stalled disk (writes buffer, confirms and flow credit wait). For
        fault-injection tests and drills of back-pressure; `gate.set()` ends the stall."""
        with self._lock:
            self._stall = gate

    def _fsync_worker(self) -> None:
        while True:
            with self._lock:
                if not self._sync_queue:
                    self._fsync_running = False
                    self._fsync_idle.notify_all()
                    return
                batches, self._sync_queue = self._sync_queue, []
                files = set().union(*(b[0] for b in batches))
                dir_too = any(b[1] for b in batches)
                stall = self._stall
            if stall is not None:
                stall.wait()
                with self._lock:
                    if self._stall is stall:
                        self._stall = None
            if self.fsync:
                for num in files:
                    _fsync_path(self._path(num))
                if dir_too:
                    fsync_dir(self.directory)
            for _files, _d, pending, flow in batches:
                for client, ids in pending.items():
                    with self._lock:
                        cb = self._clients.get(client)
                    if cb is not None and ids:
                        cb(ids)
                for client, n in flow.items():
                    with self._lock:
                        credit_cb = self._credit_cbs.get(client)
                    if credit_cb is not None and n:
                        credit_cb(n)

    def wait_for_sync(self, timeout: float = 10.0) -> None:
        """Block until no fsync is running (tests and `close`)."""
        with self._lock:
            self._fsync_idle.wait_for(lambda: not self._fsync_running, timeout)

    def _flush_locked(self) -> None:
        if self._buf:
            os.write(self._cur_fd, self._buf)
            replication_hook.appended(self._path(self._cur), self._cur_flushed, self._buf)
            self._cur_flushed += len(self._buf)
            self._buf = bytearray()

    def _roll(self) -> None:
        self._flush_locked()
        os.close(self._cur_fd)
        self._dirty.add(self._cur)
        old = self._cur
        self._cur = old + 1
        while self._cur in self._summaries:
            self._cur += 1
        self._open_current(self._cur)
        if self._summaries[old].valid_total_size == 0:
            self._delete_file(old)

    def _schedule(self, confirm: bool) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (tests, tools): the caller flushes/syncs explicitly
        if self._timer is not None and self._timer_loop is not loop:
            self._timer = None  # left over from a loop that has gone
        if self._timer is not None and (self._timer_is_sync or not confirm):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_is_sync = confirm
        self._timer_loop = loop
        if confirm:
            self._timer = loop.call_soon(self._on_timer)
        else:
            self._timer = loop.call_later(self.flush_interval, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._open:
            self.sync()

    # -- files -----------------------------------------------------------------------------
    def _path(self, num: int) -> str:
        return os.path.join(self.directory, ff.file_name(num))

    def _read_fd(self, num: int) -> int:
        fd = self._read_fds.get(num)
        if fd is None:
            fd = os.open(self._path(num), os.O_RDONLY)
            self._read_fds[num] = fd
            self._summaries[num].readers = 1
        return fd

    def _close_read_fd(self, num: int) -> None:
        fd = self._read_fds.pop(num, None)
        if fd is not None:
            os.close(fd)

    def _delete_file(self, num: int) -> None:
        """Unlink file `num` (lock held; not current, not locked)."""
        self._close_read_fd(num)
        summary = self._summaries.pop(num)
        self._total_size -= summary.file_size
        self._total_valid -= summary.valid_total_size
        self._dirty.discard(num)
        os.unlink(self._path(num))
        replication_hook.deleted(self._path(num))
        self._dir_dirty = True

    def file_summaries(self) -> dict[int, FileSummary]:
        """A copy of the per-file summaries (file number -> FileSummary)."""
        with self._lock:
            return {
                n: FileSummary(s.valid_total_size, s.file_size, s.locked, s.readers)
                for n, s in self._summaries.items()
            }

    def totals(self) -> tuple[int, int]:
        """(all bytes in files, live bytes)."""
        with self._lock:
            return self._total_size, self._total_valid

    def __len__(self) -> int:
        with self._lock:
            return len(self._index)

    # -- GC --------------------------------------------------------------------------------
    def _maybe_gc(self) -> None:
        if not self.gc_enabled or self._closing:
            return
        if self._gc_future is not None and not self._gc_future.done():
            return
        total, valid = self._total_size, self._total_valid
        if total > GC_MIN_FILES * self.file_size_limit and (total - valid) > GARBAGE_FRACTION * total:
            from broker.msg_store import gc

            self._gc_future = self._gc_pool.submit(gc.collect, self)

    def wait_for_gc(self, timeout: float = 30.0) -> None:
        """Block until a running GC pass ends (tests, `close`)."""
        fut = self._gc_future
        if fut is not None:
            fut.result(timeout)

    # -- shutdown --------------------------------------------------------------------------
    def close(self) -> None:
        """Clean shutdown: stop GC, flush and fsync everything, write the snapshot."""
        if not self._open:
            return
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.wait_for_gc()
        self.sync()
        self.wait_for_sync()
        self._pool.shutdown(wait=True)
        self._gc_pool.shutdown(wait=True)
        with self._lock:
            if self.fsync:
                os.fsync(self._cur_fd)
            os.close(self._cur_fd)
            for num in list(self._read_fds):
                self._close_read_fd(num)
            self._write_snapshot()
            self._open = False

    def abandon(self) -> None:
        """Close descriptors without flushing or a snapshot (tests simulate a crash; buffered
        bytes are lost as they would be)."""
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
        self.wait_for_gc()
        self.wait_for_sync()
        self._pool.shutdown(wait=True)
        self._gc_pool.shutdown(wait=True)
        with self._lock:
            os.close(self._cur_fd)
            for num in list(self._read_fds):
                self._close_read_fd(num)
            self._open = False

    def _write_snapshot(self) -> None:
        parts = [_MAGIC, struct.pack(">I", len(self._summaries))]
        for num in sorted(self._summaries):
            s = self._summaries[num]
            parts.append(_SNAP_FILE.pack(num, s.file_size, s.valid_total_size))
        items = self._index.items()
        parts.append(struct.pack(">Q", len(items)))
        parts.extend(
            _SNAP_ENTRY.pack(m, e.ref_count, e.file, e.offset, e.total_size) for m, e in items
        )
        data = b"".join(parts)
        data += struct.pack(">I", zlib.crc32(data))
        write_atomically(self.directory, SNAPSHOT, data, self.fsync)


def _fsync_path(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # deleted (emptied or combined by GC) since it was written
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

