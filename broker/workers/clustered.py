"""A cluster leader whose broker runs in several worker processes (issue 47 item 4,
docs/multicore.md "High availability with workers"): broker/cluster/leading.py's `Leading`
over the node process of broker/workers/node.py.

Owns: `WorkersLeader`: starts the workers with clustering on (each installs a
broker/workers/replication.py WorkerSink before it recovers, so every worker's writes reach
the replication stream, recovery's included), runs the node's NodeReplication pump, answers
the workers' requests to the node (`forget`: brokerctl forget_cluster_node, asked of worker
0's API), asks worker 0 for the definitions as operations when a follower joins, shows the
cluster's state to every worker's management code, and carries the followers' clients in:
for each, a socket pair whose one end is handed to a worker as if accepted (AMQP to the
worker with the fewest connections, HTTP and Prometheus to worker 0), the other spliced to
the follower's stream by the replication server. Talks to: the node, the replication
server. Must never: touch a queue or a client's bytes beyond that splice.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from typing import TYPE_CHECKING, Any

from broker import listeners, replication_hook
from broker.workers.mesh import REP, REQ
from broker.workers.node import Node
from broker.workers.placement import OWNER
from broker.workers.replication import NodeReplication

if TYPE_CHECKING:
    from broker.cluster.leader import ReplicationServer
    from broker.cluster.leading import Opener
    from broker.config import BrokerConfig

log = logging.getLogger("broker.workers")

SERVICES = {"amqp": (listeners.PROXIED_AMQP, None),
            "http": (listeners.PROXIED_HTTP, OWNER),
            "prometheus": (listeners.PROXIED_PROMETHEUS, OWNER)}


class WorkersLeader:
    """See the module docstring; `broker/cluster/leading.py` documents each method."""

    def __init__(self, config: BrokerConfig, server: ReplicationServer) -> None:
        self.config = config
        self.node = Node(config)
        self.replication = NodeReplication(server, self.node.send)
        self.node.on_record = self._on_record
        self.node.on_spawn = self.replication.worker_started
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}  # our requests to workers
        self._tasks: set[asyncio.Task[None]] = set()
        self._exit_watch: asyncio.Task[None] | None = None
        self._failed = False

    @property
    def failed(self) -> bool:
        return self._failed or self.replication.deposed

    async def start(self) -> None:
        self.replication.start()
        await self.node.start()
        self._exit_watch = asyncio.get_running_loop().create_task(self._watch_exit())

    async def _watch_exit(self) -> None:
        await self.node.wait_worker_exit()
        self._failed = True

    async def stop(self) -> None:
        if self._exit_watch is not None:
            self._exit_watch.cancel()
        await self.node.stop()
        await self.replication.stop()
        for fut in self._waiting.values():
            if not fut.done():
                fut.cancel()
        self._waiting.clear()

    async def definitions_snapshot(self) -> list[bytes]:
        """Worker 0's definitions as operations (broker/definitions_ops.snapshot_ops)."""
        ok, value = await self._request(OWNER, "defs_snapshot", None)
        if not ok:
            raise RuntimeError(f"worker 0 gave no definitions snapshot: {value}")
        return list(value)

    def publish(self, state: dict | None) -> None:
        for worker in self.node.live:
            self.node.send(worker, ("cluster_state", state))

    async def proxy_targets(self) -> dict[str, Opener]:
        return {service: self._opener(name, worker)
                for service, (name, worker) in SERVICES.items()
                if service == "amqp" or self._serves(service)}

    def _serves(self, service: str) -> bool:
        cfg = self.config
        return bool(cfg.management_tcp_port if service == "http" else cfg.prometheus_tcp_port)

    def _opener(self, name: str, worker: int | None) -> Opener:
        async def open_service() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            with theirs:
                handed = self.node.hand(theirs, name, worker)
            if not handed:
                ours.close()
                raise ConnectionRefusedError(f"no worker took a {name} connection")
            return await asyncio.open_connection(sock=ours)
        return open_service

    # -- the workers' records -----------------------------------------------------------------
    def _on_record(self, worker: int, record: tuple) -> None:
        kind = record[0]
        if kind == "repl":
            self.replication.received(worker, record[1])
        elif kind == REP:
            fut = self._waiting.pop(record[1], None)
            if fut is not None and not fut.done():
                fut.set_result((record[2], record[3]))
        elif kind == REQ and record[2] == "forget":
            task = asyncio.get_running_loop().create_task(
                self._forget(worker, record[1], record[3]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            log.error("worker %d sent the node %r, which it does not take", worker, kind)

    async def _forget(self, worker: int, req_id: int, member_id: str) -> None:
        forget = replication_hook.forget_member  # the cluster node's, in this process
        try:
            done = bool(forget is not None and await forget(member_id))
        except Exception as exc:  # noqa: BLE001 - etcd unreachable: told as a failure
            log.warning("cluster: forgetting %s failed: %s", member_id, exc)
            done = False
        self.node.send(worker, (REP, req_id, True, done))

    async def _request(self, worker: int, kind: str, payload: Any) -> tuple[bool, Any]:
        req_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[req_id] = fut
        self.node.send(worker, (REQ, req_id, kind, payload))
        return await asyncio.wait_for(fut, 30)
