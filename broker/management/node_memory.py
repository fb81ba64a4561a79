"""GET /api/nodes/{node}/memory and /api/nodes/{node}/memory/relative: where the node's memory
goes, under the names of RabbitMQ 3.10.8's memory breakdown (rabbit_vm:memory/0,
rabbit_mgmt_wm_node_memory), with this broker's equivalents:

- `connection_readers`: bytes received and not yet decoded (every connection's frame
  decoder buffer);
- `connection_writers`: bytes queued for the clients (every writer's buffer and its
  transport's write buffer);
- `queue_procs`: message bytes the queues hold in memory, per queue its message bytes times
  the share of its messages in RAM (the backing queue's `bytes`, `ram_msgs`, `len` and
  `pending_acks`; lazy and paged-out messages count only on disk);
- `other_proc`: the rest of the process's resident set (the interpreter, code, indexes,
  management state), so the parts add up to `total.rss`;
- every other key of RabbitMQ's breakdown (quorum and stream replicas, ETS tables, atoms,
  mnesia, ...) names an Erlang structure this broker has none of: 0.

`strategy` is "rss", as RabbitMQ's default `vm_memory_calculation_strategy`, and `total` has
RabbitMQ's three figures (`rss` the resident set from /proc, `allocated` the same, `erlang`
the parts counted above). /relative gives each key as a whole percentage of the resident
set, with `total` 100. 404 for another node's name; monitoring or administrator users only.

GET /api/nodes/{node}/memory/ets[/{filter}][/relative] (rabbit_mgmt_wm_node_memory_ets):
RabbitMQ lists the memory of the node's ETS tables, or `"ets_tables_memory": "no_tables"`
when none matches the filter. This broker keeps no ETS tables (its indexes are Python
dicts, counted in `other_proc` above), so every form answers "no_tables", as RabbitMQ 3.10.8
does for a filter that matches nothing (checked: `/memory/ets/nosuch` → 200 no_tables).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.management.auth import current, require_monitor
from broker.management.context import broker
from broker.management.http import reply
from broker.management.operations import this_node
from broker.management.overview import rss_bytes

if TYPE_CHECKING:
    from broker.queue_process import QueueProcess
    from broker.started import StartedBroker

routes = web.RouteTableDef()

# RabbitMQ 3.10.8's breakdown keys, in its order (rabbit_vm)
KEYS = ("connection_readers", "connection_writers", "connection_channels", "connection_other",
        "queue_procs", "queue_slave_procs", "quorum_queue_procs", "quorum_queue_dlx_procs",
        "stream_queue_procs", "stream_queue_replica_reader_procs",
        "stream_queue_coordinator_procs", "plugins", "other_proc", "metrics", "mgmt_db",
        "mnesia", "quorum_ets", "other_ets", "binary", "msg_index", "code", "atom",
        "other_system", "allocated_unused", "reserved_unallocated")


def _queue_ram_bytes(queue: QueueProcess) -> int:
    stats = queue.bq.stats()
    count = stats.get("len", 0) + stats.get("pending_acks", 0)
    if not count:
        return 0
    share = min(1.0, stats.get("ram_msgs", 0) / count)
    return int(stats.get("bytes", 0) * share)


def breakdown(b: StartedBroker) -> dict[str, Any]:
    """The memory breakdown as the module docstring describes it (bytes)."""
    readers = writers = 0
    for conn in b.connections:
        decoder = getattr(conn, "decoder", None)
        readers += decoder.buffered if decoder is not None else 0
        transport = getattr(conn, "transport", None)
        writer = getattr(conn, "writer", None)
        writers += writer.pending_bytes() if writer is not None else 0
        if transport is not None and not transport.is_closing():
            writers += transport.get_write_buffer_size()
    queues = sum(_queue_ram_bytes(q) for v in b.vhosts.values() for q in v.queues.values())
    rss = rss_bytes()
    out: dict[str, Any] = dict.fromkeys(KEYS, 0)
    out["connection_readers"] = readers
    out["connection_writers"] = writers
    out["queue_procs"] = queues
    counted = readers + writers + queues
    out["other_proc"] = max(0, rss - counted)
    out["strategy"] = "rss"
    out["total"] = {"erlang": counted, "rss": rss, "allocated": rss}
    return out


def _node(request: web.Request) -> Any:
    require_monitor(current(request))
    this_node(request)
    return broker(request)


@routes.get("/api/nodes/{node}/memory")
async def memory(request: web.Request) -> web.Response:
    return reply({"memory": breakdown(_node(request))})


@routes.get("/api/nodes/{node}/memory/relative")
async def memory_relative(request: web.Request) -> web.Response:
    parts = breakdown(_node(request))
    rss = parts["total"]["rss"] or 1
    relative: dict[str, Any] = {"total": 100}
    relative.update({k: round(100 * parts[k] / rss) for k in KEYS})
    return reply({"memory": relative})


@routes.get("/api/nodes/{node}/memory/ets")
@routes.get("/api/nodes/{node}/memory/ets/relative")
@routes.get("/api/nodes/{node}/memory/ets/{filter}")
@routes.get("/api/nodes/{node}/memory/ets/{filter}/relative")
async def memory_ets(request: web.Request) -> web.Response:
    _node(request)
    return reply({"ets_tables_memory": "no_tables"})
