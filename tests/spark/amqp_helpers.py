"""Plain pika helpers for the Spark tests: declare topology, publish, count, drain.

Uses only plain AMQP 0-9-1 (durable topic exchanges, durable queues, bindings, confirms,
passive queue.declare), so the tests run unchanged against RabbitMQ and the project's broker.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable

import pika

from tests import polling


def connect(uri: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(uri))


def declare_topology(uri: str, exchange: str, queue: str, binding: str = "#") -> None:
    """Durable topic `exchange`, durable `queue` bound to it with `binding`."""
    with connect(uri) as conn:
        ch = conn.channel()
        ch.exchange_declare(exchange, exchange_type="topic", durable=True)
        ch.queue_declare(queue, durable=True)
        ch.queue_bind(queue, exchange, routing_key=binding)


def delete(uri: str, exchange: str | None = None, queues: Iterable[str] = ()) -> None:
    with connect(uri) as conn:
        ch = conn.channel()
        for q in queues:
            ch.queue_delete(q)
        if exchange:
            ch.exchange_delete(exchange)


def publish_json(uri: str, exchange: str, routing_key: str, docs: Iterable[dict]) -> int:
    """Publish each doc as JSON with confirms (message_id = doc["id"]); returns the count."""
    n = 0
    with connect(uri) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        for doc in docs:
            ch.basic_publish(exchange, routing_key, json.dumps(doc).encode(),
                             pika.BasicProperties(delivery_mode=2, message_id=str(doc["id"])),
                             mandatory=True)
            n += 1
    return n


def depth(uri: str, queue: str) -> int:
    """Ready messages in `queue` (passive queue.declare)."""
    with connect(uri) as conn:
        return conn.channel().queue_declare(queue, passive=True).method.message_count


def drain(uri: str, queue: str, expected: int, timeout: float = 30.0) -> list[tuple]:
    """Consume and ack until `expected` messages arrived or `timeout` passed.

    Returns (routing_key, properties, body) for each; AssertionError on timeout."""
    got: list[tuple] = []
    deadline = time.monotonic() + timeout
    with connect(uri) as conn:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=1000)
        for method, props, body in ch.consume(queue, inactivity_timeout=0.2):
            if method is not None:
                got.append((method.routing_key, props, body))
                ch.basic_ack(method.delivery_tag)
            if len(got) >= expected:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"drained {len(got)} of {expected} from {queue}")
        ch.cancel()
    return got


def wait_for(cond: Callable[[], object], timeout: float = 60.0, interval: float = 0.1) -> object:
    """`tests.polling.wait_for` with Spark-sized defaults (60 s, polled every 0.1 s)."""
    return polling.wait_for(cond, timeout, interval)
