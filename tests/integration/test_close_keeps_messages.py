"""Nothing a client sent before closing is lost (issue 8 item 1).

RabbitMQ's rule (rabbit_reader handle_method0 connection.close → rabbit_channel:shutdown for
every channel): a channel finishes the methods it already received before it shuts down, and
`close-ok` is sent once every channel has finished; the same holds for `channel.close`, and
for a peer that drops the TCP connection after its last publish (what the reader has read is
processed). Counts are polled: RabbitMQ's queue processes may still be enqueueing when
close-ok arrives (nothing is lost; ours already holds them). Every test publishes a burst of N messages to a queue with no consumer, so credit
flow pauses the socket while many publishes are still in flight inside the broker, then closes
at once and counts the queue from another connection.
"""

from __future__ import annotations

import asyncio
import socket

import aio_pika
import pika
import pytest
from helpers import message_count, wait_for
from pamqp import commands, frame, header
from pamqp.body import ContentBody
from rawamqp import RawClient

N = 50_000  # ≥ 50 000 in flight: credit flow (400/200 per hop) engages many times over


@pytest.fixture
def queue(connection, unique):
    ch = connection.channel()
    name = unique("close")
    ch.queue_declare(name)
    yield name
    ch.queue_delete(name)


def _publish_frames(q: str, n: int, channel: int = 1) -> bytes:
    """n basic.publish + header + body triples as one buffer (bodies b"0".."n-1")."""
    method = frame.marshal(commands.Basic.Publish(exchange="", routing_key=q), channel)
    out = []
    for i in range(n):
        body = str(i).encode()
        out.append(method)
        out.append(frame.marshal(
            header.ContentHeader(0, len(body), commands.Basic.Properties()), channel))
        out.append(frame.marshal(ContentBody(body), channel))
    return b"".join(out)


def test_pika_connection_close_right_after_publishing(connect, channel, queue):
    """pika closes every channel (and waits for close-ok) before connection.close."""
    conn = connect()
    ch = conn.channel()
    for i in range(N):
        ch.basic_publish("", queue, str(i).encode())
    conn.close()  # connection.close at once; close-ok only after everything is enqueued
    wait_for(lambda: message_count(channel, queue) == N, timeout=30)


def test_pika_channel_close_right_after_publishing(connect, channel, queue):
    conn = connect()
    ch = conn.channel()
    for i in range(N):
        ch.basic_publish("", queue, str(i).encode())
    ch.close()
    wait_for(lambda: message_count(channel, queue) == N, timeout=30)
    conn.close()


@pytest.mark.parametrize("close", ["connection", "channel"])
def test_aio_pika_close_right_after_publishing(broker, channel, queue, close):
    async def main() -> None:
        conn = await aio_pika.connect(broker.url)
        ch = await conn.channel(publisher_confirms=False)
        exchange = ch.default_exchange
        # all publishes queued in aiormq's writer at once, then the close (aiormq sends
        # connection.close without closing channels first)
        await asyncio.gather(*(exchange.publish(aio_pika.Message(str(i).encode()), queue)
                               for i in range(N)))
        if close == "channel":
            await ch.close()
        await conn.close()

    asyncio.run(asyncio.wait_for(main(), 60))
    wait_for(lambda: message_count(channel, queue) == N, timeout=30)


def test_raw_connection_close_after_one_burst(broker, channel, queue):
    """The whole burst and connection.close in one write: close-ok comes after the last
    publish is enqueued, and bodies keep their order."""
    with RawClient(broker.host, broker.port, timeout=30) as c:
        c.handshake()
        c.open_channel(1)
        c.send_bytes(_publish_frames(queue, N) + frame.marshal(
            commands.Connection.Close(200, "bye", 0, 0), 0))
        c.expect(commands.Connection.CloseOk)
    wait_for(lambda: message_count(channel, queue) == N, timeout=30)
    first = channel.basic_get(queue, auto_ack=True)
    assert first[2] == b"0"


