"""Confirm modes ack and ack-lite under load: a publisher's basic.ack happens after the
consumer's ack (docs/architecture.md §6).

Several producers and consumers share one queue. A consumer adds a message's id to the shared
`acked` set BEFORE it sends the basic.ack covering it (every k-th delivery, multiple=true, plus a
flush when deliveries pause); each confirm frame a producer receives (multiple=true ones cover
every outstanding seq up to their tag) must only cover ids already in `acked`. In ack mode some
deliveries are first rejected with requeue=true: their confirm stays pending until the redelivery
is acked. x-confirm-on is our extension: `embedded_only`.
"""

from __future__ import annotations

import asyncio
import threading
import time

import aio_pika
import pika
import pytest
from confirmpub import ConfirmPublisher

MODES = ["ack", "ack-lite"]
PRODUCERS = 3
CONSUMERS = 3
PER_PRODUCER = 1000
ACK_EVERY = 7  # a consumer acks every k-th delivery with multiple=true
REQUEUE_EVERY = 97  # ack mode: a consumer rejects (requeue) first deliveries of seq % this == 0
DEADLINE = 10.0  # s: the whole exchange must be done by then


class Shared:
    """What the threads share: the acked ids, violations found, errors raised."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: set[str] = set()
        self.early: list[str] = []  # ids confirmed to their producer before a consumer acked
        self.nacked: list[str] = []
        self.errors: list[BaseException] = []
        self.multiple_confirms = 0
        self.stop = threading.Event()

    def check(self, kind: str, items: list[tuple[int, str]], multiple: bool) -> None:
        with self.lock:
            self.multiple_confirms += multiple
            for _seq, msg_id in items:
                if kind == "nack":
                    self.nacked.append(msg_id)
                elif msg_id not in self.acked:
                    self.early.append(msg_id)


def produce(host: str, port: int, q: str, pid: int, shared: Shared) -> None:
    try:
        p = ConfirmPublisher(host, port)
        p.on_confirm = lambda kind, items: shared.check(kind, items, p.frames[-1][2])
        for i in range(PER_PRODUCER):
            p.publish(q, f"{pid}:{i}".encode(), msg_id=f"p{pid}-{i}")
            if i % 50 == 49:
                p.pump(0.001)  # read what came so far: the broker never waits on our reading
        p.wait_all(timeout=DEADLINE)
        p.close()
    except BaseException as exc:  # noqa: BLE001 - handed to the test thread
        shared.errors.append(exc)


def consume(url: str, q: str, cid: int, mode: str, shared: Shared) -> None:
    try:
        conn = pika.BlockingConnection(pika.URLParameters(url))
        ch = conn.channel()
        ch.basic_qos(prefetch_count=100)
        pending: list[str] = []  # ids delivered, not yet acked
        state = {"count": 0, "last": 0, "new": False}

        def ack_up_to(tag: int) -> None:
            with shared.lock:
                shared.acked.update(pending)  # before the ack leaves: happens-before
            pending.clear()
            ch.basic_ack(tag, multiple=True)

        def on_message(_ch, method, props, _body) -> None:
            seq = int(props.message_id.split("-")[1])
            if (mode == "ack" and cid == 0 and seq % REQUEUE_EVERY == 0
                    and not method.redelivered):
                ch.basic_reject(method.delivery_tag, requeue=True)
                return
            pending.append(props.message_id)
            state["count"] += 1
            state["last"] = method.delivery_tag
            state["new"] = True
            if state["count"] % ACK_EVERY == 0:
                ack_up_to(method.delivery_tag)

        ch.basic_consume(q, on_message)
        while not shared.stop.is_set():
            state["new"] = False
            conn.process_data_events(time_limit=0.02)
            if pending and not state["new"]:  # deliveries paused: flush the rest
                ack_up_to(state["last"])
        conn.close()
    except BaseException as exc:  # noqa: BLE001 - handed to the test thread
        shared.errors.append(exc)


@pytest.mark.parametrize("mode", MODES)
def test_confirm_after_consumer_ack_threads(embedded_only, broker, connect, unique, mode):
    q = unique(f"cm-order-{mode}")
    setup = connect().channel()
    setup.queue_declare(q, arguments={"x-confirm-on": mode})
    shared = Shared()
    consumers = [threading.Thread(target=consume, args=(broker.url, q, c, mode, shared))
                 for c in range(CONSUMERS)]
    producers = [threading.Thread(target=produce, args=(broker.host, broker.port, q, p, shared))
                 for p in range(PRODUCERS)]
    started = time.monotonic()
    for t in consumers + producers:
        t.start()
    for t in producers:
        t.join(DEADLINE + 5)
    shared.stop.set()
    for t in consumers:
        t.join(5)
    elapsed = time.monotonic() - started
    setup.queue_delete(q)
    assert not any(t.is_alive() for t in consumers + producers)
    assert shared.errors == []
    assert shared.early == []
    assert shared.nacked == []
    assert len(shared.acked) == PRODUCERS * PER_PRODUCER
    assert shared.multiple_confirms > 0, "the broker never batched confirms"
    assert elapsed < DEADLINE


@pytest.mark.parametrize("mode", MODES)
def test_confirm_after_consumer_ack_aio_pika(embedded_only, broker, unique, mode):
    """The same with aio-pika in one event loop: a publish returns (its confirm came) only after
    a consumer put its id in `acked` and then sent the ack covering it."""
    acked: set[str] = set()
    early: list[str] = []
    per_producer, producers, consumers = 600, 2, 2

    async def producer(pid: int, q_name: str) -> None:
        conn = await aio_pika.connect(broker.url)
        async with conn:
            ch = await conn.channel(publisher_confirms=True)

            async def one(i: int) -> None:
                msg_id = f"p{pid}-{i}"
                await ch.default_exchange.publish(
                    aio_pika.Message(msg_id.encode(), message_id=msg_id), q_name)
                if msg_id not in acked:
                    early.append(msg_id)

            await asyncio.gather(*(one(i) for i in range(per_producer)))

    async def consumer(q_name: str, stop: asyncio.Event) -> None:
        conn = await aio_pika.connect(broker.url)
        async with conn:
            ch = await conn.channel()
            await ch.set_qos(prefetch_count=100)
            q = await ch.get_queue(q_name)
            pending: list[aio_pika.abc.AbstractIncomingMessage] = []
            count = 0

            async def ack_all() -> None:
                last = pending[-1]
                acked.update(m.message_id for m in pending)  # before the ack is sent
                pending.clear()
                await last.ack(multiple=True)

            async def on_message(msg: aio_pika.abc.AbstractIncomingMessage) -> None:
                nonlocal count
                pending.append(msg)  # first, so deliveries stay in delivery-tag order
                count += 1
                if count % ACK_EVERY == 0:
                    await ack_all()

            await q.consume(on_message)
            while not stop.is_set():
                seen = count
                await asyncio.sleep(0.02)  # a flush tick, not a wait for a result
                if pending and count == seen:
                    await ack_all()

    async def main() -> None:
        q_name = unique(f"cm-order-aio-{mode}")
        setup = await aio_pika.connect(broker.url)
        async with setup:
            sch = await setup.channel()
            q = await sch.declare_queue(q_name, arguments={"x-confirm-on": mode})
            stop = asyncio.Event()
            consuming = [asyncio.ensure_future(consumer(q_name, stop)) for _ in range(consumers)]
            async with asyncio.timeout(DEADLINE):
                await asyncio.gather(*(producer(p, q_name) for p in range(producers)))
            stop.set()
            await asyncio.gather(*consuming)
            await q.delete()

    asyncio.run(main())
    assert early == []
    assert len(acked) == per_producer * producers
