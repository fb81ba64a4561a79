"""The channel methods whose work crosses worker processes (issue 47, docs/multicore.md
"What crosses, and how it keeps RabbitMQ's semantics").

Owns: the multi-worker versions of exchange.declare/delete/bind/unbind, queue.declare/bind/
unbind/purge/delete and basic.consume/get, installed in the channel dispatch table of a
worker process (`install`). Each runs the same permission checks as the single-process
handler (channel_entities.py, channel_basic.py), then sends a request — a definition change
to the metadata owner, a consumer, get, purge or count to the queue's worker — and holds the
channel (`ChannelProcess.hold`: nothing else on it runs) until the answer, which sends the
method's reply or closes the channel with the error, as the single-process handler would
have. A definition change is answered only once every worker has applied it, so a publish on
any connection routes with it once a client has seen its `-ok`. Talks to: `ChannelRuntime`
(broker/workers/runtime.py). Must never: change a vhost's tables itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from pamqp import commands

from broker import errors, sharding
from broker.access import CONFIGURE, READ, WRITE
from broker.channel_basic import consumed, get_empty, get_ok, prepare_consume
from broker.channel_entities import _check_binding, queue_name
from broker.direct_reply_to import PSEUDO_QUEUE as REPLY_TO
from broker.protocol.encoding import build_method

if TYPE_CHECKING:
    from broker.channel import ChannelProcess, Handlers
    from broker.protocol.framing import Command

E = commands.Exchange
Q = commands.Queue
B = commands.Basic

OnReply = Callable[[bool, Any], None]


class ChannelRuntime(Protocol):
    """The worker runtime as these handlers see it."""

    @property
    def index(self) -> int: ...

    def submit(self, op: str, payload: tuple, on_reply: OnReply) -> None:
        """Ask the metadata owner to make a definition change (answered once applied
        everywhere)."""

    def ask_queue(self, worker: int, kind: str, payload: tuple, on_reply: OnReply) -> None:
        """Ask queue owner `worker` (may be this worker)."""

    def queue_worker(self, queue: Any) -> int: ...  # the worker whose process it is

    def owner_ref(self, owner: Any) -> Any: ...

    def channel_ref(self, channel: Any) -> Any: ...

    @property
    def global_qos(self) -> Any: ...  # broker/workers/global_qos.py GlobalQos


def _wait(ch: ChannelProcess, method: Any, on_value: Callable[[Any], None]) -> OnReply:
    """Hold `ch` until the answer; then `on_value(value)` or close with the error, as the
    channel loop does for a handler's error (broker/channel.py _dispatch)."""
    ch.hold()

    def on_reply(ok: bool, value: Any) -> None:
        try:
            if ch.state != "open":
                return
            if not ok:
                raise value
            on_value(value)
        except errors.SoftError as exc:
            ch.close_with_error(exc)
        except errors.HardError as exc:
            ch.state = "closed"
            ch.conn.connection_error(exc)
        except Exception as exc:  # noqa: BLE001 - the process boundary (STYLE §6): 541
            ch.crashed(exc)
        finally:
            ch.release()
            if not ch._waits:
                ch.flush_held()  # basic.cancel after the reply, as in one process
    return on_reply


def _ok(ch: ChannelProcess, m: Any, reply: Any) -> Callable[[Any], None]:
    def send(_: Any) -> None:
        if not m.nowait:
            ch.send_method(reply)
    return send


