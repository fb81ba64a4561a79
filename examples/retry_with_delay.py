"""Retry with delay, built from dead-lettering and TTL (seed 003; rabbitmq.com/dlx.html).

    work queue --reject--> (DLX "") --> wait queue (x-message-ttl = delay)
         ^                                   |
         +-------- expired (DLX "") ---------+

A consumer that fails rejects the message without requeue; it waits `delay_ms` in the wait
queue and comes back to the work queue, with an `x-death` header counting the attempts.

    python examples/retry_with_delay.py [AMQP_URL]
"""

from __future__ import annotations

import sys
import time

import pika

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


def attempts(props: pika.BasicProperties, work: str) -> int:
    """How many times this message was rejected from `work` before (from x-death)."""
    for death in (props.headers or {}).get("x-death", []):
        if death["queue"] == work and death["reason"] == "rejected":
            return death["count"]
    return 0


def main(url: str = URL, delay_ms: int = 200, failures: int = 2,
         prefix: str = "retry") -> list[tuple[int, float]]:
    """Run one job that fails `failures` times; returns [(attempt, seconds since publish)]."""
    work, wait = f"{prefix}.work", f"{prefix}.wait"
    events: list[tuple[int, float]] = []
    with pika.BlockingConnection(pika.URLParameters(url)) as conn:
        ch = conn.channel()
        ch.queue_declare(work, auto_delete=True, arguments={
            "x-dead-letter-exchange": "", "x-dead-letter-routing-key": wait})
        ch.queue_declare(wait, arguments={
            "x-message-ttl": delay_ms, "x-expires": 60_000,
            "x-dead-letter-exchange": "", "x-dead-letter-routing-key": work})
        start = time.monotonic()
        ch.basic_publish("", work, b"job")

        def on_message(channel, method, props, body):
            attempt = attempts(props, work) + 1
            events.append((attempt, time.monotonic() - start))
            print(f"attempt {attempt} after {events[-1][1]:.2f} s")
            if attempt <= failures:
                channel.basic_reject(method.delivery_tag, requeue=False)  # retry later
            else:
                channel.basic_ack(method.delivery_tag)
                channel.stop_consuming()

        ch.basic_consume(work, on_message)
        ch.start_consuming()
        ch.queue_delete(wait)
    return events


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else URL)
