"""Child process for test_crash_kill9: publishes persistent messages with confirms through a
VariableQueue and prints `C <n>` for each confirmed message and `A <n>` after acking one, until
it is killed. Not a test module.

    python tests/storage/crash_child.py <data_dir> <embed_below>
"""

from __future__ import annotations

import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from broker.backing_queue.base import MessageProps  # noqa: E402
from broker.backing_queue.variable_queue import VariableQueue  # noqa: E402
from broker.message import Message, Properties  # noqa: E402
from broker.msg_store.vhost import VhostStores  # noqa: E402


def main() -> None:
    data_dir, embed = sys.argv[1], int(sys.argv[2])
    stores = VhostStores(data_dir, "/", file_size_limit=256 * 1024)
    stores.recover()
    woke = threading.Event()
    bq = VariableQueue(("/", "crash"), True, woke.set, stores=stores,
                       queue_index_embed_msgs_below=embed, queue_index_max_journal_entries=500)
    props = MessageProps(needs_confirming=True)
    by_id: dict[bytes, int] = {}
    out = sys.stdout
    n = 0
    while True:
        for _ in range(20):
            body = (b"%d:" % n).ljust(1000 + n % 7000, b"x")
            m = Message("", "crash", Properties(delivery_mode=2), body)
            by_id[m.msg_id] = n
            bq.publish(m, props)
            n += 1
        f = bq.fetch(True)
        if f is not None and int(f.message.body.split(b":")[0]) % 3 == 0:
            # announce first: once acked, the message may legitimately be gone
            out.write(f"A {f.message.body.split(b':')[0].decode()}\n")
            out.flush()
            bq.ack([f.ack_tag])
        elif f is not None:
            bq.requeue([f.ack_tag])
        bq.sync()
        woke.wait(0.05)
        woke.clear()
        for msg_id in bq.drain_confirmed():
            out.write(f"C {by_id[msg_id]}\n")
        out.flush()


if __name__ == "__main__":
    main()
