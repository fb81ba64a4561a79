"""Small durable-file helpers shared by the message store and the queue index.

Owns: fsync of a directory and the write-to-temp-then-rename pattern. Guarantee after
`write_atomically(..., fsync=True)` returns: the file holds exactly `data` and survives a power
cut (file and directory entry fsynced); with fsync=False it survives a process crash only.
"""

from __future__ import annotations

import os

from broker import replication_hook


def fsync_dir(path: str) -> None:
    """fsync the directory `path` so renames and new entries in it are durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(directory: str, name: str, data: bytes, fsync: bool) -> None:
    """Replace `directory/name` with `data` via `name.tmp` + rename (never half-written)."""
    tmp = os.path.join(directory, name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    os.replace(tmp, os.path.join(directory, name))
    replication_hook.replaced(os.path.join(directory, name), data)
    if fsync:
        fsync_dir(directory)
