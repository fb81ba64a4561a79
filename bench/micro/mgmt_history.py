"""Cost of the management sampler's range history: ms per sampler pass and RSS with many
queues (broker/management/history.py).

Run: `python bench/micro/mgmt_history.py [--queues 10000]` from the repository root. An
in-process broker (management off, so only this script samples) gets N queues; then
`sampling.sample` runs with the clock simulated:
  rates-only  - the history switched off (what the sampler cost before ranges existed);
  idle        - the history on, nothing changes (one entry per level and queue);
  busy        - every queue's publish counter moves before every pass, 60 s apart, until
                every ring is full (the worst case: 123 + 62 entries per queue).
Prints one line per phase: median / max ms per pass and RSS (MB) after it.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from broker.embedded import EmbeddedBroker  # noqa: E402
from broker.management.history import History  # noqa: E402
from broker.management.rates import RateSampler  # noqa: E402
from broker.management.sampling import sample  # noqa: E402


class NoHistory(History):
    """A history that records nothing: the sampler as it was before ranges."""

    def record(self, key, values, now_ms) -> None:  # type: ignore[no-untyped-def]
        return None


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queues", type=int, default=10000)
    ap.add_argument("--passes", type=int, default=130, help="busy passes (fill the rings)")
    args = ap.parse_args()
    b = EmbeddedBroker().start()
    assert b.broker is not None
    broker = b.broker
    v = broker.vhosts["/"]
    b.call(lambda: [v.declare_queue(f"q{i}", durable=False) for i in range(args.queues)],
           timeout=600)
    gc.collect()
    print(f"queues={args.queues} rss={rss_mb():.1f}MB (broker + queues, no sampler)")
    clock = [int(time.time() * 1000)]

    def run(name: str, sampler: RateSampler, passes: int, step_ms: int, bump: bool) -> None:
        def one() -> float:
            if bump:
                for q in v.queues.values():
                    q.message_stats.publish += 1
            clock[0] += step_ms
            t = time.perf_counter()
            sample(broker, sampler, clock[0])
            return time.perf_counter() - t

        times = [b.call(one, timeout=600) for _ in range(passes)]
        gc.collect()
        print(f"{name:10s} passes={passes:4d} ms/pass median={statistics.median(times) * 1000:6.1f}"
              f" max={max(times) * 1000:6.1f} rss={rss_mb():.1f}MB"
              f" series={len(sampler.history)}")

    plain = RateSampler()
    plain.history = NoHistory()
    run("rates-only", plain, 10, 5000, bump=True)
    del plain
    with_history = RateSampler()
    run("idle", with_history, 10, 5000, bump=False)
    run("busy", with_history, args.passes, 60000, bump=True)
    b.stop()


if __name__ == "__main__":
    main()
