"""Basic class, publishing and consuming: publish/return, immediate, properties, consume/cancel,
exclusive consumers, round-robin, consumer priorities, basic.get.

Reply codes and texts are the ones RabbitMQ 3.10.8 sends. "Nothing more arrives" is never
checked by waiting: the queue's own ready count (queue.declare passive) must reach the value
that proves how many messages it handed out. The confirm-mode `pub` channel comes from conftest.
"""

from __future__ import annotations

import pika
import pika.exceptions
from helpers import (
    Recorder,
    consumer_count,
    fill,
    get_all,
    message_count,
    pump_until,
    soft_error,
)
from pamqp import commands
from rawamqp import RawClient

# --- publish: mandatory / immediate ------------------------------------------------------------


def test_mandatory_unroutable_is_returned_312_raw(broker, unique):
    rk = unique("nowhere")
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        props = commands.Basic.Properties(message_id="abc", content_type="text/plain")
        c.publish(
            1,
            b"back to you",
            exchange="amq.direct",
            routing_key=rk,
            mandatory=True,
            properties=props,
        )
        ret = c.expect(commands.Basic.Return, 1)
        hdr, body, _ = c.read_content(1)
        c.close()
    assert (ret.reply_code, ret.reply_text) == (312, "NO_ROUTE")
    assert (ret.exchange, ret.routing_key) == ("amq.direct", rk)
    assert body == b"back to you"
    assert hdr.properties.message_id == "abc"
    assert hdr.properties.content_type == "text/plain"


def test_mandatory_unroutable_pika_return_callback(connection, unique):
    ch = connection.channel()
    returned = []
    ch.add_on_return_callback(lambda c, m, p, b: returned.append((m.reply_code, m.reply_text, b)))
    ch.basic_publish("", unique("noqueue"), b"x", mandatory=True)
    pump_until(connection, lambda: returned)
    assert returned == [(312, "NO_ROUTE", b"x")]


def test_non_mandatory_unroutable_is_dropped_silently(connection, unique):
    ch = connection.channel()
    ch.confirm_delivery()
    returned = []
    ch.add_on_return_callback(lambda *a: returned.append(a))
    ch.basic_publish("", unique("noqueue"), b"x")
    connection.process_data_events(time_limit=0)
    assert returned == []
    assert ch.is_open


