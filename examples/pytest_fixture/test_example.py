"""Testing AMQP code with the pybroker-amqp pytest plugin.

`pip install pybroker-amqp[pytest] pika aio-pika kombu`, then `pytest` this file: no
fixture needs declaring, the plugin starts one broker per session and gives every test a
fresh vhost through `amqp_url`.
"""

import asyncio

import aio_pika
import kombu
import pika

from broker.testing import peek_messages, wait_for_queue_depth


def test_pika_round_trip(amqp_url):
    with pika.BlockingConnection(pika.URLParameters(amqp_url)) as conn:
        ch = conn.channel()
        ch.queue_declare("orders")
        ch.basic_publish("", "orders", b"order-1")
        wait_for_queue_depth(amqp_url, "orders", 1)
        assert [m.body for m in peek_messages(amqp_url, "orders")] == [b"order-1"]
        method, _props, body = ch.basic_get("orders", auto_ack=True)
        assert body == b"order-1"


def test_every_test_gets_its_own_vhost(amqp_url):
    with pika.BlockingConnection(pika.URLParameters(amqp_url)) as conn:
        ok = conn.channel().queue_declare("orders")  # the previous test's queue is not here
        assert ok.method.message_count == 0


def test_aio_pika(amqp_url):
    async def main():
        async with await aio_pika.connect_robust(amqp_url) as conn:
            ch = await conn.channel()
            q = await ch.declare_queue("jobs")
            await ch.default_exchange.publish(aio_pika.Message(b"job"), "jobs")
            msg = await q.get(timeout=5)
            await msg.ack()
            return msg.body

    assert asyncio.run(main()) == b"job"


def test_kombu(amqp_url):
    with kombu.Connection(amqp_url) as conn:
        queue = kombu.Queue("tasks", kombu.Exchange("tasks", "direct"), "tasks")
        with conn.Producer() as producer:
            producer.publish({"n": 1}, exchange=queue.exchange, routing_key="tasks",
                             declare=[queue], serializer="json")
        with conn.SimpleQueue(queue) as sq:
            msg = sq.get(timeout=5)
            msg.ack()
            assert msg.payload == {"n": 1}


def test_a_broker_with_other_settings(amqp_broker_factory):
    b = amqp_broker_factory(confirm_on="ack")  # publisher confirms after the consumer's ack
    with pika.BlockingConnection(pika.URLParameters(b.url)) as conn:
        ch = conn.channel()
        ch.queue_declare("q", exclusive=True)
        assert ch.queue_declare("q", passive=True).method.message_count == 0
