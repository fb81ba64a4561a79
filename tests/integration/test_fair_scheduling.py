"""Fairness on the one event loop (issue 49): a connection handles what it read one slice
at a time (`reader_slice`), and a queue on a busy loop serves its consumers before its
publishers (`consumer_bias_load`, broker/consumer_bias.py). Real brokers with those settings,
driven by a raw AMQP client (one write holding hundreds of frames) and pika."""

from __future__ import annotations

import time
import uuid

import pika
from pamqp import commands, frame

from tests.integration.bias_load import flow_run, publish_bytes
from tests.integration.helpers import start_embedded
from tests.integration.rawamqp import RawClient


def _confirmed_and(raw: RawClient, n: int, reply: type,
                   timeout: float = 10.0) -> tuple[int, object]:
    """Read until basic.ack covered delivery tag `n` and a `reply` came (confirms and
    method replies may interleave); returns (highest tag acked, the reply)."""
    deadline = time.monotonic() + timeout
    seen, got = 0, None
    while seen < n or got is None:
        assert time.monotonic() < deadline, f"confirmed {seen} of {n}, {reply} {got}"
        _ch, method = raw.read_frame(timeout=deadline - time.monotonic())
        if isinstance(method, commands.Basic.Ack):
            seen = max(seen, method.delivery_tag)
        else:
            assert isinstance(method, reply), method
            got = method
    return seen, got


def _declare_on_channel_1(raw: RawClient, queue: str) -> None:
    """Handshake, open channel 1 and declare `queue` on it."""
    raw.handshake()
    raw.open_channel(1)
    raw.send(commands.Queue.Declare(queue=queue), 1)
    raw.expect(commands.Queue.DeclareOk, 1)


def test_a_write_of_many_slices_is_handled_whole_in_order_then_the_close(
        embedded_only) -> None:
    """500 publishes, a queue.declare and a channel.close in one write, with slices of 3
    frames: every publish is confirmed, the queue holds them in order, and the close comes
    after them (nothing is lost or reordered across the turns between slices)."""
    b = start_embedded(reader_slice=3)
    q = f"slice-{uuid.uuid4().hex[:8]}"
    try:
        with RawClient(b.host, b.port) as raw:
            _declare_on_channel_1(raw, q)
            raw.send(commands.Confirm.Select(), 1)
            raw.expect(commands.Confirm.SelectOk, 1)
            data = b"".join(publish_bytes(q, b"%d" % i) for i in range(500))
            data += frame.marshal(commands.Queue.Declare(queue=q, passive=True), 1)
            data += frame.marshal(commands.Channel.Close(
                reply_code=200, reply_text="bye", class_id=0, method_id=0), 1)
            raw.send_bytes(data)
            acked, ok = _confirmed_and(raw, 500, commands.Queue.DeclareOk)
            assert acked == 500 and ok.message_count == 500
            raw.expect(commands.Channel.CloseOk, 1)
            raw.close()
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        bodies = []
        for _ in range(500):
            _m, _p, body = ch.basic_get(q, auto_ack=True)
            bodies.append(int(body))
        assert bodies == list(range(500))
        conn.close()
    finally:
        b.stop()


def test_a_connection_close_behind_slices_waits_for_the_publishes_before_it(
        embedded_only) -> None:
    """connection.close in the same write as 300 publishes (slices of 7): close-ok comes,
    and every publish before it reached the queue (RabbitMQ handles what came before a
    close)."""
    b = start_embedded(reader_slice=7)
    q = f"slice-{uuid.uuid4().hex[:8]}"
    try:
        with RawClient(b.host, b.port) as raw:
            _declare_on_channel_1(raw, q)
            data = b"".join(publish_bytes(q, b"x") for _ in range(300))
            data += frame.marshal(commands.Connection.Close(
                reply_code=200, reply_text="bye", class_id=0, method_id=0), 0)
            raw.send_bytes(data)
            raw.expect(commands.Connection.CloseOk, 0)
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        assert conn.channel().queue_declare(q, passive=True).method.message_count == 300
        conn.close()
    finally:
        b.stop()


def test_an_idle_loop_never_holds_a_publisher_for_a_slow_consumer(embedded_only) -> None:
    """RabbitMQ's consumer bias only reorders a busy queue's work: on an idle broker a
    publisher at 500 msg/s to a queue whose consumer takes 10 messages every 0.5 s is never
    held, and the backlog builds as it would on RabbitMQ."""
    b = start_embedded()
    try:
        q, sent, length = flow_run(b.url, publish_for=2.0, rate=500, ack_every_s=0.5,
                                   prefetch=10)
        assert b.broker.vhosts["/"].queues[q].bias.holds == 0
        assert sent >= 800 and length >= sent - 100
    finally:
        b.stop()


def test_a_consumer_that_takes_nothing_never_stalls_the_publisher(embedded_only) -> None:
    """Bias on whatever the load, a consumer with a full prefetch that never acks: a hold
    ends at the first check that finds nothing drained, and no new one starts for COOL_S,
    so the publisher goes on near its own pace and the backlog builds."""
    b = start_embedded(consumer_bias_load=0)
    try:
        q, sent, length = flow_run(b.url, publish_for=2.0, rate=500, ack_every_s=0,
                                   prefetch=5)
        assert b.broker.vhosts["/"].queues[q].bias.holds >= 1  # it was tried
        assert sent >= 600 and length >= sent - 50
    finally:
        b.stop()
