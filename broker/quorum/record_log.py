"""An append-only file of small records, replaced by a compacted copy now and then.

Owns: one file of framed records (`Length:u32 | CRC32:u32 | Payload`, big-endian), read
back up to the first torn or corrupt frame (a crash mid-append loses only that record),
appended with one write(2) each, fsynced on request, and rewritten atomically
(broker/durable_io.py) with the records still live. A quorum queue keeps its delivery
counts and its dead letters in flight in two of these, beside its index.
Must never: be used from more than one thread.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Iterable

from broker import replication_hook
from broker.durable_io import write_atomically

log = logging.getLogger("broker.queue")
_FRAME = struct.Struct(">II")


def frame(payload: bytes) -> bytes:
    """One record as stored: length, CRC32 of the payload, payload."""
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


class RecordLog:
    """The record file `directory/name`. `load()` returns the stored payloads in order;
    `append` adds one (page cache: survives a killed process), `sync` fsyncs what was
    appended since the last sync (survives a power cut), `rewrite` replaces the file with
    the given payloads."""

    def __init__(self, directory: str, name: str) -> None:
        self.directory = directory
        self.name = name
        self.path = os.path.join(directory, name)
        self._fd = -1
        self._dirty = False  # appended since the last fsync
        self.records = 0  # records in the file (live or not): the caller compacts by it

    def load(self) -> list[bytes]:
        """The payloads stored, in order; a torn or corrupt tail is dropped with a warning."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        out: list[bytes] = []
        pos = 0
        while pos + _FRAME.size <= len(data):
            size, crc = _FRAME.unpack_from(data, pos)
            payload = data[pos + _FRAME.size:pos + _FRAME.size + size]
            if len(payload) < size or zlib.crc32(payload) != crc:
                break
            out.append(payload)
            pos += _FRAME.size + size
        if pos != len(data):
            log.warning("%s: %d bytes after the last whole record dropped (a crash while "
                        "appending)", self.path, len(data) - pos)
        return out

    def rewrite(self, payloads: Iterable[bytes], fsync: bool = True) -> None:
        """Replace the file with `payloads` (renamed into place; fsynced with the directory,
        or with `fsync` False left to the caller: the file counts as appended to, so the
        next `sync`/`take_sync_fd` covers its data, not its directory entry) and append to
        it from now on."""
        self.close()
        os.makedirs(self.directory, exist_ok=True)
        frames = [frame(p) for p in payloads]
        write_atomically(self.directory, self.name, b"".join(frames), fsync=fsync)
        self.records = len(frames)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._dirty = not fsync

    def append(self, payload: bytes) -> None:
        """Add one record (one write(2): a killed process keeps it; a power cut keeps it
        once `sync` ran)."""
        if self._fd < 0:
            self.rewrite([])
        data = frame(payload)
        os.write(self._fd, data)
        replication_hook.appended_fd(self._fd, self.path, data)
        self.records += 1
        self._dirty = True

    def append_many(self, payloads: list[bytes]) -> None:
        """Add `payloads` as records with one write(2) (a batch of a process's mailbox)."""
        if not payloads:
            return
        if self._fd < 0:
            self.rewrite([])
        data = b"".join([frame(p) for p in payloads])
        os.write(self._fd, data)
        replication_hook.appended_fd(self._fd, self.path, data)
        self.records += len(payloads)
        self._dirty = True

    def append_framed(self, frames: list[bytes]) -> None:
        """`append_many` for records already framed by `frame` (one write(2))."""
        if not frames:
            return
        if self._fd < 0:
            self.rewrite([])
        data = b"".join(frames)
        os.write(self._fd, data)
        replication_hook.appended_fd(self._fd, self.path, data)
        self.records += len(frames)
        self._dirty = True

    def take_sync_fd(self) -> int:
        """For an fsync in another thread of what was appended since the last sync: a
        duplicate of the file's descriptor (a `rewrite` meanwhile cannot invalidate it; the
        caller fsyncs and closes it), or -1 when nothing was appended. Counts as the sync."""
        if not self._dirty or self._fd < 0:
            return -1
        self._dirty = False
        return os.dup(self._fd)

    def sync(self) -> None:
        """fsync what was appended since the last sync (nothing to do: no syscall)."""
        if self._dirty and self._fd >= 0:
            os.fsync(self._fd)
            self._dirty = False

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._dirty = False
