"""No exception escapes a handler (issue 8 item 4): an unexpected one closes only its
connection with 541 INTERNAL_ERROR (RabbitMQ closes the connection when a channel process
exits with a non-AMQP reason: rabbit_binary_generator:map_exception → internal_error) and the
traceback is logged; the broker, other connections and accepted messages are unaffected.

The failure is injected by replacing one method handler of the in-process broker, so these
tests need the embedded broker.
"""

from __future__ import annotations

import logging

import pika
import pika.exceptions
import pytest
from helpers import check_survivors, message_count
from pamqp import commands

from broker import channel_handlers as channel_module

pytestmark = pytest.mark.usefixtures("embedded_only")


def _boom(ch, cmd):
    raise RuntimeError("injected failure")


def test_failing_handler_closes_its_connection_with_541(broker, bystander, connect, unique,
                                                        monkeypatch, caplog):
    monkeypatch.setitem(channel_module.HANDLERS.methods, commands.Basic.Qos, _boom)
    conn = connect()
    ch = conn.channel()
    q = ch.queue_declare(unique("before-crash")).method.queue
    ch.confirm_delivery()
    ch.basic_publish("", q, b"accepted")
    with caplog.at_level(logging.ERROR, logger="broker"):
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            ch.basic_qos(prefetch_count=1)
    assert info.value.reply_code == 541
    assert info.value.reply_text.startswith("INTERNAL_ERROR")
    assert any("injected failure" in (r.exc_text or "") or
               (r.exc_info and "injected failure" in str(r.exc_info[1]))
               for r in caplog.records)
    monkeypatch.undo()
    check_survivors(bystander, connect)
    other = connect().channel()
    assert message_count(other, q) == 1  # the message accepted before the crash is kept
    other.queue_delete(q)


def test_failing_handler_requeues_the_connections_unacked(broker, connect, unique,
                                                          monkeypatch):
    setup = connect().channel()
    q = setup.queue_declare(unique("unacked-crash")).method.queue
    setup.confirm_delivery()
    setup.basic_publish("", q, b"held")
    conn = connect()
    ch = conn.channel()
    method, _p, body = ch.basic_get(q, auto_ack=False)
    assert body == b"held"
    monkeypatch.setitem(channel_module.HANDLERS.methods, commands.Basic.Recover, _boom)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker):
        ch.basic_recover(requeue=True)
    monkeypatch.undo()
    fresh = connect().channel()
    got = fresh.basic_get(q, auto_ack=True)
    assert got[2] == b"held" and got[0].redelivered
    fresh.queue_delete(q)


def test_broker_keeps_serving_after_many_crashes(broker, connect, monkeypatch):
    monkeypatch.setitem(channel_module.HANDLERS.methods, commands.Basic.Qos, _boom)
    for _ in range(20):
        conn = connect()
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker):
            conn.channel().basic_qos(prefetch_count=1)
    monkeypatch.undo()
    assert connect().channel().queue_declare("", exclusive=True).method.queue
