"""Queue class: declare rules, exclusive and auto-delete lifetimes, bind/unbind, purge, delete.

Reply codes and texts are the ones RabbitMQ 3.10.8 sends.
"""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from helpers import consumer_count, get_all, message_count, pump_until, soft_error, wait_for
from pamqp import commands
from rawamqp import RawClient


def queue_exists(connection, name: str) -> bool:
    ch = connection.channel()
    try:
        ch.queue_declare(name, passive=True)
    except pika.exceptions.ChannelClosedByBroker as exc:
        if exc.reply_code == 405:  # someone else's exclusive queue: it exists
            return True
        assert exc.reply_code == 404
        return False
    ch.close()
    return True


def publish_confirmed(ch, queue: str, bodies) -> None:
    """Publish on a confirm channel (the caller called confirm_delivery())."""
    for b in bodies:
        ch.basic_publish("", queue, b)


# --- declare ----------------------------------------------------------------------------------


def test_passive_declare_of_missing_queue_is_404(connection, unique):
    q = unique("q")
    code, text = soft_error(connection.channel().queue_declare, q, passive=True)
    assert code == 404
    assert text == f"NOT_FOUND - no queue '{q}' in vhost '/'"


def test_declare_ok_counts(connection, unique):
    ch = connection.channel()
    ch.confirm_delivery()
    q = unique("q")
    ok = ch.queue_declare(q, auto_delete=True).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (q, 0, 0)
    publish_confirmed(ch, q, [b"1", b"2"])
    ch.basic_consume(q, lambda *a: None)
    ok = connection.channel().queue_declare(q, passive=True).method
    assert (ok.message_count, ok.consumer_count) == (0, 1)  # both went to the consumer
    ok2 = ch.queue_declare(q, auto_delete=True).method  # an equivalent redeclare
    assert ok2.consumer_count == 1


def test_server_named_queue(channel):
    names = {channel.queue_declare("", exclusive=True).method.queue for _ in range(3)}
    assert len(names) == 3
    assert all(n.startswith("amq.gen-") for n in names)


def test_amq_prefix_queue_name_is_403(connection, unique):
    name = "amq." + unique("q")
    code, text = soft_error(connection.channel().queue_declare, name)
    assert code == 403
    assert text == f"ACCESS_REFUSED - queue name '{name}' contains reserved prefix 'amq.*'"


def test_redeclaring_a_server_named_queue_non_passively_is_403(connection):
    """RabbitMQ checks the amq. prefix before looking the queue up."""
    ch = connection.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_declare(q, passive=True)
    code, text = soft_error(ch.queue_declare, q, exclusive=True)
    assert code == 403
    assert text == f"ACCESS_REFUSED - queue name '{q}' contains reserved prefix 'amq.*'"


def test_durable_queue_declare_and_delete(channel, unique):
    q = unique("durable")
    channel.queue_declare(q, durable=True)
    assert channel.queue_declare(q, durable=True, passive=True).method.queue == q
    channel.queue_delete(q)


@pytest.mark.parametrize(
    ("first", "second", "arg", "received", "current"),
    [
        ({"durable": True}, {"durable": False}, "durable", "'false'", "'true'"),
        ({"auto_delete": False}, {"auto_delete": True}, "auto_delete", "'true'", "'false'"),
        (
            {"arguments": {"x-max-length": 10}},
            {"arguments": {"x-max-length": 20}},
            "x-max-length",
            "'20'",
            "'10'",
        ),
        (
            {"arguments": {"x-message-ttl": 1000}},
            {},
            "x-message-ttl",
            "none",
            "the value '1000' of type 'signedint'",  # sic: RabbitMQ 3.10's wording
        ),
    ],
    ids=["durable", "auto_delete", "x-max-length", "x-message-ttl-missing"],
)
def test_redeclare_with_different_flags_or_arguments_is_406(
    connection, unique, first, second, arg, received, current
):
    q = unique("q")
    ch = connection.channel()
    ch.queue_declare(q, **first)
    code, text = soft_error(ch.queue_declare, q, **second)
    assert code == 406
    assert text == (
        f"PRECONDITION_FAILED - inequivalent arg '{arg}' for queue '{q}' in vhost '/': "
        f"received {received} but current is {current}"
    )
    connection.channel().queue_delete(q)


def test_passive_declare_ignores_other_flags(channel, unique):
    q = unique("q")
    channel.queue_declare(q, durable=True)
    channel.queue_declare(q, passive=True, durable=False, auto_delete=True)
    channel.queue_delete(q)


# --- exclusive / auto_delete ------------------------------------------------------------------


