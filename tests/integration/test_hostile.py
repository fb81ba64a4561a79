"""Hostile peers cannot take the broker down, stall others or grow its memory without bound.

Covered here (rabbitmq.com/networking.html, AMQP 0-9-1 §4.2.3 frame size, §4.2.5.5 field
tables): a 4 GiB frame size, a field table nested thousands deep, channel numbers up to
channel_max and one more, a peer that trickles a frame one byte at a time, a consumer and a
publisher that never read their socket. Each test keeps a `bystander` connection and checks it
afterwards (`check_survivors`).
"""

from __future__ import annotations

import socket
import struct
import time

import pytest
from helpers import check_survivors
from pamqp import body, commands, frame, header
from rawamqp import Closed, RawClient, raw_frame

from tests.polling import wait_for

pytestmark = pytest.mark.usefixtures("embedded_only")


def write_buffered(broker) -> int:
    """Bytes the broker holds for all its connections' sockets (asyncio write buffers plus
    frames queued in the writers)."""

    def total() -> int:
        n = 0
        for conn in broker.broker.connections:
            if conn.transport is not None and not conn.transport.is_closing():
                n += conn.transport.get_write_buffer_size()
        return n

    return broker.call(total)


def nested_table(depth: int) -> bytes:
    """A field table {"a": {"a": {...}}} nested `depth` deep, with its length prefix."""
    inner = b""
    for _ in range(depth):
        inner = b"\x01aF" + struct.pack(">I", len(inner)) + inner
    return struct.pack(">I", len(inner)) + inner


def declare_with_arguments(table: bytes) -> bytes:
    """queue.declare (class 50, method 10) of queue 'q' with raw `table` as arguments."""
    return struct.pack(">HH", 50, 10) + b"\x00\x00" + b"\x01q" + b"\x00" + table


def test_4gib_frame_size_is_refused_at_once(broker, bystander, connect):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_bytes(b"\x01\x00\x01\xff\xff\xff\xff")  # a frame header announcing 4 GiB - 1
        close = c.read_until_connection_close(timeout=2)  # no waiting for the bytes
    assert close.reply_code == 501
    assert "frame_too_large" in close.reply_text
    check_survivors(bystander, connect)


def test_deeply_nested_field_table_is_a_frame_error(broker, bystander, connect):
    """5000 levels fit in one frame; decoding them must not blow the stack of the broker
    (RabbitMQ answers 501 FRAME_ERROR for what it cannot decode)."""
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_bytes(raw_frame(1, 1, declare_with_arguments(nested_table(5000))))
        close = c.read_until_connection_close(timeout=5)
    assert close.reply_code == 501
    check_survivors(bystander, connect)


def test_moderately_nested_table_still_works(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_bytes(raw_frame(1, 1, declare_with_arguments(nested_table(50))))
        ok = c.expect(commands.Queue.DeclareOk, channel=1)
        assert ok.queue == "q"
        c.send(commands.Queue.Delete(queue="q"), 1)
        c.expect(commands.Queue.DeleteOk, channel=1)


def test_channel_max_channels_then_530(broker, bystander, connect):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        for n in range(1, 2048):
            c.send(commands.Channel.Open(), n)
        for _ in range(1, 2048):
            c.expect(commands.Channel.OpenOk)
        c.send(commands.Channel.Open(), 2048)
        close = c.read_until_connection_close()
    assert close.reply_code == 530
    assert close.reply_text.startswith("NOT_ALLOWED - number of channels opened (2047)")
    check_survivors(bystander, connect)


def test_a_trickling_peer_does_not_stall_others(broker, bystander, connect, unique):
    """One byte every 2 ms of a publish: other connections keep their normal latency, and
    the message arrives once its last frame is complete."""
    conn, ch, _q = bystander
    q = unique("trickle")
    ch.queue_declare(q, auto_delete=False)
    publish = (frame.marshal(commands.Basic.Publish(routing_key=q), 1)
               + frame.marshal(header.ContentHeader(0, 7, commands.Basic.Properties()), 1)
               + frame.marshal(body.ContentBody(b"trickle"), 1))
    try:
        with RawClient(broker.host, broker.port) as c:
            c.handshake()
            c.open_channel(1)
            worst = 0.0
            for i, byte in enumerate(publish):
                assert ch.queue_declare(q, passive=True).method.message_count == 0
                c.send_bytes(bytes([byte]))
                if i % 10 == 0:
                    t = time.monotonic()
                    ch.queue_declare(q, passive=True)  # a round trip on the other connection
                    worst = max(worst, time.monotonic() - t)
                time.sleep(0.002)
            assert worst < 0.5
            wait_for(lambda: ch.queue_declare(q, passive=True).method.message_count == 1)
        assert ch.basic_get(q, auto_ack=True)[2] == b"trickle"
    finally:
        ch.queue_delete(q)
    check_survivors(bystander, connect)


def _small_receive_buffer(c: RawClient) -> None:
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)


