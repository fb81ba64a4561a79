"""Message deduplication with pika (issue 50): rabbitmq-message-deduplication's wire contract
(its README and exchange_SUITE / queue_SUITE: the x-message-deduplication exchange with
x-cache-size / x-cache-ttl / x-cache-persistence, the x-deduplication-header header, the
x-message-deduplication queue argument) and this broker's additions (quorum queues, a
content key, a persisted cache across a restart, duplicates confirmed)."""

from __future__ import annotations

import time

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, UnroutableError

DEDUP = "x-message-deduplication"


@pytest.fixture(autouse=True, scope="module")
def _plugin(broker) -> None:
    """Against another broker (BROKER_TEST_URI): only where the plugin is enabled."""
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
        try:
            ch = conn.channel()
            ch.exchange_declare("dedup-probe", DEDUP, arguments={"x-cache-size": 1})
            ch.exchange_delete("dedup-probe")
        except pika.exceptions.AMQPError:
            pytest.skip("the broker has no x-message-deduplication exchange type")


def _pub(ch, exchange: str, key: str, body: bytes, dedup: object = None, **headers) -> None:
    if dedup is not None:
        headers["x-deduplication-header"] = dedup
    ch.basic_publish(exchange, key, body, pika.BasicProperties(headers=headers or None))


def _bodies(ch, queue: str) -> list[bytes]:
    out = []
    while True:
        method, _props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append(body)


def test_declare_needs_a_cache_size(connect, unique) -> None:
    ch = connect().channel()
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.exchange_declare(unique("dd"), DEDUP)
    assert err.value.reply_code == 406 and "x-cache-size" in err.value.reply_text


def test_the_exchange_routes_as_a_fanout_and_drops_duplicates(connect, unique) -> None:
    ch = connect().channel()
    ch.confirm_delivery()
    x, q1, q2 = unique("dd"), unique("q1"), unique("q2")
    ch.exchange_declare(x, DEDUP, arguments={"x-cache-size": 100})
    for q, key in ((q1, "a"), (q2, "b")):
        ch.queue_declare(q)
        ch.queue_bind(q, x, key)
    _pub(ch, x, "whatever", b"1", "order-1")
    _pub(ch, x, "whatever", b"2", "order-1")  # a duplicate: confirmed, routed nowhere
    _pub(ch, x, "whatever", b"3", "order-2")
    _pub(ch, x, "whatever", b"4")  # no header: never a duplicate
    _pub(ch, x, "whatever", b"5")
    _pub(ch, x, "whatever", b"6", 7)  # an integer key
    _pub(ch, x, "whatever", b"7", "7")  # not the same key as 7
    for q in (q1, q2):
        assert _bodies(ch, q) == [b"1", b"3", b"4", b"5", b"6", b"7"]
    with pytest.raises(UnroutableError):  # mandatory: a duplicate comes back
        ch.basic_publish(x, "", b"8", pika.BasicProperties(
            headers={"x-deduplication-header": "order-1"}), mandatory=True)


def test_cache_ttl_from_the_exchange_and_the_message(connect, unique) -> None:
    ch = connect().channel()
    x, q = unique("dd"), unique("q")
    ch.exchange_declare(x, DEDUP, arguments={"x-cache-size": 100, "x-cache-ttl": 200})
    ch.queue_declare(q)
    ch.queue_bind(q, x)
    _pub(ch, x, "", b"a1", "a")
    _pub(ch, x, "", b"b1", "b", **{"x-cache-ttl": 5000})  # the message's own TTL wins
    time.sleep(0.3)
    _pub(ch, x, "", b"a2", "a")  # expired: routed again
    _pub(ch, x, "", b"b2", "b")  # still a duplicate
    assert _bodies(ch, q) == [b"a1", b"b1", b"a2"]


