"""A cluster leader that runs several workers (issue 47 item 4, docs/multicore.md
"High availability with workers"): every worker's durable writes reach the one replication
stream, and no confirm goes out before the followers in sync have what it covers.

Owns: `WorkerSink`, in each worker of a leading member: broker/replication_hook.py's sink
there. It numbers the worker's writes (its local sequence), sends them in order, one batch
per loop turn, to the node process over the control link (`("repl", [op, ...])`), and
releases what waits on a write once the node says the followers have it
(`("replicated", seq)`), or nothing more once the term is over (`("deposed",)`).
`NodeReplication`, in the node process: it hands each worker's writes to the leader's
ReplicationServer (broker/cluster/leader.py), which numbers them in the one stream, and runs
one pump: wait until the followers in sync have everything emitted so far, then tell each
worker how far its own writes are replicated.

Confirms across workers: a queue's worker confirms to a channel of another worker only
once its own writes are replicated (`WorkerSink.after`, used by broker/workers/remote.py's
RemoteChannel), and the channel's worker then gates the confirm on its own writes, as one
process gates it on every write made before it.

Talks to: replication_hook (installs the sink), the control link (a worker's mesh peer
NODE; the node's Link per worker). Must never: let a confirm out of a worker whose node
has not said that the writes before it are replicated.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker import replication_hook

if TYPE_CHECKING:
    from broker.workers.mesh import Mesh

log = logging.getLogger("broker.workers")

# a write, as it crosses to the node: (op, path, offset or size or None, data or None)
APPEND, REPLACE, TRUNCATE, DELETE, DEFS = "a", "r", "t", "d", "defs"


class WorkerSink:
    """The replication sink of a worker of a leading member (see the module docstring).
    `send(record)` puts a record on the control link (loop thread only). `owns_definitions`:
    worker 0, whose definitions database is the broker's; the others' replicas apply worker
    0's changes and report none. Writers may report from any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, send: Callable[[tuple], None],
                 owns_definitions: bool) -> None:
        self._loop = loop
        self._send = send
        self._owns_definitions = owns_definitions
        self._lock = threading.Lock()
        self._seq = 0  # writes numbered so far
        self._outbox: list[tuple] = []
        self._flush_scheduled = False
        self.replicated = 0  # the node says the followers in sync have writes up to here
        self.deposed = False  # the term is over: nothing waits any more
        self._waiting: collections.deque[tuple[int, Callable[[], None]]] = collections.deque()
        self._deposed_futures: set[asyncio.Future[bool]] = set()  # wait_replicated's

    # -- the writers' side (any thread) ----------------------------------------------------
    def _emit(self, op: tuple) -> int:
        with self._lock:
            self._seq += 1
            self._outbox.append(op)
            if not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon_threadsafe(self._flush)
            return self._seq

    def append(self, path: str, offset: int, data: bytes) -> int:
        return self._emit((APPEND, path, offset, data))

    def replace(self, path: str, data: bytes) -> int:
        return self._emit((REPLACE, path, None, data))

    def truncate(self, path: str, size: int) -> int:
        return self._emit((TRUNCATE, path, size, None))

    def delete(self, path: str) -> int:
        return self._emit((DELETE, path, None, None))

    def definitions(self, op: bytes) -> int:
        if not self._owns_definitions:
            return self.position
        return self._emit((DEFS, None, None, op))

    @property
    def position(self) -> int:
        """This worker's last write's number (its local sequence)."""
        return self._seq

    def _flush(self) -> None:
        with self._lock:
            out, self._outbox = self._outbox, []
            self._flush_scheduled = False
        if out:
            self._send(("repl", out))

    # -- the confirm side (loop thread) ----------------------------------------------------
    def after(self, fn: Callable[[], None]) -> None:
        """Run `fn()` once every write this worker made so far is replicated, after what
        was asked before it; never once the term is over."""
        if self.deposed:
            return
        position = self._seq
        if position <= self.replicated and not self._waiting:
            fn()
        else:
            self._waiting.append((position, fn))

    async def wait_replicated(self, position: int) -> bool:
        """True once this worker's writes up to `position` are replicated; False once the
        term is over (replication_hook.Sink)."""
        if self.deposed:
            return False
        if position <= self.replicated:
            return True
        done: asyncio.Future[bool] = self._loop.create_future()

        def release() -> None:
            if not done.done():
                done.set_result(True)
        self._waiting.append((position, release))
        self._deposed_futures.add(done)
        try:
            return await done
        finally:
            self._deposed_futures.discard(done)

    def on_replicated(self, seq: int) -> None:
        """The node: this worker's writes up to `seq` are on every follower in sync."""
        if seq <= self.replicated:
            return
        self.replicated = seq
        waiting = self._waiting
        while waiting and waiting[0][0] <= seq:
            waiting.popleft()[1]()

    def on_deposed(self) -> None:
        """The node: this member's term is over; nothing that waits may go out."""
        self.deposed = True
        self._waiting.clear()
        for fut in list(self._deposed_futures):
            if not fut.done():
                fut.set_result(False)


