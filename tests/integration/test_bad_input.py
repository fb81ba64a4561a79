"""Bad input never takes the broker down.

Each test: a bystander pika connection is opened first and publishes (with confirms) into a
queue; then a raw client sends bad bytes and we check the reply code RabbitMQ 3.10.8 sends
(hard errors → connection.close); finally the bystander still works and its messages are still
in their queue, and a brand-new connection works too.

RabbitMQ specifics encoded here: random bytes usually read as a huge frame size → 501
frame_too_large; a body or header frame with no method before it → 505 "expected method frame";
a content header of another class → 505; methods only a server sends (basic.deliver,
basic.get-ok, channel.open-ok, basic.consume-ok) → 503 COMMAND_INVALID "unimplemented method";
connection.start/tune on channel 0 after open → 504 "unexpected method in connection state
running"; an unknown class/method id → RabbitMQ drops the TCP connection without a
connection.close.
"""

from __future__ import annotations

import random
import socket
import struct

import pytest
from helpers import check_survivors
from pamqp import body, commands, frame, header
from rawamqp import Closed, RawClient, raw_frame

HARD_CODES = {320, 402, 501, 502, 503, 504, 505, 506, 530, 540, 541}


def send_bad(broker, data: bytes):
    """Handshake, open channel 1, send `data`; return the connection.close (or None if the
    broker just dropped the socket)."""
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        try:
            c.send_bytes(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the broker may close before reading all of an oversized frame
        try:
            return c.read_until_connection_close()
        except Closed:
            return None


def _hb(ch: int = 1) -> bytes:
    return frame.marshal(header.ContentHeader(0, 1, commands.Basic.Properties()), ch) + (
        frame.marshal(body.ContentBody(b"x"), ch)
    )


PUBLISH = frame.marshal(commands.Basic.Publish(routing_key="nowhere"), 1)
HEADER3 = frame.marshal(header.ContentHeader(0, 3, commands.Basic.Properties()), 1)


def _header_other_class() -> bytes:
    data = bytearray(HEADER3)
    data[7:9] = struct.pack(">H", 50)  # class id of the content header: queue instead of basic
    return PUBLISH + bytes(data)


CASES = {
    # name: (bytes, reply_code, class_id, method_id, text prefix)
    "wrong-frame-end": (
        raw_frame(1, 1, frame.marshal(commands.Basic.Qos(prefetch_count=1), 1)[7:-1], end=b"\0"),
        501, 0, 0, "FRAME_ERROR - type 1",
    ),
    "unknown-frame-type": (raw_frame(9, 0, b"abc"), 501, 0, 0, "FRAME_ERROR - type 9"),
    "oversized-frame": (raw_frame(3, 1, b"x" * 140000), 501, 0, 0, "FRAME_ERROR"),
    "undecodable-method-args": (
        raw_frame(1, 1, struct.pack(">HH", 60, 40) + b"\0"), 501, 60, 40, "FRAME_ERROR",
    ),
    "body-without-header": (
        frame.marshal(body.ContentBody(b"abc"), 1), 505, 0, 0,
        "UNEXPECTED_FRAME - expected method frame, got non method frame instead",
    ),
    "header-without-method": (
        HEADER3, 505, 0, 0,
        "UNEXPECTED_FRAME - expected method frame, got non method frame instead",
    ),
    "header-of-other-class": (
        _header_other_class(), 505, 60, 40,
        "UNEXPECTED_FRAME - expected content header for class 60, got one for class 50 instead",
    ),
    "method-instead-of-header": (
        PUBLISH + frame.marshal(commands.Basic.Qos(), 1), 505, 60, 40,
        "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame",
    ),
    "method-instead-of-body": (
        PUBLISH + HEADER3 + frame.marshal(commands.Basic.Qos(), 1), 505, 60, 40,
        "UNEXPECTED_FRAME - expected content body, got non content body frame instead",
    ),
    "heartbeat-on-channel-1": (raw_frame(8, 1, b""), 505, 0, 0, "UNEXPECTED_FRAME"),
    "body-on-channel-0": (raw_frame(3, 0, b"abc"), 505, 0, 0, "UNEXPECTED_FRAME"),
    "basic.deliver-from-client": (
        frame.marshal(
            commands.Basic.Deliver(consumer_tag="x", delivery_tag=1, exchange="", routing_key="q"),
            1,
        ) + _hb(),
        503, 60, 60, "COMMAND_INVALID - unimplemented method",
    ),
    "basic.get-ok-from-client": (
        frame.marshal(
            commands.Basic.GetOk(delivery_tag=1, exchange="", routing_key="q", message_count=0), 1
        ) + _hb(),
        503, 60, 71, "COMMAND_INVALID - unimplemented method",
    ),
    "basic.consume-ok-from-client": (
        frame.marshal(commands.Basic.ConsumeOk(consumer_tag="x"), 1),
        503, 60, 21, "COMMAND_INVALID - unimplemented method",
    ),
    "channel.open-ok-from-client": (
        frame.marshal(commands.Channel.OpenOk(), 1),
        503, 20, 11, "COMMAND_INVALID - unimplemented method",
    ),
    "connection.start-from-client": (
        frame.marshal(commands.Connection.Start(), 0),
        504, 10, 10, "CHANNEL_ERROR - unexpected method in connection state running",
    ),
    "connection.tune-from-client": (
        frame.marshal(commands.Connection.Tune(), 0),
        504, 10, 30, "CHANNEL_ERROR - unexpected method in connection state running",
    ),
    "connection.start-on-channel-1": (
        frame.marshal(commands.Connection.Start(), 1),
        503, 10, 10, "COMMAND_INVALID - unimplemented method",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_frame_gets_hard_error_and_broker_survives(broker, bystander, connect, case):
    data, code, class_id, method_id, text = CASES[case]
    close = send_bad(broker, data)
    assert close is not None, "expected a connection.close"
    assert close.reply_code == code
    assert (close.class_id, close.method_id) == (class_id, method_id)
    assert close.reply_text.startswith(text)
    check_survivors(bystander, connect)


def test_random_bytes_after_handshake_are_a_frame_error(broker, bystander, connect):
    close = send_bad(broker, b"\x00\x01\x02garbage\xff" * 10)
    assert close is not None
    assert close.reply_code == 501
    assert "frame_too_large" in close.reply_text
    check_survivors(bystander, connect)


def test_unknown_class_and_method_ends_the_connection(broker, bystander, connect):
    """RabbitMQ 3.10 drops the socket without a close frame; a close with a hard code is fine."""
    close = send_bad(broker, raw_frame(1, 1, struct.pack(">HH", 99, 99)))
    if close is not None:
        assert close.reply_code in HARD_CODES
    check_survivors(bystander, connect)


def test_truncated_frame_then_socket_close(broker, bystander, connect):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_bytes(PUBLISH[:-4])
    check_survivors(bystander, connect)


def test_truncated_frame_then_half_close_is_answered_by_closing(broker, bystander, connect):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_bytes(PUBLISH[:-4])
        c.sock.shutdown(socket.SHUT_WR)
        c.wait_closed(timeout=5)
    check_survivors(bystander, connect)


@pytest.mark.parametrize("seed", range(6))
def test_random_garbage_fuzz(broker, bystander, connect, seed):
    """Random bytes (some shaped like frames) then EOF: the connection ends, nothing else."""
    rnd = random.Random(seed)
    chunks = []
    for _ in range(rnd.randint(1, 5)):
        kind = rnd.random()
        payload = rnd.randbytes(rnd.randint(0, 40))
        if kind < 0.5:
            chunks.append(raw_frame(rnd.choice([1, 2, 3, 8]), rnd.randint(0, 3), payload))
        else:
            chunks.append(payload)
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send_bytes(b"".join(chunks))
        try:
            c.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        try:
            close = c.read_until_connection_close()
        except (Closed, ConnectionError):
            close = None
        if close is not None:
            assert close.reply_code in HARD_CODES
    check_survivors(bystander, connect)
