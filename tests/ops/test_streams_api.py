"""A stream queue in the HTTP API (issue 22 item 1): its type is "stream", its arguments
are shown, and (here) its message count is what the log holds, consumed or not."""

from __future__ import annotations

import uuid

import pika

from tests.ops.conftest import EXTERNAL
from tests.polling import wait_for


def test_a_stream_shows_as_such(api, broker):
    name = f"api-stream-{uuid.uuid4().hex[:8]}"
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
        ch = conn.channel()
        ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
        ch.confirm_delivery()
        for i in range(5):
            ch.basic_publish("", name, b"%d" % i)
    try:
        def shown() -> dict | None:
            r = api.get(f"/api/queues/%2F/{name}")
            return r.json() if r.status_code == 200 else None
        q = wait_for(shown, timeout=10)
        assert q["type"] == "stream" and q["durable"] is True
        assert q["arguments"]["x-queue-type"] == "stream"
        if not EXTERNAL:  # RabbitMQ's count follows its stats interval
            assert (q["messages"], q["messages_ready"]) == (5, 5)
    finally:
        with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
            conn.channel().queue_delete(name)
