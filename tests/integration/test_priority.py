"""Priority queues (rabbitmq.com/priority.html): `x-max-priority` 1..255, the highest priority
is delivered first, FIFO within a priority, no priority counts as 0 and above the maximum as
the maximum; requeued messages keep their priority; persistent messages keep it across a
restart. Checked with pika, aio-pika and kombu; also run against RabbitMQ 3.10.8."""

from __future__ import annotations

import asyncio

import aio_pika
import kombu
import pika
import pytest
from helpers import get_all, message_count

from tests.polling import wait_for


def prio(p: int | None, persistent: bool = False) -> pika.BasicProperties:
    return pika.BasicProperties(priority=p, delivery_mode=2 if persistent else None)


def test_highest_priority_first_fifo_within_one(channel, unique):
    q = unique("pq")
    channel.queue_declare(q, exclusive=True, arguments={"x-max-priority": 5})
    channel.confirm_delivery()
    for i, p in enumerate([1, 3, None, 3, 5, 0, 1]):
        channel.basic_publish("", q, f"{p}-{i}".encode(), prio(p))
    assert get_all(channel, q) == [
        b"5-4", b"3-1", b"3-3", b"1-0", b"1-6", b"None-2", b"0-5"]


def test_priority_above_the_maximum_counts_as_the_maximum(channel, unique):
    q = unique("pq")
    channel.queue_declare(q, exclusive=True, arguments={"x-max-priority": 2})
    channel.confirm_delivery()
    channel.basic_publish("", q, b"two", prio(2))
    channel.basic_publish("", q, b"nine", prio(9))  # same level as 2, so after it
    channel.basic_publish("", q, b"one", prio(1))
    assert get_all(channel, q) == [b"two", b"nine", b"one"]


def test_a_plain_queue_ignores_priorities(channel, unique):
    q = unique("pq")
    channel.queue_declare(q, exclusive=True)
    channel.confirm_delivery()
    for p in (1, 9, 5):
        channel.basic_publish("", q, f"p{p}".encode(), prio(p))
    assert get_all(channel, q) == [b"p1", b"p9", b"p5"]


def test_consumer_receives_backlog_in_priority_order(connect, unique):
    ch = connect().channel()
    q = unique("pq")
    ch.queue_declare(q, exclusive=True, arguments={"x-max-priority": 10})
    ch.confirm_delivery()
    for i in range(30):
        ch.basic_publish("", q, f"{i % 10}:{i}".encode(), prio(i % 10))
    got: list[bytes] = []
    ch.basic_qos(prefetch_count=5)
    ch.basic_consume(q, lambda c, m, p, b: (got.append(b), c.basic_ack(m.delivery_tag)))
    wait_for(lambda: (ch.connection.process_data_events(0.05), len(got) == 30)[1])
    priorities = [int(b.split(b":")[0]) for b in got]
    assert priorities == sorted(priorities, reverse=True)
    for p in range(10):  # FIFO within each priority
        within = [int(b.split(b":")[1]) for b in got if b.startswith(b"%d:" % p)]
        assert within == sorted(within)


def test_requeue_keeps_priority_and_position(channel, unique):
    q = unique("pq")
    channel.queue_declare(q, exclusive=True, arguments={"x-max-priority": 3})
    channel.confirm_delivery()
    channel.basic_publish("", q, b"hi-1", prio(3))
    channel.basic_publish("", q, b"hi-2", prio(3))
    channel.basic_publish("", q, b"lo", prio(1))
    first, _p, body = channel.basic_get(q)
    assert body == b"hi-1"
    channel.basic_publish("", q, b"hi-3", prio(3))
    channel.basic_nack(first.delivery_tag, requeue=True)
    out = []
    while True:
        method, _props, body = channel.basic_get(q, auto_ack=True)
        if method is None:
            break
        out.append((body, method.redelivered))
    assert out == [(b"hi-1", True), (b"hi-2", False), (b"hi-3", False), (b"lo", False)]


def test_message_count_covers_every_priority(channel, unique):
    q = unique("pq")
    channel.queue_declare(q, exclusive=True, arguments={"x-max-priority": 4})
    channel.confirm_delivery()
    for p in range(5):
        channel.basic_publish("", q, b"x", prio(p))
    assert message_count(channel, q) == 5
    assert channel.queue_purge(q).method.message_count == 5
    assert message_count(channel, q) == 0


def test_ttl_on_a_priority_queue(channel, unique):
    q = unique("pq")
    channel.queue_declare(q, exclusive=True,
                          arguments={"x-max-priority": 3, "x-message-ttl": 100})
    channel.confirm_delivery()
    channel.basic_publish("", q, b"hi", prio(3))
    channel.basic_publish("", q, b"lo", prio(1))
    wait_for(lambda: message_count(channel, q) == 0, timeout=5)


