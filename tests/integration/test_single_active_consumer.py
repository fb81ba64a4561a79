"""Single active consumer (rabbitmq.com/consumers.html#single-active-consumer): one consumer
receives at a time, the next registered takes over when it is cancelled or its channel
closes; consumer priorities do not change which one is active (checked on RabbitMQ 3.10.8)."""

from __future__ import annotations

import asyncio

import aio_pika
import pika
import pytest

from tests.polling import wait_for

SAC = {"x-single-active-consumer": True}


def drain(conn, got, n):
    wait_for(lambda: conn.process_data_events(0.02) or len(got) >= n, timeout=5)


def test_first_registered_is_active_until_cancelled(connection, unique):
    ch = connection.channel()
    q = ch.queue_declare(unique("sac"), exclusive=True, arguments=SAC).method.queue
    got = []
    ch.basic_consume(q, lambda c, m, p, b: got.append(("A", b)), auto_ack=True,
                     consumer_tag="A", arguments={"x-priority": 0})
    ch.basic_consume(q, lambda c, m, p, b: got.append(("B", b)), auto_ack=True,
                     consumer_tag="B", arguments={"x-priority": 10})
    for i in range(3):
        ch.basic_publish("", q, str(i).encode())
    drain(connection, got, 3)
    assert got == [("A", b"0"), ("A", b"1"), ("A", b"2")]
    assert ch.queue_declare(q, passive=True).method.consumer_count == 2
    got.clear()
    ch.basic_cancel("A")
    for i in range(3):
        ch.basic_publish("", q, str(i).encode())
    drain(connection, got, 3)
    assert got == [("B", b"0"), ("B", b"1"), ("B", b"2")]


def test_next_consumer_takes_over_when_the_channel_closes(connect, unique):
    conn = connect()
    setup = conn.channel()
    q = setup.queue_declare(unique("sac"), arguments=SAC).method.queue
    first = connect()
    ch1 = first.channel()
    ch1.basic_qos(prefetch_count=1)
    held = []
    ch1.basic_consume(q, lambda c, m, p, b: held.append((m.delivery_tag, b)))
    ch2 = conn.channel()
    got = []
    ch2.basic_consume(q, lambda c, m, p, b: got.append(b), auto_ack=True)
    setup.basic_publish("", q, b"m1")
    setup.basic_publish("", q, b"m2")
    drain(first, held, 1)
    assert held[0][1] == b"m1" and got == []
    first.close()  # m1, unacked, is requeued; the second consumer takes over
    drain(conn, got, 2)
    assert sorted(got) == [b"m1", b"m2"]
    setup.queue_delete(q)


def test_argument_must_be_a_boolean(connect, unique):
    ch = connect().channel()
    q = unique("sac")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(q, arguments={"x-single-active-consumer": "yes"})
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg 'x-single-active-consumer' for queue '{q}' in "
        "vhost '/': {unacceptable_type,longstr}")


def test_aio_pika_single_active_consumer(broker):
    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel()
            q = await ch.declare_queue(exclusive=True, arguments=SAC)
            got = []
            done = asyncio.Event()

            def handler(name):
                async def on_message(msg):
                    async with msg.process():
                        got.append(name)
                        if len(got) == 4:
                            done.set()
                return on_message

            await q.consume(handler("one"))
            await q.consume(handler("two"))
            for i in range(4):
                await ch.default_exchange.publish(aio_pika.Message(b"%d" % i), q.name)
            await asyncio.wait_for(done.wait(), 10)
            return got

    assert asyncio.run(main()) == ["one"] * 4