def test_consumer_that_never_reads_is_bounded_and_loses_nothing(broker, bystander, connect,
                                                                unique):
    """A no-ack consumer of 40 MB that does not read: the broker stops delivering once its
    write buffer passes the high-water mark (what the kernel's socket buffers hold aside,
    the rest stays in the queue), and when the client reads, every message arrives once."""
    q = unique("slow")
    size, count = 10_000, 4000
    pub = connect().channel()
    pub.queue_declare(q, auto_delete=False)
    pub.confirm_delivery()
    for i in range(count):
        pub.basic_publish("", q, struct.pack(">I", i) + bytes(size - 4))
    c = RawClient(broker.host, broker.port, timeout=3)
    try:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Basic.Consume(queue=q, consumer_tag="ct", no_ack=True), 1)

        def settled() -> bool:
            before = pub.queue_declare(q, passive=True).method.message_count
            time.sleep(0.1)
            return before == pub.queue_declare(q, passive=True).method.message_count < count

        wait_for(settled, timeout=10)
        remaining = pub.queue_declare(q, passive=True).method.message_count
        assert remaining > count // 2  # most of the queue was never pushed at the socket
        assert write_buffered(broker) < 2_000_000
        check_survivors(bystander, connect)
        seen = []
        c.expect(commands.Basic.ConsumeOk, channel=1)
        while len(seen) < count:
            try:
                c.expect(commands.Basic.Deliver, channel=1)
            except TimeoutError:
                raise AssertionError(f"stalled after {len(seen)}; queue holds "
                                     f"{pub.queue_declare(q, passive=True).method.message_count}") from None
            _hdr, data, _frames = c.read_content(1)
            seen.append(struct.unpack(">I", data[:4])[0])
        assert seen == list(range(count))
    finally:
        c.close_socket()
        pub.queue_delete(q)


def test_publisher_that_never_reads_is_bounded(broker, bystander, connect):
    """Mandatory publishes that come back as basic.return, from a client that never reads:
    once the broker's write buffer is full it stops reading that socket (the client's send
    blocks), so the returns it owes cannot pile up."""
    one = (frame.marshal(commands.Basic.Publish(routing_key="nowhere", mandatory=True), 1)
           + frame.marshal(header.ContentHeader(0, 1000, commands.Basic.Properties()), 1)
           + frame.marshal(body.ContentBody(b"x" * 1000), 1))
    c = RawClient(broker.host, broker.port)
    try:
        _small_receive_buffer(c)
        c.handshake()
        c.open_channel(1)
        c.sock.setblocking(False)
        chunk, sent, deadline = one * 100, 0, time.monotonic() + 5
        data = memoryview(chunk)
        stalled_since = None
        while time.monotonic() < deadline:
            try:
                n = c.sock.send(data)
                sent += n
                data = data[n:] if n < len(data) else memoryview(chunk)
                stalled_since = None
            except BlockingIOError:
                stalled_since = stalled_since or time.monotonic()
                if time.monotonic() - stalled_since > 0.5:
                    break  # the broker stopped reading us
                time.sleep(0.01)
        assert stalled_since is not None, f"the broker read all {sent} bytes"
        assert write_buffered(broker) < 2_000_000
        check_survivors(bystander, connect)
    finally:
        c.close_socket()


def test_garbage_after_a_huge_frame_header_then_eof(broker, bystander, connect):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.send_bytes(b"\x03\x00\x01\x00\x01\xff\xf0" + b"\x00" * 1000)
        c.sock.shutdown(socket.SHUT_WR)
        try:
            close = c.read_until_connection_close()
            assert close.reply_code == 501
        except Closed:
            pass
    check_survivors(bystander, connect)


def test_unexpected_method_with_undecodable_text_is_505_not_541(broker, bystander, connect):
    """A connection.start-ok on channel 1 during the handshake whose table holds a longstr
    that is not UTF-8 (pamqp hands it over as bytes and cannot encode it back for the
    error's "all octets" text): 505 UNEXPECTED_FRAME as for any frame there, not 541
    INTERNAL_ERROR (found by tests/fuzz)."""
    table = b"\x07productS" + struct.pack(">I", 4) + b"\x80abc"
    payload = (struct.pack(">HH", 10, 11) + struct.pack(">I", len(table)) + table
               + b"\x05PLAIN" + struct.pack(">I", 12) + b"\x00guest\x00guest" + b"\x05en_US")
    with RawClient(broker.host, broker.port) as c:
        c.send_bytes(b"AMQP\x00\x00\x09\x01")
        c.expect(commands.Connection.Start)
        c.send_bytes(raw_frame(1, 1, payload))
        close = c.read_until_connection_close()
    assert close.reply_code == 505
    check_survivors(bystander, connect)
