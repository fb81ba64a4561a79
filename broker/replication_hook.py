"""Where the broker's durable writers tell replication what they wrote (issue 35).

With clustering on, the leader installs its replication server here (`install`); every
place that writes a file under the data directory then reports the write right after making
it — an append at its offset, a file replaced whole, truncated or deleted — and the server
sends it to the followers (broker/cluster/leader.py; it keeps only the paths that replicate).
With clustering off nothing is installed and each report is one test of a module global.

Owns: the installed sink and the report functions. Callable from any thread (the index and
store write from worker threads).
Must never: import the cluster package (it sits in the ground layer, below every writer).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Protocol


class Sink(Protocol):
    """What the writers report to (the leader's ReplicationServer)."""

    def append(self, path: str, offset: int, data: bytes) -> int: ...
    def replace(self, path: str, data: bytes) -> int: ...
    def truncate(self, path: str, size: int) -> int: ...
    def delete(self, path: str) -> int: ...
    def definitions(self, op: bytes) -> int: ...

    @property
    def position(self) -> int: ...  # the last stream position handed out

    async def wait_replicated(self, position: int) -> bool:
        """True once every in-sync follower has `position`; False: this leader's term is
        over and nothing may be confirmed any more."""
        ...


sink: Sink | None = None  # the installed sink; None: not a cluster leader
# the cluster as the leader last saw it, for /api/nodes, brokerctl and Prometheus: {"term",
# "leader" (id), "members": [{"id", "node", "role", "running", "insync", "lag",
# "last_ack_s"}]}, every member that joined and was not forgotten, running or not, by its
# node name; None without a cluster. The leader's node (broker/cluster/node.py)
# refreshes it every lease renewal.
cluster_state: dict | None = None
# the leader's way to remove a dead member from etcd (brokerctl forget_cluster_node): takes
# its id, returns False when it is running; None without a cluster
forget_member: Callable[[str], Awaitable[bool]] | None = None


def install(new: Sink | None) -> None:
    """Report writes to `new` from now on (None: stop reporting)."""
    global sink
    sink = new


def appended(path: str, offset: int, data: bytes | bytearray | memoryview) -> None:
    """`data` was written at `offset` of `path`."""
    s = sink
    if s is not None:
        s.append(path, offset, bytes(data))


def appended_fd(fd: int, path: str, data: bytes | bytearray | memoryview) -> None:
    """`data` was just appended through `fd` (opened O_APPEND): its offset is the file
    position after the write less its length."""
    s = sink
    if s is not None:
        end = os.lseek(fd, 0, os.SEEK_CUR)
        s.append(path, end - len(data), bytes(data))


def replaced(path: str, data: bytes | None = None) -> None:
    """`path` now holds exactly `data` (read from the file when None)."""
    s = sink
    if s is not None:
        if data is None:
            with open(path, "rb") as f:
                data = f.read()
        s.replace(path, data)


def truncated(path: str, size: int) -> None:
    s = sink
    if s is not None:
        s.truncate(path, size)


def deleted(path: str) -> None:
    """`path`, a file or a directory tree, is gone."""
    s = sink
    if s is not None:
        s.delete(path)


def definitions(op: bytes) -> None:
    """A definitions change (broker/definitions.py's operation record, JSON)."""
    s = sink
    if s is not None:
        s.definitions(op)
