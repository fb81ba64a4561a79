"""What every worker process but the owner reports, each collect_statistics_interval, to
worker 0, whose management API and Prometheus endpoint show one broker (issue 47,
docs/multicore.md "One broker to operators").

Owns: `build(broker)`, the report's three parts: its queues' figures (remote.queue_figures),
its channels' message counts per vhost (the broker's `vhost_message_stats`, whose totals
never fall) and its connection and channel counts per vhost. Talks to:
broker/workers/runtime.py. Must never: send anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.stats import MessageStats
from broker.workers.remote import RemoteQueue, queue_figures

if TYPE_CHECKING:
    from broker.server import Broker


def build(broker: Broker) -> tuple[list[tuple[str, str, dict[str, Any]]],
                                   dict[str, dict[str, int]],
                                   dict[str, tuple[int, int]]]:
    """(queues [(vhost, name, figures)], vhost -> message counts, vhost -> (connections,
    channels)) of this worker now."""
    objects: dict[str, tuple[int, int]] = {}
    for conn in broker.connections:
        if conn.vhost is not None:
            n, c = objects.get(conn.vhost.name, (0, 0))
            objects[conn.vhost.name] = (n + 1, c + len(conn.channels))
    queues = []
    vhost_stats = {}
    for vname, v in broker.vhosts.items():
        for q in v.queues.values():
            if not isinstance(q, RemoteQueue):
                queues.append((vname, q.name, queue_figures(q, None)))
        total = broker.vhost_message_stats(v)
        vhost_stats[vname] = {k: getattr(total, k) for k in MessageStats.__slots__}
    return queues, vhost_stats, objects
