"""Publisher confirms and transactions, as RabbitMQ 3.10.8 implements them.

Confirms: delivery tags count from 1 per channel; acks may be `multiple`; every publish is
confirmed exactly once, including unroutable ones (a mandatory one gets basic.return first).
Tx: publishes and acks are held until tx.commit and discarded by tx.rollback.
"""

from __future__ import annotations

import asyncio

import aio_pika
import pika
import pika.exceptions
import pytest
from helpers import get_all, message_count, soft_error, wait_for
from pamqp import commands
from rawamqp import RawClient


def read_confirms(c: RawClient, channel: int, last_tag: int) -> list[tuple[str, int, bool]]:
    """Read basic.ack/nack (skipping returns and their content) until `last_tag` is covered."""
    confirms = []
    covered: set[int] = set()
    while len(covered) < last_tag:
        _ch, f = c.read_frame()
        if isinstance(f, commands.Basic.Return):
            c.read_content(channel)
            continue
        assert isinstance(f, commands.Basic.Ack | commands.Basic.Nack), f
        kind = "ack" if isinstance(f, commands.Basic.Ack) else "nack"
        confirms.append((kind, f.delivery_tag, f.multiple))
        new = set(range(1, f.delivery_tag + 1)) - covered if f.multiple else {f.delivery_tag}
        assert new, f"confirm {f.delivery_tag} (multiple={f.multiple}) confirms nothing new"
        assert f.delivery_tag not in covered, "a tag was confirmed twice"
        covered |= new
    assert covered == set(range(1, last_tag + 1))
    return confirms


# --- confirms -------------------------------------------------------------------------------------


def test_confirm_select_ok_then_every_publish_acked_raw(broker):
    n = 50
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = c.expect(commands.Queue.DeclareOk, 1).queue
        c.send(commands.Confirm.Select(), 1)
        c.expect(commands.Confirm.SelectOk, 1)
        for i in range(n):
            c.publish(1, str(i).encode(), routing_key=q)
        confirms = read_confirms(c, 1, n)
        c.send(commands.Queue.Declare(queue=q, passive=True), 1)
        assert c.expect(commands.Queue.DeclareOk, 1).message_count == n
        c.close()
    assert all(kind == "ack" for kind, _t, _m in confirms)
    tags = [t for _k, t, _m in confirms]
    assert tags == sorted(tags)


def test_confirm_select_nowait_raw(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Confirm.Select(nowait=True), 1)
        c.publish(1, b"a", routing_key="no-such-queue")
        c.publish(1, b"b", routing_key="no-such-queue")
        confirms = read_confirms(c, 1, 2)  # no select-ok arrives before the acks
        c.close()
    assert {k for k, _t, _m in confirms} == {"ack"}


def test_confirm_select_twice_is_fine(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Confirm.Select(), 1)
        c.expect(commands.Confirm.SelectOk, 1)
        c.send(commands.Confirm.Select(), 1)
        c.expect(commands.Confirm.SelectOk, 1)
        c.publish(1, b"a", routing_key="nowhere")
        assert read_confirms(c, 1, 1) == [("ack", 1, False)]
        c.close()


def test_unroutable_mandatory_is_returned_then_acked_raw(broker, unique):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Confirm.Select(), 1)
        c.expect(commands.Confirm.SelectOk, 1)
        c.publish(1, b"lost", routing_key=unique("nowhere"), mandatory=True)
        ret = c.expect(commands.Basic.Return, 1)
        assert ret.reply_code == 312
        assert c.read_content(1)[1] == b"lost"
        ack = c.expect(commands.Basic.Ack, 1)
        assert (ack.delivery_tag, ack.multiple) == (1, False)
        c.close()


def test_unroutable_confirms_pika(connection, unique):
    ch = connection.channel()
    ch.confirm_delivery()
    ch.basic_publish("", unique("nowhere"), b"not mandatory")  # acked: no exception
    with pytest.raises(pika.exceptions.UnroutableError) as info:
        ch.basic_publish("", unique("nowhere"), b"mandatory", mandatory=True)
    returned = info.value.messages
    assert len(returned) == 1
    assert returned[0].method.reply_code == 312
    assert returned[0].body == b"mandatory"
    assert ch.is_open


