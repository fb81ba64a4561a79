"""Channel class: open/close, channel.flow, soft errors stay on their channel, 504s.

Observed on RabbitMQ 3.10.8: channel.flow(active=false) is a connection error 540
"NOT_IMPLEMENTED - active=false" (class 20, method 20); flow(active=true) is answered with
flow-ok(active=true).
"""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from pamqp import commands
from rawamqp import RawClient


def test_open_and_close_channels(connection):
    chans = [connection.channel() for _ in range(5)]
    assert len({c.channel_number for c in chans}) == 5
    for c in chans[:3]:
        c.close()
        assert c.is_closed
    for c in chans[3:]:
        assert c.is_open
        c.queue_declare("", exclusive=True)
    assert connection.is_open


def test_raw_channel_close_and_reopen_same_number(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0), 1)
        c.expect(commands.Channel.CloseOk, 1)
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        c.expect(commands.Queue.DeclareOk, 1)
        c.close()


def test_channel_flow_active_true_is_acknowledged(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Channel.Flow(active=True), 1)
        ok = c.expect(commands.Channel.FlowOk, 1)
        assert ok.active is True
        c.close()


def test_channel_flow_active_false_is_540_not_implemented(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Channel.Flow(active=False), 1)
        close = c.read_until_connection_close()
    assert isinstance(close, commands.Connection.Close)
    assert (close.reply_code, close.class_id, close.method_id) == (540, 20, 20)
    assert close.reply_text == "NOT_IMPLEMENTED - active=false"


def test_soft_error_closes_only_that_channel(connection, unique):
    bad = connection.channel()
    good = connection.channel()
    q = unique("q")
    good.queue_declare(q, auto_delete=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        bad.queue_declare(unique("missing"), passive=True)
    assert info.value.reply_code == 404
    assert bad.is_closed
    assert connection.is_open
    assert good.is_open
    good.confirm_delivery()
    good.basic_publish("", q, b"after the other channel died")
    assert good.basic_get(q, auto_ack=True)[2] == b"after the other channel died"
    again = connection.channel()  # the connection still opens new channels
    assert again.queue_declare(q, passive=True).method.message_count == 0


def test_raw_soft_error_channel_close_fields(broker, unique):
    missing = unique("missing")
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.open_channel(2)
        c.send(commands.Queue.Declare(queue=missing, passive=True), 1)
        close = c.read_until_channel_close(1)
        c.send(commands.Queue.Declare(queue="", exclusive=True), 2)
        c.expect(commands.Queue.DeclareOk, 2)
        c.close()
    assert isinstance(close, commands.Channel.Close)
    assert (close.reply_code, close.class_id, close.method_id) == (404, 50, 10)
    assert close.reply_text == f"NOT_FOUND - no queue '{missing}' in vhost '/'"


def test_method_on_never_opened_channel_is_504(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue="", exclusive=True), 5)
        close = c.read_until_connection_close()
    assert isinstance(close, commands.Connection.Close)
    assert (close.reply_code, close.class_id, close.method_id) == (504, 50, 10)
    assert close.reply_text == "CHANNEL_ERROR - expected 'channel.open'"


def test_method_on_closed_channel_is_504(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0), 1)
        c.expect(commands.Channel.CloseOk, 1)
        c.send(commands.Basic.Qos(prefetch_count=1), 1)
        close = c.read_until_connection_close()
    assert (close.reply_code, close.class_id, close.method_id) == (504, 60, 10)


def test_second_channel_open_is_504(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Channel.Open(), 1)
        close = c.read_until_connection_close()
    assert (close.reply_code, close.class_id, close.method_id) == (504, 20, 10)
    assert close.reply_text == "CHANNEL_ERROR - second 'channel.open' seen"


def test_queue_method_on_channel_zero_is_504(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.send(commands.Queue.Declare(queue="x"), 0)
        close = c.read_until_connection_close()
    assert (close.reply_code, close.class_id, close.method_id) == (504, 50, 10)
    assert close.reply_text == "CHANNEL_ERROR - unexpected method in connection state running"


def test_methods_on_a_closing_channel_are_ignored_until_close_ok(broker, unique):
    """After the broker sent channel.close, it drops the client's methods on that channel
    (no reply, no error) until channel.close-ok; then the number can be reopened."""
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue=unique("missing"), passive=True), 1)
        close = c.expect(commands.Channel.Close, 1)
        assert close.reply_code == 404
        c.send(commands.Queue.Declare(queue="", exclusive=True), 1)  # ignored
        c.send(commands.Basic.Qos(prefetch_count=1), 1)  # ignored
        c.send(commands.Channel.CloseOk(), 1)
        c.open_channel(1)  # expect() fails if a declare-ok or qos-ok sneaks in first
        c.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        c.expect(commands.Queue.DeclareOk, 1)
        c.close()


def test_broker_closes_socket_after_connection_close_ok(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue="x"), 5)  # 504: connection.close from the broker
        close = c.read_until_connection_close()  # answers close-ok
        assert close.reply_code == 504
        c.wait_closed(timeout=3)
