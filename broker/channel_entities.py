"""Handlers for exchange.* and queue.* methods (RabbitMQ `rabbit_channel`).

Owns: turning those methods into VHost operations and their -ok replies (honouring nowait).
The checks and reply codes live in `broker/vhost.py`; this module only adapts arguments.
"""

from __future__ import annotations

from typing import Any

from pamqp import commands

from broker import errors
from broker.protocol.framing import build_method

E = commands.Exchange
Q = commands.Queue


def exchange_declare(ch: Any, cmd: Any) -> None:
    """exchange.declare (§1.6.2.1)."""
    m = cmd.method
    ch.vhost.declare_exchange(
        m.exchange, m.exchange_type, passive=m.passive, durable=m.durable,
        auto_delete=m.auto_delete, internal=m.internal, arguments=dict(m.arguments or {}),
        method=m, check_reserved=True)
    if not m.nowait:
        ch.send_method(E.DeclareOk())


def exchange_delete(ch: Any, cmd: Any) -> None:
    """exchange.delete (§1.6.2.3)."""
    m = cmd.method
    ch.vhost.delete_exchange(m.exchange, m.if_unused, m)
    if not m.nowait:
        ch.send_method(E.DeleteOk())


def exchange_bind(ch: Any, cmd: Any) -> None:
    """exchange.bind (RabbitMQ extension, rabbitmq.com/e2e.html)."""
    m = cmd.method
    ch.vhost.bind("exchange", m.destination, m.source, m.routing_key,
                  dict(m.arguments or {}), ch.conn, m)
    if not m.nowait:
        ch.send_method(E.BindOk())


def exchange_unbind(ch: Any, cmd: Any) -> None:
    """exchange.unbind."""
    m = cmd.method
    ch.vhost.unbind("exchange", m.destination, m.source, m.routing_key,
                    dict(m.arguments or {}), ch.conn, m)
    if not m.nowait:
        ch.send_method(E.UnbindOk())


def queue_declare(ch: Any, cmd: Any) -> None:
    """queue.declare (§1.7.2.1): declare-ok carries message and consumer counts."""
    m = cmd.method
    queue = ch.vhost.declare_queue(
        m.queue, passive=m.passive, durable=m.durable, exclusive=m.exclusive,
        auto_delete=m.auto_delete, arguments=dict(m.arguments or {}), owner=ch.conn, method=m)
    ch.last_queue = queue.name
    if not m.nowait:
        count = queue.call(queue.message_count)
        ch.send_method(build_method(Q.DeclareOk, queue=queue.name, message_count=count,
                                    consumer_count=queue.consumer_count()))


def queue_name(ch: Any, name: str, method: Any = None) -> str:
    """An empty queue name means the last queue declared on this channel (§1.7.2.3);
    404 "no previously declared queue" when there is none (RabbitMQ)."""
    if name:
        return name
    if ch.last_queue is None:
        raise errors.amqp_error(errors.NotFound, "no previously declared queue", method)
    return ch.last_queue


def queue_bind(ch: Any, cmd: Any) -> None:
    """queue.bind (§1.7.2.3)."""
    m = cmd.method
    ch.vhost.bind("queue", queue_name(ch, m.queue, m), m.exchange, m.routing_key,
                  dict(m.arguments or {}), ch.conn, m)
    if not m.nowait:
        ch.send_method(Q.BindOk())


def queue_unbind(ch: Any, cmd: Any) -> None:
    """queue.unbind (§1.7.2.5)."""
    m = cmd.method
    ch.vhost.unbind("queue", queue_name(ch, m.queue, m), m.exchange, m.routing_key,
                    dict(m.arguments or {}), ch.conn, m)
    ch.send_method(Q.UnbindOk())


def queue_purge(ch: Any, cmd: Any) -> None:
    """queue.purge (§1.7.2.7): purge-ok with the number of ready messages dropped."""
    m = cmd.method
    queue = ch.vhost.get_queue(queue_name(ch, m.queue, m), ch.conn, m)
    count = queue.call(queue.purge)
    if not m.nowait:
        ch.send_method(Q.PurgeOk(count))


def queue_delete(ch: Any, cmd: Any) -> None:
    """queue.delete (§1.7.2.9): if-unused/if-empty → 406; delete-ok with the count."""
    m = cmd.method
    count = ch.vhost.delete_queue(queue_name(ch, m.queue, m), m.if_unused, m.if_empty,
                                  ch.conn, m)
    if not m.nowait:
        ch.send_method(Q.DeleteOk(count))


ENTITY_HANDLERS = {
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
