"""Framing over a real socket: any TCP split, pipelining, interleaved channels, odd-but-legal
content framing (zero-length body frames, heartbeats between content frames).

All accepted by RabbitMQ 3.10.8.
"""

from __future__ import annotations

import pytest
from pamqp import commands, frame, header, heartbeat
from pamqp.body import ContentBody
from rawamqp import PROTOCOL_HEADER, RawClient, plain_response, raw_frame


def publish_bytes(channel: int, routing_key: str, body: bytes, chunk: int = 0) -> bytes:
    data = frame.marshal(commands.Basic.Publish(routing_key=routing_key), channel)
    data += frame.marshal(
        header.ContentHeader(0, len(body), commands.Basic.Properties(message_id="m")), channel
    )
    step = chunk or max(len(body), 1)
    for i in range(0, len(body), step):
        data += frame.marshal(ContentBody(body[i : i + step]), channel)
    return data


def declare_queue(c: RawClient, channel: int = 1) -> str:
    c.send(commands.Queue.Declare(queue="", exclusive=True), channel)
    return c.expect(commands.Queue.DeclareOk, channel).queue


def get_body(c: RawClient, q: str, channel: int = 1) -> bytes:
    return c.get(channel, q)[2]


def test_handshake_and_publish_one_byte_at_a_time(broker):
    with RawClient(broker.host, broker.port) as c:
        for b in PROTOCOL_HEADER:
            c.send_bytes(bytes([b]))
        c.expect(commands.Connection.Start)
        start_ok = frame.marshal(
            commands.Connection.StartOk(
                client_properties={}, mechanism="PLAIN", response=plain_response("guest", "guest")
            ),
            0,
        )
        for i in range(len(start_ok)):
            c.send_bytes(start_ok[i : i + 1])
        tune = c.expect(commands.Connection.Tune)
        c.send(commands.Connection.TuneOk(channel_max=tune.channel_max, frame_max=tune.frame_max))
        c.send(commands.Connection.Open())
        c.expect(commands.Connection.OpenOk)
        c.open_channel(1)
        q = declare_queue(c)
        data = publish_bytes(1, q, b"hello, byte by byte", chunk=7)
        for i in range(len(data)):
            c.send_bytes(data[i : i + 1])
        assert get_body(c, q) == b"hello, byte by byte"
        c.close()


@pytest.mark.parametrize("split", [1, 7, 8, 11, 13])
def test_publish_split_at_offsets(broker, split):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        q = declare_queue(c)
        data = publish_bytes(1, q, b"0123456789" * 5, chunk=16)
        for i in range(0, len(data), split):
            c.send_bytes(data[i : i + split])
        assert get_body(c, q) == b"0123456789" * 5
        c.close()


def test_pipelined_publishes_in_one_write(broker):
    """confirm.select + 300 publishes in one TCP write: all acked, all queued, in order."""
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        q = declare_queue(c)
        n = 300
        data = frame.marshal(commands.Confirm.Select(nowait=True), 1)
        data += b"".join(publish_bytes(1, q, str(i).encode()) for i in range(n))
        c.send_bytes(data)
        acked = 0
        while acked < n:
            ack = c.expect(commands.Basic.Ack, 1)
            assert ack.delivery_tag > acked
            acked = ack.delivery_tag
        assert acked == n
        c.send(commands.Queue.Declare(queue=q, passive=True), 1)
        assert c.expect(commands.Queue.DeclareOk, 1).message_count == n
        assert [get_body(c, q) for _ in range(3)] == [b"0", b"1", b"2"]
        c.close()


def test_content_interleaved_with_other_channels_and_empty_body_frames(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.open_channel(2)
        q = declare_queue(c)
        data = frame.marshal(commands.Basic.Publish(routing_key=q), 1)
        data += frame.marshal(header.ContentHeader(0, 6, commands.Basic.Properties()), 1)
        data += raw_frame(3, 1, b"abc")
        data += frame.marshal(commands.Queue.Declare(queue="", exclusive=True), 2)
        data += raw_frame(3, 1, b"")  # a zero-length body frame
        data += frame.marshal(heartbeat.Heartbeat(), 0)
        data += raw_frame(3, 1, b"def")
        c.send_bytes(data)
        c.expect(commands.Queue.DeclareOk, 2)
        assert get_body(c, q) == b"abcdef"
        c.close()


def test_many_small_body_frames(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        q = declare_queue(c)
        body = bytes(range(256)) * 4
        c.send_bytes(publish_bytes(1, q, body, chunk=1))  # 1024 one-byte body frames
        assert get_body(c, q) == body
        c.close()


def test_message_order_preserved_per_publisher(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        q = declare_queue(c)
        n = 1000
        c.send_bytes(b"".join(publish_bytes(1, q, str(i).encode()) for i in range(n)))
        c.send(commands.Basic.Consume(queue=q, no_ack=True), 1)
        c.expect(commands.Basic.ConsumeOk, 1)
        got = []
        for _ in range(n):
            c.expect(commands.Basic.Deliver, 1)
            got.append(int(c.read_content(1)[1]))
        assert got == list(range(n))
        c.close()


def test_runs_of_publishes_beyond_credit_interleaved_with_methods_and_channels(broker):
    """The reader takes runs of whole publishes in one go (issue 15), up to its credit
    towards the channel: 2 500 publishes in one write, with a method on the same channel
    and publishes on another channel in between, a body split over two frames and a
    partial last command: every message queued once, in order, per channel."""
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.open_channel(2)
        q1 = declare_queue(c, 1)
        q2 = declare_queue(c, 2)
        parts = [frame.marshal(commands.Confirm.Select(nowait=True), 1)]
        for i in range(2500):
            parts.append(publish_bytes(1, q1, b"%d" % i, chunk=1 if i == 1700 else 0))
            if i % 600 == 0:
                parts.append(frame.marshal(commands.Basic.Qos(prefetch_count=10), 1))
                parts.append(publish_bytes(2, q2, b"%d" % i))
        data = b"".join(parts)
        last = publish_bytes(1, q1, b"last")
        c.send_bytes(data + last[:-3])
        c.send_bytes(last[-3:])
        acked = 0
        while acked < 2501:
            method = c.read_frame()[1]
            if isinstance(method, commands.Basic.Ack):
                assert method.delivery_tag > acked
                acked = method.delivery_tag
        c.send(commands.Queue.Declare(queue=q1, passive=True), 1)
        assert c.expect(commands.Queue.DeclareOk, 1).message_count == 2501
        c.send(commands.Queue.Declare(queue=q2, passive=True), 2)
        assert c.expect(commands.Queue.DeclareOk, 2).message_count == 5
        assert [get_body(c, q1) for _ in range(3)] == [b"0", b"1", b"2"]
        assert [get_body(c, q2, 2) for _ in range(2)] == [b"0", b"600"]
        c.close()
