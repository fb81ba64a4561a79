"""Durable definitions and persistent messages survive a clean restart; transient ones don't
(AMQP 0-9-1 §1.7.2.1 durable, rabbitmq.com/queues.html#durability)."""

from __future__ import annotations

import struct

import pika
from pamqp import commands

from broker.embedded import EmbeddedBroker


def _conn(b: EmbeddedBroker) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(b.url))


def test_clean_restart_keeps_durable_things_only(tmp_path):
    data = str(tmp_path)
    with EmbeddedBroker(data_dir=data) as b:
        c = _conn(b)
        ch = c.channel()
        ch.confirm_delivery()
        ch.exchange_declare("dx", "topic", durable=True)
        ch.exchange_declare("tx", "fanout", durable=False)
        ch.queue_declare("dq", durable=True, arguments={"x-max-length": 100})
        ch.queue_declare("tq", durable=False)
        ch.queue_bind("dq", "dx", "a.#")
        persistent = pika.BasicProperties(delivery_mode=2, content_type="text/plain",
                                          headers={"k": 1})
        for i in range(5):
            ch.basic_publish("dx", "a.b", b"p%d" % i, persistent)
        ch.basic_publish("dx", "a.b", b"transient")
        ch.basic_publish("", "dq", b"big" * 3000, persistent)  # > 4096: message store
        c.close()
    with EmbeddedBroker(data_dir=data) as b:
        c = _conn(b)
        ch = c.channel()
        ch.exchange_declare("dx", "topic", durable=True, passive=True)
        assert ch.queue_declare("dq", durable=True, passive=True).method.message_count == 6
        bodies = []
        while True:
            m, props, body = ch.basic_get("dq", auto_ack=True)
            if m is None:
                break
            bodies.append(body)
            assert props.delivery_mode == 2
            assert props.headers == {"k": 1} or body.startswith(b"big")
        assert bodies == [b"p%d" % i for i in range(5)] + [b"big" * 3000]
        ch.basic_publish("dx", "a.z", b"routed", pika.BasicProperties(delivery_mode=2))
        assert ch.queue_declare("dq", passive=True).method.message_count == 1  # binding kept
        for name, kind in (("tq", "queue"), ("tx", "exchange")):
            ch2 = c.channel()
            try:
                if kind == "queue":
                    ch2.queue_declare(name, passive=True)
                else:
                    ch2.exchange_declare(name, passive=True)
                raise AssertionError(f"{kind} {name} survived a restart")
            except pika.exceptions.ChannelClosedByBroker as exc:
                assert exc.reply_code == 404
        c.close()


def test_deleted_durable_queue_stays_deleted(tmp_path):
    data = str(tmp_path)
    with EmbeddedBroker(data_dir=data) as b:
        c = _conn(b)
        ch = c.channel()
        ch.queue_declare("gone", durable=True)
        ch.basic_publish("", "gone", b"x", pika.BasicProperties(delivery_mode=2))
        ch.queue_delete("gone")
        c.close()
    with EmbeddedBroker(data_dir=data) as b:
        c = _conn(b)
        ch = c.channel()
        ch.queue_declare("gone", durable=True)
        assert ch.queue_declare("gone", passive=True).method.message_count == 0
        c.close()


def test_persistent_message_with_out_of_range_timestamps_survives_restart(tmp_path):
    """Properties pamqp cannot decode (Go's zero time.Time as the timestamp property and
    inside headers) are stored as received and read back after a restart, from the queue
    index (small message) and from the message store (large one), byte for byte."""
    from tests.integration.rawamqp import RawClient

    go_zero = struct.pack(">Q", 2**64 - 62135596800)
    headers = b"\x04when" + b"T" + go_zero + b"\x04kind" + b"S" + struct.pack(">I", 1) + b"a"
    raw_props = (
        struct.pack(">HI", 0x2000 | 0x1000 | 0x0040, len(headers))  # headers, delivery_mode,
        + headers + b"\x02" + go_zero  # timestamp
    )
    bodies = [b"small", b"big" * 3000]  # embedded in the index; > 4096 B: message store
    data = str(tmp_path)
    with EmbeddedBroker(data_dir=data) as b, RawClient(b.host, b.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue="tsq", durable=True), 1)
        c.expect(commands.Queue.DeclareOk, 1)
        c.send(commands.Confirm.Select(), 1)
        c.expect(commands.Confirm.SelectOk, 1)
        for body in bodies:
            c.publish_raw_properties(1, raw_props, body, routing_key="tsq")
        acked = 0
        while acked < len(bodies):
            ack = c.read_method_bytes()
            assert isinstance(ack, commands.Basic.Ack), ack
            acked = ack.delivery_tag if ack.multiple else acked + 1
        c.close()
    with EmbeddedBroker(data_dir=data) as b, RawClient(b.host, b.port) as c:
        c.handshake()
        c.open_channel(1)
        got = [c.get_bytes(1, "tsq", timeout=0) for _ in bodies]
        assert got == [(raw_props, body) for body in bodies]
        c.close()
