"""basic.consume's arguments by queue type (rabbit_amqqueue:check_consume_arguments/3 in
RabbitMQ 3.10.8): a consumer argument of another queue type is refused with 406 naming the
type, a value of the wrong type with 406 naming what was expected, unknown arguments are
ignored. The Spark source's AMQP probe of a queue's type relies on the first (a stream's
`x-stream-offset` refused on a classic queue before any message moves). Passes against
RabbitMQ 3.10.8 with BROKER_TEST_URI set."""

from __future__ import annotations

import pika
import pytest


def consume(connect, unique, queue_args: dict, consumer_args: dict):
    """Declare a durable queue with `queue_args`, publish one message, consume with
    `consumer_args`; returns (the refusal or None, the queue's message)."""
    conn = connect()
    ch = conn.channel()
    q = unique("cargs")
    ch.queue_declare(q, durable=True, arguments=queue_args)
    ch.basic_publish("", q, b"stays")
    ch.basic_qos(prefetch_count=1)
    refusal = None
    try:
        ch.basic_consume(q, lambda *a: None, arguments=consumer_args)
    except pika.exceptions.ChannelClosedByBroker as exc:
        refusal = exc
    other = connect().channel()
    return refusal, q, other


@pytest.mark.parametrize(("queue_type", "key", "value", "module"), [
    ("classic", "x-stream-offset", "next", "rabbit_classic_queue"),
    ("stream", "x-priority", 5, "rabbit_stream_queue"),
    ("stream", "x-cancel-on-ha-failover", True, "rabbit_stream_queue"),
])
def test_a_consumer_argument_of_another_queue_type_is_refused(connect, unique, queue_type,
                                                              key, value, module):
    args = {} if queue_type == "classic" else {"x-queue-type": queue_type}
    refusal, q, other = consume(connect, unique, args, {key: value})
    assert refusal is not None
    assert refusal.reply_code == 406
    assert refusal.reply_text == (f"PRECONDITION_FAILED - invalid arg '{key}' for queue "
                                  f"'{q}' in vhost '/' of queue type {module}")
    if queue_type == "classic":  # the message never moved: still there, not redelivered
        method, _props, body = other.basic_get(q)
        assert body == b"stays" and not method.redelivered
    other.queue_delete(q)


def test_a_priority_that_is_no_integer_is_refused(connect, unique):
    refusal, q, other = consume(connect, unique, {}, {"x-priority": "high"})
    assert refusal is not None
    assert refusal.reply_code == 406
    assert refusal.reply_text == (f"PRECONDITION_FAILED - invalid arg 'x-priority' for queue "
                                  f"'{q}' in vhost '/': \"expected integer, got longstr\"")
    other.queue_delete(q)


def test_arguments_no_queue_type_knows_are_ignored(connect, unique):
    refusal, q, other = consume(connect, unique, {}, {"x-whatever": 1, "x-priority": 3})
    assert refusal is None
    other.queue_delete(q)
