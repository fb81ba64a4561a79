"""A synchronous method's reply comes before the notifications it causes on the same channel
(issue 8 item 2), as in RabbitMQ, where the queue process's basic.cancel reaches the channel
process after the channel has replied (rabbit_channel handle_method queue.delete, then
handle_cast {send_command, basic.cancel}). Checked on the wire with the raw client and with
py-amqp (kombu's transport), which raised ConsumerCancelled inside queue_delete when the order
was reversed.
"""

from __future__ import annotations

import amqp
import pytest
from pamqp import commands
from rawamqp import RawClient

B = commands.Basic
Q = commands.Queue
CAPS = {"consumer_cancel_notify": True, "authentication_failure_close": True}


def _consume(c: RawClient, channel: int, queue: str, tag: str) -> None:
    c.send(B.Consume(queue=queue, consumer_tag=tag), channel)
    c.expect(B.ConsumeOk, channel)


def _declare_and_consume(c: RawClient, queue: str, tag: str, caps: dict | None = CAPS) -> None:
    """Handshake, open channel 1, declare `queue` and consume it there as `tag`."""
    c.handshake(capabilities=caps)
    c.open_channel(1)
    c.send(Q.Declare(queue=queue), 1)
    c.expect(Q.DeclareOk, 1)
    _consume(c, 1, queue, tag)


def test_queue_delete_ok_precedes_cancel_on_the_consuming_channel(broker, unique):
    q = unique("del")
    with RawClient(broker.host, broker.port) as c:
        _declare_and_consume(c, q, "ctag-1")
        c.send(Q.Delete(queue=q), 1)
        first = c.expect((Q.DeleteOk, B.Cancel), 1)
        second = c.expect((Q.DeleteOk, B.Cancel), 1)
        c.close()
    assert isinstance(first, Q.DeleteOk)
    assert isinstance(second, B.Cancel)
    assert second.consumer_tag == "ctag-1"


def test_queue_delete_from_another_channel_cancels_the_consumer(broker, unique):
    q = unique("del2")
    with RawClient(broker.host, broker.port) as c:
        c.handshake(capabilities=CAPS)
        c.open_channel(1)
        c.open_channel(2)
        c.send(Q.Declare(queue=q), 1)
        c.expect(Q.DeclareOk, 1)
        _consume(c, 1, q, "ctag-a")
        c.send(Q.Delete(queue=q), 2)
        got = {}
        for _ in range(2):
            ch, method = c.read_frame()
            got[type(method)] = (ch, method)
        c.close()
    assert got[Q.DeleteOk][0] == 2
    assert got[B.Cancel][0] == 1
    assert got[B.Cancel][1].consumer_tag == "ctag-a"


def test_cancel_is_not_sent_to_a_client_without_the_capability(broker, unique):
    q = unique("del3")
    with RawClient(broker.host, broker.port) as c:
        _declare_and_consume(c, q, "ctag-x", caps=None)  # no consumer_cancel_notify
        c.send(Q.Delete(queue=q), 1)
        c.expect(Q.DeleteOk, 1)
        c.send(commands.Basic.Qos(prefetch_count=1), 1)
        c.expect(B.QosOk, 1)  # fails if a basic.cancel came in between
        c.close()


def test_py_amqp_queue_delete_with_own_consumer(broker, unique):
    """kombu's transport: queue_delete returns the count instead of raising
    ConsumerCancelled; the cancel is then seen by drain_events."""
    q = unique("pyamqp")
    cancelled: list[str] = []
    conn = amqp.Connection(f"{broker.host}:{broker.port}", userid="guest", password="guest")
    conn.connect()
    try:
        ch = conn.channel()
        ch.queue_declare(q)
        ch.basic_consume(q, callback=lambda m: None, on_cancel=cancelled.append)
        count = ch.queue_delete(q)
        assert count == 0
        while not cancelled:
            conn.drain_events(timeout=5)
        assert cancelled and cancelled[0].startswith("amq.ctag-")
        ch.close()
    finally:
        conn.close()


@pytest.mark.parametrize("if_empty", [False, True])
def test_purge_and_failed_delete_send_no_cancel(broker, unique, if_empty):
    """queue.purge and a queue.delete refused with 406 cancel nobody."""
    q = unique("purge")
    with RawClient(broker.host, broker.port) as c:
        _declare_and_consume(c, q, "ctag-p")
        c.send(Q.Purge(queue=q), 1)
        c.expect(Q.PurgeOk, 1)
        c.open_channel(2)
        c.send(Q.Delete(queue=q, if_unused=True, if_empty=if_empty), 2)
        close = c.expect(commands.Channel.Close, 2)
        assert close.reply_code == 406
        c.send(commands.Channel.CloseOk(), 2)
        c.send(commands.Basic.Qos(prefetch_count=1), 1)
        c.expect(B.QosOk, 1)
        c.send(Q.Delete(queue=q), 1)
        c.expect(Q.DeleteOk, 1)
        c.expect(B.Cancel, 1)
        c.close()
