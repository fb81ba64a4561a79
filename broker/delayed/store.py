"""The timer index of one delayed exchange: messages waiting for their due time, on disk,
handed out in due order.

Owns: the files of one delayed exchange's directory and the in-memory part of its index:
- `journal-<g>` (broker/quorum/record_log.py frames): every message taken since the last
  spill, as a record `due ms:u64 | seq:u64 | msg_id:16 | flags:u8 | message`
  (broker/storage_codec.py's form). Its messages are also in memory, in a heap keyed by
  (due, seq) (the memtable).
- `run-<n>-<count>-<max seq>-<g>`: a sorted run, the memtable written out in (due, seq)
  order when it passed `memtable_bytes`, covering journal generations up to g. The spill
  is done in a thread (`SpillJob`): the memtable's messages stay in memory and are handed
  out from there meanwhile, new messages go to a new memtable and journal `g + 1`, and
  journal `g` is deleted once the run is fsynced and renamed into place (so a run under its
  final name is whole; at start, journals it covers are deleted, others read back). Runs
  are read forward a chunk at a time: 4 KiB first (its head), then `readahead` bytes
  (64 KiB), less when there are many runs, so that all their chunks together stay within
  READ_BUDGET (8 MiB; 4 KiB at least).
  At most `open_runs` (64) runs hold an open file (`_OpenRuns`: the least recently read is
  closed first, its chunk kept, and opened again at the same offset when that chunk is
  used up), so 10 million waiting messages cost the memtable and the read budget, and
  never more than 64 descriptors per exchange.
- `fired`: the watermark, the largest (due, seq) such that every message up to it was handed
  out and settled (its targets confirmed it or it had none), in one of two slots written in
  place in turn (`_Watermark`). Messages are handed out in key
  order, and a new message's key is always above every key handed out (its due time is
  clamped to the last one handed out, its seq is new), so the watermark alone says what is
  done: recovery skips everything at or below it.
A message handed out but not settled when the broker dies is handed out again after the
restart (at least once: it may reach its queues twice when the broker dies between a
target's confirm and the watermark's record). Nothing confirmed to a publisher is lost: the
holder confirms a publish only after `sync` made its journal record durable.

Must never: hand out a message before its due time, or out of (due, seq) order; block on
fsync in the event loop (the holder runs `sync_fds` in a thread).
Source of the contract: rabbitmq-delayed-message-exchange (its Mnesia table keyed by due
time), LavinMQ's delayed exchange (an internal queue ordered by due time); the layout is
this broker's own, after a log-structured merge of sorted runs.
"""

from __future__ import annotations

import heapq
import logging
import os
import shutil
import struct
import sys
import threading
import zlib
from bisect import bisect_left
from collections import OrderedDict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from operator import itemgetter
from typing import Any, BinaryIO

from broker import replication_hook, storage_codec
from broker.durable_io import fsync_and_close, fsync_dir, fsync_path, write_parts_atomically
from broker.message import Message
from broker.quorum.record_log import RecordLog, frame

log = logging.getLogger("broker.delayed")

JOURNAL = "journal"
FIRED = "fired"
RUN_PREFIX = "run-"
_ENTRY = struct.Struct(">QQ16sB")  # due ms, seq, msg_id, flags; then storage_codec's bytes
_KEY = struct.Struct(">QQ")
_FRAME = struct.Struct(">II")  # record_log's frame head: length, CRC32
READ_BUDGET = 8 << 20  # bytes of chunks all runs read ahead together (4 KiB each at least)
MIN_CHUNK = 4 << 10
SPILL_CHUNK = 1024  # records sorted (and joined) per GIL hold when a memtable is spilled
# the interpreter's switch interval while a spill runs (s; CPython's default is 0.005): the
# event loop's thread gets the GIL back within about this much of asking
SPILL_SWITCH_S = 0.0005


