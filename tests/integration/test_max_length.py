"""Queue length limit (rabbitmq.com/maxlength.html): x-max-length with x-overflow drop-head
(the default: the oldest ready messages are dropped) or reject-publish (the newest is refused;
with confirms the publisher gets basic.nack)."""

from __future__ import annotations

import asyncio

import aio_pika
import pika
import pytest
from helpers import get_all, message_count

from tests.polling import wait_for


def test_drop_head_keeps_the_newest(channel, unique):
    q = unique("ml")
    channel.queue_declare(q, exclusive=True, arguments={"x-max-length": 3})
    channel.confirm_delivery()
    for i in range(10):
        channel.basic_publish("", q, f"m{i}".encode())  # every one is acked
    assert get_all(channel, q) == [b"m7", b"m8", b"m9"]


def test_unacked_messages_do_not_count(channel, unique):
    q = unique("ml")
    channel.queue_declare(q, exclusive=True, arguments={"x-max-length": 1})
    channel.confirm_delivery()
    channel.basic_publish("", q, b"a")
    method, _p, body = channel.basic_get(q)  # now unacked: not in the ready count
    channel.basic_publish("", q, b"b")
    assert message_count(channel, q) == 1
    channel.basic_ack(method.delivery_tag)
    assert get_all(channel, q) == [b"b"]


@pytest.mark.parametrize("overflow", ["reject-publish", "reject-publish-dlx"])
def test_reject_publish_nacks_with_confirms(connect, unique, overflow):
    ch = connect().channel()
    q = unique("ml")
    ch.queue_declare(q, exclusive=True,
                     arguments={"x-max-length": 2, "x-overflow": overflow})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"1")
    ch.basic_publish("", q, b"2")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", q, b"3")
    assert get_all(ch, q) == [b"1", b"2"]
    ch.basic_publish("", q, b"4")  # room again
    assert get_all(ch, q) == [b"4"]


