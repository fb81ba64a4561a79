"""Client-library idioms beyond the tutorials: what aio-pika, kombu and pika's SelectConnection
do in real applications (process/requeue, iterators, robust connections, reject, errors).
"""

from __future__ import annotations

import asyncio

import aio_pika
import aio_pika.exceptions
import kombu
import pika
import pytest
from helpers import wait_for

# --- aio-pika ---------------------------------------------------------------------------------


def test_aio_pika_process_requeues_on_exception_then_acks(broker):
    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel(publisher_confirms=True)
            q = await ch.declare_queue(exclusive=True)
            await ch.default_exchange.publish(aio_pika.Message(b"job"), q.name)
            seen = []
            async with q.iterator() as it:
                async for msg in it:
                    seen.append(msg.redelivered)
                    if len(seen) == 1:
                        with pytest.raises(RuntimeError):
                            async with msg.process(requeue=True):
                                raise RuntimeError("handler failed")
                        continue
                    async with msg.process():
                        pass
                    break
            again = await ch.declare_queue(q.name, passive=True)
            return seen, again.declaration_result.message_count

    seen, left = asyncio.run(asyncio.wait_for(main(), 10))
    assert seen == [False, True]
    assert left == 0


def test_aio_pika_iterator_and_reject_without_requeue(broker):
    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel(publisher_confirms=True)
            await ch.set_qos(prefetch_count=2)
            q = await ch.declare_queue(exclusive=True)
            for i in range(5):
                await ch.default_exchange.publish(aio_pika.Message(str(i).encode()), q.name)
            bodies = []
            async with q.iterator() as it:
                async for msg in it:
                    bodies.append(msg.body)
                    if msg.body == b"2":
                        await msg.reject(requeue=False)
                    else:
                        await msg.ack()
                    if len(bodies) == 5:
                        break
            again = await ch.declare_queue(q.name, passive=True)
            return bodies, again.declaration_result.message_count

    bodies, left = asyncio.run(asyncio.wait_for(main(), 10))
    assert bodies == [b"0", b"1", b"2", b"3", b"4"]
    assert left == 0


def test_aio_pika_robust_connection_and_exchange_binding(broker, unique):
    src_name, dst_name = unique("src"), unique("dst")

    async def main():
        conn = await aio_pika.connect_robust(broker.url)
        async with conn:
            ch = await conn.channel(publisher_confirms=True)
            src = await ch.declare_exchange(src_name, aio_pika.ExchangeType.TOPIC)
            dst = await ch.declare_exchange(dst_name, aio_pika.ExchangeType.FANOUT)
            await dst.bind(src, routing_key="a.#")
            q = await ch.declare_queue(exclusive=True)
            await q.bind(dst)
            await src.publish(aio_pika.Message(b"in"), routing_key="a.b.c")
            await src.publish(aio_pika.Message(b"out"), routing_key="b.a")
            got = []
            while (msg := await q.get(no_ack=True, fail=False)) is not None:
                got.append(msg.body)
            await dst.unbind(src, routing_key="a.#")
            await src.delete()
            await dst.delete()
            return got

    assert asyncio.run(asyncio.wait_for(main(), 10)) == [b"in"]


def test_aio_pika_missing_queue_raises_404(broker, unique):
    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel()
            with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity) as info:
                await ch.declare_queue(unique("missing"), passive=True)
            return info.value

    err = asyncio.run(asyncio.wait_for(main(), 10))
    assert "NOT_FOUND - no queue" in str(err)


def test_aio_pika_mandatory_publish_unroutable_is_returned(broker, unique):
    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel(publisher_confirms=True, on_return_raises=True)
            with pytest.raises(aio_pika.exceptions.DeliveryError) as info:
                await ch.default_exchange.publish(
                    aio_pika.Message(b"x"), routing_key=unique("nowhere"), mandatory=True
                )
            return info.value

    err = asyncio.run(asyncio.wait_for(main(), 10))
    assert err.message is not None
    assert err.message.body == b"x"


# --- kombu ------------------------------------------------------------------------------------


def test_kombu_requeue_and_reject(broker, unique):
    with kombu.Connection(broker.url) as conn:
        ch = conn.channel()
        q = kombu.Queue(unique("kombu"), auto_delete=True)(ch)
        q.declare()
        producer = kombu.Producer(ch, routing_key=q.name)
        producer.publish("a", serializer="json")
        producer.publish("b", serializer="json")

        def get():  # basic.get; publishes are asynchronous, so poll (bounded)
            return wait_for(lambda: q.get(no_ack=False))

        first = get()
        assert first.payload == "a"
        first.requeue()
        again = get()
        assert again.payload == "a"
        assert again.delivery_info["redelivered"] is True
        again.reject()  # dropped: no dead-letter exchange
        second = get()
        assert second.payload == "b"
        second.ack()
        assert q.get() is None
        q.delete()


def test_kombu_fanout_to_two_consumers(broker, unique):
    ex = kombu.Exchange(unique("kfan"), type="fanout", auto_delete=True)
    with kombu.Connection(broker.url) as conn:
        ch = conn.channel()
        queues = [
            kombu.Queue(unique("kq"), ex, exclusive=True)(ch),
            kombu.Queue(unique("kq"), ex, exclusive=True)(ch),
        ]
        for q in queues:
            q.declare()
        kombu.Producer(ch, exchange=ex).publish({"n": 1}, serializer="json")
        got = []
        with kombu.Consumer(ch, queues=queues, callbacks=[lambda b, m: (got.append(b), m.ack())]):
            while len(got) < 2:
                conn.drain_events(timeout=5)
        assert got == [{"n": 1}, {"n": 1}]


# --- pika SelectConnection --------------------------------------------------------------------


def test_select_connection_channel_error_callback(broker, unique):
    missing = unique("missing")
    state: dict[str, object] = {}

    def on_open(conn):
        conn.channel(on_open_callback=on_channel)

    def on_channel(ch):
        ch.add_on_close_callback(on_channel_closed)
        ch.queue_declare(missing, passive=True)

    def on_channel_closed(ch, reason):
        state["reason"] = reason
        ch.connection.channel(on_open_callback=on_second_channel)

    def on_second_channel(ch):
        state["second_open"] = True
        ch.connection.close()

    conn = pika.SelectConnection(
        pika.URLParameters(broker.url),
        on_open_callback=on_open,
        on_open_error_callback=lambda c, e: (state.setdefault("error", e), c.ioloop.stop()),
        on_close_callback=lambda c, r: c.ioloop.stop(),
    )
    timer = conn.ioloop.call_later(5, lambda: (state.setdefault("timeout", True), conn.close()))
    conn.ioloop.start()
    conn.ioloop.remove_timeout(timer)
    conn.ioloop.close()
    assert "error" not in state and "timeout" not in state
    reason = state["reason"]
    assert isinstance(reason, pika.exceptions.ChannelClosedByBroker)
    assert reason.reply_code == 404
    assert state["second_open"] is True
