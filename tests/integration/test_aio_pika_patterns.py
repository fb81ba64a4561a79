"""aio-pika's and aiormq's documented patterns, as RabbitMQ 3.10.8 answers them.

Robust connections (restore after the server drops the connection), Queue.iterator, both RPC
styles, basic.qos via set_qos, basic.get on an empty queue, server-side consumer cancel,
confirms with mandatory returns, transactions, exclusive queues, a 404 then reopen, closing,
message properties, big and empty bodies. Every test passed against RabbitMQ 3.10.8
(BROKER_TEST_URI=amqp://guest:guest@127.0.0.1:5672/%2F); an xfail marks a difference of ours.

Each test is one coroutine run by asyncio.run under a deadline (the suite has no
pytest-asyncio). "Nothing more arrives" is proven by ready counts or by a later message on the
same path, never by waiting.
"""

from __future__ import annotations

import asyncio
import uuid

import aio_pika
import aio_pika.exceptions
import pytest
from aio_pika.patterns import RPC
from aiohelpers import drop_connection, ignore, ready_count, run, until
from pamqp import commands as spec

# --- robust connections -----------------------------------------------------------------------


def test_robust_connection_restores_topology_and_consumer_after_server_drop(broker, unique):
    """connect_robust: the server drops the connection; the exclusive queue, its binding to an
    auto-delete exchange and the consumer vanish with it, and aio-pika redeclares them all."""
    name, ex_name, q_name = unique("conn"), unique("ex"), unique("q")

    async def main():
        conn = await aio_pika.connect_robust(f"{broker.url}?name={name}&reconnect_interval=0.1")
        async with conn:
            reconnected = asyncio.Event()
            conn.reconnect_callbacks.add(lambda *_a, **_k: reconnected.set())
            ch = await conn.channel(publisher_confirms=True)
            await ch.set_qos(prefetch_count=10)
            ex = await ch.declare_exchange(ex_name, aio_pika.ExchangeType.DIRECT, auto_delete=True)
            q = await ch.declare_queue(q_name, exclusive=True)
            await q.bind(ex, "rk")
            got: asyncio.Queue[bytes] = asyncio.Queue()

            async def on_message(msg):
                await got.put(msg.body)

            await q.consume(on_message, no_ack=True)
            await ex.publish(aio_pika.Message(b"before"), "rk")
            first = await got.get()
            assert await drop_connection(broker, name) == 1
            await asyncio.wait_for(reconnected.wait(), 10)
            await ex.publish(aio_pika.Message(b"after"), "rk")
            second = await got.get()
            check = await conn.channel()
            restored = await check.declare_queue(q_name, passive=True)
            return first, second, restored.declaration_result.consumer_count

    assert run(main(), 20) == (b"before", b"after", 1)


def test_robust_channel_reopens_after_channel_error(broker, unique):
    """A robust channel closed by a 404 is reopened by aio-pika and can be used again."""

    async def main():
        async with await aio_pika.connect_robust(broker.url) as conn:
            ch = await conn.channel()
            with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
                await ch.declare_queue(unique("missing"), passive=True)
            await ch.reopen()
            q = await ch.declare_queue(exclusive=True)
            await ch.default_exchange.publish(aio_pika.Message(b"ok"), q.name)
            msg = await until(lambda: q.get(no_ack=True, fail=False))
            return msg.body

    assert run(main()) == b"ok"


# --- iterator ---------------------------------------------------------------------------------


def test_queue_iterator_cancels_its_consumer_on_exit(broker):
    """async with q.iterator(): consume some, leave the block; the consumer is cancelled and
    the unacked message returns to the queue."""

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel(publisher_confirms=True)
            await ch.set_qos(prefetch_count=1)
            q = await ch.declare_queue(exclusive=True)
            for i in range(3):
                await ch.default_exchange.publish(aio_pika.Message(f"{i}".encode()), q.name)
            seen = []
            async with q.iterator() as it:
                async for msg in it:
                    seen.append(msg.body)
                    if len(seen) == 2:
                        break  # not acked: back to the queue when the channel lets go
                    await msg.ack()
            await ch.close()
            check = await conn.channel()
            again = await check.declare_queue(q.name, passive=True)
            return seen, again.declaration_result.consumer_count, \
                again.declaration_result.message_count

    assert run(main()) == ([b"0", b"1"], 0, 2)


def test_queue_iterator_ends_when_channel_closes(broker):
    """The iterator's `async for` stops (StopAsyncIteration) once its channel is closed."""

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel()
            q = await ch.declare_queue(exclusive=True)
            await ch.default_exchange.publish(aio_pika.Message(b"x"), q.name)
            seen = []
            async for msg in q.iterator(no_ack=True):
                seen.append(msg.body)
                await ch.close()
            return seen

    assert run(main()) == [b"x"]


# --- RPC --------------------------------------------------------------------------------------


