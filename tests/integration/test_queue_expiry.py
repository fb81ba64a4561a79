"""Queue expiry, x-expires (rabbitmq.com/ttl.html#queue-ttl): a queue unused for that long
(no consumers, no basic.get, no redeclare) is deleted; a declared durable queue keeps expiring
after a restart."""

from __future__ import annotations

import time

import pika
import pytest

from tests.polling import wait_for


def exists(connect, name: str) -> bool:
    ch = connect().channel()
    try:
        ch.queue_declare(name, passive=True)  # note: a declare renews the lease
        return True
    except pika.exceptions.ChannelClosedByBroker as exc:
        assert exc.reply_code == 404
        return False


def test_unused_queue_is_deleted(connect, unique):
    q = unique("exp")
    ch = connect().channel()
    ch.queue_declare(q, arguments={"x-expires": 300})
    t = time.monotonic()
    ch.basic_publish("", q, b"messages do not count as use")
    wait_for(lambda: not exists_after(connect, q, t, 0.35), timeout=5)
    assert time.monotonic() - t < 2


def exists_after(connect, name: str, since: float, seconds: float) -> bool:
    """Check only once `seconds` passed (checking is a declare, which renews the lease)."""
    while time.monotonic() - since < seconds:
        time.sleep(0.02)
    return exists(connect, name)


def test_a_consumer_keeps_it_and_its_cancel_restarts_the_lease(connect, unique):
    q = unique("exp")
    ch = connect().channel()
    ch.queue_declare(q, arguments={"x-expires": 200})
    tag = ch.basic_consume(q, lambda *a: None)
    time.sleep(0.5)  # well past x-expires, with a consumer
    assert exists(connect, q)
    ch.basic_cancel(tag)
    t = time.monotonic()
    wait_for(lambda: not exists_after(connect, q, t, 0.25), timeout=5)


def test_basic_get_renews_the_lease(connect, unique):
    q = unique("exp")
    ch = connect().channel()
    ch.queue_declare(q, arguments={"x-expires": 300})
    for _ in range(5):  # 0.5 s in all, more than x-expires, but used every 0.1 s
        time.sleep(0.1)
        ch.basic_get(q, auto_ack=True)
    assert exists(connect, q)
    ch.queue_delete(q)


@pytest.mark.parametrize(("value", "why"), [(0, "{value_zero,0}"), (-1, "{value_negative,-1}")])
def test_invalid_expires_is_406(connect, unique, value, why):
    ch = connect().channel()
    q = unique("exp")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(q, arguments={"x-expires": value})
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg 'x-expires' for queue '{q}' in vhost '/': {why}")


def test_durable_queue_expires_after_a_restart(tmp_path, embedded_only):
    from broker.embedded import EmbeddedBroker

    with EmbeddedBroker(data_dir=str(tmp_path)) as b:
        with pika.BlockingConnection(pika.URLParameters(b.url)) as c:
            c.channel().queue_declare("dq", durable=True, arguments={"x-expires": 300})
    with EmbeddedBroker(data_dir=str(tmp_path)) as b:
        assert b.call(lambda: "dq" in b.broker.vhosts["/"].queues)
        wait_for(lambda: b.call(lambda: "dq" not in b.broker.vhosts["/"].queues), timeout=5)
        names = b.call(lambda: [q.name for q in b.broker.definitions.list_queues("/")])
        assert "dq" not in names


def test_aio_pika_queue_expires(broker, unique):
    import asyncio

    import aio_pika
    import aiormq

    name = unique("exp")

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel()
            await ch.declare_queue(name, arguments={"x-expires": 200})
            await asyncio.sleep(0.6)  # unused for three times x-expires
            ch2 = await conn.channel()
            try:
                await ch2.declare_queue(name, passive=True)
            except aiormq.exceptions.ChannelNotFoundEntity:
                return "gone"
            return "still there"

    assert asyncio.run(asyncio.wait_for(main(), 20)) == "gone"
