"""Basic class: publish/return, consume/cancel, get, ack/nack/reject, recover, qos, ordering.

Reply codes and texts are the ones RabbitMQ 3.10.8 sends. "Nothing more arrives" is never
checked by waiting: the queue's own ready count (queue.declare passive) must reach the value
that proves how many messages it handed out.
"""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from helpers import consumer_count, get_all, message_count, pump_until, soft_error, wait_for
from pamqp import commands
from rawamqp import RawClient


@pytest.fixture
def pub(connection):
    """A confirm-mode channel: every publish has reached its queues when it returns."""
    ch = connection.channel()
    ch.confirm_delivery()
    return ch


def fill(pub, q: str, n: int, prefix: str = "m") -> list[bytes]:
    bodies = [f"{prefix}{i}".encode() for i in range(n)]
    for b in bodies:
        pub.basic_publish("", q, b)
    return bodies


class Recorder:
    """on_message_callback that records (delivery_tag, body, redelivered) without acking."""

    def __init__(self, ack: bool = False) -> None:
        self.got: list[tuple[int, bytes, bool]] = []
        self.ack = ack

    def __call__(self, ch, method, props, body) -> None:
        self.got.append((method.delivery_tag, body, method.redelivered))
        if self.ack:
            ch.basic_ack(method.delivery_tag)

    @property
    def bodies(self) -> list[bytes]:
        return [b for _t, b, _r in self.got]


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


# --- ack / nack / reject ----------------------------------------------------------------------


def get_n(ch, q, n):
    tags = []
    for _ in range(n):
        method, _p, body = ch.basic_get(q, auto_ack=False)
        tags.append((method.delivery_tag, body, method.redelivered))
    return tags


def test_delivery_tags_count_up_per_channel(pub):
    q = pub.queue_declare("", exclusive=True).method.queue
    fill(pub, q, 3)
    assert [t for t, _b, _r in get_n(pub, q, 3)] == [1, 2, 3]


def test_ack_multiple(connection, pub):
    ch = connection.channel()
    q = pub.queue_declare("", exclusive=True).method.queue
    fill(pub, q, 5)
    got = get_n(ch, q, 5)
    ch.basic_ack(got[2][0], multiple=True)  # acks 1..3
    ch.close()  # 4 and 5 come back
    wait_for(lambda: message_count(pub, q) == 2)
    assert get_all(pub, q) == [b"m3", b"m4"]


def test_nack_requeue_and_redelivered_flag(pub):
    q = pub.queue_declare("", exclusive=True).method.queue
    fill(pub, q, 1)
    ((tag, _b, redelivered),) = get_n(pub, q, 1)
    assert redelivered is False
    pub.basic_nack(tag, requeue=True)
    method, _p, body = pub.basic_get(q, auto_ack=True)
    assert (body, method.redelivered) == (b"m0", True)


def test_nack_multiple_without_requeue_drops(pub):
    q = pub.queue_declare("", exclusive=True).method.queue
    fill(pub, q, 4)
    got = get_n(pub, q, 3)
    pub.basic_nack(got[-1][0], multiple=True, requeue=False)
    assert get_all(pub, q) == [b"m3"]


def test_reject_requeue_and_drop(pub):
    q = pub.queue_declare("", exclusive=True).method.queue
    fill(pub, q, 2)
    (t1, _, _), (t2, _, _) = get_n(pub, q, 2)
    pub.basic_reject(t1, requeue=False)
    pub.basic_reject(t2, requeue=True)
    method, _p, body = pub.basic_get(q, auto_ack=True)
    assert (body, method.redelivered) == (b"m1", True)
    assert pub.basic_get(q) == (None, None, None)


def test_requeued_messages_keep_their_original_order(pub):
    q = pub.queue_declare("", exclusive=True).method.queue
    bodies = fill(pub, q, 6)
    got = get_n(pub, q, 4)
    # requeue out of order: 3rd, 1st, 4th, 2nd
    for i in (2, 0, 3, 1):
        pub.basic_nack(got[i][0], requeue=True)
    assert get_all(pub, q) == bodies


