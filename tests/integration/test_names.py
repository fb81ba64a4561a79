"""Names RabbitMQ accepts that pamqp's name pattern does not (issue 8 item 4).

RabbitMQ takes any UTF-8 shortstr (up to 255 bytes) as a queue, exchange, routing key or
consumer tag, and echoes it back in queue.declare-ok, basic.get-ok, basic.deliver,
basic.return and consume-ok. Before, the broker created the queue but failed to encode the
declare-ok (pamqp's validate()), and every later command on that channel stalled.
"""

from __future__ import annotations

import kombu
import pika
import pytest
from helpers import Recorder, pump_until

NAMES = ["café", "orders*", "q?", "a~", "日本", "tab\there", "sp ace", "x" * 200]


@pytest.mark.parametrize("name", NAMES, ids=range(len(NAMES)))
def test_name_round_trip_everywhere_it_is_echoed(connection, name, unique):
    ch = connection.channel()
    ch.confirm_delivery()
    qname = f"{name}-{unique('n')}"
    xname = f"x-{name}-{unique('n')}"
    declared = ch.queue_declare(qname, exclusive=True).method
    assert declared.queue == qname
    ch.exchange_declare(xname, "direct", auto_delete=True)
    ch.queue_bind(qname, xname, routing_key=name)

    ch.basic_publish(xname, name, b"one")
    method, _props, body = ch.basic_get(qname, auto_ack=True)
    assert (method.exchange, method.routing_key, body) == (xname, name, b"one")

    returned = []
    ch.add_on_return_callback(lambda _c, m, _p, b: returned.append((m.exchange, m.routing_key)))
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish(xname, f"{name}-nobody", b"r", mandatory=True)
    pump_until(connection, lambda: returned)
    assert returned == [(xname, f"{name}-nobody")]

    rec = Recorder()
    tag = ch.basic_consume(qname, rec, auto_ack=True, consumer_tag=f"ctag-{name}")
    assert tag == f"ctag-{name}"
    ch.basic_publish(xname, name, b"two")
    pump_until(connection, lambda: rec.got)
    assert rec.bodies == [b"two"]
    ch.basic_cancel(tag)
    ch.exchange_delete(xname)


def test_kombu_queue_with_non_ascii_name(broker, unique):
    name = f"commandes-été-{unique('k')}"
    with kombu.Connection(broker.url) as conn:
        q = kombu.Queue(name, exchange=kombu.Exchange(""), routing_key=name, auto_delete=True)
        with conn.Producer() as producer:
            producer.publish({"n": 1}, routing_key=name, declare=[q], serializer="json")
        with conn.SimpleQueue(q) as sq:
            msg = sq.get(timeout=5)
            msg.ack()
    assert msg.payload == {"n": 1}
    assert msg.delivery_info["routing_key"] == name
