"""Helpers the shovel and federation tests share: filling a queue, taking messages out of
one, its depth, and a dynamic shovel's parameter and status through the HTTP API (real
pika connections and real HTTP requests; nothing here fakes the broker)."""

from __future__ import annotations

import time
from typing import Any

import pika


def connect(url: str) -> pika.BlockingConnection:
    """A pika connection to `url` (an amqp:// URI)."""
    return pika.BlockingConnection(pika.URLParameters(url))


def fill(url: str, queue: str, n: int, props: list | None = None) -> None:
    """Declare `queue` (durable) and publish bodies b"0" .. b"n-1" to it, confirmed;
    `props[i]` are message i's properties."""
    with connect(url) as conn:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True)
        ch.confirm_delivery()
        for i in range(n):
            ch.basic_publish("", queue, b"%d" % i, props[i] if props else None)


def get_all(url: str, queue: str, n: int, timeout: float = 15.0,
            wait_for_queue: bool = False) -> list[tuple[Any, Any, bytes]]:
    """Up to `n` messages from `queue` (basic.get, auto-acked), waiting up to `timeout` s:
    [(method, properties, body)]. With `wait_for_queue` a queue that does not exist yet
    (404) is waited for too (a shovel declares its destination when it starts)."""
    got: list[tuple[Any, Any, bytes]] = []
    with connect(url) as conn:
        ch = conn.channel()
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            try:
                method, props, body = ch.basic_get(queue, auto_ack=True)
            except pika.exceptions.ChannelClosedByBroker as exc:
                if not wait_for_queue or exc.reply_code != 404:
                    raise
                ch = conn.channel()
                method = None
            if method is None:
                conn.sleep(0.02)
                continue
            got.append((method, props, body))
    return got


def depth(url: str, queue: str) -> int:
    """`queue`'s ready messages (queue.declare passive)."""
    with connect(url) as conn:
        return conn.channel().queue_declare(queue, passive=True).method.message_count


def put_shovel(api: Any, name: str, value: dict, vhost: str = "%2F") -> Any:
    """PUT /api/parameters/shovel/{vhost}/{name}: the HTTP response."""
    return api.put(f"/api/parameters/shovel/{vhost}/{name}",
                   json={"value": value, "component": "shovel", "name": name})


def shovel_status(api: Any, name: str, vhost: str = "%2F") -> dict | None:
    """Shovel `name`'s row of /api/shovels/{vhost}, or None."""
    for s in api.get(f"/api/shovels/{vhost}").json():
        if s["name"] == name:
            return s
    return None
