# broker/gc_pacing.py — keep CPython's cyclic collector from pausing the event loop for long.
#
# Owns: the process's cyclic-GC schedule while a standalone broker runs (`python -m broker`):
# a freeze of the old generation every PACE_S seconds and full collections when cheap or due.
# Talks to: the `gc` module only; started and stopped by broker/__main__.py.
# Must never: run in an embedded broker (tests, applications: the process is not ours to
# freeze), or leave cyclic garbage uncollected for longer than FULL_EVERY_S.
"""Cyclic-GC pacing for the standalone broker (issue 26 item 4: fairness on one loop).

CPython 3.11's collector scans a whole generation in one go. Its oldest generation is
scanned each time the long-lived objects have grown by a quarter, and a queue holding
60 000 messages keeps about 190 000 tracked objects alive (one `Message`, `MsgStatus` and
`MessageProps` each). Measured with `gc.callbacks` during `python -m bench.fairness`
(a flood of 1 KB messages into a queue whose consumer reads slowly): oldest-generation
passes of 21, 49, 104 and 137 ms, each collecting nothing, and the bystander's worst round
trips (124-156 ms) at those passes. Messages are acyclic and are freed by reference
counting; scanning them finds no garbage. RabbitMQ has no such pause: each Erlang process
collects its own small heap.

What the pacer does, every PACE_S seconds on the event loop:

- collect the two young generations (short: they hold what was allocated since the last
  pass), then `gc.freeze()` everything still tracked: it moves to the permanent generation,
  which no pass scans, so the oldest generation's automatic passes only ever see what
  survived since the last tick. Frozen objects are still freed by reference counting.
- a full collection (`gc.unfreeze()` then `gc.collect()`) when it is cheap, i.e. the heap
  has fewer than FULL_WHEN_GROWN_BELOW memory blocks more than at start (the queues have
  drained; at most every FULL_CHEAP_EVERY_S seconds), and at the latest every
  FULL_EVERY_S seconds whatever it costs: a reference cycle that became garbage after it was
  frozen (a closed connection's objects) is freed within that time.

Cheap full collections back off while they find nothing: each one that frees fewer than
USEFUL_COLLECTED objects doubles the wait before the next (10, 20, 40 … s, up to
FULL_EVERY_S), and one that frees more brings it back to FULL_CHEAP_EVERY_S. Measured for
issue 36 (tail latency): in a steady s2 run at 3 600 msg/s every such pass found 0-138
objects among 49 000 tracked and paused the loop for about 25 ms, which set the run's
p99.9 (14-20 ms, against a p99 of 1-2 ms) and its maximum; a workload that closes
connections holding cycles keeps its passes every 10 s.

The trade: a cycle of objects that lived past a tick and then became garbage (a closed
connection's objects, if they hold each other) waits for the next full collection, so while
queues hold many messages for a long time such garbage accumulates for up to FULL_EVERY_S,
and that forced pass is as long as CPython's own would be (100+ ms with 100 000 messages
in RAM). Without pacing, CPython makes such a pass every time the long-lived objects grow by
a quarter, which a flood or connection churn does far more often than every 5 minutes.

Python's documentation describes `gc.freeze` for servers that keep large, long-lived object
graphs (docs.python.org/3.11/library/gc.html#gc.freeze). The heap's size is read with
`sys.getallocatedblocks()` (a walk over pymalloc's arenas, ~0.03 ms), not with
`gc.get_freeze_count()`, which walks the frozen objects themselves: 30-50 ms every second
with 100 000 messages queued, a stall of its own (found with a loop-lag probe).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import time

log = logging.getLogger("broker.gc")

PACE_S = 1.0  # seconds between freezes
# pymalloc blocks above the heap at start under which a full collection is cheap (a message
# queued in RAM takes about four blocks: at 50 000 blocks more, a full pass took 230 ms
# under load 3, so "cheap" means a few thousand messages at most)
FULL_WHEN_GROWN_BELOW = 20_000
FULL_EVERY_S = 300.0  # the longest a cyclic garbage may wait for a full collection
FULL_CHEAP_EVERY_S = 10.0  # cheap full collections at most this often
USEFUL_COLLECTED = 1_000  # a full pass freeing fewer objects than this was not worth its pause


class GcPacer:
    """Runs the schedule above on `loop` from `start()` until `stop()`.

    Shapes: `full_passes` and `freezes` count what it did; `last_full_ms` is the duration of
    the last full collection in ms, `last_full_collected` the objects it freed;
    `cheap_every_s` the current wait (s) before the next cheap one. Raises nothing; a collection's own errors propagate as
    they would from an automatic one.
    """

    def __init__(self, pace_s: float = PACE_S, full_when_grown_below: int = FULL_WHEN_GROWN_BELOW,
                 full_every_s: float = FULL_EVERY_S,
                 full_cheap_every_s: float = FULL_CHEAP_EVERY_S) -> None:
        self.pace_s = pace_s
        self.full_when_grown_below = full_when_grown_below
        self._baseline = sys.getallocatedblocks()  # the heap's size in blocks at start
        self.full_every_s = full_every_s
        self.full_cheap_every_s = full_cheap_every_s
        self.cheap_every_s = full_cheap_every_s  # grows while cheap passes free nothing
        self.last_full_collected = 0
        self.freezes = 0
        self.full_passes = 0
        self.last_full_ms = 0.0
        self._last_full = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Begin pacing (first tick after `pace_s`)."""
        self._loop = loop
        self._timer = loop.call_later(self.pace_s, self._tick)

    def stop(self) -> None:
        """Stop pacing and give everything back to the collector's own schedule."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        gc.unfreeze()

    def tick(self) -> None:
        """One step of the schedule (the timer calls it; tests may call it directly)."""
        now = time.monotonic()
        since = now - self._last_full
        if since >= self.full_every_s or (
                since >= self.cheap_every_s
                and sys.getallocatedblocks() - self._baseline < self.full_when_grown_below):
            t0 = time.perf_counter()
            gc.unfreeze()
            self.last_full_collected = gc.collect()
            self.last_full_ms = (time.perf_counter() - t0) * 1000
            self.cheap_every_s = (self.full_cheap_every_s
                                  if self.last_full_collected >= USEFUL_COLLECTED
                                  else min(2 * self.cheap_every_s, self.full_every_s))
            self.full_passes += 1
            self._last_full = now
            if self.last_full_ms > 50:
                log.info("full cyclic collection took %.0f ms", self.last_full_ms)
        else:
            gc.collect(1)
        gc.freeze()
        self.freezes += 1

    def _tick(self) -> None:
        try:
            self.tick()
        finally:
            if self._loop is not None and self._timer is not None:
                self._timer = self._loop.call_later(self.pace_s, self._tick)
