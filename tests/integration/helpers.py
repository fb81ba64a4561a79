"""Shared helpers for the integration suite: bounded polling and small client utilities.

Used only by tests/integration. Never sleeps to "let things settle": every wait is a bounded
poll of a condition, or a client call with its own timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pika
import pika.exceptions
import pytest

from tests.polling import wait_for  # noqa: E402,F401  (re-exported)

RABBIT_TIMEOUT = 5.0
N_BEFORE = 5  # confirmed messages the `bystander` fixture queues before bad input




def pump_until(
    conn: pika.BlockingConnection, cond: Callable[[], object], timeout: float = 5.0
) -> object:
    """Run a BlockingConnection's I/O until `cond()` is truthy (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"condition not met within {timeout}s")
        conn.process_data_events(time_limit=min(0.05, remaining))


def get_all(ch, queue: str, limit: int = 10_000) -> list[bytes]:
    """Drain `queue` with basic.get (auto-ack); returns the bodies in order."""
    bodies = []
    for _ in range(limit):
        method, _props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            break
        bodies.append(body)
    return bodies


def message_count(ch, queue: str) -> int:
    return ch.queue_declare(queue, passive=True).method.message_count


def consumer_count(ch, queue: str) -> int:
    return ch.queue_declare(queue, passive=True).method.consumer_count


def start_embedded(**config: object):
    """Start broker.embedded.EmbeddedBroker(**config) (tests marked embedded_only); caller stops."""
    from broker.embedded import EmbeddedBroker

    return EmbeddedBroker(**config).start()


def soft_error(fn: Callable[..., object], *args: object, **kwargs: object) -> tuple[int, str]:
    """Call fn expecting the broker to close the channel; return (reply_code, reply_text)."""
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        fn(*args, **kwargs)
    return info.value.reply_code, info.value.reply_text


def fill(pub, q: str, n: int, prefix: str = "m") -> list[bytes]:
    """Publish n bodies b"<prefix>0".. to queue q on channel pub; return them in order."""
    bodies = [f"{prefix}{i}".encode() for i in range(n)]
    for b in bodies:
        pub.basic_publish("", q, b)
    return bodies


def get_n(ch, q: str, n: int) -> list[tuple[int, bytes, bool]]:
    """basic.get n messages without ack: [(delivery_tag, body, redelivered)]."""
    tags = []
    for _ in range(n):
        method, _p, body = ch.basic_get(q, auto_ack=False)
        tags.append((method.delivery_tag, body, method.redelivered))
    return tags


class Recorder:
    """on_message_callback that records (delivery_tag, body, redelivered); acks if asked."""

    def __init__(self, ack: bool = False) -> None:
        self.got: list[tuple[int, bytes, bool]] = []
        self.ack = ack

    def __call__(self, ch, method, props, body) -> None:
        self.got.append((method.delivery_tag, body, method.redelivered))
        if self.ack:
            ch.basic_ack(method.delivery_tag)

    @property
    def bodies(self) -> list[bytes]:
        return [b for _t, b, _r in self.got]


def check_survivors(bystander, connect) -> None:
    """After bad input elsewhere: the `bystander` fixture's connection, channel and its
    N_BEFORE confirmed messages are intact, and a new connection works."""
    conn, ch, q = bystander
    assert conn.is_open and ch.is_open
    assert message_count(ch, q) == N_BEFORE
    ch.basic_publish("", q, b"after")
    assert get_all(ch, q) == [f"m{i}".encode() for i in range(N_BEFORE)] + [b"after"]
    fresh = connect().channel()
    assert fresh.queue_declare("", exclusive=True).method.queue.startswith("amq.gen-")
