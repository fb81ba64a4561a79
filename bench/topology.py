# bench/topology.py — what a Scenario declares and who publishes/consumes where.
#
# Owns: the pure mapping Scenario -> Plan (exchange, queues, bindings, producer and consumer
# connections with their channels, how many queues each producer's messages reach, and how
# connections are spread over worker processes), plus the admin coroutines that declare and
# delete that topology through bench.amqp.
# Talks to: bench.options (Scenario), bench.coordinator (uses Plan), bench.worker (gets specs).
# Must never: publish or consume messages.
"""Topology rules, following PerfTest:

- ``--queue-pattern``: queues ``pattern % i`` for i in from..to, each bound with its own name
  as routing key; ``-x``/``-y`` producer/consumer connections *per queue*.
- ``-u NAME``: one queue bound with ``-k`` (default: its name); ``-x``/``-y`` in total.
- neither: every consumer channel gets its own generated queue bound with ``-k`` (default: a
  generated key), so with a fanout (or one key) each message reaches every consumer queue.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field

from pamqp import commands

from bench.amqp import URI, Connection
from bench.options import Scenario


@dataclass(frozen=True)
class ProducerConn:
    """One producer connection: its channels as (producer_id, exchange, routing_key)."""

    index: int
    channels: tuple[tuple[int, str, str], ...]


@dataclass(frozen=True)
class ConsumerConn:
    """One consumer connection: the queue each of its channels consumes."""

    index: int
    channels: tuple[str, ...]


@dataclass
class Plan:
    """Declarations and connections of one run."""

    exchanges: list[tuple[str, str, bool]]  # (name, type, durable) to declare
    queues: list[str]
    queue_durable: bool
    queue_args: dict[str, object]
    bindings: list[tuple[str, str, str]]  # (queue, exchange, routing_key)
    producers: list[ProducerConn]
    consumers: list[ConsumerConn]
    fanout: dict[int, int]  # producer_id -> queues each of its messages reaches
    generated: bool  # names were generated: delete them after the run
    workers: list[tuple[list[ProducerConn], list[ConsumerConn]]] = field(default_factory=list)


def build_plan(sc: Scenario, run_id: str | None = None) -> Plan:
    """Scenario -> Plan. ``run_id`` (default random) makes generated names unique."""
    run_id = run_id or uuid.uuid4().hex[:8]
    ex = sc.exchange
    declare = ex != "" and not ex.startswith("amq.")
    # --exchanges N (pattern only): queue i of the pattern is bound to exchange "<ex>-<i % N>"
    ex_names = [f"{ex}-{j}" for j in range(sc.exchanges)] if sc.exchanges > 1 else [ex]
    declare_ex = [(n, sc.exchange_type, sc.exchange_durable) for n in ex_names] if declare else []
    producers: list[ProducerConn] = []
    consumers: list[ConsumerConn] = []
    bindings: list[tuple[str, str, str]] = []
    queues: list[str] = []
    fanout: dict[int, int] = {}
    pc, cc = sc.producer_channel_count, sc.consumer_channel_count

    def add_producers(count: int, rk: str, reach: int, exchange: str = ex) -> None:
        for _ in range(count):
            chans = []
            for _ in range(pc):
                pid = len(fanout)
                fanout[pid] = reach
                chans.append((pid, exchange, rk))
            producers.append(ProducerConn(len(producers), tuple(chans)))

    def add_consumers(count: int, queue: str) -> None:
        for _ in range(count):
            consumers.append(ConsumerConn(len(consumers), (queue,) * cc))

    generated = False
    if sc.queue_pattern:
        for n, i in enumerate(range(sc.queue_pattern_from, sc.queue_pattern_to + 1)):
            q = sc.queue_pattern % i
            qex = ex_names[n % len(ex_names)]
            queues.append(q)
            if ex:
                bindings.append((q, qex, q))
            add_consumers(sc.consumers, q)
            add_producers(sc.producers, q, 1 if sc.consumers else 0, qex)
    elif sc.queue:
        rk = sc.routing_key or sc.queue
        queues.append(sc.queue)
        if ex:
            bindings.append((sc.queue, ex, rk))
        add_consumers(sc.consumers, sc.queue)
        add_producers(sc.producers, sc.queue if not ex else rk, 1 if sc.consumers else 0)
    else:
        generated = True
        rk = sc.routing_key or f"bench-{run_id}"
        for c in range(sc.consumers):
            names = tuple(f"bench-{run_id}-{c}-{k}" for k in range(cc))
            queues.extend(names)
            bindings.extend((q, ex, rk) for q in names)
            consumers.append(ConsumerConn(c, names))
        add_producers(sc.producers, rk, len(queues))
    plan = Plan(
        exchanges=declare_ex,
        queues=queues,
        queue_durable=sc.persistent,
        queue_args=dict(sc.queue_args),
        bindings=bindings,
        producers=producers,
        consumers=consumers,
        fanout=fanout,
        generated=generated or sc.name != "custom",
    )
    plan.workers = spread(producers, consumers, sc.processes)
    return plan


def spread(
    producers: list[ProducerConn], consumers: list[ConsumerConn], processes: int
) -> list[tuple[list[ProducerConn], list[ConsumerConn]]]:
    """Deal connections round-robin over worker processes, producers first, so with two
    processes and one producer and one consumer they never share a process."""
    conns: list[ProducerConn | ConsumerConn] = [*producers, *consumers]
    n = processes or min(len(conns), 2 * (os.cpu_count() or 1))
    n = max(1, min(n, len(conns) or 1))
    out: list[tuple[list[ProducerConn], list[ConsumerConn]]] = [([], []) for _ in range(n)]
    for i, c in enumerate(conns):
        if isinstance(c, ProducerConn):
            out[i % n][0].append(c)
        else:
            out[i % n][1].append(c)
    return out


async def declare(uri: URI, plan: Plan) -> None:
    """Declare the exchanges, queues (purged: leftovers would break the exactly-once check)
    and bindings on one admin connection."""
    conn = await Connection.open(uri, "bench-admin")
    try:
        ch = await conn.channel()
        for name, kind, durable in plan.exchanges:
            # a delayed exchange (issue 50) routes as a direct one once messages are due
            args = ({"x-delayed-type": "direct"} if kind == "x-delayed-message" else
                    {"x-cache-size": 1_000_000} if kind == "x-message-deduplication" else None)
            await ch.rpc(
                commands.Exchange.Declare(exchange=name, exchange_type=kind, durable=durable,
                                          arguments=args),
                commands.Exchange.DeclareOk,
            )
        for q in plan.queues:
            await ch.rpc(
                commands.Queue.Declare(
                    queue=q, durable=plan.queue_durable, arguments=plan.queue_args or None
                ),
                commands.Queue.DeclareOk,
            )
            await ch.rpc(commands.Queue.Purge(queue=q), commands.Queue.PurgeOk)
        for q, ex, rk in plan.bindings:
            await ch.rpc(
                commands.Queue.Bind(queue=q, exchange=ex, routing_key=rk), commands.Queue.BindOk
            )
    finally:
        await conn.close()


async def delete(uri: URI, plan: Plan) -> None:
    """Delete generated queues and exchanges (named bench-…) after the run."""
    conn = await Connection.open(uri, "bench-admin")
    try:
        ch = await conn.channel()
        for q in plan.queues:  # deleting a queue that was never declared is fine in AMQP
            await ch.rpc(commands.Queue.Delete(queue=q), commands.Queue.DeleteOk)
        for name, _, _ in plan.exchanges:
            if name.startswith("bench-"):
                await ch.rpc(commands.Exchange.Delete(exchange=name), commands.Exchange.DeleteOk)
    finally:
        await conn.close()
