"""The x-consistent-hash and x-modulus-hash exchange types through real clients (the
rabbitmq_consistent_hash_exchange and rabbitmq_sharding plugins' types; against RabbitMQ the
plugins must be enabled)."""

from __future__ import annotations

import asyncio

import aio_pika
import pika
import pytest
from helpers import message_count

from tests.polling import wait_for


@pytest.fixture
def queues(channel, unique):
    names = [unique(f"hq{i}") for i in range(4)]
    for q in names:
        channel.queue_declare(q, exclusive=True)
    return names


def publish_many(ch, exchange: str, keys, **props) -> None:
    ch.confirm_delivery()
    for k in keys:
        ch.basic_publish(exchange, k, b"m", pika.BasicProperties(**props) if props else None)


def test_consistent_hash_weights_and_same_key_same_queue(connect, channel, queues, unique):
    x = unique("chx")
    channel.exchange_declare(x, "x-consistent-hash", auto_delete=True)
    for q, weight in zip(queues, ("1", "1", "2", "2"), strict=True):
        channel.queue_bind(q, x, weight)
    pub = connect().channel()
    publish_many(pub, x, (f"key-{i}" for i in range(3000)))
    wait_for(lambda: sum(message_count(channel, q) for q in queues) == 3000)
    counts = [message_count(channel, q) for q in queues]
    assert all(200 < c < 800 for c in counts[:2]), counts  # about 500 each
    assert all(700 < c < 1300 for c in counts[2:]), counts  # about 1000 each
    for q in queues:
        channel.queue_purge(q)
    publish_many(pub, x, ["sticky"] * 20)
    wait_for(lambda: sum(message_count(channel, q) for q in queues) == 20)
    assert sorted(message_count(channel, q) for q in queues) == [0, 0, 0, 20]


@pytest.mark.parametrize(("arguments", "props"), [
    ({"hash-header": "tenant"}, {"headers": {"tenant": "acme"}}),
    ({"hash-property": "message_id"}, {"message_id": "order-17"}),
])
def test_consistent_hash_on_a_header_or_property(connect, channel, queues, unique, arguments,
                                                 props):
    """Different routing keys, same header / message_id: all in one queue."""
    x = unique("chx")
    channel.exchange_declare(x, "x-consistent-hash", auto_delete=True, arguments=arguments)
    for q in queues:
        channel.queue_bind(q, x, "10")
    pub = connect().channel()
    publish_many(pub, x, (f"rk-{i}" for i in range(40)), **props)
    wait_for(lambda: sum(message_count(channel, q) for q in queues) == 40)
    assert sorted(message_count(channel, q) for q in queues) == [0, 0, 0, 40]


@pytest.mark.parametrize(("key", "text"), [
    ("heavy", 'PRECONDITION_FAILED - The binding key must be an integer: <<"heavy">>'),
    ("0", "PRECONDITION_FAILED - The binding key must be greater than 0"),
])
def test_consistent_hash_bad_binding_key_is_406(connect, unique, key, text):
    ch = connect().channel()
    x, q = unique("chx"), unique("q")
    ch.exchange_declare(x, "x-consistent-hash", auto_delete=True)
    ch.queue_declare(q, exclusive=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_bind(q, x, key)
    assert (info.value.reply_code, info.value.reply_text) == (406, text)


def test_consistent_hash_conflicting_arguments_are_406(connect, unique):
    ch = connect().channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare(unique("chx"), "x-consistent-hash", auto_delete=True,
                            arguments={"hash-header": "h", "hash-property": "message_id"})
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - hash-header and hash-property are mutually exclusive")


def test_modulus_hash_spreads_keys_and_keeps_each_on_one_queue(connect, channel, queues,
                                                                unique):
    x = unique("mhx")
    channel.exchange_declare(x, "x-modulus-hash", auto_delete=True)
    for q in queues:
        channel.queue_bind(q, x, "any key")
    pub = connect().channel()
    publish_many(pub, x, (f"key-{i}" for i in range(400)))
    wait_for(lambda: sum(message_count(channel, q) for q in queues) == 400)
    assert all(message_count(channel, q) > 50 for q in queues)
    for q in queues:
        channel.queue_purge(q)
    publish_many(pub, x, ["one-key"] * 10)
    wait_for(lambda: sum(message_count(channel, q) for q in queues) == 10)
    assert sorted(message_count(channel, q) for q in queues) == [0, 0, 0, 10]


def test_modulus_hash_counts_bindings_not_queues(connect, channel, queues, unique):
    """rabbitmq_sharding's route picks among match_routing_key(X, ['_']), one entry per
    binding: a queue bound with two keys gets two buckets of three."""
    x = unique("mhx")
    channel.exchange_declare(x, "x-modulus-hash", auto_delete=True)
    twice, once = queues[0], queues[1]
    channel.queue_bind(twice, x, "a")
    channel.queue_bind(twice, x, "b")
    channel.queue_bind(once, x, "a")
    pub = connect().channel()
    publish_many(pub, x, (f"key-{i}" for i in range(1500)))
    wait_for(lambda: message_count(channel, twice) + message_count(channel, once) == 1500)
    assert 850 < message_count(channel, twice) < 1150  # about 2/3


def test_aio_pika_consistent_hash(broker, unique):
    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel()
            x = await ch.declare_exchange(unique("chx"), "x-consistent-hash", auto_delete=True)
            qs = [await ch.declare_queue(exclusive=True) for _ in range(3)]
            for q in qs:
                await q.bind(x, "1")
            for i in range(30):
                await x.publish(aio_pika.Message(f"{i}".encode()), routing_key="user-42")
            counts = []
            for q in qs:
                n = 0
                while (msg := await q.get(fail=False, timeout=1)) is not None:
                    await msg.ack()
                    n += 1
                counts.append(n)
            return sorted(counts)

    assert asyncio.run(asyncio.wait_for(main(), 30)) == [0, 0, 30]


def test_durable_hash_header_exchange_keeps_its_argument_after_a_restart(tmp_path,
                                                                          embedded_only):
    """Recovery rebuilt x-consistent-hash routing without its arguments (hash-header was
    forgotten, routing keys were hashed): found while adding the route cache (issue 15)."""
    from broker.embedded import EmbeddedBroker

    def counts(ch, names):
        return sorted(message_count(ch, q) for q in names)

    names = [f"dq{i}" for i in range(4)]
    with EmbeddedBroker(data_dir=str(tmp_path)) as b:
        with pika.BlockingConnection(pika.URLParameters(b.url)) as c:
            ch = c.channel()
            ch.exchange_declare("hx", "x-consistent-hash", durable=True,
                                arguments={"hash-header": "tenant"})
            for q in names:
                ch.queue_declare(q, durable=True)
                ch.queue_bind(q, "hx", "10")
    with EmbeddedBroker(data_dir=str(tmp_path)) as b:
        with pika.BlockingConnection(pika.URLParameters(b.url)) as c:
            ch = c.channel()
            publish_many(ch, "hx", (f"rk-{i}" for i in range(40)), headers={"tenant": "acme"})
            wait_for(lambda: sum(counts(ch, names)) == 40)
            assert counts(ch, names) == [0, 0, 0, 40]
