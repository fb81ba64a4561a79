"""Dead-lettering (rabbitmq.com/dlx.html): rejected, expired and maxlen messages go to the
queue's x-dead-letter-exchange with x-death and x-first-death-* headers; RabbitMQ's cycle
rule; the retry-with-delay pattern of seed 003."""

from __future__ import annotations

import asyncio
import time

import aio_pika
import pika
import pytest
from helpers import message_count

from tests.polling import wait_for


@pytest.fixture
def dlq(channel, unique):
    """A dead-letter queue reached through the default exchange."""
    name = unique("dlq")
    channel.queue_declare(name, exclusive=True)
    return name


def take(ch, q):
    wait_for(lambda: message_count(ch, q) > 0, timeout=5)
    method, props, body = ch.basic_get(q, auto_ack=True)
    return props, body


def test_rejected_message_is_dead_lettered_with_x_death(channel, unique, dlq):
    q = unique("work")
    channel.queue_declare(q, exclusive=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    channel.basic_publish("", q, b"bad", pika.BasicProperties(headers={"k": "v"}))
    method, _p, _b = channel.basic_get(q)
    channel.basic_reject(method.delivery_tag, requeue=False)
    props, body = take(channel, dlq)
    assert body == b"bad"
    (death,) = props.headers["x-death"]
    assert death["count"] == 1
    assert death["reason"] == "rejected"
    assert death["queue"] == q
    assert death["exchange"] == ""
    assert death["routing-keys"] == [q]
    assert props.headers["x-first-death-reason"] == "rejected"
    assert props.headers["x-first-death-queue"] == q
    assert props.headers["x-first-death-exchange"] == ""
    assert props.headers["k"] == "v"


def test_expired_message_keeps_its_original_expiration(channel, unique, dlq):
    q = unique("ttl")
    channel.queue_declare(q, exclusive=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    channel.basic_publish("", q, b"late", pika.BasicProperties(expiration="50"))
    props, body = take(channel, dlq)
    assert body == b"late"
    assert props.expiration is None
    (death,) = props.headers["x-death"]
    assert (death["reason"], death["original-expiration"]) == ("expired", "50")


def test_drop_head_dead_letters_as_maxlen(channel, unique, dlq):
    q = unique("ml")
    channel.queue_declare(q, exclusive=True, arguments={
        "x-max-length": 1, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    channel.basic_publish("", q, b"first")
    channel.basic_publish("", q, b"second")
    props, body = take(channel, dlq)
    assert body == b"first"
    assert props.headers["x-death"][0]["reason"] == "maxlen"


def test_without_routing_key_the_message_keeps_its_keys(channel, unique):
    dlx, q, target = unique("dlx"), unique("q"), unique("t")
    channel.exchange_declare(dlx, "direct", auto_delete=True)
    channel.queue_declare(target, exclusive=True)
    channel.queue_bind(target, dlx, "cc-key")
    channel.queue_declare(q, exclusive=True, arguments={"x-dead-letter-exchange": dlx,
                                                        "x-message-ttl": 0})
    channel.basic_publish("", q, b"x", pika.BasicProperties(headers={"CC": ["cc-key"]}))
    props, body = take(channel, target)
    assert props.headers["x-death"][0]["routing-keys"] == [q, "cc-key"]


def test_missing_dlx_drops_silently(channel, unique):
    q = unique("q")
    channel.queue_declare(q, exclusive=True, arguments={"x-dead-letter-exchange": unique("none")})
    channel.basic_publish("", q, b"x")
    method, _p, _b = channel.basic_get(q)
    channel.basic_reject(method.delivery_tag, requeue=False)
    assert message_count(channel, q) == 0
    assert channel.is_open


def test_an_automatic_cycle_is_dropped(channel, unique):
    """A queue whose expired messages dead-letter back into itself: dropped, not looping."""
    q = unique("loop")
    channel.queue_declare(q, exclusive=True, arguments={
        "x-message-ttl": 30, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": q})
    channel.basic_publish("", q, b"x")
    wait_for(lambda: message_count(channel, q) == 0, timeout=5)
    time.sleep(0.2)
    assert message_count(channel, q) == 0


def test_retry_with_delay_round_trip(channel, unique):
    """work --reject--> wait (TTL) --expired--> work: a rejection is in the cycle, so it is
    allowed, and the x-death counts go up each round (seed 003's retry pattern)."""
    work, wait = unique("work"), unique("wait")
    channel.queue_declare(work, exclusive=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": wait})
    channel.queue_declare(wait, exclusive=True, arguments={
        "x-message-ttl": 50, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": work})
    channel.basic_publish("", work, b"job")
    for attempt in (1, 2):
        wait_for(lambda: message_count(channel, work) == 1, timeout=5)
        method, props, body = channel.basic_get(work)
        if attempt == 2:
            deaths = {(d["queue"], d["reason"]): d["count"] for d in props.headers["x-death"]}
            assert deaths == {(work, "rejected"): 1, (wait, "expired"): 1}
        channel.basic_reject(method.delivery_tag, requeue=False)
    wait_for(lambda: message_count(channel, work) == 1, timeout=5)
    _m, props, _b = channel.basic_get(work, auto_ack=True)
    deaths = {(d["queue"], d["reason"]): d["count"] for d in props.headers["x-death"]}
    assert deaths == {(work, "rejected"): 2, (wait, "expired"): 2}
    assert props.headers["x-death"][0]["queue"] == wait  # newest first


def test_routing_key_without_dlx_is_406(connect, unique):
    ch = connect().channel()
    q = unique("q")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(q, arguments={"x-dead-letter-routing-key": "k"})
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg 'x-dead-letter-routing-key' for queue '{q}' in "
        "vhost '/': routing_key_but_no_dlx_defined")


def test_aio_pika_nack_dead_letters(broker, unique):
    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel()
            dlq = await ch.declare_queue(exclusive=True)
            q = await ch.declare_queue(exclusive=True, arguments={
                "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq.name})
            await ch.default_exchange.publish(aio_pika.Message(b"m"), q.name)
            msg = await q.get(timeout=5)
            await msg.nack(requeue=False)
            for _ in range(100):
                dead = await dlq.get(fail=False)
                if dead is not None:
                    await dead.ack()
                    return dead.body, dead.headers["x-death"][0]["reason"]
                await asyncio.sleep(0.02)
            return None

    assert asyncio.run(asyncio.wait_for(main(), 30)) == (b"m", "rejected")
