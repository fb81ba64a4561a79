"""Channel-level edge cases on the wire that clients hit (issue 8 item 4).

- A channel closed by both sides at once (the broker closes it for a 404 while the client
  sends channel.close): the client's close gets close-ok, the client's close-ok to ours ends
  the channel, and the connection and its other channels go on (RabbitMQ rabbit_reader keeps
  the number "closing" until close-ok and answers a crossing channel.close).
- A content header or body on a channel that was never opened: RabbitMQ's command assembler
  refuses it with connection.close 505 UNEXPECTED_FRAME; a method other than channel.open:
  504 CHANNEL_ERROR.
"""

from __future__ import annotations

from helpers import check_survivors
from pamqp import commands, frame, header
from pamqp.body import ContentBody
from rawamqp import RawClient

CH = commands.Channel


def test_crossing_channel_close_ends_cleanly(broker, bystander, connect, unique):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.open_channel(2)
        # the passive declare fails (404); our close is on the wire before the broker's
        c.send_bytes(frame.marshal(commands.Queue.Declare(queue=unique("nope"), passive=True), 1)
                     + frame.marshal(CH.Close(200, "bye", 0, 0), 1))
        close = c.expect(CH.Close, 1)
        assert close.reply_code == 404
        c.send(CH.CloseOk(), 1)  # the late close-ok to the broker's close
        c.expect(CH.CloseOk, 1)  # the broker's answer to our close
        # the connection and channel 2 are fine, and number 1 can be opened again
        c.send(commands.Basic.Qos(prefetch_count=3), 2)
        c.expect(commands.Basic.QosOk, 2)
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        c.expect(commands.Queue.DeclareOk, 1)
        c.close()
    check_survivors(bystander, connect)


def test_crossing_close_with_pika(connection, unique):
    """pika closes a channel while the broker's 404 for it is in flight."""
    import pika.exceptions
    ch = connection.channel()
    other = connection.channel()
    ch.basic_publish(unique("no-such-exchange"), "k", b"x")  # async 404 from the broker
    try:
        ch.close()
    except pika.exceptions.ChannelClosed:
        pass
    assert not ch.is_open
    other.queue_declare("", exclusive=True)
    assert connection.is_open


def test_content_header_on_unopened_channel_is_505(broker, bystander, connect):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.send(header.ContentHeader(0, 3, commands.Basic.Properties()), 5)
        close = c.read_until_connection_close()
    assert close.reply_code == 505
    assert close.reply_text == ("UNEXPECTED_FRAME - expected method frame, "
                                "got non method frame instead")
    check_survivors(bystander, connect)


def test_body_on_unopened_channel_is_505(broker, bystander, connect):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(ContentBody(b"abc"), 7)
        close = c.read_until_connection_close()
    assert close.reply_code == 505
    check_survivors(bystander, connect)


def test_method_on_unopened_channel_is_504(broker, bystander, connect):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.send(commands.Basic.Qos(prefetch_count=1), 3)
        close = c.read_until_connection_close()
    assert close.reply_code == 504
    assert close.reply_text == "CHANNEL_ERROR - expected 'channel.open'"
    assert (close.class_id, close.method_id) == (60, 10)
    check_survivors(bystander, connect)