def test_confirms_mixed_routable_and_unroutable_are_in_order_raw(broker, unique):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = c.expect(commands.Queue.DeclareOk, 1).queue
        c.send(commands.Confirm.Select(), 1)
        c.expect(commands.Confirm.SelectOk, 1)
        for i in range(20):
            c.publish(1, b"x", routing_key=q if i % 2 else unique("nowhere"), mandatory=i % 3 == 0)
        confirms = read_confirms(c, 1, 20)
        c.close()
    assert {k for k, _t, _m in confirms} == {"ack"}


def test_persistent_publish_to_durable_queue_is_acked(connection, unique):
    ch = connection.channel()
    ch.confirm_delivery()
    q = unique("durable")
    ch.queue_declare(q, durable=True)
    for i in range(20):
        ch.basic_publish("", q, str(i).encode(), pika.BasicProperties(delivery_mode=2))
    assert message_count(ch, q) == 20
    ch.queue_delete(q)


def test_persistent_publish_taken_at_once_by_a_no_ack_consumer_is_acked(broker, connect,
                                                                       unique):
    """A persistent message for a durable queue whose no-ack consumer takes it at once is
    never written, and is confirmed at once (it used to wait forever for a write)."""
    q = unique("noack")
    consumer_conn = connect()
    ch = consumer_conn.channel()
    ch.queue_declare(q, durable=True)
    got: list[bytes] = []
    ch.basic_consume(q, lambda c, m, p, b: got.append(b), auto_ack=True)
    consumer_conn.process_data_events(0.1)
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Confirm.Select(), 1)
        c.expect(commands.Confirm.SelectOk, 1)
        for i in range(5):
            c.publish(1, b"%d" % i, routing_key=q,
                      properties=commands.Basic.Properties(delivery_mode=2))
        confirms = read_confirms(c, 1, 5)  # RawClient reads time out after 5 s
        assert all(kind == "ack" for kind, _t, _m in confirms), confirms
        c.close()
    wait_for(lambda: (consumer_conn.process_data_events(0.05), len(got) == 5)[1])
    assert got == [b"0", b"1", b"2", b"3", b"4"]
    ch.queue_delete(q)


def test_message_routed_to_several_queues_acked_once(broker, unique):
    ex = unique("fan")
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Exchange.Declare(exchange=ex, exchange_type="fanout", auto_delete=True), 1)
        c.expect(commands.Exchange.DeclareOk, 1)
        for _ in range(3):
            c.send(commands.Queue.Declare(queue="", exclusive=True), 1)
            q = c.expect(commands.Queue.DeclareOk, 1).queue
            c.send(commands.Queue.Bind(queue=q, exchange=ex), 1)
            c.expect(commands.Queue.BindOk, 1)
        c.send(commands.Confirm.Select(), 1)
        c.expect(commands.Confirm.SelectOk, 1)
        c.publish(1, b"x", exchange=ex)
        c.publish(1, b"y", exchange=ex)
        assert [t for _k, t, _m in read_confirms(c, 1, 2)][-1] == 2
        c.close()


def test_aio_pika_publisher_confirms(broker):
    async def main():
        conn = await aio_pika.connect(broker.url)
        async with conn:
            ch = await conn.channel(publisher_confirms=True)
            q = await ch.declare_queue(exclusive=True)
            confirmations = await asyncio.gather(
                *(
                    ch.default_exchange.publish(aio_pika.Message(str(i).encode()), q.name)
                    for i in range(30)
                )
            )
            again = await ch.declare_queue(q.name, passive=True)
            return confirmations, again.declaration_result.message_count

    confirmations, count = asyncio.run(main())
    assert len(confirmations) == 30
    assert all(isinstance(c, commands.Basic.Ack) for c in confirmations)
    assert count == 30


# --- tx -------------------------------------------------------------------------------------------


def test_tx_publish_invisible_until_commit(connection):
    tx = connection.channel()
    tx.tx_select()
    observer = connection.channel()
    q = observer.queue_declare("", exclusive=True).method.queue
    tx.basic_publish("", q, b"1")
    tx.basic_publish("", q, b"2")
    tx.basic_qos(prefetch_count=0)  # round trip: the tx channel has handled both publishes
    assert message_count(observer, q) == 0
    tx.tx_commit()
    assert get_all(observer, q) == [b"1", b"2"]