def install(runtime: ChannelRuntime, handlers: Handlers) -> None:
    """Put the multi-worker handlers in `handlers.methods` (this process's dispatch table:
    a worker process serves only as a worker)."""
    table: dict[type, Callable[[ChannelProcess, Any], None]] = {}

    def exchange_declare(ch: ChannelProcess, cmd: Command) -> None:
        m = cmd.method
        if m.passive or not m.exchange:
            original[E.Declare](ch, cmd)  # reads this worker's tables only
            return
        ch.access.check("exchange", m.exchange, CONFIGURE, m)
        alternate = (m.arguments or {}).get("alternate-exchange")
        if alternate is not None and m.exchange not in ch.vhost.exchanges:
            ch.access.check("exchange", m.exchange, READ, m)
            ch.access.check("exchange", str(alternate), WRITE, m)
        runtime.submit("xdecl", (ch.vhost.name, m.exchange, m.exchange_type, m.durable,
                                 m.auto_delete, m.internal, dict(m.arguments or {}), m),
                       _wait(ch, m, _ok(ch, m, E.DeclareOk())))
    table[E.Declare] = exchange_declare

    def exchange_delete(ch: ChannelProcess, cmd: Command) -> None:
        m = cmd.method
        if m.exchange and not m.exchange.startswith("amq."):
            ch.access.check("exchange", m.exchange, CONFIGURE, m)
        runtime.submit("xdel", (ch.vhost.name, m.exchange, m.if_unused, m),
                       _wait(ch, m, _ok(ch, m, E.DeleteOk())))
    table[E.Delete] = exchange_delete

    def binding(kind: str, unbind: bool, reply: Any) -> Callable[[ChannelProcess, Any], None]:
        def handler(ch: ChannelProcess, cmd: Command) -> None:
            m = cmd.method
            if kind == "queue":
                destination, source = queue_name(ch, m.queue, m), m.exchange
            else:
                destination, source = m.destination, m.source
            _check_binding(ch, kind, destination, source, m.routing_key, m)
            op = "unbind" if unbind else "bind"
            on_value = _ok(ch, m, reply)
            if kind == "queue" and unbind:  # queue.unbind has no nowait
                def on_value(_: Any) -> None:
                    ch.send_method(reply)
            runtime.submit(op, (ch.vhost.name, kind, destination, source, m.routing_key,
                                dict(m.arguments or {}), runtime.owner_ref(ch.conn), m),
                           _wait(ch, m, on_value))
        return handler
    table[E.Bind] = binding("exchange", False, E.BindOk())
    table[E.Unbind] = binding("exchange", True, E.UnbindOk())
    table[Q.Bind] = binding("queue", False, Q.BindOk())
    table[Q.Unbind] = binding("queue", True, Q.UnbindOk())

    def queue_declare(ch: ChannelProcess, cmd: Command) -> None:
        m = cmd.method
        if m.queue in ch.vhost.exchanges:  # a sharded exchange's name declares its shard 0
            m.queue = sharding.redirect(ch.vhost, m.queue, "queue.declare",
                                        ch.conn.broker.node_name(), m)
        if m.passive or m.queue.startswith(REPLY_TO):
            if m.passive and not m.queue.startswith(REPLY_TO):
                queue = ch.vhost.declare_queue(m.queue, passive=True, owner=ch.conn, method=m)
                ch.last_queue = queue.name
                _declare_ok(ch, m, queue)
                return
            original[Q.Declare](ch, cmd)
            return
        arguments = dict(m.arguments or {})

        def answered(name: str) -> None:
            ch.last_queue = name
            _declare_ok(ch, m, ch.vhost.queues[name])
        runtime.submit("qdecl", (ch.vhost.name, m.queue, m.durable, m.exclusive,
                                 m.auto_delete, arguments, runtime.owner_ref(ch.conn),
                                 ch.conn.username, m),
                       _wait(ch, m, answered))
    table[Q.Declare] = queue_declare

    def _declare_ok(ch: ChannelProcess, m: Any, queue: Any) -> None:
        """declare-ok with the counts, asked of the queue's worker after what this channel
        sent it before (one ordered link)."""
        if m.nowait:
            return
        runtime.ask_queue(runtime.queue_worker(queue), "counts", (ch.vhost.name, queue.name),
                          _wait(ch, m, lambda counts: ch.send_method(build_method(
                              Q.DeclareOk, queue=queue.name, message_count=counts[0],
                              consumer_count=counts[1]))))

    def queue_purge(ch: ChannelProcess, cmd: Command) -> None:
        m = cmd.method
        name = queue_name(ch, m.queue, m)
        ch.access.check("queue", name, READ, m)
        queue = ch.vhost.get_queue(name, ch.conn, m)
        runtime.ask_queue(runtime.queue_worker(queue), "purge", (ch.vhost.name, name),
                          _wait(ch, m, lambda count: None if m.nowait
                                else ch.send_method(Q.PurgeOk(count))))
    table[Q.Purge] = queue_purge

    def queue_delete(ch: ChannelProcess, cmd: Command) -> None:
        m = cmd.method
        name = queue_name(ch, m.queue, m)
        ch.access.check("queue", name, CONFIGURE, m)
        runtime.submit("qdel", (ch.vhost.name, name, m.if_unused, m.if_empty,
                                runtime.owner_ref(ch.conn), m),
                       _wait(ch, m, lambda count: None if m.nowait
                             else ch.send_method(Q.DeleteOk(count))))
    table[Q.Delete] = queue_delete

    def on_shard(handler: Callable[[ChannelProcess, Any], None]
                 ) -> Callable[[ChannelProcess, Any], None]:
        """basic.consume / basic.get on a sharded exchange's name whose shards live in
        other workers too: ask each shard's worker for its consumer count (the counts a
        proxy holds are reports, not now), take the shard with the fewest
        (sharding.fewest_consumers), then run `handler` on it."""
        def shard_first(ch: ChannelProcess, cmd: Command) -> None:
            m = cmd.method
            queues = sharding.shards(ch.vhost, m.queue, ch.conn.broker.node_name())
            if not queues or all(runtime.queue_worker(q) == runtime.index for q in queues):
                handler(ch, cmd)
                return
            counted: list[tuple[int, str] | None] = [None] * len(queues)
            left = [len(queues)]

            def chosen(name: str) -> None:
                m.queue = name
                handler(ch, cmd)
            done = _wait(ch, m, chosen)

            def counts(i: int) -> OnReply:
                def on_reply(ok: bool, value: Any) -> None:
                    if ok:
                        counted[i] = (value[1], queues[i].name)
                    left[0] -= 1
                    if left[0] == 0:
                        try:
                            name = sharding.fewest_consumers(
                                m.queue, [c for c in counted if c is not None], m)
                        except errors.AMQPError as exc:
                            done(False, exc)
                            return
                        done(True, name)
                return on_reply
            for i, q in enumerate(queues):
                runtime.ask_queue(runtime.queue_worker(q), "counts", (ch.vhost.name, q.name),
                                  counts(i))
        return shard_first

    def consume(ch: ChannelProcess, cmd: Command) -> None:
        m = cmd.method
        prepared = prepare_consume(ch, m)
        if prepared is None:
            return
        queue, consumer = prepared
        worker = runtime.queue_worker(queue)
        if worker == runtime.index:
            queue.call(queue.add_consumer, consumer)
            consumed(ch, m, queue, consumer.tag)
            return
        ch.consumers[consumer.tag] = queue  # the tag is taken while the queue answers
        payload = (ch.vhost.name, queue.name, runtime.channel_ref(ch), consumer.tag,
                   consumer.no_ack, consumer.exclusive, consumer.priority,
                   consumer.prefetch, consumer.arguments, runtime.global_qos.limited(ch))

        def on_value(_: Any) -> None:
            consumed(ch, m, queue, consumer.tag)

        wait = _wait(ch, m, on_value)

        def on_reply(ok: bool, value: Any) -> None:
            if not ok:
                ch.consumers.pop(consumer.tag, None)
            wait(ok, value)
        runtime.ask_queue(worker, "consume", payload, on_reply)
    table[B.Consume] = on_shard(consume)

    def get(ch: ChannelProcess, cmd: Command) -> None:
        m = cmd.method
        name = queue_name(ch, m.queue, m)
        ch.access.check("queue", name, READ, m)
        queue = ch.vhost.get_queue(name, ch.conn, m)
        worker = runtime.queue_worker(queue)
        if worker == runtime.index:
            original[B.Get](ch, cmd)
            return

        def on_value(got: Any) -> None:
            if got is None:
                get_empty(ch)
                return
            message, redelivered, ack_tag, left = got
            get_ok(ch, m.no_ack, queue, message, redelivered, ack_tag, left)
        runtime.ask_queue(worker, "get", (ch.vhost.name, name, runtime.channel_ref(ch),
                                          m.no_ack), _wait(ch, m, on_value))
    table[B.Get] = on_shard(get)

    def qos(ch: ChannelProcess, cmd: Command) -> None:
        """basic.qos as in one process; the workers whose queues feed the channel are told
        whether a channel-wide limit applies now (GlobalQos)."""
        original[B.Qos](ch, cmd)
        workers = {runtime.queue_worker(q) for q in ch.consumers.values()} - {runtime.index}
        if workers:
            runtime.global_qos.limited(ch)  # its capacity hook, from now on
            runtime.global_qos.qos_changed(ch, workers)
    table[B.Qos] = qos

    original = dict(handlers.methods)
    handlers.methods.update(table)  # type: ignore[attr-defined]  # a dict: patched in place
