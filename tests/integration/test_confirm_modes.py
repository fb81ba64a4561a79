"""Publisher-confirm modes (docs/architecture.md §6): when a queue releases a message to its publisher.

A queue's mode is its argument `x-confirm-on` ("persist" | "ack" | "ack-lite"), else the broker
config `confirm_on` (default "persist"). persist is RabbitMQ's behaviour: confirmed once enqueued
(or written, for a persistent message in a durable queue), whatever the consumers do. ack and
ack-lite confirm only once a consumer has acked the message (auto-ack: once delivered); dropping
a message the queue owed (reject/nack without requeue, purge, delete) nacks the publisher. ack
keeps requeue (the confirm stays pending); ack-lite cannot requeue: requeue=true and
basic.recover close the connection with 540, and a consumer's channel loss nacks the publisher.

x-confirm-on is not a RabbitMQ feature: those tests take `embedded_only`. The publisher is the raw
client in confirmpub.py (it sees every basic.ack/nack and what is still pending); consumers are
pika BlockingConnections. The many-producer ordering checks are in test_confirm_modes_order.py.
"""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from confirmpub import ConfirmPublisher
from helpers import Recorder, message_count, pump_until, soft_error, start_embedded, wait_for
from pamqp import commands

MODES = ["ack", "ack-lite"]  # the modes that confirm on consumer ack
ALL_MODES = ["persist", *MODES]


def take(ch, q: str, auto_ack: bool = False, timeout: float = 5.0):
    """basic.get polled until a message comes (raw publishes are asynchronous):
    (delivery_tag, body, redelivered)."""
    def get():
        method, _props, body = ch.basic_get(q, auto_ack=auto_ack)
        return method and (method.delivery_tag, body, method.redelivered)

    return wait_for(get, timeout)


def refuse(ch, how: str, tag: int, requeue: bool, multiple: bool = False) -> None:
    """basic.reject or basic.nack of `tag`."""
    if how == "reject":
        ch.basic_reject(tag, requeue=requeue)
    else:
        ch.basic_nack(tag, multiple=multiple, requeue=requeue)


def confirm_index(p: ConfirmPublisher, seq: int) -> int:
    """Position in p.events of the confirm that covered `seq`."""
    return next(i for i, (kind, what) in enumerate(p.events)
                if kind != "return" and seq in what)


def closed_with_540(conn: pika.BlockingConnection) -> pika.exceptions.ConnectionClosedByBroker:
    """Pump `conn` until the broker closes it; the close exception (asserted 540)."""
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        pump_until(conn, lambda: False)
    assert info.value.reply_code == 540
    assert info.value.reply_text.startswith("NOT_IMPLEMENTED")
    return info.value


# --- declaration ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ALL_MODES)
def test_declare_accepts_each_mode_and_same_redeclare(embedded_only, channel, unique, mode):
    q = unique("cm")
    args = {"x-confirm-on": mode}
    channel.queue_declare(q, arguments=args)
    channel.queue_declare(q, arguments=args)
    assert channel.queue_declare(q, passive=True).method.queue == q
    channel.queue_delete(q)


def test_declare_unknown_mode_is_406(embedded_only, channel, unique):
    code, text = soft_error(channel.queue_declare, unique("cm"), arguments={"x-confirm-on": "never"})
    assert code == 406
    assert text.startswith("PRECONDITION_FAILED - invalid arg 'x-confirm-on'")


def test_redeclare_with_other_mode_is_406(embedded_only, connect, unique):
    q = unique("cm")
    first = connect().channel()
    first.queue_declare(q, arguments={"x-confirm-on": "ack"})
    ch = connect().channel()
    code, text = soft_error(ch.queue_declare, q, arguments={"x-confirm-on": "ack-lite"})
    first.queue_delete(q)
    assert code == 406
    assert text.startswith(
        f"PRECONDITION_FAILED - inequivalent arg 'x-confirm-on' for queue '{q}' in vhost '/'")


# --- persist --------------------------------------------------------------------------------------


def test_default_mode_confirms_without_consumer(cpub, declare, channel):
    """No argument on the default broker: RabbitMQ's confirms, with no consumer at all."""
    q = declare(durable=True)
    transient = cpub.publish(q, b"t")
    persistent = cpub.publish(q, b"p", delivery_mode=2)
    assert cpub.wait(transient, persistent) == ["ack", "ack"]
    assert message_count(channel, q) == 2