class NodeReplication:
    """The node process's side (see the module docstring): `server` is the leader's
    ReplicationServer (the replication_hook.Sink it installs in one process);
    `send(worker, record)` puts a record on that worker's control link."""

    def __init__(self, server: replication_hook.Sink, send: Callable[[int, tuple], None]) -> None:
        self.server = server
        self._send = send
        self._emitted: dict[int, int] = {}  # worker -> its writes handed to the server
        self._told: dict[int, int] = {}  # worker -> what it was last told is replicated
        self._more = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.deposed = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._pump())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def worker_started(self, worker: int) -> None:
        """Worker `worker` (re)started: its numbering starts again at 0."""
        self._emitted[worker] = 0
        self._told[worker] = 0

    def received(self, worker: int, ops: list[tuple]) -> None:
        """Worker `worker`'s next writes, in its order."""
        server = self.server
        for kind, path, arg, data in ops:
            if kind == APPEND:
                server.append(path, arg, data)
            elif kind == REPLACE:
                server.replace(path, data)
            elif kind == TRUNCATE:
                server.truncate(path, arg)
            elif kind == DELETE:
                server.delete(path)
            elif kind == DEFS:
                server.definitions(data)
        self._emitted[worker] = self._emitted.get(worker, 0) + len(ops)
        self._more.set()

    async def _pump(self) -> None:
        """Wait until the followers in sync have everything emitted so far; tell each
        worker how far its writes are replicated; again. A term that ends tells every
        worker so (its waiting confirms never go out)."""
        server = self.server
        while True:
            await self._more.wait()
            self._more.clear()
            target = server.position
            emitted = dict(self._emitted)
            if not await server.wait_replicated(target):
                self.deposed = True
                for worker in emitted:
                    self._send(worker, ("deposed",))
                return
            for worker, seq in emitted.items():
                if seq > self._told.get(worker, 0) and self._emitted.get(worker, 0) >= seq:
                    self._told[worker] = seq
                    self._send(worker, ("replicated", seq))


def install_worker_sink(loop: asyncio.AbstractEventLoop, mesh: Mesh, node: int,
                        owns_definitions: bool) -> WorkerSink:
    """Make this worker's sink, install it (replication_hook) and take the node's records
    for it; returns it."""
    sink = WorkerSink(loop, lambda record: mesh.send(node, record), owns_definitions)
    replication_hook.install(sink)
    mesh.on("replicated", lambda peer, record: sink.on_replicated(record[1]))
    mesh.on("deposed", lambda peer, record: sink.on_deposed())

    def cluster_state(peer: int, record: tuple) -> None:
        replication_hook.cluster_state = record[1]
    mesh.on("cluster_state", cluster_state)

    async def forget(member_id: str) -> bool:
        got: asyncio.Future[tuple[bool, Any]] = loop.create_future()
        mesh.request(node, "forget", member_id, lambda ok, value: got.set_result((ok, value)))
        ok, value = await got
        return bool(ok and value)
    replication_hook.forget_member = forget
    return sink
