# bench/storage_bytes.py — on-disk bytes per message and VariableQueue-only throughput.
#
# Owns: measuring what one persistent message costs on disk (embedded 1 KB: queue index only;
# stored 8 KB: message store + index entry) and publish+fetch+ack through VariableQueue alone.
# Talks to: broker.backing_queue.variable_queue, broker.msg_store.vhost (in process).
# Must never: start a broker or leave its temporary directories behind.
"""Storage figures (moved here from tests/storage/bench_storage.py).

    python -m bench.storage_bytes [N]

Prints on-disk bytes per message (embedded 1 KB, stored 8 KB) and persistent publish + fetch
+ ack throughput through VariableQueue alone (no broker, no sockets), with fsync on and off.
A queue process is imitated: publish a batch of 100 with needs_confirming, `sync()` (the
mailbox-empty point), fetch and ack the batch; confirms are drained as they arrive.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time

from broker.backing_queue.base import MessageProps
from broker.backing_queue.variable_queue import VariableQueue
from broker.message import Message, Properties
from broker.msg_store.vhost import VhostStores


def du(path: str, suffix: str) -> int:
    """Bytes in files under `path` whose name ends with `suffix`."""
    total = 0
    for root, _dirs, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files if f.endswith(suffix))
    return total


def message(size: int) -> Message:
    return Message("", "bench", Properties(delivery_mode=2), os.urandom(size))


def bytes_per_message(size: int, n: int) -> dict[str, float]:
    """On-disk bytes per persistent message of `size` body bytes (n messages in one durable
    queue): journal before the fold, then segments and store after a clean terminate."""
    d = tempfile.mkdtemp()
    try:
        stores = VhostStores(d, "/", fsync=False)
        stores.recover()
        bq = VariableQueue(("/", "q"), True, stores=stores, fsync=False)
        for _ in range(n):
            bq.publish(message(size), MessageProps())
        bq._qi.flush()
        stores.persistent.flush()
        journal = du(d, ".jif") / n
        bq.terminate()
        stores.close()
        return {
            "journal B/msg": journal,
            "segments B/msg": du(d, ".idx") / n,
            "store B/msg": du(d, ".rdq") / n,
        }
    finally:
        shutil.rmtree(d)


def throughput(size: int, n: int, fsync: bool) -> float:
    """Persistent publish+fetch+ack rate through VariableQueue alone, in msg/s."""
    d = tempfile.mkdtemp()
    try:
        stores = VhostStores(d, "/", fsync=fsync)
        stores.recover()
        woke = threading.Event()
        bq = VariableQueue(("/", "q"), True, woke.set, stores=stores, fsync=fsync)
        props = MessageProps(needs_confirming=True)
        body = os.urandom(size)
        msgs = [Message("", "bench", Properties(delivery_mode=2), body) for _ in range(n)]
        confirmed = 0
        start = time.perf_counter()
        for b in range(n // 100):
            for i in range(100):
                bq.publish(msgs[b * 100 + i], props)
            bq.sync()
            tags = [bq.fetch(True).ack_tag for _ in range(100)]
            bq.ack(tags)
            confirmed += len(bq.drain_confirmed())
        while confirmed < n:
            woke.wait(1)
            woke.clear()
            confirmed += len(bq.drain_confirmed())
        elapsed = time.perf_counter() - start
        bq.terminate()
        stores.close()
        return n / elapsed
    finally:
        shutil.rmtree(d)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    for label, size in (("embedded 1 KB", 1024), ("stored 8 KB", 8192)):
        print(label, {k: round(v, 1) for k, v in bytes_per_message(size, n).items()})
    for size in (1500, 8192):
        for fsync in (True, False):
            rate = throughput(size, n, fsync)
            print(f"publish+ack {size} B persistent, fsync={fsync}: {rate:,.0f} msg/s")


if __name__ == "__main__":
    main()
