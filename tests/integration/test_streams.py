"""Stream queues over AMQP 0-9-1 (issue 22; rabbitmq.com/streams.html), driven with pika;
the same tests pass against RabbitMQ 3.10.8 (BROKER_TEST_URI): declare rules and texts,
publishing with confirms, consumers that choose where to start (x-stream-offset: first,
last, next, an offset, a timestamp, an interval) and read independently, acks that only
give credit, the x-stream-offset header, and what is refused (basic.get, auto-ack, no
prefetch)."""

from __future__ import annotations

import datetime
import os
import time

import pika
import pika.exceptions
import pytest

EXTERNAL = bool(os.environ.get("BROKER_TEST_URI"))
STREAM = {"x-queue-type": "stream"}


@pytest.fixture
def stream(connect, unique):
    """A fresh stream queue's name (deleted afterwards)."""
    name = unique("stream")
    ch = connect().channel()
    ch.queue_declare(name, durable=True, arguments=STREAM)
    yield name
    connect().channel().queue_delete(name)


def _publish(ch, queue: str, bodies: list[bytes]) -> None:
    ch.confirm_delivery()
    for body in bodies:
        ch.basic_publish("", queue, body, pika.BasicProperties(message_id=body.decode(),
                                                               headers={"h": 1}))


def _consume(conn, queue: str, n: int, offset=None, prefetch: int = 10,
             timeout: float = 10.0) -> list[tuple[int, bytes]]:
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    got: list[tuple[int, bytes]] = []

    def on_message(c, method, props, body):
        got.append((props.headers["x-stream-offset"], body))
        c.basic_ack(method.delivery_tag)
    args = {} if offset is None else {"x-stream-offset": offset}
    tag = ch.basic_consume(queue, on_message, arguments=args)
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    ch.basic_cancel(tag)
    return got


@pytest.mark.parametrize(("flags", "args", "text"), [
    ({"durable": False}, {}, "invalid property 'non-durable' for queue"),
    ({"durable": True, "auto_delete": True}, {}, "invalid property 'auto-delete' for queue"),
    ({"durable": True, "exclusive": True}, {}, "invalid property 'exclusive-owner' for queue"),
    ({"durable": True}, {"x-max-age": "10x"}, "invalid arg 'x-max-age' for queue"),
    ({"durable": True}, {"x-stream-max-segment-size-bytes": 4_000_000_000},
     "Exceeded max value for x-stream-max-segment-size-bytes"),
])
def test_declare_rules(connect, unique, flags, args, text):
    ch = connect().channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.queue_declare(unique("bad"), arguments={**STREAM, **args}, **flags)
    assert err.value.reply_code == 406 and text in err.value.reply_text


def test_an_unknown_queue_type_is_refused(connect, unique):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        connect().channel().queue_declare(unique("q"), durable=True,
                                          arguments={"x-queue-type": "bogus"})
    assert err.value.reply_code == 406
    assert err.value.reply_text.endswith(
        "\"unsupported queue type 'bogus'\"")


def test_a_stream_keeps_its_type_and_arguments(connect, stream):
    ch = connect().channel()
    ch.queue_declare(stream, durable=True, arguments=STREAM)  # the same: fine
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "classic"})
    assert err.value.reply_code == 406
    assert "inequivalent arg 'x-queue-type'" in err.value.reply_text
    assert "received 'classic' but current is 'stream'" in err.value.reply_text
    ok = connect().channel().queue_declare(
        stream + "-aged", durable=True,
        arguments={**STREAM, "x-max-age": "7D", "x-max-length-bytes": 10_000_000,
                   "x-stream-max-segment-size-bytes": 1_000_000})
    connect().channel().queue_delete(ok.method.queue)


def test_consumers_read_independently_from_where_they_start(connect, stream):
    conn = connect()
    _publish(conn.channel(), stream, [b"m%d" % i for i in range(30)])
    everything = _consume(conn, stream, 30, "first")
    assert everything == [(i, b"m%d" % i) for i in range(30)]
    again = _consume(conn, stream, 30, "first")  # reading removed nothing
    assert again == everything
    assert _consume(conn, stream, 10, 20) == [(i, b"m%d" % i) for i in range(20, 30)]


def test_next_waits_for_new_messages_and_last_starts_at_the_last_chunk(connect, stream):
    conn = connect()
    pub = connect().channel()
    _publish(pub, stream, [b"old"])
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    got: list[bytes] = []
    ch.basic_consume(stream, lambda c, m, p, b: (got.append(b), c.basic_ack(m.delivery_tag)))
    conn.process_data_events(0.3)  # "next" (the default): nothing old
    assert got == []
    _publish(pub, stream, [b"new1", b"new2"])
    deadline = time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    assert got == [b"new1", b"new2"]
    last = _consume(connect(), stream, 1, "last", timeout=3)
    assert last and last[0][1] in (b"new1", b"new2")  # the last chunk


def test_timestamp_and_interval_offsets(connect, stream):
    conn = connect()
    _publish(conn.channel(), stream, [b"a", b"b"])
    hour_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    assert [b for _o, b in _consume(conn, stream, 2, hour_ago)] == [b"a", b"b"]
    assert [b for _o, b in _consume(conn, stream, 2, "1h")] == [b"a", b"b"]
    future = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    assert _consume(conn, stream, 1, future, timeout=0.5) == []