@pytest.mark.parametrize("durable", [False, True])
def test_persist_mode_confirms_regardless_of_consumers(
    embedded_only, cpub, declare, connect, durable
):
    """x-confirm-on=persist: enqueued (or written) is enough; an unacking consumer changes
    nothing, and neither do its reject or the queue's purge after the confirm."""
    q = declare("persist", durable=durable)
    ch = connect().channel()
    rec = Recorder(ack=False)
    ch.basic_consume(q, rec)
    seqs = [cpub.publish(q, b"t"), cpub.publish(q, b"p", delivery_mode=2)]
    assert cpub.wait(*seqs) == ["ack", "ack"]
    confirms = list(cpub.frames)
    pump_until(ch.connection, lambda: len(rec.got) == 2)
    ch.basic_reject(rec.got[0][0], requeue=False)
    ch.basic_reject(rec.got[1][0], requeue=True)
    cpub.pump(0.1)
    assert cpub.frames == confirms  # nothing more: each publish was confirmed once


@pytest.mark.parametrize("confirm_on", MODES)
def test_config_mode_applies_to_queues_without_argument(embedded_only, unique, confirm_on):
    """Broker config confirm_on=ack/ack-lite: a queue without x-confirm-on holds the confirm
    until a consumer acks; x-confirm-on=persist on that broker confirms at once."""
    b = start_embedded(confirm_on=confirm_on)
    try:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        plain, persist = unique("plain"), unique("persist")
        ch.queue_declare(plain)
        ch.queue_declare(persist, arguments={"x-confirm-on": "persist"})
        p = ConfirmPublisher(b.host, b.port)
        held = p.publish(plain)
        at_once = p.publish(persist)
        assert p.wait(at_once) == ["ack"]
        p.assert_pending(held)
        tag, _body, _r = take(ch, plain)
        p.assert_pending(held, within=0.1)
        ch.basic_ack(tag)
        assert p.wait(held) == ["ack"]
        p.close()
        conn.close()
    finally:
        b.stop()


@pytest.mark.parametrize("confirm_on", ALL_MODES)
def test_unroutable_acked_at_once_in_every_mode(embedded_only, unique, confirm_on):
    """Routed to no queue: basic.ack at once (after basic.return when mandatory), whatever the
    broker's mode; default exchange with a missing queue and a fanout with no bindings."""
    b = start_embedded(confirm_on=confirm_on)
    try:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ex = unique("lonely")
        conn.channel().exchange_declare(ex, "fanout")
        p = ConfirmPublisher(b.host, b.port)
        p.publish(unique("nowhere"), b"a")
        p.publish(unique("nowhere"), b"b", mandatory=True)
        p.publish("", b"c", exchange=ex)
        p.publish("", b"d", exchange=ex, mandatory=True)
        assert p.wait_all() == ["ack"] * 4
        assert p.returned == [b"b", b"d"]
        assert p.events.index(("return", b"b")) < confirm_index(p, 2)
        assert p.events.index(("return", b"d")) < confirm_index(p, 4)
        p.close()
        conn.close()
    finally:
        b.stop()


@pytest.mark.parametrize("mode", MODES)
def test_unroutable_and_persist_acked_while_ack_mode_publish_pending(
    embedded_only, cpub, declare, mode
):
    """A pending confirm does not hold later ones: they come singly, never as a `multiple`
    ack that would cover the pending seq."""
    held_q, persist_q = declare(mode), declare("persist")
    held = cpub.publish(held_q)
    later = [cpub.publish(persist_q), cpub.publish("no-such-queue-cm"), cpub.publish(persist_q)]
    assert cpub.wait(*later) == ["ack"] * 3
    cpub.assert_pending(held)


# --- ack and ack-lite: releasing the confirm ------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_confirm_held_until_consumer_acks(embedded_only, cpub, declare, connect, mode):
    q = declare(mode)
    seq = cpub.publish(q, b"hello")
    cpub.assert_pending(seq)  # no consumer: held
    conn = connect()
    ch = conn.channel()
    rec = Recorder()
    ch.basic_consume(q, rec)
    pump_until(conn, lambda: rec.got)
    assert rec.bodies == [b"hello"]
    cpub.assert_pending(seq)  # delivered, not acked: still held
    ch.basic_ack(rec.got[0][0])
    assert cpub.wait(seq) == ["ack"]
    assert cpub.frames == [("ack", 1, False)]


