"""max_message_size: a body larger than the limit closes the channel with 406.

RabbitMQ's default limit is 128 MiB (134217728), too big to exercise here against a shared
RabbitMQ, so these tests start their own EmbeddedBroker with a small limit and are skipped when
BROKER_TEST_URI is set. The expected text is RabbitMQ 3.10's (rabbit_channel:check_msg_size):
"PRECONDITION_FAILED - message size N is larger than configured max size M".
"""

from __future__ import annotations

import os

import pika
import pika.exceptions
import pytest
from helpers import get_all, start_embedded
from pamqp import commands
from rawamqp import RawClient

LIMIT = 1024


@pytest.fixture(scope="module")
def small_broker():
    if os.environ.get("BROKER_TEST_URI"):
        pytest.skip("EmbeddedBroker-only (max_message_size); BROKER_TEST_URI is set")
    b = start_embedded(max_message_size=LIMIT)
    try:
        yield b
    finally:
        b.stop()


def test_body_over_max_message_size_is_406_on_the_channel(small_broker):
    conn = pika.BlockingConnection(pika.URLParameters(small_broker.url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        q = ch.queue_declare("", exclusive=True).method.queue
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.basic_publish("", q, b"x" * (LIMIT + 1))
        assert info.value.reply_code == 406
        assert info.value.reply_text == (
            f"PRECONDITION_FAILED - message size {LIMIT + 1} is larger than configured max size "
            f"{LIMIT}"
        )
        assert conn.is_open  # a channel error, not a connection error
        ch2 = conn.channel()
        ch2.confirm_delivery()
        ch2.basic_publish("", q, b"y" * LIMIT)  # exactly the limit is fine
        assert get_all(ch2, q) == [b"y" * LIMIT]
    finally:
        conn.close()


def test_max_message_size_raw_close_fields(small_broker):
    with RawClient(small_broker.host, small_broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.publish(1, b"z" * (LIMIT * 3), routing_key="nowhere")
        close = c.read_until_channel_close(1)
    assert isinstance(close, commands.Channel.Close)
    assert (close.reply_code, close.class_id, close.method_id) == (406, 60, 40)


def test_oversized_publish_in_a_run_closes_the_channel_after_the_ones_before(small_broker):
    """A run of whole publishes read in one go (issue 15) with one over the limit in the
    middle: those before it are queued, it closes the channel with 406, the rest are
    discarded, as when each arrives alone."""
    from pamqp import body, frame, header

    def one(ch: int, q: str, data: bytes) -> bytes:
        return (frame.marshal(commands.Basic.Publish(routing_key=q), ch)
                + frame.marshal(header.ContentHeader(0, len(data), commands.Basic.Properties()),
                                ch)
                + frame.marshal(body.ContentBody(data), ch))

    with RawClient(small_broker.host, small_broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.open_channel(2)
        c.send(commands.Queue.Declare(queue="", exclusive=True), 2)
        q = c.expect(commands.Queue.DeclareOk, 2).queue
        c.send_bytes(b"".join(one(1, q, b"ok%d" % i) for i in range(50))
                     + one(1, q, b"z" * (LIMIT + 1))
                     + b"".join(one(1, q, b"after%d" % i) for i in range(50)))
        close = c.read_until_channel_close(1)
        assert (close.reply_code, close.class_id, close.method_id) == (406, 60, 40)
        c.send(commands.Queue.Declare(queue=q, passive=True), 2)
        assert c.expect(commands.Queue.DeclareOk, 2).message_count == 50
