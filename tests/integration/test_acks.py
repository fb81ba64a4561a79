"""Basic class, acknowledgements: ack/nack/reject (multiple, requeue), unknown and double
acks, recover, redelivered flag and requeue order, requeue when a channel or connection closes.

Reply codes and texts are the ones RabbitMQ 3.10.8 sends.
"""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from helpers import (
    Recorder,
    fill,
    get_all,
    get_n,
    message_count,
    pump_until,
    soft_error,
    wait_for,
)
from pamqp import commands
from rawamqp import RawClient

# --- ack / nack / reject ----------------------------------------------------------------------


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


# --- recover and more RabbitMQ specifics ------------------------------------------------------


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