def test_exclusive_queue_is_locked_for_other_connections(connect, unique):
    owner = connect()
    q = unique("excl")
    owner.channel().queue_declare(q, exclusive=True)
    other = connect()
    for op in ("declare", "passive", "consume", "get", "delete", "purge", "bind"):
        ch = other.channel()
        call = {
            "declare": lambda ch=ch: ch.queue_declare(q, exclusive=True),
            "passive": lambda ch=ch: ch.queue_declare(q, passive=True),
            "consume": lambda ch=ch: ch.basic_consume(q, lambda *a: None),
            "get": lambda ch=ch: ch.basic_get(q),
            "delete": lambda ch=ch: ch.queue_delete(q),
            "purge": lambda ch=ch: ch.queue_purge(q),
            "bind": lambda ch=ch: ch.queue_bind(q, "amq.fanout"),
        }[op]
        code, text = soft_error(call)
        assert code == 405, op
        assert text.startswith(
            f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{q}' in vhost '/'"
        ), op
    assert owner.channel().queue_declare(q, passive=True).method.queue == q


def test_exclusive_queue_is_deleted_when_its_connection_closes(connect, unique):
    owner = connect()
    q = unique("excl")
    owner.channel().queue_declare(q, exclusive=True)
    watcher = connect()
    assert queue_exists(watcher, q)
    owner.close()
    wait_for(lambda: not queue_exists(watcher, q), timeout=5)


def test_exclusive_queue_survives_its_channel_closing(connection, unique):
    ch = connection.channel()
    q = unique("excl")
    ch.queue_declare(q, exclusive=True)
    ch.close()
    assert queue_exists(connection, q)


def test_auto_delete_queue_deleted_after_last_consumer_cancelled(connect, unique):
    conn = connect()
    ch = conn.channel()
    q = unique("ad")
    ch.queue_declare(q, auto_delete=True)
    t1 = ch.basic_consume(q, lambda *a: None)
    t2 = ch.basic_consume(q, lambda *a: None)
    ch.basic_cancel(t1)
    assert queue_exists(conn, q)
    ch.basic_cancel(t2)
    wait_for(lambda: not queue_exists(conn, q), timeout=5)


def test_auto_delete_queue_without_consumers_stays(connection, unique):
    ch = connection.channel()
    q = unique("ad")
    ch.queue_declare(q, auto_delete=True)
    assert queue_exists(connection, q)
    ch.queue_delete(q)


def test_auto_delete_queue_deleted_when_consumer_channel_closes(connect, unique):
    conn = connect()
    q = unique("ad")
    conn.channel().queue_declare(q, auto_delete=True)
    cons = conn.channel()
    cons.basic_consume(q, lambda *a: None)
    cons.close()
    wait_for(lambda: not queue_exists(conn, q), timeout=5)


# --- bind / unbind ----------------------------------------------------------------------------


def test_bind_and_unbind(connection, unique):
    ch = connection.channel()
    ch.confirm_delivery()
    ex = unique("ex")
    ch.exchange_declare(ex, "direct")
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, ex, "k")
    ch.queue_bind(q, ex, "k")  # binding twice is a no-op
    ch.basic_publish(ex, "k", b"1")
    assert get_all(ch, q) == [b"1"]
    ch.queue_unbind(q, ex, "k")
    ch.basic_publish(ex, "k", b"2")
    assert get_all(ch, q) == []
    ch.queue_unbind(q, ex, "never-bound")  # unbinding a missing binding is ok
    ch.exchange_delete(ex)


def test_bind_missing_queue_or_exchange_is_404(connection, unique):
    q, ex = unique("q"), unique("ex")
    ch = connection.channel()
    ch.exchange_declare(ex, "direct", auto_delete=True)
    code, text = soft_error(ch.queue_bind, q, ex)
    assert code == 404
    assert text == f"NOT_FOUND - no queue '{q}' in vhost '/'"
    ch = connection.channel()
    real_q = ch.queue_declare("", exclusive=True).method.queue
    missing_ex = unique("missing")
    code, text = soft_error(ch.queue_bind, real_q, missing_ex)
    assert code == 404
    assert text == f"NOT_FOUND - no exchange '{missing_ex}' in vhost '/'"


# --- purge / delete ---------------------------------------------------------------------------


def test_purge_returns_count(channel):
    channel.confirm_delivery()
    q = channel.queue_declare("", exclusive=True).method.queue
    publish_confirmed(channel, q, [b"a", b"b", b"c"])
    assert channel.queue_purge(q).method.message_count == 3
    assert channel.queue_purge(q).method.message_count == 0
    assert message_count(channel, q) == 0


def test_purge_leaves_unacked_messages(connection):
    ch = connection.channel()
    ch.confirm_delivery()
    q = ch.queue_declare("", exclusive=True).method.queue
    publish_confirmed(ch, q, [b"a", b"b", b"c"])
    method, _, _ = ch.basic_get(q, auto_ack=False)
    assert ch.queue_purge(q).method.message_count == 2
    ch.basic_nack(method.delivery_tag, requeue=True)
    assert get_all(ch, q) == [b"a"]