@pytest.mark.parametrize("mode", MODES)
def test_ack_lite_keeps_no_backing_queue_record_of_a_direct_delivery(
        embedded_only, broker, cpub, declare, connect, mode):
    """A confirmed publish that goes straight to a waiting consumer: in ack mode the
    backing queue holds its pending ack; in ack-lite the consumer's channel holds a LiteRef
    and the backing queue never records it (the paper §3.2); both release on the ack."""
    q = declare(mode)
    conn = connect()
    ch = conn.channel()
    rec = Recorder()
    ch.basic_consume(q, rec)
    bq = broker.call(lambda: broker.broker.vhosts["/"].queues[q].bq)
    pump_until(conn, lambda: broker.call(
        lambda: len(broker.broker.vhosts["/"].queues[q].consumers)) == 1)
    first_seq_id = broker.call(lambda: bq._next_seq_id)
    seq = cpub.publish(q, b"direct")
    pump_until(conn, lambda: rec.got)
    pending = broker.call(lambda: bq.stats()["pending_acks"])
    recorded = broker.call(lambda: bq._next_seq_id) - first_seq_id  # message statuses made
    assert (pending, recorded) == ((1, 1) if mode == "ack" else (0, 0))
    cpub.assert_pending(seq)
    ch.basic_ack(rec.got[0][0])
    assert cpub.wait(seq) == ["ack"]


@pytest.mark.parametrize("mode", MODES)
def test_auto_ack_consumer_releases_on_delivery(embedded_only, cpub, declare, connect, mode):
    q = declare(mode)
    seqs = [cpub.publish(q, str(i).encode()) for i in range(3)]
    cpub.assert_pending(*seqs)
    conn = connect()
    ch = conn.channel()
    got: list[bytes] = []
    ch.basic_consume(q, lambda _c, _m, _p, body: got.append(body), auto_ack=True)
    pump_until(conn, lambda: len(got) == 3)
    assert cpub.wait(*seqs) == ["ack"] * 3


@pytest.mark.parametrize("mode", MODES)
def test_basic_get_then_ack_releases(embedded_only, cpub, declare, channel, mode):
    q = declare(mode)
    seq = cpub.publish(q)
    tag, _body, _r = take(channel, q)
    cpub.assert_pending(seq)
    channel.basic_ack(tag)
    assert cpub.wait(seq) == ["ack"]


@pytest.mark.parametrize("mode", MODES)
def test_basic_get_no_ack_releases_on_get(embedded_only, cpub, declare, channel, mode):
    q = declare(mode)
    seq = cpub.publish(q)
    cpub.assert_pending(seq)
    take(channel, q, auto_ack=True)
    assert cpub.wait(seq) == ["ack"]


@pytest.mark.parametrize("mode", MODES)
def test_consumer_multiple_ack_releases_up_to_tag(embedded_only, cpub, declare, channel, mode):
    q = declare(mode)
    seqs = [cpub.publish(q, str(i).encode()) for i in range(5)]
    tags = [take(channel, q)[0] for _ in seqs]
    channel.basic_ack(tags[2], multiple=True)
    assert cpub.wait(*seqs[:3]) == ["ack"] * 3
    cpub.assert_pending(*seqs[3:])
    channel.basic_ack(tags[4], multiple=True)
    assert cpub.wait(*seqs[3:]) == ["ack"] * 2


# --- ack and ack-lite: dropping the message nacks the publisher -----------------------------------


@pytest.mark.parametrize("how", ["reject", "nack"])
@pytest.mark.parametrize("mode", MODES)
def test_reject_without_requeue_nacks_publisher(
    embedded_only, cpub, declare, channel, mode, how
):
    q = declare(mode)
    seq = cpub.publish(q)
    tag, _body, _r = take(channel, q)
    cpub.assert_pending(seq)
    refuse(channel, how, tag, requeue=False)
    assert cpub.wait(seq) == ["nack"]
    assert message_count(channel, q) == 0


@pytest.mark.parametrize("mode", MODES)
def test_consumer_multiple_nack_without_requeue_nacks_each(
    embedded_only, cpub, declare, channel, mode
):
    q = declare(mode)
    seqs = [cpub.publish(q, str(i).encode()) for i in range(4)]
    tags = [take(channel, q)[0] for _ in seqs]
    channel.basic_nack(tags[-1], multiple=True, requeue=False)
    assert cpub.wait(*seqs) == ["nack"] * 4