def test_immediate_publish_is_540_not_implemented(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.publish(1, b"x", routing_key="whatever", immediate=True)
        close = c.read_until_connection_close()
    assert isinstance(close, commands.Connection.Close)
    assert (close.reply_code, close.class_id, close.method_id) == (540, 60, 40)
    assert close.reply_text == "NOT_IMPLEMENTED - immediate=true"


def test_properties_and_empty_body_round_trip(pub):
    q = pub.queue_declare("", exclusive=True).method.queue
    props = pika.BasicProperties(
        content_type="application/json",
        content_encoding="utf-8",
        headers={"a": 1, "b": "two", "c": [1, "x"], "d": {"n": True}},
        delivery_mode=2,
        priority=3,
        correlation_id="cid",
        reply_to="rt",
        expiration="60000",
        message_id="mid",
        timestamp=1700000000,
        type="kind",
        user_id="guest",
        app_id="app",
    )
    pub.basic_publish("", q, b"", props)
    method, got, body = pub.basic_get(q, auto_ack=True)
    assert body == b""
    for field in (
        "content_type",
        "content_encoding",
        "headers",
        "delivery_mode",
        "priority",
        "correlation_id",
        "reply_to",
        "expiration",
        "message_id",
        "timestamp",
        "type",
        "user_id",
        "app_id",
    ):
        assert getattr(got, field) == getattr(props, field), field
    assert method.exchange == ""
    assert method.routing_key == q


def test_user_id_mismatch_is_406(connection):
    ch = connection.channel()
    ch.confirm_delivery()
    q = ch.queue_declare("", exclusive=True).method.queue
    code, text = soft_error(ch.basic_publish, "", q, b"x", pika.BasicProperties(user_id="bob"))
    assert code == 406
    assert (
        text
        == "PRECONDITION_FAILED - user_id property set to 'bob' but authenticated user was 'guest'"
    )


# --- consume / cancel ---------------------------------------------------------------------------


def test_consume_server_generated_tag_and_cancel(connection, pub):
    ch = connection.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    rec = Recorder(ack=True)
    tag = ch.basic_consume(q, rec)
    assert tag.startswith("ctag")  # pika makes its own tag; the raw test checks amq.ctag-
    fill(pub, q, 2)
    pump_until(connection, lambda: len(rec.got) == 2)
    ch.basic_cancel(tag)
    assert consumer_count(pub, q) == 0
    fill(pub, q, 3, "later")
    assert message_count(pub, q) == 3
    assert len(rec.got) == 2


def test_raw_consume_empty_tag_gets_amq_ctag(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = c.expect(commands.Queue.DeclareOk, 1).queue
        c.send(commands.Basic.Consume(queue=q, consumer_tag=""), 1)
        tag = c.expect(commands.Basic.ConsumeOk, 1).consumer_tag
        assert tag.startswith("amq.ctag-")
        c.publish(1, b"hi", routing_key=q)
        deliver = c.expect(commands.Basic.Deliver, 1)
        assert (deliver.consumer_tag, deliver.delivery_tag, deliver.redelivered) == (tag, 1, False)
        assert c.read_content(1)[1] == b"hi"
        c.send(commands.Basic.Cancel(consumer_tag=tag), 1)
        assert c.expect(commands.Basic.CancelOk, 1).consumer_tag == tag
        c.close()


def test_duplicate_consumer_tag_is_530(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = c.expect(commands.Queue.DeclareOk, 1).queue
        c.send(commands.Basic.Consume(queue=q, consumer_tag="dup"), 1)
        c.expect(commands.Basic.ConsumeOk, 1)
        c.send(commands.Basic.Consume(queue=q, consumer_tag="dup"), 1)
        close = c.read_until_connection_close()
    assert (close.reply_code, close.class_id, close.method_id) == (530, 60, 20)
    assert close.reply_text == "NOT_ALLOWED - attempt to reuse consumer tag 'dup'"


def test_cancel_unknown_consumer_tag_is_ok(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Basic.Cancel(consumer_tag="never-was"), 1)
        assert c.expect(commands.Basic.CancelOk, 1).consumer_tag == "never-was"
        c.close()


def test_consume_from_missing_queue_is_404(connection, unique):
    q = unique("missing")
    code, text = soft_error(connection.channel().basic_consume, q, lambda *a: None)
    assert code == 404
    assert text == f"NOT_FOUND - no queue '{q}' in vhost '/'"


def test_exclusive_consumer_blocks_others_403(connection, unique):
    q = unique("q")
    ch = connection.channel()
    ch.queue_declare(q, auto_delete=True)
    ch.basic_consume(q, lambda *a: None, exclusive=True)
    code, text = soft_error(connection.channel().basic_consume, q, lambda *a: None)
    assert code == 403
    assert text == f"ACCESS_REFUSED - queue '{q}' in vhost '/' in exclusive use"


def test_exclusive_consume_on_queue_with_consumers_is_403(connection, unique):
    q = unique("q")
    ch = connection.channel()
    ch.queue_declare(q, auto_delete=True)
    ch.basic_consume(q, lambda *a: None)
    code, text = soft_error(connection.channel().basic_consume, q, lambda *a: None, exclusive=True)
    assert code == 403
    assert text == f"ACCESS_REFUSED - queue '{q}' in vhost '/' in exclusive use"


def test_no_ack_consumer_messages_are_gone(connection, pub):
    ch = connection.channel()
    q = pub.queue_declare("", exclusive=True).method.queue
    rec = Recorder()
    ch.basic_consume(q, rec, auto_ack=True)
    bodies = fill(pub, q, 5)
    pump_until(connection, lambda: len(rec.got) == 5)
    assert rec.bodies == bodies
    ch.close()  # nothing unacked to requeue
    assert message_count(pub, q) == 0


def test_round_robin_across_consumers(connection, pub):
    ch = connection.channel()
    q = pub.queue_declare("", exclusive=True).method.queue
    recs = [Recorder(ack=True) for _ in range(3)]
    for r in recs:
        ch.basic_consume(q, r)
    bodies = fill(pub, q, 9)
    pump_until(connection, lambda: sum(len(r.got) for r in recs) == 9)
    assert sorted(len(r.got) for r in recs) == [3, 3, 3]
    # each consumer sees every third message, in order
    firsts = sorted(recs, key=lambda r: r.bodies[0])
    for i, r in enumerate(firsts):
        assert r.bodies == bodies[i::3]


def test_consumer_priorities(connect, unique):
    """The x-priority 10 consumer gets messages while it has prefetch room; then the 0 one."""
    conn = connect()
    setup = conn.channel()
    setup.confirm_delivery()
    q = unique("prio")
    setup.queue_declare(q, auto_delete=True)
    high_ch, low_ch = conn.channel(), conn.channel()
    high_ch.basic_qos(prefetch_count=3)
    low_ch.basic_qos(prefetch_count=3)
    high, low = Recorder(), Recorder()
    low_ch.basic_consume(q, low, arguments={"x-priority": 0})
    high_ch.basic_consume(q, high, arguments={"x-priority": 10})
    fill(setup, q, 4)
    pump_until(conn, lambda: len(high.got) + len(low.got) == 4)
    assert (len(high.got), len(low.got)) == (3, 1)
    high_ch.basic_ack(0, multiple=True)
    fill(setup, q, 2, "second")
    pump_until(conn, lambda: len(high.got) + len(low.got) == 6)
    assert high.bodies[3:] == [b"second0", b"second1"]
    assert len(low.got) == 1


# --- get ------------------------------------------------------------------------------------------


def test_basic_get_and_get_empty(pub):
    q = pub.queue_declare("", exclusive=True).method.queue
    assert pub.basic_get(q) == (None, None, None)
    fill(pub, q, 3)
    counts = []
    for _ in range(3):
        method, _props, _body = pub.basic_get(q, auto_ack=True)
        counts.append(method.message_count)
    assert counts == [2, 1, 0]
    assert pub.basic_get(q) == (None, None, None)


def test_raw_get_empty(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = c.expect(commands.Queue.DeclareOk, 1).queue
        c.send(commands.Basic.Get(queue=q), 1)
        c.expect(commands.Basic.GetEmpty, 1)
        c.close()


def test_get_from_missing_queue_is_404(connection, unique):
    code, _ = soft_error(connection.channel().basic_get, unique("missing"))
    assert code == 404


# --- more RabbitMQ specifics --------------------------------------------------------------------


def test_no_local_is_ignored(broker):
    """RabbitMQ does not implement no_local: a connection's own publishes are delivered."""
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = c.expect(commands.Queue.DeclareOk, 1).queue
        c.send(commands.Basic.Consume(queue=q, no_local=True, no_ack=True), 1)
        c.expect(commands.Basic.ConsumeOk, 1)
        c.publish(1, b"mine", routing_key=q)
        c.expect(commands.Basic.Deliver, 1)
        assert c.read_content(1)[1] == b"mine"
        c.close()


def test_large_message_round_trip(pub):
    q = pub.queue_declare("", exclusive=True).method.queue
    body = bytes(range(256)) * 4096 + b"tail"  # 1 MiB + 4: many body frames
    pub.basic_publish("", q, body)
    assert pub.basic_get(q, auto_ack=True)[2] == body


def test_many_channels_publish_and_consume(connection, pub):
    q = pub.queue_declare("", exclusive=True).method.queue
    chans = [connection.channel() for _ in range(20)]
    for i, ch in enumerate(chans):
        ch.basic_publish("", q, str(i).encode())
    pump_until(connection, lambda: message_count(pub, q) == 20)
    assert sorted(int(b) for b in get_all(pub, q)) == list(range(20))


def test_exclusive_consumer_released_by_cancel(connection, unique):
    q = unique("q")
    ch = connection.channel()
    ch.queue_declare(q, auto_delete=False)
    tag = ch.basic_consume(q, lambda *a: None, exclusive=True)
    ch.basic_cancel(tag)
    other = connection.channel()
    other.basic_consume(q, lambda *a: None)  # no 403 now
    assert consumer_count(other, q) == 1
    connection.channel().queue_delete(q)


def test_no_deliveries_after_cancel_ok(broker):
    """Deliveries may race the cancel, but none follow cancel-ok, and none are lost.

    (Cancel is sent only after consume-ok: RabbitMQ 3.10.8 sometimes answers a basic.cancel
    pipelined right behind its basic.consume with 541 INTERNAL_ERROR, a RabbitMQ bug.)"""
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = c.expect(commands.Queue.DeclareOk, 1).queue
        n = 200
        c.send(commands.Confirm.Select(), 1)
        c.expect(commands.Confirm.SelectOk, 1)
        for i in range(n):
            c.publish(1, str(i).encode() * 100, routing_key=q)
        acked = 0
        while acked < n:
            acked = c.expect(commands.Basic.Ack, 1).delivery_tag
        c.send(commands.Basic.Consume(queue=q, consumer_tag="c1"), 1)
        c.expect(commands.Basic.ConsumeOk, 1)
        c.send(commands.Basic.Cancel(consumer_tag="c1"), 1)
        delivered = 0
        while True:
            _ch, f = c.read_frame()
            if isinstance(f, commands.Basic.Deliver):
                c.read_content(1)
                delivered += 1
            elif isinstance(f, commands.Basic.CancelOk):
                break
            else:
                raise AssertionError(f"unexpected {f!r}")
        c.send(commands.Queue.Declare(queue=q, passive=True), 1)
        ok = c.expect(commands.Queue.DeclareOk, 1)  # fails on a delivery after cancel-ok
        assert ok.message_count + delivered == n
        c.close()
