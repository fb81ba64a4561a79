"""Message TTL (rabbitmq.com/ttl.html): the queue's x-message-ttl and the message's
expiration (ms, a string), the lower wins; expired messages are never delivered or returned
by basic.get; expiry happens at the head, by one timer; 0 means "now or never"; persistent
messages keep their expiry across a restart."""

from __future__ import annotations

import time

import kombu
import pika
import pytest
from helpers import message_count

from tests.polling import wait_for


def expiring(ms: int) -> pika.BasicProperties:
    return pika.BasicProperties(expiration=str(ms))


def test_queue_ttl_expires_messages_without_any_activity(channel, unique):
    q = unique("ttl")
    channel.queue_declare(q, exclusive=True, arguments={"x-message-ttl": 200})
    channel.confirm_delivery()
    for i in range(3):
        channel.basic_publish("", q, f"m{i}".encode())
    assert message_count(channel, q) == 3
    t = time.monotonic()
    wait_for(lambda: message_count(channel, q) == 0, timeout=5)
    assert time.monotonic() - t < 2


def test_per_message_expiration_and_the_lower_ttl_wins(channel, unique):
    q = unique("ttl")
    channel.queue_declare(q, exclusive=True, arguments={"x-message-ttl": 60_000})
    channel.confirm_delivery()
    channel.basic_publish("", q, b"short", expiring(100))
    channel.basic_publish("", q, b"long")
    wait_for(lambda: message_count(channel, q) == 1, timeout=5)
    assert channel.basic_get(q, auto_ack=True)[2] == b"long"


def test_an_expired_message_behind_the_head_is_never_delivered(channel, unique):
    """Only the head is checked; an expired message that reaches the head is dropped there."""
    q = unique("ttl")
    channel.queue_declare(q, exclusive=True)
    channel.confirm_delivery()
    channel.basic_publish("", q, b"keep")
    channel.basic_publish("", q, b"gone", expiring(50))
    channel.basic_publish("", q, b"keep too")
    time.sleep(0.15)  # let "gone" expire while "keep" is still at the head
    got = [channel.basic_get(q, auto_ack=True)[2] for _ in range(3)]
    assert got == [b"keep", b"keep too", None]


def test_expired_messages_are_not_delivered_to_a_late_consumer(channel, unique):
    q = unique("ttl")
    channel.queue_declare(q, exclusive=True)
    channel.confirm_delivery()
    for i in range(5):
        channel.basic_publish("", q, f"old{i}".encode(), expiring(50))
    channel.basic_publish("", q, b"fresh")
    time.sleep(0.15)
    got = []
    channel.basic_consume(q, lambda ch, m, p, b: got.append(b), auto_ack=True)
    wait_for(lambda: channel.connection.process_data_events(0.02) or got, timeout=5)
    channel.connection.process_data_events(0.1)
    assert got == [b"fresh"]


@pytest.mark.parametrize("how", ["x-message-ttl", "expiration"])
def test_ttl_zero_delivers_to_a_waiting_consumer_only(connect, unique, how):
    ch = connect().channel()
    q = unique("ttl0")
    args = {"x-message-ttl": 0} if how == "x-message-ttl" else None
    props = expiring(0) if how == "expiration" else None
    ch.queue_declare(q, exclusive=True, arguments=args)
    ch.confirm_delivery()
    ch.basic_publish("", q, b"nobody", props)
    wait_for(lambda: message_count(ch, q) == 0, timeout=2)
    got = []
    ch.basic_consume(q, lambda c, m, p, b: got.append(b), auto_ack=True)
    ch.basic_publish("", q, b"someone", props)
    wait_for(lambda: ch.connection.process_data_events(0.02) or got, timeout=5)
    assert got == [b"someone"]


@pytest.mark.parametrize(("expiration", "reason"), [
    ("abc", "no_integer"),
    ("-5", "{value_negative,-5}"),
    ("10x", '{leftover_string,"x"}'),
    ("315360000001", "{value_too_large,315360000001}"),  # over ten years (check_expiry)
])
def test_invalid_expiration_is_406(connect, unique, expiration, reason):
    ch = connect().channel()
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_publish("", unique("q"), b"x", pika.BasicProperties(expiration=expiration))
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - invalid expiration '{expiration}': {reason}")


