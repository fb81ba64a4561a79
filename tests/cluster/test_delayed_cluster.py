"""Delayed messages and a deduplication cache on disk survive the loss of the leader (issue
50): a follower in the ISR holds the delayed exchange's and the cache's files as it holds a
queue's, and when it takes over it sends every confirmed delayed message when due (none
early, none lost) and still refuses the keys it had seen; a deduplicating queue's messages
keep their keys on the new leader (it rebuilds them from the queue it recovers)."""

from __future__ import annotations

import time

import pika
import pytest

from tests.cluster.test_failover import drain, leader_and_follower, takes_over


@pytest.mark.timeout(120)
def test_delayed_messages_and_a_disk_cache_survive_kill_9_of_the_leader(tmp_path, etcd):
    with leader_and_follower(tmp_path, etcd) as (a, b, prefix):
        with pika.BlockingConnection(pika.URLParameters(a.url)) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.exchange_declare("later", "x-delayed-message", durable=True,
                                arguments={"x-delayed-type": "direct"})
            ch.exchange_declare("once", "x-message-deduplication", durable=True,
                                arguments={"x-cache-size": 100, "x-cache-persistence": "disk"})
            ch.queue_declare("due", durable=True)
            ch.queue_bind("due", "later", "k")
            ch.queue_declare("unique", durable=True)
            ch.queue_bind("unique", "once")
            ch.queue_declare("kept", durable=True,
                             arguments={"x-message-deduplication": True})
            sent = time.time()
            for i in range(50):
                ch.basic_publish("later", "k", b"%d" % i, pika.BasicProperties(
                    delivery_mode=2, headers={"x-delay": 8000 + 20 * i}))
            for i in range(10):
                ch.basic_publish("once", "", b"first-%d" % i, pika.BasicProperties(
                    delivery_mode=2, headers={"x-deduplication-header": f"key-{i}"}))
            for i in range(5):
                ch.basic_publish("", "kept", b"first-%d" % i, pika.BasicProperties(
                    delivery_mode=2, headers={"x-deduplication-header": f"q-{i}"}))
        a.kill()
        takes_over(b, etcd, prefix)
        with pika.BlockingConnection(pika.URLParameters(b.url)) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            for i in range(10):  # the keys the old leader saw are still duplicates
                ch.basic_publish("once", "", b"again-%d" % i, pika.BasicProperties(
                    delivery_mode=2, headers={"x-deduplication-header": f"key-{i}"}))
            for i in range(5):  # so are those of the queue's messages still there
                ch.basic_publish("", "kept", b"again-%d" % i, pika.BasicProperties(
                    delivery_mode=2, headers={"x-deduplication-header": f"q-{i}"}))
        assert drain(b, "unique") == [b"first-%d" % i for i in range(10)]
        assert drain(b, "kept") == [b"first-%d" % i for i in range(5)]
        got: list[bytes] = []
        first_at = None
        deadline = time.monotonic() + 30
        while len(got) < 50 and time.monotonic() < deadline:
            got += drain(b, "due")
            if got and first_at is None:
                first_at = time.time()
            time.sleep(0.05)
        assert first_at is not None and first_at >= sent + 8.0  # none before it was due
        assert got == [b"%d" % i for i in range(50)]
