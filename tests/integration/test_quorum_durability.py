"""A quorum queue keeps every message as persistent, whatever its delivery_mode, and confirms
it in `persist` mode whatever the broker-wide confirm_on says (issue 34 item 3; rabbit_fifo
settles an enqueue once it is in the log). The message itself is delivered as published:
RabbitMQ 3.10.8 hands a transient message back with delivery_mode 1."""

from __future__ import annotations

import pika
import pytest

QUORUM = {"x-queue-type": "quorum"}


def test_a_transient_message_keeps_its_delivery_mode(connect, unique):
    ch = connect().channel()
    q = unique("qq-dm")
    ch.queue_declare(q, durable=True, arguments=QUORUM)
    ch.confirm_delivery()
    ch.basic_publish("", q, b"t", pika.BasicProperties(delivery_mode=1))
    ch.basic_publish("", q, b"n")
    got = [ch.basic_get(q, auto_ack=True) for _ in range(2)]
    assert [(body, props.delivery_mode) for _m, props, body in got] == [(b"t", 1), (b"n", None)]
    ch.queue_delete(q)


@pytest.mark.timeout(60)  # without the persist rule the first confirm never comes
def test_every_message_survives_a_restart_and_is_confirmed_in_persist_mode(tmp_path,
                                                                          embedded_only):
    """Broker-wide confirm_on = ack: a classic queue would confirm only once consumed and
    keeps transient messages in RAM; the quorum queue confirms without a consumer and has
    every transient message back after a restart (the classic durable queue beside it has
    none, as RabbitMQ)."""
    from broker.embedded import EmbeddedBroker

    b = EmbeddedBroker(data_dir=str(tmp_path), confirm_on="ack").start()
    try:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        ch.queue_declare("qq", durable=True, arguments=QUORUM)
        ch.queue_declare("cq", durable=True)
        ch.confirm_delivery()  # each publish waits for its confirm (pika's blocking channel)
        for i in range(20):
            ch.basic_publish("", "qq", str(i).encode(), pika.BasicProperties(delivery_mode=1))
        plain = conn.channel()
        for i in range(20):
            plain.basic_publish("", "cq", str(i).encode(), pika.BasicProperties(delivery_mode=1))
        assert plain.queue_declare("cq", durable=True).method.message_count == 20
        conn.close()
    finally:
        b.stop()
    b = EmbeddedBroker(data_dir=str(tmp_path), confirm_on="ack").start()
    try:
        with pika.BlockingConnection(pika.URLParameters(b.url)) as conn:
            ch = conn.channel()
            assert ch.queue_declare("cq", durable=True).method.message_count == 0
            assert ch.queue_declare("qq", durable=True,
                                    arguments=QUORUM).method.message_count == 20
            bodies = []
            for _ in range(20):
                _m, props, body = ch.basic_get("qq", auto_ack=True)
                assert props.delivery_mode == 1
                bodies.append(body)
            assert bodies == [str(i).encode() for i in range(20)]
    finally:
        b.stop()
