"""What every worker process but the owner reports, each collect_statistics_interval, to
worker 0, whose management API and Prometheus endpoint show one broker (issue 47,
docs/multicore.md "One broker to operators").

Owns: `build(broker)`, the report's four parts: its queues' figures (remote.queue_figures),
its channels' message counts per vhost (the broker's `vhost_message_stats`, whose totals
never fall), each AMQP connection with its
channels as the management API shows them (without rates, which worker 0 computes from the
counters), and the worker's own view (`worker_view`); and `ReportedConn` / `ReportedChan`, what worker 0 keeps of those (the
`ReportedConnection` contract of broker/started.py). Talks to: broker/workers/runtime.py.
Must never: send anything.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker.management import shapes
from broker.management.rates import RateSampler
from broker.memory_monitor import rss
from broker.stats import MessageStats
from broker.workers.remote import RemoteQueue, queue_figures

if TYPE_CHECKING:
    from broker.reader import Reader
    from broker.server import Broker
    from broker.started import StartedBroker

# (serial, connection JSON, recv_oct, send_oct, [(channel number, channel JSON, counts)])
ConnRow = tuple[int, dict[str, Any], int, int, list[tuple[int, dict[str, Any], dict[str, int]]]]


def worker_view(broker: Broker, index: int) -> dict[str, Any]:
    """One worker process as GET /api/nodes/{node} lists it under "workers" (beyond
    RabbitMQ: the per-worker view of issue 47 item 4): its index, pid, own RSS (bytes),
    connections, channels and the queue processes it runs."""
    conns = [c for c in broker.connections if c.vhost is not None]
    return {"index": index, "os_pid": os.getpid(), "mem_used": rss(),
            "connections": len(conns), "channels": sum(len(c.channels) for c in conns),
            "queues": sum(1 for v in broker.vhosts.values() for q in v.queues.values()
                          if not isinstance(q, RemoteQueue))}


def build(broker: Broker, serial: Callable[[Any], int], index: int
          ) -> tuple[list[tuple[str, str, dict[str, Any]]], dict[str, dict[str, int]],
                     list[ConnRow], dict[str, Any], list[tuple[str, str, dict[str, Any]]]]:
    """(queues [(vhost, name, figures)], vhost -> message counts, connections,
    `worker_view`, delayed and deduplicating exchanges [(vhost, name, the holder's own
    stats, or {"duplicates": n})]) of worker
    `index` now; `serial(reader)` numbers a connection as the other workers name it (the
    runtime's)."""
    conns: list[ConnRow] = []
    no_rates = RateSampler()
    started = broker.started()
    for conn in broker.connections:
        if conn.vhost is not None:
            conns.append(connection_row(started, no_rates, conn, serial(conn)))
    queues = []
    vhost_stats = {}
    for vname, v in broker.vhosts.items():
        for q in v.queues.values():
            if not isinstance(q, RemoteQueue):
                queues.append((vname, q.name, queue_figures(q, None)))
        total = broker.vhost_message_stats(v)
        vhost_stats[vname] = total.as_dict()
    delayed: list[tuple[str, str, dict[str, Any]]] = [
        (vname, h.name, h.own_stats()) for vname, v in broker.vhosts.items()
        for h in v.delayed_holders()]
    delayed += [(vname, x.name,
                 {"duplicates": getattr(getattr(x.routing, "cache", None), "duplicates", 0)})
                for vname, v in broker.vhosts.items() for x in v.dedup_exchanges()]
    return queues, vhost_stats, conns, worker_view(broker, index), delayed


def connection_row(broker: StartedBroker, no_rates: RateSampler, conn: Reader,
                   serial: int) -> ConnRow:
    """One connection and its open channels as the management API shows them, rates left
    at 0 (`no_rates`: a sampler that never sampled)."""
    chans = [(ch.number, shapes.channel(broker, no_rates, ch), ch.message_stats.as_dict())
             for ch in conn.channels.values() if ch.opened]
    return (serial, shapes.connection(broker, no_rates, conn), conn.recv_oct,
            conn.writer.bytes_sent if conn.writer else 0, chans)


class ReportedChan:
    """A channel of another worker's connection, as last reported (ReportedChannel)."""

    def __init__(self) -> None:
        self.json: dict[str, Any] = {}
        self.message_stats = MessageStats()

    def update(self, json: dict[str, Any], counts: dict[str, int]) -> None:
        self.json = json
        self.message_stats = MessageStats.from_dict(counts)


class ReportedConn:
    """Connection `serial` of worker `worker`, as last reported (ReportedConnection);
    `close` asks that worker through `send(worker, record)`. Kept while the connection
    lives, so the management API's rate sampler finds it under the same key."""

    def __init__(self, worker: int, serial: int,
                 send: Callable[[int, tuple], None]) -> None:
        self.worker = worker
        self.serial = serial
        self._send = send
        self.json: dict[str, Any] = {}
        self.recv_oct = 0
        self.send_oct = 0
        self.channels: dict[int, ReportedChan] = {}

    def update(self, row: ConnRow) -> None:
        _serial, self.json, self.recv_oct, self.send_oct, chans = row
        kept = {}
        for number, json, counts in chans:
            chan = self.channels.get(number) or ReportedChan()
            chan.update(json, counts)
            kept[number] = chan
        self.channels = kept

    def close(self, code: int, text: str) -> None:
        self._send(self.worker, ("close_conn", self.serial, code, text))