def test_raw_channel_close_after_one_burst(broker, channel, queue):
    with RawClient(broker.host, broker.port, timeout=30) as c:
        c.handshake()
        c.open_channel(1)
        c.send_bytes(_publish_frames(queue, N) + frame.marshal(commands.Channel.Close(
            200, "bye", 0, 0), 1))
        c.expect(commands.Channel.CloseOk, 1)
        c.open_channel(1)  # the number is free again
        c.close()
    wait_for(lambda: message_count(channel, queue) == N, timeout=30)


def test_raw_tcp_drop_after_one_burst(broker, channel, queue):
    """No connection.close at all: the client shuts its socket after the burst. Everything
    the broker reads before the end-of-file is routed (RabbitMQ does the same)."""
    with RawClient(broker.host, broker.port, timeout=30) as c:
        c.handshake()
        c.open_channel(1)
        c.send_bytes(_publish_frames(queue, N))
        c.sock.shutdown(socket.SHUT_WR)
        c.wait_closed(timeout=30)
    wait_for(lambda: message_count(channel, queue) == N, timeout=30)


def test_partial_command_at_tcp_drop_is_discarded(broker, channel, queue):
    """A publish whose body never came is not enqueued; the complete ones before it are."""
    with RawClient(broker.host, broker.port, timeout=30) as c:
        c.handshake()
        c.open_channel(1)
        data = _publish_frames(queue, 3)
        data += frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue), 1)
        data += frame.marshal(header.ContentHeader(0, 10, commands.Basic.Properties()), 1)
        c.send_bytes(data)
        c.sock.shutdown(socket.SHUT_WR)
        c.wait_closed(timeout=10)
    wait_for(lambda: message_count(channel, queue) == 3, timeout=10)
    assert message_count(channel, queue) == 3


def test_select_connection_close_from_callback(broker, channel, queue):
    """pika's SelectConnection (the async adapter) closing in the same callback that
    published: close is queued behind the publishes on the wire."""
    params = pika.URLParameters(broker.url)
    done: list[str] = []

    def on_open(conn):
        conn.channel(on_open_callback=lambda ch: publish_and_close(conn, ch))

    def publish_and_close(conn, ch):
        for i in range(N // 5):
            ch.basic_publish("", queue, str(i).encode())
        conn.close()

    conn = pika.SelectConnection(params, on_open_callback=on_open,
                                 on_close_callback=lambda *a: (done.append("closed"),
                                                               conn.ioloop.stop()))
    conn.ioloop.call_later(60, conn.ioloop.stop)
    conn.ioloop.start()
    conn.ioloop.close()  # its wake-up socketpair
    assert done == ["closed"]
    wait_for(lambda: message_count(channel, queue) == N // 5, timeout=30)


def test_stuck_queue_cannot_hold_a_dead_connection(broker, channel, queue, embedded_only,
                                                   monkeypatch):
    """A queue that never grants credit back (injected) leaves the channel suspended with
    publishes in its mailbox. When the client dies while credit flow paused its socket (the
    heartbeat monitor is paused meanwhile, as rabbit_reader's, so silence alone does not end
    it) the broker notices through the heartbeats it writes; the channel still drains what it
    holds and the connection is forgotten."""
    from broker.queue_process import QueueProcess

    monkeypatch.setattr(QueueProcess, "_credit_back", lambda self, ch: None)
    n_before = len(broker.broker.connections)
    with RawClient(broker.host, broker.port, timeout=30) as c:
        c.handshake(heartbeat_s=1)
        c.open_channel(1)
        c.send_bytes(_publish_frames(queue, 1_000))  # > 400: the channel blocks on the queue
        wait_for(lambda: broker.call(lambda: any(
            conn._paused for conn in broker.broker.connections)), timeout=10)
    # the client is gone (socket closed) while the broker was not reading it
    wait_for(lambda: message_count(channel, queue) == 1_000, timeout=10)
    wait_for(lambda: len(broker.broker.connections) <= n_before, timeout=10)
