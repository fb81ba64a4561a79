"""The management server's counter passes: `collect` reads every object's counters (queues,
vhosts, connections, channels, the overview) under the keys `shapes` looks rates up by;
`sample` feeds them to the RateSampler (rates and the range history) every
collect_statistics_interval; `reset_statistics` is DELETE /api/reset. Nothing here runs per
message."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from broker.management import shapes
from broker.management.rates import RateSampler
from broker.stats import MessageStats

if TYPE_CHECKING:
    from broker.started import StartedBroker


def sample(broker: StartedBroker, sampler: RateSampler, wall_ms: int | None = None) -> None:
    """One pass over every counter: queues, channels, connections, vhosts, the overview;
    the history records it at `wall_ms` (ms since the epoch; the clock when None)."""
    observed = collect(broker)
    wall_ms = int(time.time() * 1000) if wall_ms is None else wall_ms
    for key, values in observed.items():
        sampler.observe(key, values, wall_ms=wall_ms)
    sampler.forget_missing(set(observed))


def reset_statistics(broker: StartedBroker, sampler: RateSampler) -> None:
    """DELETE /api/reset (rabbit_mgmt_wm_reset): the rate history is dropped. RabbitMQ
    3.10.8 empties its statistics database, and every live channel, queue and connection
    reports its cumulative counters again at its next emission (checked: a channel's three
    publishes read 3, then 4 after one more, across a reset); this broker's counters are
    the objects' own, so they read the same, and the rates start again."""
    sampler.clear()


def collect(broker: StartedBroker) -> dict:
    """Every object's counters now: {key: {field: value}} (queues, exchanges, vhosts with
    their recv_oct / send_oct, connections, channels, the overview, its churn), the keys
    `shapes` reads rates under."""
    out: dict = {}
    total = MessageStats()
    total.add(broker.deleted_vhosts_stats)  # so the overview's counters never fall
    lengths = {"messages": 0, "messages_ready": 0, "messages_unacknowledged": 0}
    for vname, v in broker.vhosts.items():
        vlen = {"messages": 0, "messages_ready": 0, "messages_unacknowledged": 0}
        for q in v.queues.values():
            key = shapes.queue_key(vname, q.name)
            ql = shapes.queue_lengths(q)
            out[key] = {**q.message_stats.as_dict(), **ql}
            for k, n in ql.items():
                vlen[k] += n
        for x in v.exchanges.values():
            if x.publish_in:
                out[shapes.exchange_key(vname, x.name)] = {"publish_in": x.publish_in,
                                                           "publish_out": x.publish_out}
        vstats = shapes.vhost_stats(broker, v)
        total.add(vstats)
        out[("vhost", vname)] = {**vstats.as_dict(), **vlen,
                                 **shapes.vhost_octets(broker, v)}
        for k, n in vlen.items():
            lengths[k] += n
    for conn in broker.connections:
        key = ("connection", id(conn))
        out[key] = {"recv_oct": conn.recv_oct,
                    "send_oct": conn.writer.bytes_sent if conn.writer else 0}
        for ch in conn.channels.values():
            ckey = ("channel", id(ch))
            out[ckey] = ch.message_stats.as_dict()
    for rc in broker.remote_connections() if broker.remote_connections is not None else ():
        out[("connection", id(rc))] = {"recv_oct": rc.recv_oct, "send_oct": rc.send_oct}
        for rch in rc.channels.values():
            out[("channel", id(rch))] = rch.message_stats.as_dict()
    out[("overview",)] = {**total.as_dict(), **lengths}
    out[("churn",)] = shapes.churn_counts(broker)
    return out