def test_invalid_queue_ttl_is_406(connect, unique):
    ch = connect().channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(unique("q"), arguments={"x-message-ttl": -1})
    assert info.value.reply_code == 406


@pytest.mark.parametrize("key", ["x-message-ttl", "x-expires"])
def test_a_ttl_over_ten_years_is_406_and_ten_years_is_accepted(connect, unique, key):
    """rabbit_misc:check_expiry bounds x-message-ttl and x-expires at 315 360 000 000 ms."""
    ch = connect().channel()
    q = unique("q")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(q, arguments={key: 315_360_000_001})
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg '{key}' for queue '{q}' in vhost '/': "
        "{value_too_large,315360000001}")
    ch = connect().channel()
    ch.confirm_delivery()
    ch.queue_declare(q, exclusive=True, arguments={key: 315_360_000_000})
    ch.basic_publish("", q, b"x", pika.BasicProperties(expiration="315360000000"))
    assert ch.queue_declare(q, passive=True).method.message_count == 1


def test_persist_mode_confirms_an_expired_message(connect, unique):
    """RabbitMQ confirms (basic.ack) a message that expired: it was handled."""
    ch = connect().channel()
    q = unique("ttl")
    ch.queue_declare(q, durable=True, arguments={"x-message-ttl": 50})
    try:
        ch.confirm_delivery()
        ch.basic_publish("", q, b"x", pika.BasicProperties(delivery_mode=2))  # acked
        wait_for(lambda: message_count(ch, q) == 0, timeout=5)
    finally:
        ch.queue_delete(q)


def test_expiry_survives_a_restart(tmp_path, embedded_only):
    from broker.embedded import EmbeddedBroker

    with EmbeddedBroker(data_dir=str(tmp_path)) as b:
        with pika.BlockingConnection(pika.URLParameters(b.url)) as c:
            ch = c.channel()
            ch.queue_declare("dq", durable=True)
            ch.confirm_delivery()
            ch.basic_publish("", "dq", b"expires", pika.BasicProperties(delivery_mode=2,
                                                                        expiration="400"))
            ch.basic_publish("", "dq", b"stays", pika.BasicProperties(delivery_mode=2))
    with EmbeddedBroker(data_dir=str(tmp_path)) as b:
        with pika.BlockingConnection(pika.URLParameters(b.url)) as c:
            ch = c.channel()
            wait_for(lambda: message_count(ch, "dq") == 1, timeout=5)  # no activity needed
            assert ch.basic_get("dq", auto_ack=True)[2] == b"stays"


def test_kombu_message_ttl_and_expiration(broker, unique):
    """As Celery users set them: Queue(message_ttl=seconds) and publish(expiration=seconds)."""
    name = unique("kq")
    with kombu.Connection(broker.url) as conn:
        queue = kombu.Queue(name, kombu.Exchange(name, "direct", auto_delete=True), name,
                            message_ttl=0.2, auto_delete=True)
        with conn.Producer() as producer:
            producer.publish({"n": 1}, exchange=queue.exchange, routing_key=name,
                             declare=[queue], serializer="json")
            producer.publish({"n": 2}, exchange=queue.exchange, routing_key=name,
                             serializer="json", expiration=0.05)
        bound = queue(conn.default_channel)
        wait_for(lambda: bound.queue_declare(passive=True).message_count == 0, timeout=5)
        with conn.SimpleQueue(queue) as sq:
            with pytest.raises(sq.Empty):
                sq.get(timeout=0.2)


def test_a_requeued_message_that_expired_meanwhile_is_dropped(channel, unique):
    """Delivered, then requeued after its expiry (the queue was empty meanwhile): dropped
    at the head, not delivered again."""
    q = unique("ttl")
    channel.queue_declare(q, exclusive=True)
    channel.confirm_delivery()
    channel.basic_publish("", q, b"short", expiring(100))
    method, _p, body = channel.basic_get(q)  # now unacked; the queue is empty
    assert body == b"short"
    time.sleep(0.2)
    channel.basic_nack(method.delivery_tag, requeue=True)
    wait_for(lambda: message_count(channel, q) == 0, timeout=5)
    assert channel.basic_get(q, auto_ack=True)[2] is None
