"""Helpers the stream protocol's tests share: run a coroutine with a deadline, create a
stream and publish with rstream, read a stream over AMQP 0-9-1 with pika, consume with
rstream."""

from __future__ import annotations

import asyncio
import time

import pika
import rstream


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def create_stream(b, name: str) -> None:
    """Create stream `name` over the stream protocol (rstream)."""
    async def main() -> None:
        async with producer(b) as p:
            await p.create_stream(name)
    run(main())


def amqp_read(url: str, queue: str, n: int) -> list:
    """The first `n` deliveries of `queue` from its first offset over AMQP 0-9-1 (pika):
    [(routing key, headers, body)]."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    got: list = []
    ch.basic_consume(queue, lambda c, m, p, body: got.append((m.routing_key, p.headers, body)),
                     arguments={"x-stream-offset": "first"})
    deadline = time.monotonic() + 10
    while len(got) < n and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    conn.close()
    return got


def producer(b, **kw) -> rstream.Producer:
    kw.setdefault("username", "guest")
    kw.setdefault("password", "guest")
    return rstream.Producer("127.0.0.1", b.stream_port, **kw)


async def consume(b, stream: str, n: int, spec=None, name: str | None = None) -> list:
    """(offset, body) of the first `n` messages rstream's consumer gets."""
    got: list = []
    done = asyncio.Event()
    consumer = rstream.Consumer("127.0.0.1", b.stream_port, username="guest",
                                password="guest")

    async def on_message(msg, ctx) -> None:
        got.append((ctx.offset, bytes(msg.body) if hasattr(msg, "body") else msg))
        if len(got) >= n:
            done.set()

    async with consumer:
        await consumer.subscribe(stream, on_message, decoder=rstream.amqp_decoder,
                                 offset_specification=spec or rstream.ConsumerOffsetSpecification(
                                     rstream.OffsetType.FIRST, None),
                                 subscriber_name=name)
        task = asyncio.create_task(consumer.run())
        await asyncio.wait_for(done.wait(), 20)
        await consumer.close()
        task.cancel()
    return got