@pytest.mark.parametrize("mode", MODES)
def test_purge_nacks_ready_messages_only(embedded_only, cpub, declare, channel, mode):
    """queue.purge nacks every purged (ready) message; an unacked one stays owed."""
    q = declare(mode)
    seqs = [cpub.publish(q, str(i).encode()) for i in range(3)]
    wait_for(lambda: message_count(channel, q) == 3)
    tag, body, _r = take(channel, q)  # seq 1, now unacked
    assert body == b"0"
    assert channel.queue_purge(q).method.message_count == 2
    assert cpub.wait(*seqs[1:]) == ["nack", "nack"]
    cpub.assert_pending(seqs[0])
    channel.basic_ack(tag)
    assert cpub.wait(seqs[0]) == ["ack"]


@pytest.mark.parametrize("mode", MODES)
def test_delete_nacks_ready_and_unacked(embedded_only, cpub, connect, unique, mode):
    """queue.delete nacks everything the queue still owed: ready and unacked."""
    ch = connect().channel()
    q = unique("cm-del")
    ch.queue_declare(q, arguments={"x-confirm-on": mode})
    seqs = [cpub.publish(q, str(i).encode()) for i in range(3)]
    wait_for(lambda: message_count(ch, q) == 3)
    tag, _b, _r = take(ch, q)  # one unacked
    cpub.assert_pending(*seqs)
    connect().channel().queue_delete(q)
    assert cpub.wait(*seqs) == ["nack"] * 3
    confirms = list(cpub.frames)
    ch.basic_ack(tag)  # too late: harmless, and no second confirm
    ch.basic_qos(prefetch_count=0)
    assert ch.is_open
    cpub.pump(0.1)
    assert cpub.frames == confirms


@pytest.mark.parametrize("mode", MODES)
def test_ttl_expiry_nacks_publisher(embedded_only, cpub, declare, mode):
    """A message that expires (x-message-ttl) before a consumer acked it: basic.nack."""
    q = declare(mode, arguments={"x-message-ttl": 50})
    seq = cpub.publish(q)
    assert cpub.wait(seq) == ["nack"]


@pytest.mark.parametrize("mode", MODES)
def test_max_length_drop_nacks_publisher(embedded_only, cpub, declare, channel, mode):
    """x-max-length=1 (drop-head): the dropped head gets basic.nack, the kept one stays owed."""
    q = declare(mode, arguments={"x-max-length": 1})
    first, second = cpub.publish(q, b"1"), cpub.publish(q, b"2")
    assert cpub.wait(first) == ["nack"]
    cpub.assert_pending(second)
    tag, body, _r = take(channel, q)
    assert body == b"2"
    channel.basic_ack(tag)
    assert cpub.wait(second) == ["ack"]


# --- requeue: ack keeps the confirm pending, ack-lite refuses -------------------------------------


@pytest.mark.parametrize("how", ["reject", "nack"])
def test_ack_mode_requeue_keeps_confirm_pending(embedded_only, cpub, declare, channel, how):
    q = declare("ack")
    seq = cpub.publish(q, b"again")
    tag, _body, redelivered = take(channel, q)
    assert not redelivered
    refuse(channel, how, tag, requeue=True)
    cpub.assert_pending(seq)
    tag, body, redelivered = take(channel, q)
    assert (body, redelivered) == (b"again", True)
    cpub.assert_pending(seq, within=0.1)
    channel.basic_ack(tag)
    assert cpub.wait(seq) == ["ack"]


@pytest.mark.parametrize("close", ["channel", "connection"])
def test_ack_mode_consumer_close_requeues_and_keeps_pending(
    embedded_only, cpub, declare, connect, close
):
    """The consumer goes away with the message unacked: requeued, confirm still pending; the
    next consumer's ack releases it."""
    q = declare("ack")
    seq = cpub.publish(q, b"m")
    first = connect()
    ch = first.channel()
    take(ch, q)
    (ch if close == "channel" else first).close()
    cpub.assert_pending(seq)
    other = connect().channel()
    tag, body, redelivered = take(other, q)
    assert (body, redelivered) == (b"m", True)
    other.basic_ack(tag)
    assert cpub.wait(seq) == ["ack"]


