"""Micro-benchmark: µs per publish + fetch + ack of a 16-byte transient message through the
in-memory backing queue and the variable queue (non-durable queue, nothing written).

Run: PYTHONPATH=. python bench/micro/bq_transient.py
"""

from __future__ import annotations

import asyncio
import tempfile
import time

from broker.backing_queue.base import MessageProps
from broker.backing_queue.memory import MemoryBackingQueue
from broker.backing_queue.variable_queue import VariableQueue
from broker.message import Message, Properties
from broker.msg_store.vhost import VhostStores

N = 100_000


async def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        stores = VhostStores(d, "/")
        stores.recover(keep_queues=[])
        queues = (("memory", MemoryBackingQueue(("/", "q"))),
                  ("variable", VariableQueue(("/", "q"), False, lambda: None, stores=stores)))
        for name, bq in queues:
            msgs = [Message("", "q", Properties(), b"x" * 16) for _ in range(N)]
            t = time.perf_counter()
            for m in msgs:
                bq.publish(m, MessageProps())
                f = bq.fetch(True)
                bq.ack([f.ack_tag])
            print(f"{name:9s} {(time.perf_counter() - t) / N * 1e6:6.2f} µs per publish+fetch+ack")
        stores.close()


if __name__ == "__main__":
    asyncio.run(main())
