"""Confirm modes across several queues, and with aio-pika (docs/architecture.md §6; the rules are
in test_confirm_modes.py's docstring): a message routed to queues of different modes is
confirmed once every queue released it under its own rule, and nacked when one drops it;
aio-pika's publish() returns only after the consumer's ack, and raises DeliveryError on a nack.
"""

from __future__ import annotations

import asyncio

import aio_pika
import aio_pika.exceptions
import pytest
from helpers import message_count, wait_for
from pamqp import commands
from test_confirm_modes import MODES, take

# --- several queues -------------------------------------------------------------------------------


@pytest.fixture
def fanout(connect, unique):
    """fanout(*queues) -> a new fanout exchange bound to each queue."""
    ch = connect().channel()

    def _fanout(*queues: str) -> str:
        ex = unique("cm-fan")
        ch.exchange_declare(ex, "fanout", auto_delete=True)
        for q in queues:
            ch.queue_bind(q, ex)
        return ex

    return _fanout


@pytest.mark.parametrize("mode", MODES)
def test_persist_and_ack_queue_confirm_once_both_released(
    embedded_only, cpub, declare, fanout, channel, mode
):
    persist_q, held_q = declare("persist"), declare(mode)
    seq = cpub.publish("", b"both", exchange=fanout(persist_q, held_q))
    wait_for(lambda: message_count(channel, persist_q) == 1)
    cpub.assert_pending(seq)  # the persist queue released it, the other not yet
    tag, _b, _r = take(channel, held_q)
    cpub.assert_pending(seq, within=0.1)
    channel.basic_ack(tag)
    assert cpub.wait(seq) == ["ack"]
    assert cpub.frames == [("ack", 1, False)]


@pytest.mark.parametrize("mode", MODES)
def test_two_ack_queues_confirm_after_both_acked(
    embedded_only, cpub, declare, fanout, channel, mode
):
    q1, q2 = declare(mode), declare(mode)
    seq = cpub.publish("", b"both", exchange=fanout(q1, q2))
    t1, _b, _r = take(channel, q1)
    t2, _b, _r = take(channel, q2)
    channel.basic_ack(t1)
    cpub.assert_pending(seq)
    channel.basic_ack(t2)
    assert cpub.wait(seq) == ["ack"]
    assert cpub.frames == [("ack", 1, False)]


@pytest.mark.parametrize("mode", MODES)
def test_one_queue_drops_so_publisher_nacked(
    embedded_only, cpub, declare, fanout, channel, mode
):
    """Routed to a persist and an ack-mode queue; the latter's consumer rejects without requeue:
    one basic.nack (a nack from any queue wins, as in RabbitMQ)."""
    persist_q, held_q = declare("persist"), declare(mode)
    seq = cpub.publish("", b"x", exchange=fanout(persist_q, held_q))
    tag, _b, _r = take(channel, held_q)
    channel.basic_reject(tag, requeue=False)
    assert cpub.wait(seq) == ["nack"]
    assert cpub.frames == [("nack", 1, False)]
    assert message_count(channel, persist_q) == 1


# --- aio-pika -------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_aio_pika_publish_returns_after_consumer_ack(embedded_only, broker, unique, mode):
    """aio-pika's publish (publisher_confirms=True) does not return until a consumer acked."""

    async def main():
        pconn, cconn, q, publishing = await _publish_one(broker, unique, mode, b"aio")
        async with pconn, cconn:
            done, _ = await asyncio.wait([publishing], timeout=0.3)
            assert not done, "confirmed with no consumer"
            msg = await _get(q)
            done, _ = await asyncio.wait([publishing], timeout=0.2)
            assert not done, "confirmed before the consumer acked"
            await msg.ack()
            confirm = await asyncio.wait_for(publishing, 5)
            await q.delete()
            return msg.body, confirm

    body, confirm = asyncio.run(main())
    assert body == b"aio"
    assert isinstance(confirm, commands.Basic.Ack)


@pytest.mark.parametrize("mode", MODES)
def test_aio_pika_reject_raises_delivery_error(embedded_only, broker, unique, mode):
    async def main():
        pconn, cconn, q, publishing = await _publish_one(broker, unique, mode, b"no")
        async with pconn, cconn:
            msg = await _get(q)
            await msg.reject(requeue=False)
            try:
                with pytest.raises(aio_pika.exceptions.DeliveryError) as info:
                    await asyncio.wait_for(publishing, 5)
            finally:
                await q.delete()
            return info.value

    err = asyncio.run(main())
    assert isinstance(err.frame, commands.Basic.Nack)


async def _publish_one(broker, unique, mode: str, body: bytes):
    """A publisher connection (confirms on) and a consumer connection, a fresh queue in
    confirm mode `mode` declared by the consumer, and the publish of `body` to it as a task:
    (pconn, cconn, queue, publishing)."""
    q_name = unique("cm-aio")
    pconn = await aio_pika.connect(broker.url)
    cconn = await aio_pika.connect(broker.url)
    pch = await pconn.channel(publisher_confirms=True)
    cch = await cconn.channel()
    q = await cch.declare_queue(q_name, arguments={"x-confirm-on": mode})
    publishing = asyncio.ensure_future(
        pch.default_exchange.publish(aio_pika.Message(body), q_name))
    return pconn, cconn, q, publishing


async def _get(q):
    """The first message a consumer on `q` receives (not acked; bounded: 5 s)."""
    got: asyncio.Future = asyncio.get_running_loop().create_future()

    async def on_message(msg) -> None:
        if not got.done():
            got.set_result(msg)

    tag = await q.consume(on_message)
    msg = await asyncio.wait_for(got, 5)
    await q.cancel(tag)
    return msg
