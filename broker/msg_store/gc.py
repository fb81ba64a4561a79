"""Message-store garbage collection (RabbitMQ `rabbit_msg_store_gc.erl` and the
`combine_files`/`delete_file_if_empty` parts of `rabbit_msg_store.erl`).

Owns: compacting `.rdq` files. Runs on the store's GC worker thread, started by
`MessageStore._maybe_gc` when all bytes > 2 x file_size_limit and garbage > 50 %. Never writes
to the current file and never holds the store lock while copying, so writers and readers keep
going; only the choice of files and the final swap take the lock.

One pass combines a pair of adjacent non-current files `left`, `right` whose live bytes fit in
one file: both are marked `locked` (so at most 2 files are locked, under RabbitMQ's limit of
4), the live records of left then right are copied into `<left>.rdt`, which is fsynced; then,
under the lock, index entries still pointing at the old places are moved to the new offsets,
`<left>.rdt` is renamed over `<left>.rdq` and `<right>.rdq` is deleted. A crash before the
rename leaves a stray `.rdt` (deleted at boot); after it, a record may be in both files (the
boot scan keeps the first copy). Files with no live data left are deleted on the way.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from broker import replication_hook
from broker.msg_store import file_format as ff
from broker.msg_store.index import FileSummary

# every function takes the MessageStore whose private state it works on (`store`); gc is
# that class's helper and is imported by it, so it does not import store.py back
MessageStore = Any

log = logging.getLogger("broker.store")


def collect(store: MessageStore) -> None:
    """Run GC passes until the garbage condition no longer holds or no pair fits."""
    while not store._closing:
        with store._lock:
            _delete_empty(store)
            total, valid = store._total_size, store._total_valid
            if total <= 2 * store.file_size_limit or (total - valid) <= 0.5 * total:
                return
            pair = _pick_pair(store)
            if pair is None:
                return
            left, right = pair
            store._summaries[left].locked = True
            store._summaries[right].locked = True
        try:
            _combine(store, left, right)
        finally:
            with store._lock:
                for num in (left, right):
                    summary = store._summaries.get(num)
                    if summary is not None:
                        summary.locked = False


def _delete_empty(store: MessageStore) -> None:
    for num, summary in list(store._summaries.items()):
        if num != store._cur and summary.valid_total_size == 0 and not summary.locked:
            store._delete_file(num)


def _pick_pair(store: MessageStore) -> tuple[int, int] | None:
    """Adjacent non-current files with the most garbage whose live data fits in one file."""
    nums = sorted(n for n in store._summaries if n != store._cur)
    best = None
    best_garbage = 0
    for left, right in zip(nums, nums[1:], strict=False):
        a, b = store._summaries[left], store._summaries[right]
        if a.locked or b.locked:
            continue
        if a.valid_total_size + b.valid_total_size > store.file_size_limit:
            continue
        garbage = a.file_size + b.file_size - a.valid_total_size - b.valid_total_size
        if garbage > best_garbage:
            best, best_garbage = (left, right), garbage
    return best


def _combine(store: MessageStore, left: int, right: int) -> None:
    # 1. Which records are live now (one short lock).
    candidates = []
    for num in (left, right):
        for rec, body in ff.iter_records(store._path(num)):
            candidates.append((num, rec, body))
    with store._lock:
        live = []
        for num, rec, body in candidates:
            entry = store._index.lookup(rec.msg_id)
            if entry is not None and entry.file == num and entry.offset == rec.offset:
                live.append((num, rec, body))
    # 2. Copy them without the lock.
    tmp = os.path.join(store.directory, f"{left}.rdt")
    moved = []
    offset = 0
    with open(tmp, "wb") as f:
        for num, rec, body in live:
            record = ff.encode_record(rec.msg_id, body)
            f.write(record)
            moved.append((num, rec, offset))
            offset += len(record)
        f.flush()
        os.fsync(f.fileno())
    # 3. Swap under the lock: repoint entries that did not change meanwhile.
    with store._lock:
        new_valid = 0
        for num, rec, new_offset in moved:
            entry = store._index.lookup(rec.msg_id)
            if entry is not None and entry.file == num and entry.offset == rec.offset:
                entry.file = left
                entry.offset = new_offset
                new_valid += entry.total_size
        store._close_read_fd(left)
        store._close_read_fd(right)
        os.replace(tmp, store._path(left))
        replication_hook.replaced(store._path(left))
        dir_fd = os.open(store.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename is durable before the right file goes
        finally:
            os.close(dir_fd)
        old_left = store._summaries[left]
        old_right = store._summaries.pop(right)
        store._dirty.discard(right)
        os.unlink(store._path(right))
        replication_hook.deleted(store._path(right))
        store._total_size += offset - old_left.file_size - old_right.file_size
        store._total_valid += new_valid - old_left.valid_total_size - old_right.valid_total_size
        store._summaries[left] = FileSummary(new_valid, offset, locked=True)
        store._dir_dirty = True
    log.info(
        "%s: combined %d.rdq and %d.rdq into %d bytes (%d live)",
        store.directory, left, right, offset, new_valid,
    )
