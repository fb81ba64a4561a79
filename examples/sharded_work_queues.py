"""Sharded work queues over an `x-modulus-hash` exchange (seed 003; the rabbitmq_sharding
plugin's exchange type): every routing key always lands on the same shard, so one worker
per shard sees all the work for its keys, in order.

    python examples/sharded_work_queues.py [AMQP_URL]
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict

import pika

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


def main(url: str = URL, shards: int = 4, keys: int = 20, per_key: int = 5,
         prefix: str = "sharded") -> dict[str, dict[str, list[int]]]:
    """Publish `per_key` numbered jobs for each of `keys` routing keys; returns
    {shard queue: {routing key: [job numbers in arrival order]}}."""
    exchange = f"{prefix}.jobs"
    queues = [f"{prefix}.shard.{i}" for i in range(shards)]
    seen: dict[str, dict[str, list[int]]] = {q: defaultdict(list) for q in queues}
    with pika.BlockingConnection(pika.URLParameters(url)) as conn:
        ch = conn.channel()
        ch.exchange_declare(exchange, "x-modulus-hash", auto_delete=True)
        for q in queues:
            ch.queue_declare(q, auto_delete=True)
            ch.queue_bind(q, exchange, "")
        ch.confirm_delivery()
        for n in range(per_key):
            for k in range(keys):
                ch.basic_publish(exchange, f"customer-{k}", str(n).encode())
        total = keys * per_key
        got = 0
        deadline = time.monotonic() + 30
        while got < total and time.monotonic() < deadline:
            for q in queues:  # one "worker" per shard
                method, props, body = ch.basic_get(q, auto_ack=True)
                if method is not None:
                    seen[q][method.routing_key].append(int(body))
                    got += 1
        for q in queues:
            print(f"{q}: {len(seen[q])} keys, {sum(map(len, seen[q].values()))} jobs")
    return {q: dict(v) for q, v in seen.items()}


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else URL)