def test_drop_head_drops_the_highest_priority_first(channel, unique):
    """RabbitMQ drops from the head of delivery order, so from the highest priority
    (rabbit_priority_queue `drop`); checked on RabbitMQ 3.10.8."""
    q = unique("pq")
    channel.queue_declare(q, exclusive=True,
                          arguments={"x-max-priority": 3, "x-max-length": 2})
    channel.confirm_delivery()
    channel.basic_publish("", q, b"lo", prio(1))
    channel.basic_publish("", q, b"hi", prio(3))
    channel.basic_publish("", q, b"mid", prio(2))
    assert get_all(channel, q) == [b"mid", b"lo"]


def test_dead_lettered_message_keeps_its_priority(channel, unique):
    q, dl = unique("pq"), unique("pq-dl")
    channel.queue_declare(dl, exclusive=True, arguments={"x-max-priority": 5})
    channel.queue_declare(q, exclusive=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dl})
    channel.confirm_delivery()
    for p in (1, 5, 3):
        channel.basic_publish("", q, f"p{p}".encode(), prio(p))
    for _ in range(3):
        method, _props, _body = channel.basic_get(q)
        channel.basic_reject(method.delivery_tag, requeue=False)
    wait_for(lambda: message_count(channel, dl) == 3)
    assert get_all(channel, dl) == [b"p5", b"p3", b"p1"]


@pytest.mark.parametrize(("value", "why"), [
    (256, "{max_value_exceeded,256}"),
    (-1, "{value_negative,-1}"),
    ("high", '"expected integer, got longstr"'),
])
def test_invalid_max_priority_is_406(connect, unique, value, why):
    ch = connect().channel()
    q = unique("pq")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(q, arguments={"x-max-priority": value})
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue '{q}' in vhost '/': "
        f"{why}")


def test_redeclare_with_another_max_priority_is_406(connect, unique):
    ch = connect().channel()
    q = unique("pq")
    ch.queue_declare(q, arguments={"x-max-priority": 3}, auto_delete=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(q, arguments={"x-max-priority": 4}, auto_delete=True)
    assert info.value.reply_code == 406
    assert "x-max-priority" in info.value.reply_text


def test_aio_pika_consumer_gets_priority_order(broker):
    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel(publisher_confirms=True)
            q = await ch.declare_queue(exclusive=True, arguments={"x-max-priority": 10})
            for i, p in enumerate([2, 7, 0, 7, 10, 4]):
                await ch.default_exchange.publish(
                    aio_pika.Message(f"{p}:{i}".encode(), priority=p), q.name)
            out = []
            async with q.iterator() as it:
                async for msg in it:
                    async with msg.process():
                        out.append(msg.body.decode())
                    if len(out) == 6:
                        break
            return out

    got = asyncio.run(asyncio.wait_for(main(), 30))
    assert got == ["10:4", "7:1", "7:3", "4:5", "2:0", "0:2"]


def test_kombu_queue_max_priority(broker, unique):
    """As Celery sets it: Queue(max_priority=N), publish(priority=p)."""
    name = unique("kpq")
    with kombu.Connection(broker.url) as conn:
        queue = kombu.Queue(name, kombu.Exchange(name, "direct", auto_delete=True), name,
                            max_priority=9, auto_delete=True)
        with conn.Producer() as producer:
            for p in (0, 9, 4, 9, 1):
                producer.publish({"p": p}, exchange=queue.exchange, routing_key=name,
                                 declare=[queue], serializer="json", priority=p)
        bound = queue(conn.default_channel)
        got = []
        while (msg := bound.get(no_ack=True)) is not None:
            got.append(msg.payload["p"])
        assert got == [9, 9, 4, 1, 0]
        bound.delete()


def test_priorities_survive_a_restart(tmp_path, embedded_only):
    from broker.embedded import EmbeddedBroker

    data = str(tmp_path)
    with EmbeddedBroker(data_dir=data) as b:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("pq", durable=True, arguments={"x-max-priority": 4})
        for i, p in enumerate([0, 4, 2, 4, None, 1]):
            ch.basic_publish("", "pq", f"{p}-{i}".encode() * (1 if i % 2 else 3000),
                             prio(p, persistent=True))
        ch.basic_publish("", "pq", b"transient", prio(4))
        method, _p, _b = ch.basic_get("pq")  # pending ack at shutdown: comes back
        assert _b == b"4-1"
        conn.close()
    with EmbeddedBroker(data_dir=data) as b:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        assert message_count(ch, "pq") == 6
        out = []
        while True:
            method, props, body = ch.basic_get("pq", auto_ack=True)
            if method is None:
                break
            out.append((body[:8], props.priority, method.redelivered))
        assert out == [(b"4-1", 4, True), (b"4-3", 4, False), (b"2-2" * 2 + b"2-", 2, False),
                       (b"1-5", 1, False), (b"0-00-00-", 0, False),
                       (b"None-4No", None, False)]
        ch.queue_delete("pq")
        conn.close()