def test_delete_returns_message_count(channel, unique):
    channel.confirm_delivery()
    q = unique("q")
    channel.queue_declare(q)
    publish_confirmed(channel, q, [b"1", b"2"])
    assert channel.queue_delete(q).method.message_count == 2


def test_delete_missing_queue_is_ok(channel, unique):
    assert channel.queue_delete(unique("never")).method.message_count == 0


def test_delete_if_unused_with_consumer_is_406(connection, unique):
    q = unique("q")
    ch = connection.channel()
    ch.queue_declare(q, auto_delete=False)
    ch.basic_consume(q, lambda *a: None)
    code, text = soft_error(connection.channel().queue_delete, q, if_unused=True)
    assert code == 406
    assert text == f"PRECONDITION_FAILED - queue '{q}' in vhost '/' in use"
    assert queue_exists(connection, q)
    connection.channel().queue_delete(q)


def test_delete_if_empty_with_messages_is_406(connection, unique):
    q = unique("q")
    ch = connection.channel()
    ch.confirm_delivery()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"x")
    code, text = soft_error(connection.channel().queue_delete, q, if_empty=True)
    assert code == 406
    assert text == f"PRECONDITION_FAILED - queue '{q}' in vhost '/' not empty"
    ch2 = connection.channel()
    ch2.queue_purge(q)
    assert ch2.queue_delete(q, if_empty=True, if_unused=True).method.message_count == 0


def test_deleted_queue_cancels_its_consumers_pika(connect, unique):
    q = unique("q")
    conn = connect()
    ch = conn.channel()
    ch.queue_declare(q)
    cancelled = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = ch.basic_consume(q, lambda *a: None)
    connect().channel().queue_delete(q)
    pump_until(conn, lambda: cancelled, timeout=5)
    assert cancelled == [tag]
    assert ch.is_open
    assert ch.consumer_tags == []


def test_deleted_queue_ends_pika_consume_generator(connect, unique):
    q = unique("q")
    conn = connect()
    ch = conn.channel()
    ch.queue_declare(q)
    ch.confirm_delivery()
    ch.basic_publish("", q, b"first")
    gen = ch.consume(q, auto_ack=True, inactivity_timeout=5)
    method, _props, body = next(gen)
    assert body == b"first"
    connect().channel().queue_delete(q)
    with pytest.raises(StopIteration):
        next(gen)  # pika ends the generator when the broker cancels the consumer
    assert ch.is_open


def test_deleted_queue_sends_basic_cancel_raw(broker, connect, unique):
    q = unique("q")
    with RawClient(broker.host, broker.port) as c:
        c.handshake(capabilities={"consumer_cancel_notify": True})
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue=q), 1)
        c.expect(commands.Queue.DeclareOk, 1)
        c.send(commands.Basic.Consume(queue=q, consumer_tag="my-tag"), 1)
        c.expect(commands.Basic.ConsumeOk, 1)
        assert consumer_count(connect().channel(), q) == 1
        connect().channel().queue_delete(q)
        cancel = c.expect(commands.Basic.Cancel, 1)
        assert cancel.consumer_tag == "my-tag"
        assert cancel.nowait is True
        c.close()


def test_deleted_queue_with_unacked_messages_reports_only_ready(connection, unique):
    q = unique("q")
    ch = connection.channel()
    ch.confirm_delivery()
    ch.queue_declare(q)
    publish_confirmed(ch, q, [b"1", b"2", b"3"])
    ch.basic_get(q, auto_ack=False)
    assert connection.channel().queue_delete(q).method.message_count == 2
    assert ch.is_open


# --- more RabbitMQ specifics --------------------------------------------------------------------


@pytest.mark.parametrize(("first", "second"), [(True, False), (False, True)])
def test_redeclare_with_other_exclusive_flag_is_405(connection, unique, first, second):
    q = unique("q")
    ch = connection.channel()
    ch.queue_declare(q, exclusive=first, auto_delete=True)
    code, text = soft_error(
        connection.channel().queue_declare, q, exclusive=second, auto_delete=True
    )
    assert code == 405
    assert text.startswith(
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{q}'"
    )
    connection.channel().queue_delete(q)


def test_queue_declare_nowait_raw(broker, unique):
    q = unique("nowait")
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue=q, exclusive=True, nowait=True), 1)
        c.send(commands.Queue.Declare(queue=q, passive=True), 1)
        ok = c.expect(commands.Queue.DeclareOk, 1)  # the first declare sent no declare-ok
        assert (ok.queue, ok.message_count, ok.consumer_count) == (q, 0, 0)
        c.close()


def test_queue_name_of_255_bytes(broker):
    name = "q" * 255
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue=name, exclusive=True), 1)
        assert c.expect(commands.Queue.DeclareOk, 1).queue == name
        c.close()