def test_ack_unknown_delivery_tag_is_406(connection):
    ch = connection.channel()
    code, text = soft_error(lambda: (ch.basic_ack(42), ch.basic_qos(prefetch_count=0)))
    assert code == 406
    assert text == "PRECONDITION_FAILED - unknown delivery tag 42"


def test_raw_ack_unknown_delivery_tag_fields(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Basic.Ack(delivery_tag=42), 1)
        close = c.read_until_channel_close(1)
    assert (close.reply_code, close.class_id, close.method_id) == (406, 60, 80)
    assert close.reply_text == "PRECONDITION_FAILED - unknown delivery tag 42"


def test_double_ack_is_406(connection, pub):
    ch = connection.channel()
    q = pub.queue_declare("", exclusive=True).method.queue
    fill(pub, q, 1)
    ((tag, _, _),) = get_n(ch, q, 1)
    ch.basic_ack(tag)
    code, text = soft_error(lambda: (ch.basic_ack(tag), ch.basic_qos(prefetch_count=0)))
    assert code == 406
    assert text == f"PRECONDITION_FAILED - unknown delivery tag {tag}"
    assert message_count(pub, q) == 0


@pytest.mark.parametrize("method", ["nack", "reject"])
def test_nack_or_reject_unknown_tag_is_406(connection, method):
    ch = connection.channel()
    fn = ch.basic_nack if method == "nack" else ch.basic_reject
    code, text = soft_error(lambda: (fn(7), ch.basic_qos(prefetch_count=0)))
    assert code == 406
    assert text == "PRECONDITION_FAILED - unknown delivery tag 7"


def test_ack_multiple_zero_acks_everything(connection, pub):
    ch = connection.channel()
    q = pub.queue_declare("", exclusive=True).method.queue
    fill(pub, q, 3)
    get_n(ch, q, 3)
    ch.basic_ack(0, multiple=True)
    ch.basic_ack(0, multiple=True)  # nothing left: still fine, not "unknown delivery tag 0"
    ch.basic_qos(prefetch_count=0)  # round trip
    assert ch.is_open
    ch.close()  # had the acks been lost, the 3 messages would be requeued now
    assert pub.basic_get(q) == (None, None, None)


def test_ack_on_other_channel_is_406(connection, pub):
    ch1, ch2 = connection.channel(), connection.channel()
    q = pub.queue_declare("", exclusive=True).method.queue
    fill(pub, q, 1)
    ((tag, _, _),) = get_n(ch1, q, 1)
    code, _text = soft_error(lambda: (ch2.basic_ack(tag), ch2.basic_qos(prefetch_count=0)))
    assert code == 406
    ch1.basic_ack(tag)
    assert message_count(pub, q) == 0


# --- recover --------------------------------------------------------------------------------------


def test_recover_requeue_redelivers(connection, pub):
    ch = connection.channel()
    q = pub.queue_declare("", exclusive=True).method.queue
    rec = Recorder()
    ch.basic_consume(q, rec)
    bodies = fill(pub, q, 3)
    pump_until(connection, lambda: len(rec.got) == 3)
    ch.basic_recover(requeue=True)
    pump_until(connection, lambda: len(rec.got) == 6)
    assert rec.bodies[3:] == bodies
    assert [r for _t, _b, r in rec.got] == [False] * 3 + [True] * 3
    ch.basic_ack(0, multiple=True)


# --- qos --------------------------------------------------------------------------------------