def test_patterns_rpc_call_result_exception_and_unroutable(broker, unique):
    """aio_pika.patterns.RPC: a result, a remote exception re-raised, and a call to a method
    nobody registered (mandatory publish returned → MessageProcessError)."""
    mul, boom, ghost = unique("mul"), unique("boom"), unique("ghost")

    async def multiply(*, x, y):
        return x * y

    async def explode():
        raise ValueError("nope")

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            rpc = await RPC.create(await conn.channel(), host_exceptions=False)
            await rpc.register(mul, multiply, auto_delete=True)
            await rpc.register(boom, explode, auto_delete=True)
            product = await rpc.call(mul, kwargs={"x": 6, "y": 7})
            with pytest.raises(ValueError) as remote:
                await rpc.call(boom)
            with pytest.raises(aio_pika.exceptions.MessageProcessError) as returned:
                await rpc.call(ghost)
            await rpc.close()
            return product, str(remote.value), str(returned.value)

    product, remote, returned = run(main())
    assert product == 42
    assert remote == "nope"
    assert "returned" in returned


def test_tutorial_six_rpc_with_callback_queue(broker, unique):
    """RabbitMQ tutorial 6: an exclusive server-named callback queue, reply_to and
    correlation_id; the server answers on the default exchange."""
    rpc_queue = unique("rpc_queue")

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            server_ch = await conn.channel()
            requests = await server_ch.declare_queue(rpc_queue, auto_delete=True)

            async def serve(msg):
                async with msg.process():
                    n = int(msg.body)
                    await server_ch.default_exchange.publish(
                        aio_pika.Message(str(n * n).encode(), correlation_id=msg.correlation_id),
                        routing_key=msg.reply_to,
                    )

            await requests.consume(serve)

            client_ch = await conn.channel()
            callback = await client_ch.declare_queue(exclusive=True)
            assert callback.name.startswith("amq.gen-")
            futures: dict[str, asyncio.Future] = {}

            async def on_reply(msg):
                futures.pop(msg.correlation_id).set_result(msg.body)

            await callback.consume(on_reply, no_ack=True)
            answers = []
            for n in (3, 12):
                cid = str(uuid.uuid4())
                futures[cid] = asyncio.get_running_loop().create_future()
                await client_ch.default_exchange.publish(
                    aio_pika.Message(str(n).encode(), correlation_id=cid,
                                     reply_to=callback.name),
                    routing_key=rpc_queue,
                )
                answers.append(await futures[cid])
            return answers

    assert run(main()) == [b"9", b"144"]


def test_direct_reply_to(broker, unique):
    """RPC via amq.rabbitmq.reply-to: the client consumes the pseudo-queue (no_ack) and
    publishes with reply_to='amq.rabbitmq.reply-to'; the server sees a generated
    'amq.rabbitmq.reply-to.<token>' and its reply comes back to that consumer."""
    rpc_queue = unique("rpc_queue")

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            server_ch = await conn.channel()
            requests = await server_ch.declare_queue(rpc_queue, auto_delete=True)
            seen_reply_to = []

            async def serve(msg):
                seen_reply_to.append(msg.reply_to)
                await server_ch.default_exchange.publish(
                    aio_pika.Message(b"pong", correlation_id=msg.correlation_id),
                    routing_key=msg.reply_to,
                )

            await requests.consume(serve, no_ack=True)
            client_ch = await conn.channel()
            pseudo = await client_ch.get_queue("amq.rabbitmq.reply-to", ensure=False)
            reply: asyncio.Future = asyncio.get_running_loop().create_future()

            async def on_reply(m):
                reply.set_result(m)

            await pseudo.consume(on_reply, no_ack=True)
            await client_ch.default_exchange.publish(
                aio_pika.Message(b"ping", correlation_id="c1",
                                 reply_to="amq.rabbitmq.reply-to"),
                routing_key=rpc_queue,
            )
            msg = await reply
            return msg.body, msg.correlation_id, seen_reply_to

    body, cid, seen = run(main())
    assert (body, cid) == (b"pong", "c1")
    assert seen[0].startswith("amq.rabbitmq.reply-to.")


# --- qos, get, cancel -------------------------------------------------------------------------