def test_unbind_with_missing_queue_or_exchange_is_ok(connection, unique):
    ch = connection.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_unbind(q, unique("missing-ex"), "k")
    ch.queue_unbind(unique("missing-q"), "amq.direct", "k")
    assert ch.is_open


def test_purge_missing_queue_is_404(connection, unique):
    q = unique("missing")
    code, text = soft_error(connection.channel().queue_purge, q)
    assert code == 404
    assert text == f"NOT_FOUND - no queue '{q}' in vhost '/'"


def test_empty_queue_name_means_the_channels_last_declared_queue(broker):
    """queue.bind/purge/delete and basic.get/consume with queue="" use the queue most recently
    declared on the channel (AMQP 0-9-1 shortcut, implemented by RabbitMQ)."""
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = c.expect(commands.Queue.DeclareOk, 1).queue
        rk = "last-" + q
        c.send(commands.Queue.Bind(queue="", exchange="amq.direct", routing_key=rk), 1)
        c.expect(commands.Queue.BindOk, 1)
        c.publish(1, b"x", exchange="amq.direct", routing_key=rk)
        ok, _hdr, body, _n = c.get(1, "")
        assert (ok.routing_key, body) == (rk, b"x")
        c.publish(1, b"y", exchange="amq.direct", routing_key=rk)
        c.publish(1, b"z", exchange="amq.direct", routing_key=rk)
        c.send(commands.Queue.Declare(queue=q, passive=True), 1)
        c.expect(commands.Queue.DeclareOk, 1)
        c.get(1, q, no_ack=False)  # "y" unacked, so "z" is what purge can count
        c.send(commands.Queue.Purge(queue=""), 1)
        assert c.expect(commands.Queue.PurgeOk, 1).message_count == 1
        c.send(commands.Basic.Consume(queue="", consumer_tag="t"), 1)
        c.expect(commands.Basic.ConsumeOk, 1)
        c.send(commands.Basic.Cancel(consumer_tag="t"), 1)
        c.expect(commands.Basic.CancelOk, 1)
        c.send(commands.Queue.Delete(queue=""), 1)
        c.expect(commands.Queue.DeleteOk, 1)
        c.send(commands.Queue.Declare(queue=q, passive=True), 1)
        close = c.read_until_channel_close(1)
        assert close.reply_code == 404
        c.close()


def test_empty_queue_name_without_a_declared_queue_is_404(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Queue.Bind(queue="", exchange="amq.direct", routing_key="k"), 1)
        close = c.read_until_channel_close(1)
        c.close()
    assert (close.reply_code, close.class_id, close.method_id) == (404, 50, 20)
    assert close.reply_text == "NOT_FOUND - no previously declared queue"


def test_unknown_queue_arguments_are_not_checked_for_equivalence(channel, unique):
    q = unique("q")
    channel.queue_declare(q, arguments={"foo": 1})
    channel.queue_declare(q, arguments={"foo": 2})
    channel.queue_declare(q)
    channel.queue_delete(q)


@pytest.mark.parametrize(
    ("value", "why"),
    [("ten", '"expected integer, got longstr"'), (-1, "{value_negative,-1}")],
    ids=["string", "negative"],
)
def test_invalid_x_max_length_is_406(connection, unique, value, why):
    q = unique("q")
    code, text = soft_error(
        connection.channel().queue_declare, q, arguments={"x-max-length": value}
    )
    assert code == 406
    assert (
        text
        == f"PRECONDITION_FAILED - invalid arg 'x-max-length' for queue '{q}' in vhost '/': {why}"
    )
    assert not queue_exists(connection, q)


def test_ack_after_the_queue_was_deleted_is_accepted(connection, unique):
    q = unique("q")
    ch = connection.channel()
    ch.confirm_delivery()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"a")
    method, _p, _b = ch.basic_get(q)
    connection.channel().queue_delete(q)
    ch.basic_ack(method.delivery_tag)
    ch.basic_qos(prefetch_count=0)  # round trip: no 406
    assert ch.is_open


def test_basic_get_takes_the_next_ready_message_beside_a_consumer(connection, unique):
    pub = connection.channel()
    pub.confirm_delivery()
    q = pub.queue_declare("", exclusive=True).method.queue
    cons = connection.channel()
    cons.basic_qos(prefetch_count=1)
    got = []
    cons.basic_consume(q, lambda ch, m, p, b: got.append(b))
    for i in range(3):
        pub.basic_publish("", q, str(i).encode())
    pump_until(connection, lambda: got)
    wait_for(lambda: message_count(pub, q) == 2)
    method, _p, body = pub.basic_get(q, auto_ack=True)
    assert (body, method.message_count) == (b"1", 1)
    assert got == [b"0"]