def test_prefetch_count_per_consumer(connection, pub):
    """global=false: each consumer on the channel may hold `prefetch_count` unacked."""
    ch = connection.channel()
    ch.basic_qos(prefetch_count=2, global_qos=False)
    qs = [pub.queue_declare("", exclusive=True).method.queue for _ in range(2)]
    recs = [Recorder(), Recorder()]
    for q, r in zip(qs, recs, strict=True):
        fill(pub, q, 5)
        ch.basic_consume(q, r)
    pump_until(connection, lambda: all(message_count(pub, q) == 3 for q in qs))
    pump_until(connection, lambda: [len(r.got) for r in recs] == [2, 2])
    ch.basic_ack(recs[0].got[0][0])  # room for one more on the first consumer only
    pump_until(connection, lambda: message_count(pub, qs[0]) == 2)
    pump_until(connection, lambda: len(recs[0].got) == 3)
    assert message_count(pub, qs[1]) == 3


def test_prefetch_count_global_is_per_channel(connection, pub):
    """global=true: all consumers of the channel share `prefetch_count`."""
    ch = connection.channel()
    ch.basic_qos(prefetch_count=3, global_qos=True)
    qs = [pub.queue_declare("", exclusive=True).method.queue for _ in range(2)]
    recs = [Recorder(), Recorder()]
    for q, r in zip(qs, recs, strict=True):
        fill(pub, q, 5)
        ch.basic_consume(q, r)
    pump_until(connection, lambda: sum(message_count(pub, q) for q in qs) == 7)
    pump_until(connection, lambda: sum(len(r.got) for r in recs) == 3)
    assert sum(len(r.got) for r in recs) == 3


def _qos_deliveries(connection, pub, qos_calls):
    """Apply basic.qos calls, consume 2 queues of 5 messages; return the settled counts."""
    ch = connection.channel()
    for count, global_qos in qos_calls:
        ch.basic_qos(prefetch_count=count, global_qos=global_qos)
    qs = [pub.queue_declare("", exclusive=True).method.queue for _ in range(2)]
    recs = [Recorder(), Recorder()]
    for q, r in zip(qs, recs, strict=True):
        fill(pub, q, 5)
        ch.basic_consume(q, r)
    return ch, qs, recs


def test_prefetch_per_consumer_then_global_combine(connection, pub):
    """qos(2, global=false) then qos(3, global=true): each consumer <= 2, the channel <= 3."""
    _ch, qs, recs = _qos_deliveries(connection, pub, [(2, False), (3, True)])
    pump_until(connection, lambda: sum(message_count(pub, q) for q in qs) == 7)
    pump_until(connection, lambda: sum(len(r.got) for r in recs) == 3)
    assert sorted(len(r.got) for r in recs) == [1, 2]


def test_prefetch_per_consumer_qos_lifts_the_global_limit(connection, pub):
    """RabbitMQ 3.10 quirk: basic.qos(global=false) removes an earlier channel-wide limit
    (rabbit_channel calls rabbit_limiter:unlimit_prefetch), so qos(3, global=true) then
    qos(2, global=false) leaves only the per-consumer limit: 2 + 2 unacked."""
    _ch, qs, recs = _qos_deliveries(connection, pub, [(3, True), (2, False)])
    pump_until(connection, lambda: all(message_count(pub, q) == 3 for q in qs))
    pump_until(connection, lambda: [len(r.got) for r in recs] == [2, 2])


def test_prefetch_applies_to_consumers_created_after_qos(connection, pub):
    """RabbitMQ: basic.qos(global=false) changes the limit for *new* consumers only."""
    ch = connection.channel()
    q = pub.queue_declare("", exclusive=True).method.queue
    rec = Recorder()
    ch.basic_consume(q, rec)  # unlimited
    ch.basic_qos(prefetch_count=1)
    fill(pub, q, 4)
    pump_until(connection, lambda: len(rec.got) == 4)
    assert message_count(pub, q) == 0


def test_prefetch_zero_is_unlimited(connection, pub):
    ch = connection.channel()
    ch.basic_qos(prefetch_count=0)
    q = pub.queue_declare("", exclusive=True).method.queue
    rec = Recorder()
    ch.basic_consume(q, rec)
    fill(pub, q, 50)
    pump_until(connection, lambda: len(rec.got) == 50)


