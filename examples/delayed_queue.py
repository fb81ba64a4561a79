"""A delayed queue from TTL and dead-lettering (seed 003): messages wait in a queue nobody
consumes until their TTL (per message: the `expiration` property) runs out, then go to the
target queue through its dead-letter exchange.

    python examples/delayed_queue.py [AMQP_URL]
"""

from __future__ import annotations

import sys
import time

import pika

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


def main(url: str = URL, delays_ms: tuple[int, ...] = (300, 100, 200),
         prefix: str = "delayed") -> list[tuple[bytes, float]]:
    """Publish one message per delay; returns [(body, seconds until it arrived)] in arrival
    order. Note: expiry happens at the head, so delays should not decrease along the queue
    (here each delay gets its own waiting queue)."""
    target = f"{prefix}.ready"
    arrived: list[tuple[bytes, float]] = []
    with pika.BlockingConnection(pika.URLParameters(url)) as conn:
        ch = conn.channel()
        ch.queue_declare(target, auto_delete=True)
        start = time.monotonic()
        for delay in delays_ms:
            waiting = f"{prefix}.wait.{delay}"
            ch.queue_declare(waiting, arguments={
                "x-message-ttl": delay, "x-expires": 60_000,
                "x-dead-letter-exchange": "", "x-dead-letter-routing-key": target})
            ch.basic_publish("", waiting, f"after {delay} ms".encode())

        def on_message(channel, method, props, body):
            arrived.append((body, time.monotonic() - start))
            print(f"{body.decode()}: arrived after {arrived[-1][1]:.2f} s")
            channel.basic_ack(method.delivery_tag)
            if len(arrived) == len(delays_ms):
                channel.stop_consuming()

        ch.basic_consume(target, on_message)
        ch.start_consuming()
        for delay in delays_ms:
            ch.queue_delete(f"{prefix}.wait.{delay}")
    return arrived


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else URL)
