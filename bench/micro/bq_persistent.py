"""Micro-benchmark: the paper's queue-side path for one persistent message (issue 26): a
1 500-byte persistent message with its own message_id goes straight to a consumer
(`publish_delivered`, written to the queue index with its body embedded, a confirm owed),
the queue syncs after every 50 publishes as its mailbox empties, and the consumer's acks
follow one batch behind (so each publish reached the journal file before its ack, as in a
paper run). fsync is on; confirms are drained each batch and all are checked at the end.

Prints µs of wall time and of process CPU (all threads) per message.

Run: PYTHONPATH=. python bench/micro/bq_persistent.py [--json]
A/B: python bench/micro/ab.py OLD_TREE NEW_TREE bench/micro/bq_persistent.py
"""

from __future__ import annotations

import json
import sys
import tempfile
import time

from broker.backing_queue.base import MessageProps
from broker.backing_queue.variable_queue import VariableQueue
from broker.message import Message, Properties
from broker.msg_store.vhost import VhostStores
from broker.protocol.properties import scan_properties

N = 60_000
BATCH = 50


def run() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        stores = VhostStores(d, "/")
        stores.recover(keep_queues=[])
        bq = VariableQueue(("/", "q"), True, lambda: None, stores=stores)
        body = b"x" * 1500
        msgs = []
        for i in range(N):  # as the reader makes them: properties kept as received
            raw = Message("", "", Properties(delivery_mode=2, message_id=f"m-{i:08d}"),
                          b"").wire_properties()
            msgs.append(Message.from_wire("bench-paper", "q", raw, scan_properties(raw), body))
        props = MessageProps(None, True)
        confirmed = 0
        prev: list = []
        wall, cpu = time.perf_counter(), time.process_time()
        for start in range(0, N, BATCH):
            tags = [bq.publish_delivered(m, props) for m in msgs[start:start + BATCH]]
            bq.sync()
            if prev:
                bq.ack(prev)
            prev = tags
            confirmed += len(bq.drain_confirmed())
        bq.ack(prev)
        confirmed += len(bq.drain_confirmed())
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        bq._qi.wait_for_sync()  # noqa: SLF001 - a benchmark may wait for the fsync thread
        confirmed += len(bq.drain_confirmed())
        if confirmed != N:
            raise SystemExit(f"confirmed {confirmed} of {N}")
        bq.delete_and_terminate()
        stores.close()
    return {"paper publish_delivered+sync+ack, wall": wall / N * 1e6,
            "paper publish_delivered+sync+ack, cpu": cpu / N * 1e6}


def main() -> None:
    result = run()
    if "--json" in sys.argv:
        print(json.dumps(result))
    else:
        for case, us in result.items():
            print(f"{case:48s} {us:6.2f} µs per message")


if __name__ == "__main__":
    main()