def test_basic_get_ignores_prefetch(pub):
    pub.basic_qos(prefetch_count=1)
    q = pub.queue_declare("", exclusive=True).method.queue
    fill(pub, q, 3)
    assert [b for _t, b, _r in get_n(pub, q, 3)] == [b"m0", b"m1", b"m2"]


def test_prefetch_size_nonzero_is_540(connection):
    """RabbitMQ does not implement prefetch_size: connection error 540."""
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        connection.channel().basic_qos(prefetch_size=1000)
    assert info.value.reply_code == 540
    assert info.value.reply_text == "NOT_IMPLEMENTED - prefetch_size!=0 (1000)"


# --- requeue on channel / connection loss ---------------------------------------------------------


def test_unacked_messages_requeued_when_channel_closes(connection, pub):
    ch = connection.channel()
    q = pub.queue_declare("", exclusive=True).method.queue
    rec = Recorder()
    ch.basic_consume(q, rec)
    bodies = fill(pub, q, 4)
    pump_until(connection, lambda: len(rec.got) == 4)
    ch.basic_ack(rec.got[1][0])
    ch.close()
    wait_for(lambda: message_count(pub, q) == 3)
    got = [pub.basic_get(q, auto_ack=True) for _ in range(3)]
    assert [b for _m, _p, b in got] == [bodies[0], bodies[2], bodies[3]]
    assert all(m.redelivered for m, _p, _b in got)


def test_unacked_messages_requeued_when_connection_closes(connect, unique):
    q = unique("q")
    keeper = connect().channel()
    keeper.confirm_delivery()
    keeper.queue_declare(q, auto_delete=False)
    bodies = fill(keeper, q, 5)
    conn = connect()
    ch = conn.channel()
    rec = Recorder()
    ch.basic_consume(q, rec)
    pump_until(conn, lambda: len(rec.got) == 5)
    conn.close()
    wait_for(lambda: message_count(keeper, q) == 5)
    assert get_all(keeper, q) == bodies
    keeper.queue_delete(q)


def test_unacked_basic_get_requeued_when_channel_closes(connection, pub):
    ch = connection.channel()
    q = pub.queue_declare("", exclusive=True).method.queue
    bodies = fill(pub, q, 3)
    get_n(ch, q, 2)
    ch.close()
    wait_for(lambda: message_count(pub, q) == 3)
    method, _p, body = pub.basic_get(q, auto_ack=True)
    assert (body, method.redelivered) == (bodies[0], True)
    assert get_all(pub, q) == bodies[1:]


# --- more RabbitMQ specifics --------------------------------------------------------------------


def test_ack_after_cancel_is_still_valid(connection, pub):
    ch = connection.channel()
    q = pub.queue_declare("", exclusive=True).method.queue
    rec = Recorder()
    tag = ch.basic_consume(q, rec)
    fill(pub, q, 1)
    pump_until(connection, lambda: rec.got)
    ch.basic_cancel(tag)
    ch.basic_ack(rec.got[0][0])
    ch.basic_qos(prefetch_count=0)  # round trip: no 406 for the ack
    ch.close()
    assert message_count(pub, q) == 0


def test_recover_requeue_false_is_540(connection):
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        connection.channel().basic_recover(requeue=False)
    assert info.value.reply_code == 540
    assert info.value.reply_text == "NOT_IMPLEMENTED - requeue=false"


def test_recover_async_requeues_without_reply(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = c.expect(commands.Queue.DeclareOk, 1).queue
        c.publish(1, b"a", routing_key=q)
        c.get(1, q, no_ack=False)
        with pytest.warns(DeprecationWarning):  # pamqp: deprecated in 0-9-1, RabbitMQ accepts it
            recover_async = commands.Basic.RecoverAsync(requeue=True)
        c.send(recover_async, 1)
        ok, _hdr, body, _n = c.get(1, q)  # expects get-ok/get-empty: no recover reply came
        assert ok.redelivered is True
        assert body == b"a"
        c.close()


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
