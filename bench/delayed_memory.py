# bench/delayed_memory.py — `python -m bench.delayed_memory [N]`: what N waiting delayed
# messages cost in memory (issue 50: 10 million waiting must cost bounded memory).
#
# Owns: filling one delayed exchange's timer index (broker/delayed/store.py, the broker's own
# code, in this process) with N messages of random due times, and reporting the process's
# RSS as it grows, the files it made, and the cost of handing the first ones out in order.
# Talks to: the store and the file system only (a temporary directory).
# Must never: run without a bound (N and the pops are fixed).
"""Memory of N waiting delayed messages. The broker keeps nothing else per waiting message
(the holder process counts them), so the store's RSS is the broker's cost; with the broker
itself, `python -m bench -t x-delayed-message --delay-ms ...` reports its RSS peak.

    python -m bench.delayed_memory 10000000 --json r.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time

from broker.delayed.store import DelayStore
from broker.memory_monitor import rss
from broker.message import Message, Properties


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("n", type=int, nargs="?", default=10_000_000, help="messages to hold")
    p.add_argument("--size", type=int, default=16, help="body bytes")
    p.add_argument("--json", help="write the figures to FILE")
    args = p.parse_args(argv)
    rnd = random.Random(1)
    base_rss = rss()
    body = b"x" * args.size
    props = Properties(delivery_mode=2, headers={"x-delay": 3_600_000})
    points = []
    with tempfile.TemporaryDirectory() as d:
        store = DelayStore(os.path.join(d, "x"))
        started = time.monotonic()
        now = int(time.time() * 1000)
        step = max(1, args.n // 10)
        for i in range(args.n):
            store.add(now + 60_000 + rnd.randrange(86_400_000), Message("dx", "k", props, body))
            if i % 256 == 255:
                store.flush()
            if (i + 1) % step == 0:
                store.flush()
                point = {"waiting": i + 1, "rss_mb": round(rss() / 1e6, 1),
                         "runs": len(store._runs), "open_files": len(os.listdir("/proc/self/fd")),
                         "s": round(time.monotonic() - started, 1)}
                points.append(point)
                print(json.dumps(point), flush=True)
        store.flush()
        store.sync()
        filled_s = time.monotonic() - started
        disk = sum(os.path.getsize(os.path.join(d, "x", f)) for f in os.listdir(os.path.join(d, "x")))
        t0 = time.monotonic()
        out = store.pop_due(10**15, 100_000)
        pop_s = time.monotonic() - t0
        keys = [k for k, _f, _m in out]
        assert keys == sorted(keys)
        result = {"n": args.n, "body_bytes": args.size, "fill_s": round(filled_s, 1),
                  "fill_msg_s": round(args.n / filled_s), "disk_mb": round(disk / 1e6, 1),
                  "rss_start_mb": round(base_rss / 1e6, 1),
                  "rss_end_mb": round(rss() / 1e6, 1), "runs": len(store._runs),
                  "open_files": len(os.listdir("/proc/self/fd")),
                  "pop_first_100k_msg_s": round(len(out) / pop_s), "points": points}
        store.close()
    print(json.dumps(result), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
