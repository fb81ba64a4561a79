"""Small durable-file helpers shared by the message store and the queue index.

Owns: fsync of a directory and the write-to-temp-then-rename pattern. Guarantee after
`write_atomically(..., fsync=True)` returns: the file holds exactly `data` and survives a power
cut (file and directory entry fsynced); with fsync=False it survives a process crash only.
"""

from __future__ import annotations

import os

from broker import replication_hook


def fsync_path(path: str) -> None:
    """fsync the file or directory at `path` (a file's directory entry is `fsync_dir`'s)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_and_close(fds: list[int]) -> None:
    """fsync each of `fds`, then close it. Every one is closed, even after a failure; the
    first OSError is raised once all are closed, and no fsync is tried after it."""
    error: OSError | None = None
    for fd in fds:
        try:
            if error is None:
                os.fsync(fd)
        except OSError as exc:
            error = exc
        finally:
            os.close(fd)
    if error is not None:
        raise error


def fsync_dir(path: str) -> None:
    """fsync the directory `path` so renames and new entries in it are durable."""
    fsync_path(path)


def write_parts_atomically(directory: str, name: str, parts: list[bytes], fsync: bool) -> None:
    """`write_atomically` of `b"".join(parts)` without that join: one write per part, so a
    thread writing megabytes never holds the GIL for one long copy (a replication sink reads
    the file back instead)."""
    _replace_with_parts(directory, name, parts, fsync, None)


def write_atomically(directory: str, name: str, data: bytes, fsync: bool) -> None:
    """Replace `directory/name` with `data` via `name.tmp` + rename (never half-written)."""
    _replace_with_parts(directory, name, [data], fsync, data)


def _replace_with_parts(directory: str, name: str, parts: list[bytes], fsync: bool,
                        data: bytes | None) -> None:
    """Write `parts` to `name.tmp` (fsynced with `fsync`), rename it over `name`, tell the
    replication hook (`data`: the whole content, None: the hook reads the file), then fsync
    the directory."""
    tmp = os.path.join(directory, name + ".tmp")
    with open(tmp, "wb", buffering=0) as f:
        for part in parts:
            view = memoryview(part)
            while view:
                view = view[f.write(view):]
        if fsync:
            os.fsync(f.fileno())
    path = os.path.join(directory, name)
    os.replace(tmp, path)
    replication_hook.replaced(path, data)
    if fsync:
        fsync_dir(directory)