def test_a_full_cache_forgets_the_oldest(connect, unique) -> None:
    ch = connect().channel()
    x, q = unique("dd"), unique("q")
    ch.exchange_declare(x, DEDUP, arguments={"x-cache-size": 2})
    ch.queue_declare(q)
    ch.queue_bind(q, x)
    for key in ("k1", "k2", "k3", "k1", "k3"):
        _pub(ch, x, "", key.encode(), key)
    assert _bodies(ch, q) == [b"k1", b"k2", b"k3", b"k1"]


def test_a_queue_refuses_what_it_holds_until_it_leaves(connect, unique) -> None:
    ch = connect().channel()
    ch.confirm_delivery()
    q = unique("dq")
    ch.queue_declare(q, arguments={DEDUP: True})
    _pub(ch, "", q, b"1", "job-1")
    _pub(ch, "", q, b"2", "job-1")  # confirmed (the publisher's retry succeeds), not enqueued
    _pub(ch, "", q, b"3", "job-2")
    assert ch.queue_declare(q, passive=True).method.message_count == 2
    method, _p, body = ch.basic_get(q)
    assert body == b"1"
    _pub(ch, "", q, b"4", "job-1")  # delivered, not acked yet: still a duplicate
    ch.basic_ack(method.delivery_tag)
    _pub(ch, "", q, b"5", "job-1")  # gone: welcome again
    assert _bodies(ch, q) == [b"3", b"5"]


def test_a_quorum_queue_deduplicates_too(connect, unique) -> None:
    ch = connect().channel()
    ch.confirm_delivery()
    q = unique("dqq")
    ch.queue_declare(q, durable=True, arguments={DEDUP: True, "x-queue-type": "quorum"})
    for body, key in ((b"1", "x"), (b"2", "x"), (b"3", "y")):
        _pub(ch, "", q, body, key)
    assert _bodies(ch, q) == [b"1", b"3"]
    ch.queue_delete(q)


def test_the_api_counts_duplicates(broker, connect, unique, embedded_only) -> None:
    import requests

    ch = connect().channel()
    x, q = unique("dd"), unique("dq")
    ch.exchange_declare(x, DEDUP, arguments={"x-cache-size": 10})
    ch.queue_declare(q, arguments={DEDUP: True})
    for _ in range(3):
        _pub(ch, x, "", b"m", "same")
        _pub(ch, "", q, b"m", "same")
    auth = ("guest", "guest")
    got = requests.get(f"{broker.api_url}/api/exchanges/%2F/{x}", auth=auth, timeout=10).json()
    assert got["messages_deduplicated"] == 2
    assert got["cache_info"] == {"entries": 1, "size": 10}
    deadline = time.monotonic() + 10
    while True:
        got = requests.get(f"{broker.api_url}/api/queues/%2F/{q}", auth=auth, timeout=10).json()
        if got.get("messages_deduplicated") == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert got["messages_deduplicated"] == 2


def test_a_disk_cache_survives_a_restart(tmp_path, embedded_only) -> None:
    from broker.embedded import EmbeddedBroker

    for run in range(2):
        b = EmbeddedBroker(data_dir=str(tmp_path)).start()
        try:
            with pika.BlockingConnection(pika.URLParameters(b.url)) as conn:
                ch = conn.channel()
                ch.exchange_declare("ddx", DEDUP, durable=True, arguments={
                    "x-cache-size": 10, "x-cache-persistence": "disk"})
                ch.exchange_declare("ddm", DEDUP, durable=True, arguments={"x-cache-size": 10})
                ch.queue_declare("ddq", durable=True)
                ch.queue_bind("ddq", "ddx")
                ch.queue_bind("ddq", "ddm")
                _pub(ch, "ddx", "", b"disk-%d" % run, "k")
                _pub(ch, "ddm", "", b"memory-%d" % run, "k")
                bodies = _bodies(ch, "ddq")
        finally:
            b.stop()
    # the second run: the disk cache still held "k", the memory one had forgotten it
    assert bodies == [b"memory-1"]