def test_reject_publish_without_confirms_drops_silently(channel, unique):
    q = unique("ml")
    channel.queue_declare(q, exclusive=True,
                          arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    for i in range(5):
        channel.basic_publish("", q, f"m{i}".encode())
    wait_for(lambda: message_count(channel, q) == 1)
    channel.connection.process_data_events(0.1)
    assert channel.is_open
    assert get_all(channel, q) == [b"m0"]


@pytest.mark.parametrize("overflow", ["reject-publish", "reject-publish-dlx"])
@pytest.mark.parametrize("settle", ["reject", "nack", "close"])
def test_reject_publish_keeps_a_requeued_message(connect, unique, overflow, settle):
    """reject-publish refuses new publishes only: a requeue may take the queue past its limit
    and nothing already enqueued is dropped (rabbit_amqqueue_process maybe_drop_head is a
    no-op for the rejecting modes; RabbitMQ 3.10.8 delivers a, then c)."""
    conn = connect()
    ch = conn.channel()
    q = unique("ml")
    ch.queue_declare(q, arguments={"x-max-length": 1, "x-overflow": overflow})
    try:
        ch.confirm_delivery()
        ch.basic_publish("", q, b"a")
        holder = connect().channel() if settle == "close" else ch
        method, _p, body = holder.basic_get(q)
        assert body == b"a"
        ch.basic_publish("", q, b"c")  # a is unacked: c fits
        if settle == "reject":
            holder.basic_reject(method.delivery_tag, requeue=True)
        elif settle == "nack":
            holder.basic_nack(method.delivery_tag, requeue=True)
        else:
            holder.connection.close()
        wait_for(lambda: message_count(ch, q) == 2)
        assert get_all(ch, q) == [b"a", b"c"]
    finally:
        ch.queue_delete(q)


@pytest.mark.parametrize(("value", "why"), [
    ("drop-tail", "invalid_overflow"),
    (7, "{unacceptable_type,signedint}"),
])
def test_invalid_overflow_is_406(connect, unique, value, why):
    ch = connect().channel()
    q = unique("ml")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(q, arguments={"x-overflow": value})
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg 'x-overflow' for queue '{q}' in vhost '/': {why}")


def test_aio_pika_drop_head(broker):
    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel()
            q = await ch.declare_queue(exclusive=True, arguments={"x-max-length": 2})
            for i in range(5):
                await ch.default_exchange.publish(aio_pika.Message(f"{i}".encode()), q.name)
            out = []
            while (msg := await q.get(fail=False, timeout=1)) is not None:
                await msg.ack()
                out.append(msg.body)
            return out

    assert asyncio.run(asyncio.wait_for(main(), 30)) == [b"3", b"4"]


# --- x-max-length-bytes: the ready messages' body bytes ---------------------------------------

def test_max_length_bytes_drop_head_keeps_the_newest_that_fit(channel, unique):
    """Five 4-byte bodies under a 10-byte limit: only the newest two (8 bytes) stay."""
    q = unique("mlb")
    channel.queue_declare(q, exclusive=True, arguments={"x-max-length-bytes": 10})
    channel.confirm_delivery()
    for i in range(5):
        channel.basic_publish("", q, f"m{i}..".encode())  # 4 bytes each
    assert message_count(channel, q) == 2
    assert get_all(channel, q) == [b"m3..", b"m4.."]


def test_max_length_bytes_counts_ready_messages_only(channel, unique):
    q = unique("mlb")
    channel.queue_declare(q, exclusive=True, arguments={"x-max-length-bytes": 5})
    channel.confirm_delivery()
    channel.basic_publish("", q, b"12345")
    method, _p, _body = channel.basic_get(q)  # unacked: its bytes no longer count
    channel.basic_publish("", q, b"abcde")
    assert message_count(channel, q) == 1
    channel.basic_nack(method.delivery_tag, requeue=True)  # back at the head: 10 bytes
    assert get_all(channel, q) == [b"abcde"]  # the limit holds after a requeue too


@pytest.mark.parametrize("args", [{"x-max-length": 1}, {"x-max-length-bytes": 5}])
def test_limits_hold_after_requeue_and_channel_close(connect, unique, args):
    """RabbitMQ 3.10.8 (checked) drops from the head when a requeue (basic.nack, or the
    unacked messages of a closed channel) takes the queue past its limit."""
    ch = connect().channel()
    q = unique("mlr")
    ch.queue_declare(q, auto_delete=False, arguments=args)
    ch.confirm_delivery()
    ch.basic_publish("", q, b"first")
    other = connect().channel()
    method, _p, _b = other.basic_get(q)
    ch.basic_publish("", q, b"secnd")
    other.close()  # "first" comes back at the head, over the limit: dropped
    wait_for(lambda: message_count(ch, q) == 1)
    assert get_all(ch, q) == [b"secnd"]
    ch.queue_delete(q)


def test_max_length_bytes_drops_a_body_larger_than_the_limit(channel, unique):
    q = unique("mlb")
    channel.queue_declare(q, exclusive=True, arguments={"x-max-length-bytes": 3})
    channel.confirm_delivery()
    channel.basic_publish("", q, b"ab")
    channel.basic_publish("", q, b"too long")  # enqueued, then over: everything goes
    assert message_count(channel, q) == 0


def test_max_length_bytes_reject_publish_nacks(connect, unique):
    ch = connect().channel()
    q = unique("mlb")
    ch.queue_declare(q, exclusive=True, arguments={
        "x-max-length-bytes": 6, "x-overflow": "reject-publish"})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"abc")
    ch.basic_publish("", q, b"def")  # exactly 6: accepted
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", q, b"g")
    ch.basic_publish("", q, b"")  # an empty body still fits
    assert get_all(ch, q) == [b"abc", b"def", b""]


def test_max_length_and_bytes_together_whichever_is_hit_first(channel, unique):
    q = unique("mlb")
    channel.queue_declare(q, exclusive=True, arguments={
        "x-max-length": 3, "x-max-length-bytes": 100})
    channel.confirm_delivery()
    for i in range(5):
        channel.basic_publish("", q, f"{i}".encode())
    assert get_all(channel, q) == [b"2", b"3", b"4"]  # the count limit bit
    for i in range(3):
        channel.basic_publish("", q, f"{i}".encode() * 40)  # 40 bytes each
    assert get_all(channel, q) == [b"1" * 40, b"2" * 40]  # the byte limit bit


def test_max_length_bytes_dead_letters_maxlen(channel, unique):
    q, dl = unique("mlb"), unique("mlb-dl")
    channel.queue_declare(dl, exclusive=True)
    channel.queue_declare(q, exclusive=True, arguments={
        "x-max-length-bytes": 4, "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": dl})
    channel.confirm_delivery()
    channel.basic_publish("", q, b"old!")
    channel.basic_publish("", q, b"new!")
    wait_for(lambda: message_count(channel, dl) == 1)
    method, props, body = channel.basic_get(dl, auto_ack=True)
    assert body == b"old!"
    assert props.headers["x-first-death-reason"] == "maxlen"
    assert get_all(channel, q) == [b"new!"]


def test_max_length_bytes_invalid_is_406(connect, unique):
    ch = connect().channel()
    q = unique("mlb")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(q, arguments={"x-max-length-bytes": -1})
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg 'x-max-length-bytes' for queue '{q}' in vhost "
        "'/': {value_negative,-1}")
