"""The management server's counter passes: `collect` reads every object's counters (queues,
vhosts, connections, channels, the overview) under the keys `shapes` looks rates up by;
`sample` feeds them to the RateSampler (rates and the range history) every
collect_statistics_interval; `reset_statistics` is DELETE /api/reset; `vhost_bytes` is a
vhost's recv_oct / send_oct (its open connections' plus its closed ones', as RabbitMQ's
vhost_stats_coarse_conn_stats keep them). Nothing here runs per message."""

from __future__ import annotations

import time
from collections.abc import Hashable
from typing import TYPE_CHECKING

from broker.management import shapes
from broker.management.rates import RateSampler
from broker.stats import MessageStats

if TYPE_CHECKING:
    from broker.facades import StartedBroker


def sample(broker: StartedBroker, sampler: RateSampler, wall_ms: int | None = None) -> None:
    """One pass over every counter: queues, channels, connections, vhosts, the overview;
    the history records it at `wall_ms` (ms since the epoch; the clock when None)."""
    retire_connections(broker, sampler)
    observed = collect(broker, sampler)
    wall_ms = int(time.time() * 1000) if wall_ms is None else wall_ms
    for key, values in observed.items():
        sampler.observe(key, values, wall_ms=wall_ms)
    sampler.forget_missing(set(observed))


def retire_connections(broker: StartedBroker, sampler: RateSampler) -> None:
    """Add the bytes of connections closed since the last pass to their vhost's
    `closed_bytes` (their last sampled counts) and note the open ones' counts."""
    now: dict[Hashable, tuple[str, int, int]] = {}
    for conn in broker.connections:
        if conn.vhost is not None:
            now[("connection", id(conn))] = (conn.vhost.name, conn.recv_oct,
                                             conn.writer.bytes_sent if conn.writer else 0)
    for key, (vname, recv, send) in sampler.conn_bytes.items():
        if key not in now and vname in broker.vhosts:
            acc = sampler.closed_bytes.setdefault(vname, [0, 0])
            acc[0] += recv
            acc[1] += send
    for vname in [v for v in sampler.closed_bytes if v not in broker.vhosts]:
        del sampler.closed_bytes[vname]
    sampler.conn_bytes = now


def vhost_bytes(broker: StartedBroker, sampler: RateSampler, vname: str) -> dict[str, int]:
    """{"recv_oct": n, "send_oct": n} of vhost `vname`: its open connections' bytes plus
    those of its connections closed before the sampler's last pass."""
    recv, send = sampler.closed_bytes.get(vname, (0, 0))
    for conn in broker.connections:
        if conn.vhost is not None and conn.vhost.name == vname:
            recv += conn.recv_oct
            send += conn.writer.bytes_sent if conn.writer else 0
    return {"recv_oct": recv, "send_oct": send}


def reset_statistics(broker: StartedBroker, sampler: RateSampler) -> None:
    """DELETE /api/reset (rabbit_mgmt_wm_reset): the rate history is dropped. RabbitMQ
    3.10.8 empties its statistics database, and every live channel, queue and connection
    reports its cumulative counters again at its next emission (checked: a channel's three
    publishes read 3, then 4 after one more, across a reset); this broker's counters are
    the objects' own, so they read the same, and the rates start again."""
    sampler.clear()


def collect(broker: StartedBroker, sampler: RateSampler | None = None) -> dict:
    """Every object's counters now: {key: {field: value}} (queues, vhosts, connections,
    channels, the overview), the keys `shapes` reads rates under; with `sampler`, a vhost's
    recv_oct / send_oct too (from the connections `retire_connections` noted)."""
    out: dict = {}
    vbytes = None
    if sampler is not None:  # per vhost: closed connections' bytes + open ones' (one pass)
        vbytes = {v: list(acc) for v, acc in sampler.closed_bytes.items()}
        for vname, recv, send in sampler.conn_bytes.values():
            acc = vbytes.setdefault(vname, [0, 0])
            acc[0] += recv
            acc[1] += send
    total = MessageStats()
    lengths = {"messages": 0, "messages_ready": 0, "messages_unacknowledged": 0}
    for vname, v in broker.vhosts.items():
        vlen = {"messages": 0, "messages_ready": 0, "messages_unacknowledged": 0}
        for q in v.queues.values():
            key = shapes.queue_key(vname, q.name)
            ql = shapes.queue_lengths(q)
            out[key] = {**q.message_stats.as_dict(), **ql}
            for k, n in ql.items():
                vlen[k] += n
        vstats = shapes.vhost_stats(broker, v)
        total.add(vstats)
        out[("vhost", vname)] = {**vstats.as_dict(), **vlen}
        if vbytes is not None:
            recv, send = vbytes.get(vname, (0, 0))
            out[("vhost", vname)].update({"recv_oct": recv, "send_oct": send})
        for k, n in vlen.items():
            lengths[k] += n
    for conn in broker.connections:
        key = ("connection", id(conn))
        out[key] = {"recv_oct": conn.recv_oct,
                    "send_oct": conn.writer.bytes_sent if conn.writer else 0}
        for ch in conn.channels.values():
            ckey = ("channel", id(ch))
            out[ckey] = ch.message_stats.as_dict()
    out[("overview",)] = {**total.as_dict(), **lengths}
    return out