def test_tx_rollback_discards_publishes(connection):
    tx = connection.channel()
    tx.tx_select()
    q = tx.queue_declare("", exclusive=True).method.queue
    tx.basic_publish("", q, b"discard me")
    tx.tx_rollback()
    tx.basic_publish("", q, b"keep me")
    tx.tx_commit()
    assert get_all(tx, q) == [b"keep me"]


def test_tx_mandatory_unroutable_returned_at_commit(connection, unique):
    tx = connection.channel()
    tx.tx_select()
    returned = []
    tx.add_on_return_callback(lambda c, m, p, b: returned.append((m.reply_code, b)))
    tx.basic_publish("", unique("nowhere"), b"r", mandatory=True)
    tx.tx_commit()
    connection.process_data_events(time_limit=0)
    assert returned == [(312, b"r")]


def test_tx_ack_rolled_back_is_not_applied(connection):
    setup = connection.channel()
    setup.confirm_delivery()
    q = setup.queue_declare("", exclusive=True).method.queue
    for b in (b"a", b"b"):
        setup.basic_publish("", q, b)
    tx = connection.channel()
    tx.tx_select()
    m1, _, _ = tx.basic_get(q)
    m2, _, _ = tx.basic_get(q)
    tx.basic_ack(m1.delivery_tag)
    tx.tx_rollback()  # the ack of "a" is forgotten; "a" stays unacked
    tx.basic_ack(m2.delivery_tag)
    tx.tx_commit()  # only "b" is acked
    tx.close()  # "a" goes back to the queue
    wait_for(lambda: message_count(setup, q) == 1)
    method, _p, body = setup.basic_get(q, auto_ack=True)
    assert (body, method.redelivered) == (b"a", True)
    assert setup.basic_get(q) == (None, None, None)


def test_tx_ack_applied_only_at_commit(connection):
    setup = connection.channel()
    setup.confirm_delivery()
    q = setup.queue_declare("", exclusive=True).method.queue
    setup.basic_publish("", q, b"a")
    tx = connection.channel()
    tx.tx_select()
    m, _, _ = tx.basic_get(q)
    tx.basic_ack(m.delivery_tag)
    tx.basic_qos(prefetch_count=0)  # round trip: the ack has reached the broker
    tx.tx_commit()
    tx.close()
    assert setup.basic_get(q) == (None, None, None)


def test_tx_reject_requeue_applied_at_commit(connection):
    setup = connection.channel()
    setup.confirm_delivery()
    q = setup.queue_declare("", exclusive=True).method.queue
    setup.basic_publish("", q, b"a")
    tx = connection.channel()
    tx.tx_select()
    m, _, _ = tx.basic_get(q)
    tx.basic_reject(m.delivery_tag, requeue=True)
    tx.basic_qos(prefetch_count=0)
    assert message_count(setup, q) == 0  # not yet requeued
    tx.tx_commit()
    assert message_count(setup, q) == 1


def test_confirm_select_on_tx_channel_is_406(connection):
    ch = connection.channel()
    ch.tx_select()
    code, text = soft_error(ch.confirm_delivery)
    assert code == 406
    assert text == "PRECONDITION_FAILED - cannot switch from tx to confirm mode"


def test_tx_select_on_confirm_channel_is_406(connection):
    ch = connection.channel()
    ch.confirm_delivery()
    code, text = soft_error(ch.tx_select)
    assert code == 406
    assert text == "PRECONDITION_FAILED - cannot switch from confirm to tx mode"


@pytest.mark.parametrize("method", ["tx_commit", "tx_rollback"])
def test_commit_or_rollback_without_select_is_406(connection, method):
    ch = connection.channel()
    code, text = soft_error(getattr(ch, method))
    assert code == 406
    assert text == "PRECONDITION_FAILED - channel is not transactional"


def test_tx_select_twice_is_fine(connection):
    ch = connection.channel()
    ch.tx_select()
    ch.tx_select()
    ch.tx_commit()
    assert ch.is_open


def test_tx_publish_to_missing_exchange_is_404_at_once(connection, unique):
    ch = connection.channel()
    ch.tx_select()
    missing = unique("missing")
    # basic.qos is only a round trip: the error comes before any tx.commit
    code, text = soft_error(lambda: (ch.basic_publish(missing, "", b"x"), ch.basic_qos()))
    assert code == 404
    assert text == f"NOT_FOUND - no exchange '{missing}' in vhost '/'"