@pytest.mark.parametrize("how", ["reject", "nack"])
def test_ack_lite_requeue_closes_connection_540(embedded_only, cpub, declare, connect, how):
    """requeue=true is impossible without a pending-ack record: 540 NOT_IMPLEMENTED on the
    connection; the delivery dies with it, so the publisher gets basic.nack."""
    q = declare("ack-lite")
    seq = cpub.publish(q)
    conn = connect()
    ch = conn.channel()
    tag, _body, _r = take(ch, q)
    refuse(ch, how, tag, requeue=True)
    closed_with_540(conn)
    assert cpub.wait(seq) == ["nack"]


def test_ack_lite_recover_closes_connection_540(embedded_only, cpub, declare, connect):
    q = declare("ack-lite")
    seq = cpub.publish(q)
    conn = connect()
    ch = conn.channel()
    take(ch, q)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        ch.basic_recover(requeue=True)
    assert info.value.reply_code == 540
    assert info.value.reply_text.startswith("NOT_IMPLEMENTED")
    assert cpub.wait(seq) == ["nack"]


@pytest.mark.parametrize("close", ["channel", "connection"])
def test_ack_lite_consumer_close_nacks_unacked(embedded_only, cpub, declare, connect, close):
    """No requeue in ack-lite: the consumer's unacked deliveries are nacked to the publisher
    when its channel or connection closes; the acked one is acked; nothing goes back."""
    q = declare("ack-lite")
    seqs = [cpub.publish(q, str(i).encode()) for i in range(3)]
    conn = connect()
    ch = conn.channel()
    tags = [take(ch, q)[0] for _ in seqs]
    ch.basic_ack(tags[0])
    assert cpub.wait(seqs[0]) == ["ack"]
    (ch if close == "channel" else conn).close()
    assert cpub.wait(*seqs[1:]) == ["nack", "nack"]
    assert message_count(connect().channel(), q) == 0


# --- publisher side -------------------------------------------------------------------------------


@pytest.mark.parametrize("close", ["channel", "connection"])
@pytest.mark.parametrize("mode", MODES)
def test_publisher_gone_before_consumer_acks(
    embedded_only, cpub, declare, connect, mode, close
):
    """The publisher's channel closes with its confirm pending: no error anywhere; the consumer
    gets and acks the message normally."""
    q = declare(mode)
    cpub.publish(q, b"orphan")
    wait_for(lambda: message_count(connect().channel(), q) == 1)
    if close == "channel":
        cpub.call(commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0,
                                         method_id=0), commands.Channel.CloseOk)
    else:
        cpub.close()
    conn = connect()
    ch = conn.channel()
    tag, body, redelivered = take(ch, q)
    assert (body, redelivered) == (b"orphan", False)
    ch.basic_ack(tag)
    ch.basic_qos(prefetch_count=0)  # round trip: the ack was handled
    assert conn.is_open and ch.is_open
    assert message_count(ch, q) == 0
    if close == "channel":  # the publisher's connection is unharmed and hears nothing more
        cpub.pump(0.1)
        assert cpub.frames == []
        cpub.close()


@pytest.mark.parametrize("mode", MODES)
def test_publishes_without_confirms_behave_as_rabbitmq(embedded_only, broker, declare, channel,
                                                       mode):
    """No confirm.select: the queue's mode changes nothing visible; no ack/nack frames."""
    p = ConfirmPublisher(broker.host, broker.port, confirm=False)
    q = declare(mode)
    for i in range(3):
        p.publish(q, str(i).encode())
    wait_for(lambda: message_count(channel, q) == 3)
    tags = [take(channel, q) for _ in range(2)]
    assert [(b, r) for _t, b, r in tags] == [(b"0", False), (b"1", False)]
    channel.basic_ack(tags[1][0], multiple=True)
    assert take(channel, q, auto_ack=True)[1] == b"2"
    p.pump(0.2)
    assert p.events == []
    assert message_count(channel, q) == 0
    p.close()


def test_publishes_without_confirms_requeue_in_ack_mode(embedded_only, broker, declare, channel):
    p = ConfirmPublisher(broker.host, broker.port, confirm=False)
    q = declare("ack")
    p.publish(q, b"r")
    tag, _b, _r = take(channel, q)
    channel.basic_reject(tag, requeue=True)
    tag, body, redelivered = take(channel, q)
    assert (body, redelivered) == (b"r", True)
    channel.basic_nack(tag, requeue=False)
    assert message_count(channel, q) == 0
    p.pump(0.1)
    assert p.events == []
    p.close()