class _ShortGilTurns:
    """While any spill runs, a short switch interval (SPILL_SWITCH_S); the previous one
    comes back when the last ends. Process-wide, as `sys.setswitchinterval` is."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._saved = sys.getswitchinterval()

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if self._users == 0:
                self._saved = sys.getswitchinterval()
                sys.setswitchinterval(SPILL_SWITCH_S)
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    sys.setswitchinterval(self._saved)


_SHORT_GIL_TURNS = _ShortGilTurns()


def close_all(fds: list[int]) -> None:
    """Close `fds` (for a thread: the last close of an unlinked file frees its blocks)."""
    for fd in fds:
        os.close(fd)


def drop_gradually(items: list[Any]) -> None:
    """Free `items` (holding the last references to them) SPILL_CHUNK at a time with short
    GIL turns: for a thread, so that the event loop never waits for one long free."""
    with _SHORT_GIL_TURNS.held():
        while items:
            del items[-SPILL_CHUNK:]
ENTRY_OVERHEAD = 120  # bytes of Python objects per memtable entry beside its record

Key = tuple[int, int]  # (due ms since the epoch, seq)


def encode_entry(due: int, seq: int, message: Message, flags: int = 0) -> bytes:
    """A journal or run record: the due time, the seq, the holder's flags (a byte) and the
    message."""
    return _ENTRY.pack(due, seq, message.msg_id, flags) + storage_codec.encode(message)


def decode_entry(record: bytes) -> tuple[int, int, int, Message]:
    """(due ms, seq, flags, message) of a record made by `encode_entry`; the message's
    properties stay encoded until read."""
    due, seq, msg_id, flags = _ENTRY.unpack_from(record)
    return due, seq, flags, storage_codec.decode_lazy(msg_id, memoryview(record)[_ENTRY.size:])


class _Watermark:
    """The `fired` file: two 32-byte slots, each `counter:u64 | due:u64 | seq:u64 |
    CRC32:u32 | pad`, written in place in turn (one pwrite, no rewrite and no fsync in the
    loop: `take_sync_fd` hands the fsync to the holder's thread). Reading takes the valid
    slot with the larger counter, so a torn write leaves the other one."""

    _SLOT = struct.Struct(">QQQI4x")

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, FIRED)
        self._counter = 0
        self._dirty = False
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)

    def load(self) -> Key | None:
        data = os.pread(self._fd, 2 * self._SLOT.size, 0)
        best: tuple[int, Key] | None = None
        for i in range(len(data) // self._SLOT.size):
            counter, due, seq, crc = self._SLOT.unpack_from(data, i * self._SLOT.size)
            if crc == zlib.crc32(_KEY.pack(counter, due) + seq.to_bytes(8, "big")) and (
                    best is None or counter > best[0]):
                best = (counter, (due, seq))
        if best is None:
            return None
        self._counter = best[0]
        return best[1]

    def write(self, key: Key) -> None:
        self._counter += 1
        counter = self._counter
        data = self._SLOT.pack(counter, key[0], key[1],
                               zlib.crc32(_KEY.pack(counter, key[0]) + key[1].to_bytes(8, "big")))
        offset = (counter % 2) * self._SLOT.size
        os.pwrite(self._fd, data, offset)
        replication_hook.appended(self.path, offset, data)
        self._dirty = True

    def take_sync_fd(self) -> int:
        if not self._dirty:
            return -1
        self._dirty = False
        return os.dup(self._fd)

    def sync(self) -> None:
        if self._dirty:
            os.fsync(self._fd)
            self._dirty = False

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class _Run:
    """One sorted run file, read forward: `head` is its next (due, seq, record), None at
    the end."""

    __slots__ = ("path", "number", "count", "max_seq", "_f", "_buf", "_pos", "_offset",
                 "_open", "_chunk", "head", "last")

    def __init__(self, path: str, number: int, count: int, max_seq: int, after: Key,
                 open_runs: _OpenRuns) -> None:
        self.path = path
        self.number = number
        self.count = count  # records in the file
        self.max_seq = max_seq
        self._f: BinaryIO | None = None  # open while among `open_runs`' most recent
        self._buf = b""
        self._pos = 0
        self._offset = 0  # where in the file `_buf` ends
        # the first read is small: a new run's turn may be hours away, and its first
        # record is all the heap needs until then; later reads take the store's chunk
        self._chunk = MIN_CHUNK
        self._open = open_runs
        self.head: tuple[int, int, bytes] | None = None
        self.last: Key = (-1, -1)  # the last key handed out of it
        self.advance()
        while self.head is not None and (self.head[0], self.head[1]) <= after:
            self.count -= 1
            self.advance()

    def advance(self) -> None:
        """Read the next record into `head` (None past the last; a torn record ends it)."""
        while True:
            buf, pos = self._buf, self._pos
            if pos + _FRAME.size <= len(buf):
                size, _crc = _FRAME.unpack_from(buf, pos)
                end = pos + _FRAME.size + size
                if end <= len(buf):
                    record = buf[pos + _FRAME.size:end]
                    self._pos = end
                    due, seq = _KEY.unpack_from(record)
                    self.head = (due, seq, record)
                    return
            f = self._f
            if f is None:
                f = self._f = open(self.path, "rb")  # noqa: SIM115 - closed by release()
                f.seek(self._offset)
            self._open.used(self)
            more = f.read(self._chunk)
            self._chunk = self._open.chunk
            if not more:
                self.head = None
                self.close()
                return
            self._offset += len(more)
            self._buf = buf[pos:] + more
            self._pos = 0

    def release(self) -> None:
        """Close the file, keeping what is left of the chunk (the next read opens it again
        at `_offset`): `_OpenRuns` makes room for a run being read."""
        if self._f is not None:
            self._f.close()
            self._f = None

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
        self._open.forget(self)


class _OpenRuns:
    """The runs holding an open file and a chunk, at most `limit`, least recently read
    first: reading one more closes the oldest (`_Run.release`)."""

    def __init__(self, limit: int, chunk: int) -> None:
        self.limit = limit
        self.chunk = chunk  # bytes a run reads at a time (the store sets it per run count)
        self._runs: OrderedDict[int, _Run] = OrderedDict()  # id(run) -> run

    def used(self, run: _Run) -> None:
        runs = self._runs
        key = id(run)
        if key in runs:
            runs.move_to_end(key)
            return
        runs[key] = run
        while len(runs) > self.limit:
            _, oldest = runs.popitem(last=False)
            oldest.release()

    def forget(self, run: _Run) -> None:
        self._runs.pop(id(run), None)

    def __len__(self) -> int:
        return len(self._runs)


class SpillJob:
    """One memtable being written as sorted run `number` (covering journals up to
    `generation`): `write()` in any thread (`sorted_parts`: the event loop waits at most
    about one SPILL_CHUNK's sort for the GIL), then `DelayStore.finish_spill(job)` in the
    store's."""

    def __init__(self, directory: str, number: int, generation: int,
                 entries: list[tuple[int, int, bytes]], max_seq: int) -> None:
        self.directory = directory
        self.number = number
        self.generation = generation
        self.entries = entries  # a copy of the memtable's heap: nobody else changes it
        self.name = ""  # the run's file name, once written
        self.journal_path = ""  # the journal started with it, fsynced by write()
        self.count = len(entries)
        self.max_seq = max_seq

    def write(self) -> None:
        with _SHORT_GIL_TURNS.held():
            self._write()

    def _write(self) -> None:
        if self.journal_path:  # its directory entry with the run's, below
            fsync_path(self.journal_path)
        self.name = f"{RUN_PREFIX}{self.number}-{self.count}-{self.max_seq}-{self.generation}"
        write_parts_atomically(self.directory, self.name, sorted_parts(self.entries),
                               fsync=True)
        self.entries = []


def sorted_parts(entries: list[tuple[int, int, bytes]]) -> list[bytes]:
    """The records of `entries` ((due, seq, framed record), keys distinct) joined in key
    order, as parts of about SPILL_CHUNK records each.

    No single C call may hold the GIL for long, for the event loop waits for all of it (the
    interpreter hands the GIL over every switch interval, only between bytecodes); nor may
    the spill cost much CPU, for on a small machine the loop and the clients want the same
    cores. So the entries are sorted in chunks of SPILL_CHUNK (one short hold each; nearly
    free when they came in order, as with one delay for every message), then cut into key
    ranges at splitters sampled from the chunks: each range gathers its slice of every chunk
    (found by bisection), is sorted (Timsort merges the slices' runs in C, a short hold) and
    joined. Measured on 80 000 records (29 Nov): 101-126 ms of CPU in order and 253 ms
    shuffled with a Python heapq.merge (what this did before); see docs/benchmarks.md for
    this version's figures. One Timsort of the whole (before that) held the GIL 6-19 ms, so
    that at 10 000 msg/s into a delayed exchange a publish every 4 s waited that long
    (issue 50's lateness, 29 Nov)."""
    chunks = [sorted(entries[i:i + SPILL_CHUNK]) for i in range(0, len(entries), SPILL_CHUNK)]
    if not chunks:
        return []
    take = itemgetter(2)
    if all(chunks[i][-1] < chunks[i + 1][0] for i in range(len(chunks) - 1)):
        # in order already (one delay for every message, taken in order, none handed out
        # yet: a heap filled in key order is a sorted list)
        return [b"".join(map(take, chunk)) for chunk in chunks]
    # splitters: every 16th of a sample of every 64th record; a range holds about
    # 16 * 64 = SPILL_CHUNK records
    sample = sorted([entry for chunk in chunks for entry in chunk[::64]])
    splitters = sample[16::16]
    cuts = [[0, *(bisect_left(chunk, s) for s in splitters), len(chunk)] for chunk in chunks]
    parts = []
    for r in range(len(splitters) + 1):
        part: list[tuple[int, int, bytes]] = []
        for chunk, cut in zip(chunks, cuts, strict=True):
            lo, hi = cut[r], cut[r + 1]
            if lo < hi:
                part.extend(chunk[lo:hi])
        part.sort()
        parts.append(b"".join(map(take, part)))
    return parts


class DelayStore:
    """The waiting messages of one delayed exchange, in `directory` (None: memory only, for
    a broker without a data directory). Single-threaded except `sync_fds`, which only
    fsyncs descriptors it was given.

    Taking: `add(due_ms, message)` (due time clamped as the module says), then `flush()` to
    write what was added (one write(2)), `sync_fds()` + `synced()` or `sync()` to make it
    durable. Handing out: `next_due()`, `pop_due(now_ms, limit)` → [(key, message)], and
    `settle(key)` once each was published (or had nowhere to go), `commit()` after a batch
    of settles. Sizes: `len(store)`
    messages waiting (not handed out), `bytes` their body bytes.
    """

    def __init__(self, directory: str | None, *, memtable_bytes: int = 8 << 20,
                 readahead: int = 64 << 10, open_runs: int = 64) -> None:
        self.directory = directory
        self.memtable_bytes = memtable_bytes  # spill to a sorted run past this many
        self.readahead = readahead  # bytes read from a run at a time
        self.open_runs = _OpenRuns(open_runs, readahead)  # runs with an open file
        # heap of (due, seq, record framed as the journal and runs hold it)
        self._mem: list[tuple[int, int, bytes]] = []
        self._mem_bytes = 0  # framed records plus ENTRY_OVERHEAD each
        self._runs: dict[int, _Run] = {}  # number -> run
        self._run_heads: list[tuple[int, int, int]] = []  # heap of (due, seq, run number)
        self._next_run = 0
        self._next_seq = 1
        self._count = 0  # waiting, not handed out
        self.watermark: Key = (0, 0)  # every key at or below it is done (seqs start at 1)
        self._floor = 0  # due ms of the last key handed out: new keys start there
        self._order: deque[Key] = deque()  # keys handed out, not yet under the watermark
        self._settled: set[Key] = set()  # of those, the ones settled
        # handed out of the memtable, not settled: their framed records
        self._unsettled_mem: dict[Key, bytes] = {}
        self._pending: list[bytes] = []  # framed journal records not yet written
        # the memtable being written by a SpillJob: still handed out from (a heap)
        self._spilling: list[tuple[int, int, bytes]] = []
        self._spill_job: SpillJob | None = None
        self._old_journal: RecordLog | None = None  # the journal a SpillJob covers
        self._directory_unsynced = False  # a journal renamed in, its entry not fsynced
        # the holder's: spent runs and covered journals are unlinked in a thread, not here
        # (an unlink of an 8 MiB file took 3-4 ms of the event loop at every spill)
        self.unlink_later = False
        self._garbage: list[int] = []
        self._spill_last: Key = (0, 0)  # the last key handed out of `_spilling`
        self._generation = 0  # of the journal written now
        self._journal: RecordLog | None = None
        self._fired: _Watermark | None = None
        self._watermark_moved = False  # since the last commit
        if directory is not None:
            os.makedirs(directory, exist_ok=True)
            self._fired = _Watermark(directory)
            self._recover()

    # -- recovery --------------------------------------------------------------------------
    def _recover(self) -> None:
        assert self._fired is not None and self.directory
        mark = self._fired.load()
        if mark is not None:
            self.watermark = mark
        self._floor = self.watermark[0]
        max_seq = self.watermark[1]
        covered = -1  # the newest journal generation a whole run holds
        journals: list[int] = []
        names = sorted(os.listdir(self.directory))
        self._size_chunks(sum(1 for n in names if n.startswith(RUN_PREFIX)))
        for name in names:
            if name.startswith(JOURNAL + "-") and name[len(JOURNAL) + 1:].isdigit():
                journals.append(int(name[len(JOURNAL) + 1:]))
                continue
            if not name.startswith(RUN_PREFIX) or name.endswith(".tmp"):
                if name.endswith(".tmp"):  # a spill the crash interrupted: its journal stays
                    os.unlink(os.path.join(self.directory, name))
                continue
            try:
                number, count, run_max, generation = (
                    int(p) for p in name[len(RUN_PREFIX):].split("-"))
            except ValueError:
                continue
            self._next_run = max(self._next_run, number + 1)
            covered = max(covered, generation)
            max_seq = max(max_seq, run_max)
            run = _Run(os.path.join(self.directory, name), number, count, run_max,
                       self.watermark, self.open_runs)
            if run.head is None:
                self._delete_run(run)
                continue
            self._add_run(run)
        live = []
        # a record handed out and not settled when a spill started is in the journal that
        # spill covers and in the one it started: read once
        seen: set[Key] = set()
        for generation in sorted(journals):
            path = os.path.join(self.directory, f"{JOURNAL}-{generation}")
            if generation <= covered:  # its messages are in a run
                os.unlink(path)
                replication_hook.deleted(path)
                continue
            for record in RecordLog(self.directory, f"{JOURNAL}-{generation}").load():
                due, seq = _KEY.unpack_from(record)
                max_seq = max(max_seq, seq)
                if (due, seq) > self.watermark and (due, seq) not in seen:
                    seen.add((due, seq))
                    live.append(record)
                    framed = frame(record)
                    heapq.heappush(self._mem, (due, seq, framed))
                    self._mem_bytes += len(framed) + ENTRY_OVERHEAD
                    self._count += 1
            self._generation = max(self._generation, generation)
        # one journal from now on, holding what the old ones held that is still live
        self._generation = max(self._generation, covered) + 1
        self._journal = RecordLog(self.directory, f"{JOURNAL}-{self._generation}")
        self._journal.rewrite(live)
        for generation in journals:
            path = os.path.join(self.directory, f"{JOURNAL}-{generation}")
            if generation != self._generation and os.path.exists(path):
                os.unlink(path)
                replication_hook.deleted(path)
        self._next_seq = max_seq + 1
        if self._count:
            log.info("delayed messages in %s: %d waiting, %d sorted runs", self.directory,
                     self._count, len(self._runs))

    def _size_chunks(self, runs: int) -> None:
        """Chunks of `readahead` bytes, less with many runs: READ_BUDGET in all."""
        self.open_runs.chunk = max(MIN_CHUNK, min(self.readahead, READ_BUDGET // max(1, runs)))

    def _add_run(self, run: _Run) -> None:
        self._runs[run.number] = run
        self._size_chunks(len(self._runs))
        self._count += run.count
        assert run.head is not None
        heapq.heappush(self._run_heads, (run.head[0], run.head[1], run.number))

    # -- taking ----------------------------------------------------------------------------
    def add(self, due: int, message: Message, flags: int = 0) -> Key:
        """Hold `message` until `due` (ms since the epoch; clamped up to the last due time
        handed out) with the holder's `flags` (0..255); returns its key. Written by the next
        `flush`."""
        if due < self._floor:
            due = self._floor
        seq = self._next_seq
        self._next_seq = seq + 1
        framed = frame(encode_entry(due, seq, message, flags))
        heapq.heappush(self._mem, (due, seq, framed))
        self._mem_bytes += len(framed) + ENTRY_OVERHEAD
        self._count += 1
        if self._journal is not None:
            self._pending.append(framed)
        return (due, seq)

    def flush(self, background: bool = False) -> SpillJob | None:
        """Write what `add` took since the last flush (the page cache: survives a killed
        process); then, if the memtable grew past its bound and no spill is under way,
        spill it: at once, or with `background` as a SpillJob returned for the caller to
        `write()` in a thread and hand back to `finish_spill`."""
        if self._pending and self._journal is not None:
            self._journal.append_framed(self._pending)
            self._pending = []
        if (self._mem_bytes > self.memtable_bytes and self.directory is not None
                and self._spill_job is None):
            job = self._start_spill()
            if background:
                return job
            job.write()
            self.finish_spill(job)
        return None

    def _start_spill(self) -> SpillJob:
        """Hand the memtable to a SpillJob and start a new memtable and journal; the old
        journal (deleted once the run is whole) holds the memtable's messages meanwhile,
        and the new one the records handed out of memtables that are not settled yet."""
        assert self.directory is not None and self._journal is not None
        job = SpillJob(self.directory, self._next_run, self._generation, list(self._mem),
                       self._next_seq - 1)
        self._next_run += 1
        self._spilling = self._mem  # still a heap, still handed out from
        self._spill_last = (0, 0)
        self._spill_job = job
        self._mem = []
        self._mem_bytes = 0
        # still fsynced with the rest (confirms may wait on its last records) until the run
        # that covers it is whole
        self._old_journal = self._journal
        self._generation += 1
        self._journal = RecordLog(self.directory, f"{JOURNAL}-{self._generation}")
        # not fsynced here: two fsyncs on the event loop stalled it for milliseconds at
        # every spill. The job fsyncs the file before its run (and the directory after),
        # so the new journal is durable before finish_spill deletes the old one; until
        # then the old one holds these records too, and confirms of what is appended
        # meanwhile wait for the directory as well (sync_fds).
        self._journal.rewrite([f[_FRAME.size:] for f in self._unsettled_mem.values()],
                              fsync=False)
        job.journal_path = self._journal.path
        self._directory_unsynced = True
        return job

    def finish_spill(self, job: SpillJob) -> list[tuple[int, int, bytes]]:
        """`job` wrote its run: read it from the messages not handed out meanwhile, and
        delete the journal it covers. Returns the spilled memtable's entries, the last
        references to them: freeing 80 000 records at once holds the GIL about 4 ms, so a
        caller on the event loop hands them to `drop_gradually` in a thread."""
        assert self.directory is not None and job is self._spill_job
        self._spill_job = None
        self._count -= len(self._spilling)  # counted again as the run's
        spilled, self._spilling = self._spilling, []
        run = _Run(os.path.join(self.directory, job.name), job.number, job.count,
                   job.max_seq, max(self.watermark, self._spill_last), self.open_runs)
        if run.head is None:
            self._delete_run(run)
        else:
            self._add_run(run)
        old, self._old_journal = self._old_journal, None
        if old is not None:
            old.close()
        self._unlink(os.path.join(self.directory, f"{JOURNAL}-{job.generation}"))
        return spilled

    def abort_spill(self, job: SpillJob) -> None:
        """`job` failed (a disk error, logged by the caller): its messages go back to the
        memtable, and the journal that holds them stays (read back at the next start)."""
        if job is not self._spill_job:
            return
        self._spill_job = None
        for entry in self._spilling:
            self._mem_bytes += len(entry[2]) + ENTRY_OVERHEAD
        self._mem.extend(self._spilling)
        heapq.heapify(self._mem)
        self._spilling = []

    def spilling(self) -> bool:
        """A SpillJob is under way (the caller must hand it back before `close`)."""
        return self._spill_job is not None

    def sync_fds(self) -> list[int]:
        """Descriptors to fsync for everything written so far (duplicates: the caller
        fsyncs and closes them, in any thread)."""
        fds = []
        for records in (self._journal, self._old_journal, self._fired):
            fd = records.take_sync_fd() if records is not None else -1
            if fd >= 0:
                fds.append(fd)
        if self._directory_unsynced and self.directory is not None:
            self._directory_unsynced = False  # a new journal's entry (_start_spill)
            fds.append(os.open(self.directory, os.O_RDONLY))
        return fds

    def sync(self) -> None:
        """fsync what was written, here and now."""
        fsync_and_close(self.sync_fds())

    # -- handing out -----------------------------------------------------------------------
    def next_due(self) -> int | None:
        """Due time (ms since the epoch) of the next message, None when none waits."""
        best = None
        for heap in (self._mem, self._spilling, self._run_heads):
            if heap and (best is None or heap[0][0] < best):
                best = heap[0][0]
        return best

    def pop_due(self, now: int, limit: int) -> list[tuple[Key, int, Message]]:
        """Up to `limit` messages due at or before `now` (ms), in (due, seq) order, as
        (key, flags, message); each must be `settle`d once published."""
        out: list[tuple[Key, int, Message]] = []
        mem, spilling, heads = self._mem, self._spilling, self._run_heads
        while len(out) < limit:
            if spilling and (not mem or spilling[0] < mem[0]) and (
                    not heads or (spilling[0][0], spilling[0][1]) < (heads[0][0], heads[0][1])):
                if spilling[0][0] > now:
                    break
                due, seq, record = heapq.heappop(spilling)
                record = record[_FRAME.size:]
                self._spill_last = (due, seq)
            elif mem and (not heads or (mem[0][0], mem[0][1]) < (heads[0][0], heads[0][1])):
                if mem[0][0] > now:
                    break
                due, seq, framed = heapq.heappop(mem)
                self._mem_bytes -= len(framed) + ENTRY_OVERHEAD
                self._unsettled_mem[(due, seq)] = framed
                record = framed[_FRAME.size:]
            elif heads:
                if heads[0][0] > now:
                    break
                due, seq, number = heapq.heappop(heads)
                run = self._runs[number]
                assert run.head is not None
                record = run.head[2]
                run.last = (due, seq)
                run.advance()
                if run.head is not None:
                    heapq.heappush(heads, (run.head[0], run.head[1], number))
            else:
                break
            key = (due, seq)
            self._count -= 1
            self._floor = due
            self._order.append(key)
            _due, _seq, flags, message = decode_entry(record)
            out.append((key, flags, message))
        return out

    def settle(self, key: Key) -> None:
        """The message handed out under `key` was published (or had nowhere to go); the
        watermark moves in memory, and is written by the next `commit`."""
        self._settled.add(key)
        order, settled = self._order, self._settled
        while order and order[0] in settled:
            done = order.popleft()
            settled.discard(done)
            self._unsettled_mem.pop(done, None)
            self.watermark = done
            self._watermark_moved = True

    def commit(self) -> None:
        """Write the watermark if it moved (one record per batch), and delete the runs
        every message of which is under it."""
        if not self._watermark_moved:
            return
        self._watermark_moved = False
        if self._fired is not None:
            self._fired.write(self.watermark)
        self._drop_spent_runs()

    def _drop_spent_runs(self) -> None:
        for run in [r for r in self._runs.values()
                    if r.head is None and r.last <= self.watermark]:
            self._delete_run(run)

    def _delete_run(self, run: _Run) -> None:
        run.close()
        self._runs.pop(run.number, None)
        self._size_chunks(len(self._runs))
        self._unlink(run.path)

    def _unlink(self, path: str) -> None:
        """Delete a spent run or a covered journal. With `unlink_later` the name goes now
        and the blocks later: the file is opened, then unlinked (tens of µs: the inode
        lives on), and the last close, which frees its blocks (3-4 ms for 8 MiB on
        ext4), is left to whoever calls `take_garbage`."""
        fd = -1
        if self.unlink_later:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                pass
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        if fd >= 0:
            self._garbage.append(fd)
        replication_hook.deleted(path)

    def take_garbage(self) -> list[int]:
        """Descriptors of files unlinked since the last call (with `unlink_later`), the
        last ones open on them: for `close_all` in a thread."""
        garbage, self._garbage = self._garbage, []
        return garbage

    # -- sizes and listing -----------------------------------------------------------------
    def __len__(self) -> int:
        return self._count

    def in_flight(self) -> int:
        """Handed out, not settled yet."""
        return len(self._order) - len(self._settled)

    def peek(self, limit: int) -> Iterator[tuple[Key, Message]]:
        """Up to `limit` waiting messages in due order, without handing them out (the
        management API's browse): the memtable's and the runs' next ones merged. Reads the
        run files again from their start."""
        runs = []
        # this browse's own: as many files at most, chunks of the same size
        opened = _OpenRuns(self.open_runs.limit, self.open_runs.chunk)
        for run in self._runs.values():
            runs.append(_Run(run.path, run.number, run.count, run.max_seq,
                             max(self.watermark, run.last), opened))
        try:
            streams: list[Iterator[tuple[int, int, bytes]]] = [
                iter([(d, q, f[_FRAME.size:]) for d, q, f in sorted(self._mem)]),
                iter([(d, q, f[_FRAME.size:]) for d, q, f in sorted(self._spilling)])]
            streams.extend(_run_records(r) for r in runs)
            for n, (due, seq, record) in enumerate(heapq.merge(*streams)):
                if n >= limit:
                    break
                yield (due, seq), decode_entry(record)[3]
        finally:
            for r in runs:
                r.close()

    # -- the end ---------------------------------------------------------------------------
    def close(self) -> None:
        """Write and fsync what is pending and close the files (a clean stop)."""
        self.commit()
        self.flush()
        self.sync()
        close_all(self.take_garbage())
        for run in list(self._runs.values()):
            run.close()
        for records in (self._journal, self._old_journal, self._fired):
            if records is not None:
                records.close()

    def delete(self) -> None:
        """Forget every message and remove the directory (the exchange was deleted)."""
        close_all(self.take_garbage())
        for run in list(self._runs.values()):
            run.close()
        self._runs.clear()
        for records in (self._journal, self._old_journal, self._fired):
            if records is not None:
                records.close()
        self._mem = []
        self._count = 0
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            replication_hook.deleted(self.directory)
            parent = os.path.dirname(self.directory)
            if os.path.isdir(parent):
                fsync_dir(parent)


def _run_records(run: _Run) -> Iterator[tuple[int, int, bytes]]:
    while run.head is not None:
        yield run.head
        run.advance()
