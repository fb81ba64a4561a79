"""A stream keeps every confirmed message at the same offset across a graceful restart and
a kill -9 (issue 22 item 4), with a broker process."""

from __future__ import annotations

import time

import pika

from tests.recovery.brokerproc import BrokerProcess


def _read_all(url: str, queue: str, n: int) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []
    with pika.BlockingConnection(pika.URLParameters(url)) as conn:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=100)
        ch.basic_consume(queue, lambda c, m, p, b: (
            got.append((p.headers["x-stream-offset"], b)), c.basic_ack(m.delivery_tag)),
            arguments={"x-stream-offset": "first"})
        deadline = time.monotonic() + 20
        while len(got) < n and time.monotonic() < deadline:
            conn.process_data_events(0.05)
    return got


def test_confirmed_messages_survive_restarts_at_their_offsets(tmp_path):
    b = BrokerProcess(tmp_path / "data").start()
    try:
        with pika.BlockingConnection(pika.URLParameters(b.url)) as conn:
            ch = conn.channel()
            ch.queue_declare("events", durable=True, arguments={"x-queue-type": "stream"})
            ch.confirm_delivery()
            for i in range(300):
                ch.basic_publish("", "events", b"e%d" % i)
        expected = [(i, b"e%d" % i) for i in range(300)]
        b.kill()  # SIGKILL: every confirmed message was fsynced
        b = BrokerProcess(tmp_path / "data").start()
        assert _read_all(b.url, "events", 300) == expected
        with pika.BlockingConnection(pika.URLParameters(b.url)) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_publish("", "events", b"after")
        b.stop()  # graceful
        b = BrokerProcess(tmp_path / "data").start()
        assert _read_all(b.url, "events", 301) == [*expected, (300, b"after")]
    finally:
        b.stop()
