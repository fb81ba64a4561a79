"""Test helpers that work against any AMQP 0-9-1 broker (this one or RabbitMQ).

Owns: `queue_depth`, `wait_for_queue_depth` and `peek_messages`. They open their own short
pika connection (pika must be installed: `pip install pybroker-amqp[pytest]`), so they never
disturb the connections of the code under test.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


def _connect(url: str) -> Any:
    import pika

    return pika.BlockingConnection(pika.URLParameters(url))


def queue_depth(url: str, queue: str) -> int:
    """Ready messages in `queue` (queue.declare passive's message-count; unacked deliveries
    are not counted, as RabbitMQ). A missing queue raises pika's ChannelClosedByBroker (404)."""
    conn = _connect(url)
    try:
        return conn.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        conn.close()


def wait_for_queue_depth(url: str, queue: str, depth: int, timeout: float = 10.0,
                         interval: float = 0.02) -> int:
    """Poll until `queue` holds exactly `depth` ready messages; returns it. Raises
    TimeoutError with the last depth seen after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    conn = _connect(url)
    try:
        ch = conn.channel()
        while True:
            seen = ch.queue_declare(queue, passive=True).method.message_count
            if seen == depth:
                return seen
            if time.monotonic() > deadline:
                raise TimeoutError(f"queue {queue!r} holds {seen} messages, not {depth}")
            conn.sleep(interval)
    finally:
        conn.close()


@dataclass
class PeekedMessage:
    """One message read by `peek_messages`: body (bytes), properties (pika.BasicProperties),
    routing_key and exchange it was published with."""

    body: bytes
    properties: Any
    routing_key: str
    exchange: str


def peek_messages(url: str, queue: str, count: int | None = None) -> list[PeekedMessage]:
    """Read up to `count` (default: all) ready messages of `queue` in order, leaving them in
    the queue: basic.get without ack, then the channel closes and they are requeued at their
    old positions (AMQP 0-9-1 §1.8.3.13; RabbitMQ keeps their order). As with RabbitMQ's
    management "get messages, requeue", they come back with `redelivered` set."""
    conn = _connect(url)
    out: list[PeekedMessage] = []
    try:
        ch = conn.channel()
        while count is None or len(out) < count:
            method, props, body = ch.basic_get(queue, auto_ack=False)
            if method is None:
                break
            out.append(PeekedMessage(body, props, method.routing_key, method.exchange))
        ch.close()
    finally:
        conn.close()
    return out
