"""A publisher and a consumer of chosen speeds on one queue, for the consumer bias's tests
(broker/consumer_bias.py): `flow_run(url, …)` publishes for a while and reports how far the
queue's backlog grew. Real clients: pika, and a raw-socket publisher for floods."""

from __future__ import annotations

import threading
import time
import uuid

import pika
from pamqp import commands, frame, header
from pamqp.body import ContentBody

from tests.integration.rawamqp import RawClient


def publish_bytes(queue: str, body: bytes, channel: int = 1) -> bytes:
    """basic.publish to the default exchange, its content header and body, encoded."""
    return (frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue), channel)
            + frame.marshal(header.ContentHeader(0, len(body), commands.Basic.Properties()),
                            channel)
            + frame.marshal(ContentBody(body), channel))


def flow_run(url: str, publish_for: float, rate: int, ack_every_s: float,
             prefetch: int, confirm: bool = True) -> tuple[str, int, int]:
    """Publish at about `rate` msg/s for `publish_for` s (with confirms: pika, one at a
    time, each waited for; without: a raw client writing bursts of frames, held back by
    TCP alone) to a queue whose consumer (its own thread and connection, prefetch
    `prefetch`) acks all it holds every `ack_every_s` s (0: never). Returns (the queue's
    name, messages published, queue length at the end)."""
    q = f"bias-{uuid.uuid4().hex[:8]}"
    stop = threading.Event()
    ready = threading.Event()

    def consume() -> None:
        cons = pika.BlockingConnection(pika.URLParameters(url))
        cch = cons.channel()
        cch.queue_declare(q)
        cch.basic_qos(prefetch_count=prefetch)
        last: list[int] = []
        cch.basic_consume(q, lambda ch, m, p, body: last.append(m.delivery_tag))
        ready.set()
        next_ack = time.monotonic() + ack_every_s
        while not stop.is_set():
            cons.process_data_events(0.001)  # returns early when something came
            if ack_every_s and last and time.monotonic() >= next_ack:
                cch.basic_ack(last[-1], multiple=True)
                last.clear()
                next_ack = time.monotonic() + ack_every_s
        cons.close()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    assert ready.wait(10)
    admin = pika.BlockingConnection(pika.URLParameters(url))
    ach = admin.channel()
    sent = 0
    start = time.monotonic()
    if confirm:
        pch = admin.channel()
        pch.confirm_delivery()
        while (elapsed := time.monotonic() - start) < publish_for:
            while sent < int(elapsed * rate):
                pch.basic_publish("", q, b"m")  # returns once confirmed
                sent += 1
            time.sleep(0.001)
    else:
        params = pika.URLParameters(url)
        raw = RawClient(params.host, params.port)
        raw.handshake()
        raw.open_channel(1)
        burst = publish_bytes(q, b"m") * 100
        while (elapsed := time.monotonic() - start) < publish_for:
            while sent < int(elapsed * rate):
                raw.send_bytes(burst)  # blocks while the broker does not read
                sent += 100
            time.sleep(0.001)
    length = ach.queue_declare(q, passive=True).method.message_count
    stop.set()
    thread.join(10)
    if not confirm:
        raw.close_socket()
    admin.close()
    return q, sent, length