def test_acks_only_give_credit(connect, stream):
    conn = connect()
    _publish(conn.channel(), stream, [b"%d" % i for i in range(8)])
    ch = conn.channel()
    ch.basic_qos(prefetch_count=3)
    held: list = []
    ch.basic_consume(stream, lambda c, m, p, b: held.append(m.delivery_tag),
                     arguments={"x-stream-offset": "first"})
    conn.process_data_events(0.5)
    assert len(held) == 3  # the prefetch, then nothing until acks
    ch.basic_ack(held[-1], multiple=True)
    deadline = time.monotonic() + 5
    while len(held) < 6 and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    assert len(held) == 6


def test_what_a_stream_refuses(connect, stream):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        connect().channel().basic_consume(stream, lambda *a: None)  # no basic.qos
    assert err.value.reply_code == 406
    assert "consumer prefetch count is not set for" in err.value.reply_text
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as err:
        connect().channel().basic_get(stream)
    assert err.value.reply_code == 540
    assert "basic.get not supported by stream queues" in err.value.reply_text
    ch = connect().channel()
    ch.basic_qos(prefetch_count=1)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as err:
        ch.basic_consume(stream, lambda *a: None, auto_ack=True)
    assert err.value.reply_code == 540
    assert "automatic acknowledgement not supported by stream queues" in err.value.reply_text


@pytest.mark.skipif(EXTERNAL, reason="RabbitMQ 3.10.8 answers a bad offset with 541")
def test_a_bad_offset_is_406(connect, stream):
    ch = connect().channel()
    ch.basic_qos(prefetch_count=1)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.basic_consume(stream, lambda *a: None, arguments={"x-stream-offset": "bogus"})
    assert err.value.reply_code == 406 and "x-stream-offset" in err.value.reply_text


@pytest.mark.skipif(EXTERNAL, reason="RabbitMQ applies retention on its own schedule")
def test_retention_by_policy_drops_whole_segments_from_the_start(broker, connect, unique):
    import requests

    def api_put(path: str, body: dict | None) -> requests.Response:
        url, auth = broker.api_url + path, ("guest", "guest")
        if body is None:
            return requests.delete(url, auth=auth, timeout=10)
        return requests.put(url, json=body, auth=auth, timeout=10)

    name = unique("retained")
    ch = connect().channel()
    ch.queue_declare(name, durable=True, arguments={
        **STREAM, "x-stream-max-segment-size-bytes": 1000})
    try:
        assert api_put(f"/api/policies/%2F/{name}", {
            "pattern": f"^{name}$", "apply-to": "queues",
            "definition": {"max-length-bytes": 3000}}).status_code in (201, 204)
        conn = connect()
        pub = conn.channel()
        pub.confirm_delivery()
        for i in range(100):
            pub.basic_publish("", name, b"%03d" % i + b"." * 97)
        got = _consume(conn, name, 1, "first", timeout=3)
        assert got and 0 < got[0][0] < 100  # the oldest segments are gone
    finally:
        api_put(f"/api/policies/%2F/{name}", None)
        connect().channel().queue_delete(name)


def test_a_long_read_gets_each_offset_once(connect, stream):
    """More than one loop turn's worth of deliveries (256) to one consumer: each offset
    once, in order (the turn bound once re-sent the first 256)."""
    conn = connect()
    _publish(conn.channel(), stream, [b"%d" % i for i in range(700)])
    got = _consume(conn, stream, 700, "first", prefetch=1000, timeout=15)
    conn.process_data_events(0.3)
    assert [o for o, _b in got] == list(range(700))


def test_aio_pika_reads_a_stream_from_an_offset(broker, unique):
    """aio-pika: declare, publish with confirms, two consumers at different offsets, and
    aio-pika's delete (if-unused and if-empty set), which a stream ignores as RabbitMQ's."""
    import asyncio

    import aio_pika

    name = unique("aio-stream")

    async def scenario() -> tuple[list, list]:
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel(publisher_confirms=True)
            q = await ch.declare_queue(name, durable=True, arguments=STREAM)
            for i in range(10):
                await ch.default_exchange.publish(aio_pika.Message(b"%d" % i), name)

            async def read(offset, n: int) -> list:
                rch = await conn.channel()
                await rch.set_qos(prefetch_count=5)
                rq = await rch.get_queue(name, ensure=False)
                got: list = []
                async with rq.iterator(arguments={"x-stream-offset": offset}) as it:
                    async for message in it:
                        got.append((message.headers["x-stream-offset"], message.body))
                        await message.ack()
                        if len(got) == n:
                            break
                await rch.close()
                return got
            everything = await read("first", 10)
            tail = await read(7, 3)
            await q.delete()
            return everything, tail

    everything, tail = asyncio.run(asyncio.wait_for(scenario(), 20))
    assert everything == [(i, b"%d" % i) for i in range(10)]
    assert tail == [(i, b"%d" % i) for i in range(7, 10)]
