"""Durable definitions and persistent messages survive a clean restart; transient ones don't
(AMQP 0-9-1 §1.7.2.1 durable, rabbitmq.com/queues.html#durability)."""

from __future__ import annotations

import pika

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
