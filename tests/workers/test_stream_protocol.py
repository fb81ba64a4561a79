"""The stream protocol with several workers (issue 47 item 1): the node process listens on
stream.listeners.tcp.default / .ssl.default and hands every stream connection to worker 0,
where every stream lives, whichever connection declared it; AMQP 0-9-1 connections of any
worker publish to and consume from those streams through worker 0. Driven by rstream and
pika against a real `python -m broker --workers 2`."""

from __future__ import annotations

import asyncio
import json
import ssl

import pika
import pytest
import rstream

from tests.integration.certs import TestCA
from tests.stream import helpers as stream_helpers
from tests.workers.conftest import free_port

pytestmark = pytest.mark.timeout(120)


def amqp_read(url: str, queue: str, n: int) -> list[bytes]:
    """The bodies of `queue`'s first `n` messages from its first offset, over AMQP 0-9-1."""
    return [body for _key, _headers, body in stream_helpers.amqp_read(url, queue, n)]


async def stream_read(port: int, stream: str, n: int, **kw) -> list[bytes]:
    got: list[bytes] = []
    done = asyncio.Event()

    async def on_message(msg, _ctx) -> None:
        got.append(bytes(msg.body if hasattr(msg, "body") else msg))
        if len(got) == n:
            done.set()
    async with rstream.Consumer("127.0.0.1", port, username="guest", password="guest",
                                **kw) as consumer:
        await consumer.start()
        await consumer.subscribe(stream, on_message, decoder=rstream.amqp_decoder,
                                 offset_specification=rstream.ConsumerOffsetSpecification(
                                     rstream.OffsetType.FIRST))
        await asyncio.wait_for(done.wait(), 10)
    return got


def test_streams_live_in_worker_0_and_every_protocol_reaches_them(workers_broker):
    stream_port = free_port()
    broker = workers_broker(2, **{"stream.listeners.tcp.default": stream_port})
    first, second = (pika.BlockingConnection(pika.URLParameters(broker.url))
                     for _ in range(2))  # workers 0 and 1
    second.channel().queue_declare("by-amqp", durable=True,
                                   arguments={"x-queue-type": "stream"})

    async def produce() -> None:
        async with rstream.Producer("127.0.0.1", stream_port, username="guest",
                                    password="guest") as p:
            await p.create_stream("by-stream")
            for name in ("by-amqp", "by-stream"):
                for i in range(3):
                    await p.send_wait(name, rstream.AMQPMessage(body=b"s%d" % i))
    asyncio.run(asyncio.wait_for(produce(), 30))
    for worker, conn in enumerate((first, second)):  # publishes from both, confirmed
        ch = conn.channel()
        ch.confirm_delivery()
        for name in ("by-amqp", "by-stream"):
            ch.basic_publish("", name, b"from-%d" % worker,
                             pika.BasicProperties(delivery_mode=2), mandatory=True)
    first.close()
    second.close()
    rows = json.loads((broker.data_dir / "queue_workers.json").read_text())
    assert sorted((name, worker) for _v, name, worker in rows) == [
        ("by-amqp", 0), ("by-stream", 0)]
    tail = [b"from-0", b"from-1"]
    for name in ("by-amqp", "by-stream"):
        expected = [b"s0", b"s1", b"s2", *tail]
        assert asyncio.run(stream_read(stream_port, name, 5)) == expected
        for _ in range(2):  # AMQP consumers on workers 0 and 1 read the stream alike
            assert amqp_read(broker.url, name, 5) == expected
    overview = broker.api_get("/api/overview")
    assert {"protocol": "stream", "port": stream_port} in [
        {"protocol": row["protocol"], "port": row["port"]} for row in overview["listeners"]]


def test_the_stream_protocol_over_tls_with_workers(workers_broker, tmp_path):
    (tmp_path / "ca").mkdir()
    ca = TestCA(str(tmp_path / "ca"))
    server = ca.issue("localhost", server=True)
    port = free_port()
    broker = workers_broker(2, **{"stream.listeners.ssl.default": port,
                                  "ssl_options.certfile": server.cert,
                                  "ssl_options.keyfile": server.key,
                                  "ssl_options.cacertfile": ca.ca.cert})
    ctx = ssl.create_default_context(cafile=ca.ca.cert)

    async def main() -> bool:
        async with rstream.Producer("localhost", port, ssl_context=ctx, username="guest",
                                    password="guest") as p:
            await p.create_stream("tls-s")
            await p.send_wait("tls-s", rstream.AMQPMessage(body=b"over tls"))
            return await p.stream_exists("tls-s")
    assert asyncio.run(asyncio.wait_for(main(), 30)) is True
    assert amqp_read(broker.url, "tls-s", 1) == [b"over tls"]
