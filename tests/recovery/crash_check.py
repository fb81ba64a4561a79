"""The crash check of the storage issue: publish persistent messages with confirms to a
durable queue, kill -9 the broker at a random moment, restart it, and verify that every
confirmed message is there exactly once and in order. Used by the test (a few runs) and by
`python -m tests.recovery.crash_check RUNS` (the 20-run acceptance check)."""

from __future__ import annotations

import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import pika

from tests.recovery.brokerproc import BrokerProcess

QUEUE = "crash-durable"


def _publisher(url: str, confirmed: list[int], stop: threading.Event, size: int) -> None:
    """Publish 0, 1, 2, … until the connection dies; record each confirmed number."""
    try:
        params = pika.URLParameters(url)
        c = pika.BlockingConnection(params)
        ch = c.channel()
        ch.confirm_delivery()
        i = 0
        props = pika.BasicProperties(delivery_mode=2)
        pad = b"p" * max(0, size - 8)
        while not stop.is_set():
            ch.basic_publish("", QUEUE, i.to_bytes(8, "big") + pad, props)  # waits for the ack
            confirmed.append(i)
            i += 1
    except (pika.exceptions.AMQPError, OSError):
        return


def run_once(data_dir: Path, rng: random.Random, size: int = 64) -> dict:
    """One kill -9 round; returns figures, raises AssertionError on a violation."""
    b = BrokerProcess(data_dir).start()
    c = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = c.channel()
    ch.queue_declare(QUEUE, durable=True)
    before = ch.queue_declare(QUEUE, durable=True, passive=True).method.message_count
    c.close()
    confirmed: list[int] = []
    stop = threading.Event()
    t = threading.Thread(target=_publisher, args=(b.url, confirmed, stop, size), daemon=True)
    t.start()
    time.sleep(rng.uniform(0.2, 1.5))
    b.kill()
    stop.set()
    t.join(10)
    b2 = BrokerProcess(data_dir).start()
    try:
        c = pika.BlockingConnection(pika.URLParameters(b2.url))
        ch = c.channel()
        got = []
        while True:
            m, _p, body = ch.basic_get(QUEUE, auto_ack=True)
            if m is None:
                break
            got.append(int.from_bytes(body[:8], "big"))
        c.close()
    finally:
        assert b2.stop() == 0, b2.output()
    assert before == 0
    missing = set(confirmed) - set(got)
    assert not missing, f"confirmed but lost: {sorted(missing)[:10]} ({len(missing)})"
    assert len(got) == len(set(got)), "a message came back twice"
    assert got == sorted(got), "order not kept"
    return {"confirmed": len(confirmed), "recovered": len(got)}


def main(runs: int) -> int:
    rng = random.Random()
    for i in range(runs):
        with tempfile.TemporaryDirectory() as d:
            print(f"run {i + 1}/{runs}:", run_once(Path(d), rng), flush=True)
    print(f"{runs} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20))