@pytest.mark.parametrize(("global_", "delivered"), [(False, [1, 1]), (True, [1, 0])])
def test_set_qos_global_flag(broker, global_, delivered):
    """set_qos(prefetch_count=1, global_=False) is per consumer (1 + 1 unacked); global_=True
    is per channel (1 in all). The second consumer starts after the first holds its message."""

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            pub = await conn.channel(publisher_confirms=True)
            ch = await conn.channel()
            await ch.set_qos(prefetch_count=1, global_=global_)
            qs = [await pub.declare_queue(exclusive=True) for _ in range(2)]
            for q in qs:
                for i in range(3):
                    await pub.default_exchange.publish(aio_pika.Message(f"{i}".encode()), q.name)
            got: list[list[aio_pika.abc.AbstractIncomingMessage]] = [[], []]
            for i, q in enumerate(qs):
                queue = await ch.get_queue(q.name, ensure=False)

                async def on_message(m, into=got[i]):
                    into.append(m)

                await queue.consume(on_message)
                if i == 0:
                    await until(lambda: len(got[0]) == 1)
            want_ready = [3 - n for n in delivered]

            async def settled():
                return [await ready_count(pub, q.name) for q in qs] == want_ready

            await until(settled)
            await until(lambda: [len(g) for g in got] == delivered)
            await got[0][0].ack()  # room for exactly one more delivery

            async def one_more():
                ready = [await ready_count(pub, q.name) for q in qs]
                return sum(len(g) for g in got) == sum(delivered) + 1 and sum(ready) == 5 - sum(
                    delivered) and ready

            ready = await until(one_more)
            return [len(g) for g in got], ready

    counts, ready = run(main())
    if global_:  # the channel-wide slot goes to whichever queue delivers first
        assert sum(counts) == 2 and sum(ready) == 4
    else:  # only the first consumer got room
        assert counts == [2, 1]
        assert ready == [1, 2]


def test_get_on_empty_queue(broker):
    """queue.get(fail=False) → None; queue.get() (fail=True) → QueueEmpty; channel stays open."""

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel()
            q = await ch.declare_queue(exclusive=True)
            none = await q.get(fail=False)
            with pytest.raises(aio_pika.exceptions.QueueEmpty):
                await q.get()
            await ch.default_exchange.publish(aio_pika.Message(b"x"), q.name)
            msg = await until(lambda: q.get(no_ack=True, fail=False))
            return none, msg.body, ch.is_closed

    assert run(main()) == (None, b"x", False)


def test_consumer_cancelled_by_server_when_queue_deleted_elsewhere(broker, unique):
    """A consumer on channel A; channel B deletes the queue: A gets basic.cancel (aiormq's
    on_consumer_cancel_callbacks, consumer dropped) and channel A stays usable."""
    q_name = unique("q")

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            a = await conn.channel()
            q = await a.declare_queue(q_name, auto_delete=False)
            cancelled: asyncio.Future = asyncio.get_running_loop().create_future()
            under = await a.get_underlay_channel()
            under.on_consumer_cancel_callbacks.add(lambda f: cancelled.set_result(f))
            tag = await q.consume(ignore, no_ack=True)
            b = await conn.channel()
            deleted = await b.queue_delete(q_name)
            frame = await asyncio.wait_for(cancelled, 5)
            still = await a.declare_queue(exclusive=True)
            return tag, frame, deleted, tag in under.consumers, a.is_closed, still.name

    tag, frame, deleted, still_listed, closed, name = run(main())
    assert isinstance(frame, spec.Basic.Cancel)
    assert frame.consumer_tag == tag
    assert isinstance(deleted, spec.Queue.DeleteOk)
    assert not still_listed
    assert not closed and name


def test_queue_delete_on_the_consumers_own_channel(broker):
    """queue.delete on the channel that holds the consumer: RabbitMQ answers delete-ok and
    also sends basic.cancel for that consumer; aio-pika's cancel callback runs and the
    channel stays usable."""

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel()
            under = await ch.get_underlay_channel()
            cancelled: asyncio.Future = asyncio.get_running_loop().create_future()
            under.on_consumer_cancel_callbacks.add(lambda f: cancelled.set_result(f))
            q = await ch.declare_queue(exclusive=True)
            tag = await q.consume(ignore, no_ack=True)
            deleted = await q.delete(if_unused=False, if_empty=False)
            frame = await asyncio.wait_for(cancelled, 5)
            again = await ch.declare_queue(exclusive=True)
            return tag, frame, deleted, again.name

    tag, frame, deleted, name = run(main())
    assert isinstance(deleted, spec.Queue.DeleteOk)
    assert frame.consumer_tag == tag
    assert name


def test_queue_delete_on_own_channel_wire_order(broker):
    """The same on the wire (what aio-pika's queue.delete() does): RabbitMQ 3.10.8 sends
    queue.delete-ok, then basic.cancel; with a declare pipelined behind the delete even
    declare-ok comes before the cancel. A cancel before delete-ok is wrong."""
    from rawamqp import RawClient

    with RawClient(broker.host, broker.port) as raw:
        raw.handshake(capabilities={"consumer_cancel_notify": True})
        raw.open_channel(1)
        raw.send(spec.Queue.Declare(queue="", exclusive=True), 1)
        q = raw.expect(spec.Queue.DeclareOk, 1).queue
        raw.send(spec.Basic.Consume(queue=q, consumer_tag="ct1"), 1)
        raw.expect(spec.Basic.ConsumeOk, 1)
        raw.send(spec.Queue.Delete(queue=q), 1)
        first = raw.read_frame(timeout=5)[1]
        second = raw.read_frame(timeout=5)[1]
    assert isinstance(first, spec.Queue.DeleteOk)
    assert isinstance(second, spec.Basic.Cancel)
    assert second.consumer_tag == "ct1"
