"""Handlers for exchange.* and queue.* methods (RabbitMQ `rabbit_channel`).

Owns: turning those methods into VHost operations and their -ok replies (honouring nowait).
The checks and reply codes live in `broker/vhost.py`; this module only adapts arguments and
asks the channel's `ChannelAccess` for the permission each method needs, as RabbitMQ's table
(rabbitmq.com/access-control.html, rabbit_channel.erl): declare/delete → configure; bind →
write on the destination, read on the source (and the topic read permission on the binding
key); purge → read; passive declares need none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pamqp import commands

from broker import errors, sharding
from broker.access import CONFIGURE, READ, WRITE
from broker.direct_reply_to import PREFIX as REPLY_PREFIX
from broker.direct_reply_to import PSEUDO_QUEUE as REPLY_TO
from broker.direct_reply_to import REGISTRY as REPLY_REGISTRY
from broker.protocol.encoding import build_method

if TYPE_CHECKING:
    from broker.channel import ChannelProcess
    from broker.protocol.framing import Command

E = commands.Exchange
Q = commands.Queue


def exchange_declare(ch: ChannelProcess, cmd: Command) -> None:
    """exchange.declare (§1.6.2.1): configure on the exchange; a new exchange with an
    `alternate-exchange` also needs read on itself and write on the alternate."""
    m = cmd.method
    if not m.passive and m.exchange:
        ch.access.check("exchange", m.exchange, CONFIGURE, m)
        alternate = (m.arguments or {}).get("alternate-exchange")
        if alternate is not None and m.exchange not in ch.vhost.exchanges:
            ch.access.check("exchange", m.exchange, READ, m)
            ch.access.check("exchange", str(alternate), WRITE, m)
    ch.vhost.declare_exchange(
        m.exchange, m.exchange_type, passive=m.passive, durable=m.durable,
        auto_delete=m.auto_delete, internal=m.internal, arguments=dict(m.arguments or {}),
        method=m, check_reserved=True)
    if not m.nowait:
        ch.send_method(E.DeclareOk())


def exchange_delete(ch: ChannelProcess, cmd: Command) -> None:
    """exchange.delete (§1.6.2.3): configure on the exchange (after the default and `amq.*`
    refusals, as RabbitMQ)."""
    m = cmd.method
    if m.exchange and not m.exchange.startswith("amq."):
        ch.access.check("exchange", m.exchange, CONFIGURE, m)
    ch.vhost.delete_exchange(m.exchange, m.if_unused, m)
    if not m.nowait:
        ch.send_method(E.DeleteOk())


def _check_binding(ch: ChannelProcess, kind: str, destination: str, source: str, routing_key: str,
                   method: Any) -> None:
    """rabbit_channel binding_action: write on the destination, read on the source, and the
    topic read permission for the binding key when the source is a topic exchange."""
    access = ch.access
    access.check(kind, destination, WRITE, method)
    if source == "" or (kind == "exchange" and destination == ""):
        return  # the vhost refuses the default exchange (403) next
    access.check("exchange", source, READ, method)
    exchange = ch.vhost.exchanges.get(source)
    if exchange is not None:
        access.check_topic(source, exchange.type, routing_key, READ, method)


def exchange_bind(ch: ChannelProcess, cmd: Command) -> None:
    """exchange.bind (RabbitMQ extension, rabbitmq.com/e2e.html)."""
    m = cmd.method
    _check_binding(ch, "exchange", m.destination, m.source, m.routing_key, m)
    ch.vhost.bind("exchange", m.destination, m.source, m.routing_key,
                  dict(m.arguments or {}), ch.conn, m)
    if not m.nowait:
        ch.send_method(E.BindOk())


def exchange_unbind(ch: ChannelProcess, cmd: Command) -> None:
    """exchange.unbind."""
    m = cmd.method
    _check_binding(ch, "exchange", m.destination, m.source, m.routing_key, m)
    ch.vhost.unbind("exchange", m.destination, m.source, m.routing_key,
                    dict(m.arguments or {}), ch.conn, m)
    if not m.nowait:
        ch.send_method(E.UnbindOk())


def queue_declare(ch: ChannelProcess, cmd: Command) -> None:
    """queue.declare (§1.7.2.1): declare-ok carries message and consumer counts. Configure
    on the queue (server-named: its `amq.gen-…` name); a new queue with a dead-letter
    exchange also needs read on itself and write on that exchange."""
    m = cmd.method
    arguments = dict(m.arguments or {})
    if m.queue in ch.vhost.exchanges:  # a sharded exchange's name declares its shard 0
        m.queue = sharding.redirect(ch.vhost, m.queue, "queue.declare",
                                    ch.conn.broker.node_name(), m)
    if m.queue.startswith(REPLY_TO):
        # direct reply-to: every declare of these names is passive; the pseudo-queue always
        # exists, a reply-to name while its channel is alive, else 404; if it exists "it by
        # definition has one consumer": 0 messages, 1 consumer (rabbit_channel 3.10.8)
        if m.queue != REPLY_TO and (not m.queue.startswith(REPLY_PREFIX)
                                    or REPLY_REGISTRY.channel_for(m.queue) is None):
            raise errors.amqp_error(
                errors.NotFound, f"no queue '{m.queue}' in vhost '{ch.vhost.name}'", m)
        if not m.nowait:
            ch.send_method(build_method(Q.DeclareOk, queue=m.queue, message_count=0,
                                        consumer_count=1))
        return

    def authorize(name: str, exists: bool) -> None:
        ch.access.check("queue", name, CONFIGURE, m)
        dlx = arguments.get("x-dead-letter-exchange")
        if not exists and dlx is not None:
            ch.access.check("queue", name, READ, m)
            ch.access.check("exchange", str(dlx), WRITE, m)

    queue = ch.vhost.declare_queue(
        m.queue, passive=m.passive, durable=m.durable, exclusive=m.exclusive,
        auto_delete=m.auto_delete, arguments=arguments, owner=ch.conn, method=m,
        authorize=authorize)
    ch.last_queue = queue.name
    if not m.nowait:
        count = queue.call(queue.message_count)
        ch.send_method(build_method(Q.DeclareOk, queue=queue.name, message_count=count,
                                    consumer_count=queue.consumer_count()))


_SHARDED_METHODS = {commands.Queue.Bind: "queue.bind", commands.Queue.Unbind: "queue.unbind",
                    commands.Queue.Purge: "queue.purge", commands.Queue.Delete: "queue.delete",
                    commands.Basic.Consume: "basic.consume", commands.Basic.Get: "basic.get"}


def queue_name(ch: ChannelProcess, name: str, method: Any = None) -> str:
    """An empty queue name means the last queue declared on this channel (§1.7.2.3);
    404 "no previously declared queue" when there is none (RabbitMQ). The name of a
    sharded exchange addresses one of its shards, or is refused (broker/sharding.py)."""
    if name:
        kind = _SHARDED_METHODS.get(type(method))
        if kind is not None and name in ch.vhost.exchanges:
            return sharding.redirect(ch.vhost, name, kind, ch.conn.broker.node_name(), method)
        return name
    if ch.last_queue is None:
        raise errors.amqp_error(errors.NotFound, "no previously declared queue", method)
    return ch.last_queue


def queue_bind(ch: ChannelProcess, cmd: Command) -> None:
    """queue.bind (§1.7.2.3)."""
    m = cmd.method
    name = queue_name(ch, m.queue, m)
    _check_binding(ch, "queue", name, m.exchange, m.routing_key, m)
    ch.vhost.bind("queue", name, m.exchange, m.routing_key, dict(m.arguments or {}), ch.conn, m)
    if not m.nowait:
        ch.send_method(Q.BindOk())


def queue_unbind(ch: ChannelProcess, cmd: Command) -> None:
    """queue.unbind (§1.7.2.5)."""
    m = cmd.method
    name = queue_name(ch, m.queue, m)
    _check_binding(ch, "queue", name, m.exchange, m.routing_key, m)
    ch.vhost.unbind("queue", name, m.exchange, m.routing_key, dict(m.arguments or {}),
                    ch.conn, m)
    ch.send_method(Q.UnbindOk())


def queue_purge(ch: ChannelProcess, cmd: Command) -> None:
    """queue.purge (§1.7.2.7): read on the queue; purge-ok with the number of ready
    messages dropped."""
    m = cmd.method
    name = queue_name(ch, m.queue, m)
    ch.access.check("queue", name, READ, m)
    queue = ch.vhost.get_queue(name, ch.conn, m)
    count = queue.call(queue.purge)
    if not m.nowait:
        ch.send_method(Q.PurgeOk(count))


def queue_delete(ch: ChannelProcess, cmd: Command) -> None:
    """queue.delete (§1.7.2.9): configure on the queue; if-unused/if-empty → 406;
    delete-ok with the count."""
    m = cmd.method
    name = queue_name(ch, m.queue, m)
    ch.access.check("queue", name, CONFIGURE, m)
    count = ch.vhost.delete_queue(name, m.if_unused, m.if_empty, ch.conn, m)
    if not m.nowait:
        ch.send_method(Q.DeleteOk(count))


ENTITY_HANDLERS: dict[type, Callable[[ChannelProcess, Any], None]] = {
    E.Declare: exchange_declare,
    E.Delete: exchange_delete,
    E.Bind: exchange_bind,
    E.Unbind: exchange_unbind,
    Q.Declare: queue_declare,
    Q.Bind: queue_bind,
    Q.Unbind: queue_unbind,
    Q.Purge: queue_purge,
    Q.Delete: queue_delete,
}
