"""The files a cluster replicates, on either side.

Owns: which paths under the data directory are replicated (`replicated`: the persistent
message store, queue indexes and what a quorum queue keeps beside them, stream segments, in
every worker's directory, and where each durable queue lives; not
the transient store, not `definitions.db` — definitions travel as the operations that change
them — and not this member's own `cluster/` state), listing them with their sizes and SHA-1
(`list_files`, the leader's side of a sync), and applying the stream's operations to a
follower's copy (`FollowerFiles`), each written at its offset so that applying one twice
changes nothing.
Must never: follow a path out of the data directory (broker/cluster/wire.py `safe_path`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil

from broker.cluster.wire import FileEntry, safe_path
from broker.definitions import Definitions
from broker.definitions_ops import apply_op
from broker.durable_io import fsync_dir, write_atomically

LOCAL_DIR = "cluster"  # this member's own state: never replicated
PLACEMENT_FILE = "queue_workers.json"  # where each durable queue lives (broker/workers/)


def replicated(path: str) -> bool:
    """Is `path` (relative, '/'-separated) a file the leader replicates? With several
    workers (docs/multicore.md) worker k's queues live under `worker-<k>/` in the same
    layout, and `queue_workers.json` says which worker's directory holds each durable
    queue. `vhosts/<vhost>/delayed/` holds the delayed exchanges' messages
    (broker/delayed/store.py), `vhosts/<vhost>/dedup/` the deduplication caches kept on
    disk (broker/dedup/cache.py)."""
    if path == PLACEMENT_FILE:
        return True
    parts = path.split("/")
    if parts[0].startswith("worker-") and parts[0][7:].isdigit():
        parts = parts[1:]
    if parts[0] != "vhosts" or len(parts) < 3:
        return False
    return parts[2] in ("queues", "streams", "msg_store_persistent", "delayed", "dedup")


def list_files(data_dir: str) -> list[FileEntry]:
    """Every replicated file under `data_dir` with its size and SHA-1 (read now; a file
    that disappears meanwhile is left out)."""
    out = []
    for root, dirs, names in os.walk(data_dir):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(root, name)
            rel = os.path.relpath(full, data_dir).replace(os.sep, "/")
            if not replicated(rel):
                continue
            try:
                size, digest = _sha1(full)
            except FileNotFoundError:
                continue
            out.append(FileEntry(rel, size, digest))
    return out


def _sha1(path: str, limit: int | None = None) -> tuple[int, bytes]:
    h = hashlib.sha1(usedforsecurity=False)
    size = 0
    with open(path, "rb") as f:
        while limit is None or size < limit:
            chunk = f.read(1 << 20 if limit is None else min(1 << 20, limit - size))
            if not chunk:
                break
            h.update(chunk)
            size += len(chunk)
    return size, h.digest()


class FollowerFiles:
    """A follower's copy of the replicated files under `data_dir`. `fsync`: `sync()`
    fdatasyncs every file written since the last call (the ack waits for it)."""

    def __init__(self, data_dir: str, fsync: bool) -> None:
        self.data_dir = data_dir
        self.fsync = fsync
        self._dirty: set[str] = set()  # written since the last sync
        self._dirty_dirs: set[str] = set()

    def _full(self, path: str) -> str:
        return os.path.join(self.data_dir, *safe_path(path).split("/"))

    def wanted(self, leader: list[FileEntry]) -> list[str]:
        """The paths whose content differs from the leader's list (missing, other size,
        other SHA-1); replicated files the leader does not have are deleted here: this
        member's tail diverged (it led once) and is cut back to what the leader has."""
        want = []
        theirs = {e.path for e in leader}
        for mine in list_files(self.data_dir):
            if mine.path not in theirs:
                os.remove(self._full(mine.path))
        for entry in leader:
            full = self._full(entry.path)
            try:
                size, digest = _sha1(full)
            except FileNotFoundError:
                want.append(entry.path)
                continue
            if size != entry.size or digest != entry.sha1:
                want.append(entry.path)
        return want

    def append(self, path: str, offset: int, data: bytes) -> None:
        full = self._full(path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        fd = os.open(full, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, data, offset)
        finally:
            os.close(fd)
        self._dirty.add(full)

    def replace(self, path: str, data: bytes) -> None:
        full = self._full(path)
        directory = os.path.dirname(full)
        os.makedirs(directory, exist_ok=True)
        write_atomically(directory, os.path.basename(full), data, fsync=self.fsync)
        self._dirty_dirs.add(directory)

    def truncate(self, path: str, size: int) -> None:
        full = self._full(path)
        try:
            os.truncate(full, size)
        except FileNotFoundError:
            return
        self._dirty.add(full)

    def delete(self, path: str) -> None:
        """Remove a file, or a directory and everything in it."""
        full = self._full(path)
        if os.path.isdir(full):
            shutil.rmtree(full, ignore_errors=True)
        else:
            try:
                os.remove(full)
            except FileNotFoundError:
                pass
        self._dirty.discard(full)
        self._dirty_dirs.add(os.path.dirname(full))

    def sync(self) -> None:
        """fdatasync what was written since the last sync (with `fsync`), then forget it."""
        dirty, self._dirty = self._dirty, set()
        dirs, self._dirty_dirs = self._dirty_dirs, set()
        if not self.fsync:
            return
        for full in dirty:
            try:
                fd = os.open(full, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        for directory in dirs:
            if os.path.isdir(directory):
                fsync_dir(directory)


class FollowerDefinitions:
    """A follower's copy of the definitions: its own `definitions.db`, rebuilt from the
    leader's snapshot when it syncs and changed by each replayed operation
    (broker/definitions_ops.py). Opened on first use, from the replication worker thread."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, "definitions.db")
        self._defs: Definitions | None = None

    def _open(self) -> Definitions:
        if self._defs is None:
            self._defs = Definitions(self.path, check_same_thread=False)
        return self._defs

    def rebuild(self, ops: list[bytes]) -> None:
        self.close()
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path + suffix)
        defs = self._open()
        for op in ops:
            apply_op(defs, op)

    def apply(self, op: bytes) -> None:
        apply_op(self._open(), op)

    def close(self) -> None:
        if self._defs is not None:
            self._defs.close()
            self._defs = None
