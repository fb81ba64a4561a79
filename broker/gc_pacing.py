# broker/gc_pacing.py — keep CPython's cyclic collector from pausing the event loop for long.
#
# Owns: the process's cyclic-GC schedule while a standalone broker runs (`python -m broker`):
# a freeze of what exists when the broker is up, the oldest generation's passes (when cheap
# or due) and, rarely, a deep pass over the frozen objects too.
# Talks to: the `gc` module only; started and stopped by broker/__main__.py.
# Must never: run in an embedded broker (tests, applications: the process is not ours to
# freeze), or leave cyclic garbage uncollected for longer than DEEP_EVERY_S.
"""Cyclic-GC pacing for the standalone broker (issue 26 item 4: fairness on one loop;
issue 36: tail latency).

CPython 3.11's collector scans a whole generation in one go. Its oldest generation is
scanned each time the long-lived objects have grown by a quarter, and a queue holding
60 000 messages keeps about 190 000 tracked objects alive (one `Message`, `MsgStatus` and
`MessageProps` each). Measured with `gc.callbacks` during `python -m bench.fairness`
(a flood of 1 KB messages into a queue whose consumer reads slowly): oldest-generation
passes of 21, 49, 104 and 137 ms, each collecting nothing, and the bystander's worst round
trips (124-156 ms) at those passes. Messages are acyclic and are freed by reference
counting; scanning them finds no garbage. RabbitMQ has no such pause: each Erlang process
collects its own small heap.

The schedule:

- `start()`: one full collection, then `gc.freeze()` of everything still tracked: the
  modules, functions and classes the broker imported (46 000 of the 48 000 objects an idle
  broker tracks) and the state it recovered. Frozen objects move to the permanent
  generation, which no pass scans; they are still freed by reference counting. CPython's own
  oldest-generation passes are turned off (its third threshold set out of reach) while the
  pacer runs them.
- every PACE_S seconds, a full collection of the three generations (what was allocated since
  the last freeze; the frozen objects stay frozen) when it is cheap, i.e. the heap has fewer
  than FULL_WHEN_GROWN_BELOW memory blocks more than at the last freeze (the queues hold
  few messages; at most every FULL_CHEAP_EVERY_S seconds), and at the latest every
  FULL_EVERY_S seconds whatever it costs, except that a pass that would be long waits while
  the event loop is active (`busy`: the loop-lag probe's `was_active_within`, traffic or a
  wait for a CPU in the last BUSY_WITHIN_S), up to FULL_EVERY_S more: a
  flood's messages usually go when it ends, and the pass is cheap then (issue 49). Cheap
  passes back off while they find nothing: each one that frees fewer than USEFUL_COLLECTED objects doubles the wait before the next
  (10, 20, 40 … s, up to FULL_EVERY_S), and one that frees more brings it back to
  FULL_CHEAP_EVERY_S.
- every DEEP_EVERY_S seconds, and at the tick after `refreeze()`, a deep pass: `gc.unfreeze()`, a full collection, and a new
  freeze; like a long forced pass, it waits while the loop is active, up to FULL_EVERY_S. It frees a reference cycle that was alive at the last freeze and became garbage
  since (a queue recovered at start and deleted later).

Measured for issue 36 (tail latency, s2 open loop at 3 600 msg/s, one 10 ms loop-lag probe
reading the thread's CPU time and `/proc/self/schedstat` at each late tick): with a freeze
every second and every full collection unfreezing first, each full pass scanned the 48 000
objects, found 0-340 of them garbage and held the loop 14-24 ms of CPU, which set the run's
p99.9 (10 ms against 3.6-4.1 in runs without one) and its maximum (20-26 ms); they came every
5 minutes once backed off. A full pass over what was allocated since start scans a few
thousand objects.

The trade: a cycle of objects that was alive at the last freeze and then became garbage
waits up to DEEP_EVERY_S for the deep pass, and while queues hold many messages for a long
time the forced pass every FULL_EVERY_S is as long as CPython's own would be (100+ ms with
100 000 messages in RAM). Without pacing, CPython makes such a pass every time the
long-lived objects grow by a quarter, which a flood or connection churn does far more
often than every 5 minutes.

Python's documentation describes `gc.freeze` for servers that keep large, long-lived object
graphs (docs.python.org/3.11/library/gc.html#gc.freeze). The heap's size is read with
`sys.getallocatedblocks()` (a walk over pymalloc's arenas, ~0.03 ms), not with
`gc.get_freeze_count()` or `gc.get_objects()`, which walk the objects themselves (30-50 ms
with 100 000 messages queued, a stall of its own, found with a loop-lag probe).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import time
from collections.abc import Callable

log = logging.getLogger("broker.gc")

PACE_S = 1.0  # seconds between looks at the schedule
# pymalloc blocks above the heap at the last freeze under which a full collection is cheap
# (a message queued in RAM takes about four blocks: at 50 000 blocks more, a full pass took
# 230 ms under load 3, so "cheap" means a few thousand messages at most)
FULL_WHEN_GROWN_BELOW = 20_000
FULL_EVERY_S = 300.0  # the longest unfrozen cyclic garbage waits for a full collection
FULL_CHEAP_EVERY_S = 10.0  # cheap full collections at most this often
USEFUL_COLLECTED = 1_000  # a full pass freeing fewer objects than this was not worth its pause
DEEP_EVERY_S = 3600.0  # the longest frozen cyclic garbage waits for a deep pass
BUSY_WITHIN_S = 5.0  # a forced long pass waits if the loop was active this recently
NO_AUTOMATIC_PASS = 1 << 30  # CPython's third threshold while pacing: never reached


class GcPacer:
    """Runs the schedule above on `loop` from `start()` until `stop()`.

    Shapes: `full_passes` and `deep_passes` count what it did; `last_full_ms` is the
    duration of the last full or deep collection in ms, `last_full_collected` the objects it
    freed; `cheap_every_s` the current wait (s) before the next cheap one. Raises nothing; a
    collection's own errors propagate as they would from an automatic one.
    """

    def __init__(self, pace_s: float = PACE_S, full_when_grown_below: int = FULL_WHEN_GROWN_BELOW,
                 full_every_s: float = FULL_EVERY_S,
                 full_cheap_every_s: float = FULL_CHEAP_EVERY_S,
                 deep_every_s: float = DEEP_EVERY_S,
                 busy: Callable[[], bool] | None = None) -> None:
        self.pace_s = pace_s
        # is the event loop saturated? While it is, a forced pass that would be long waits,
        # up to another full_every_s (None: never waits)
        self.busy = busy
        self.full_when_grown_below = full_when_grown_below
        self.full_every_s = full_every_s
        self.full_cheap_every_s = full_cheap_every_s
        self.deep_every_s = deep_every_s
        self.cheap_every_s = full_cheap_every_s  # grows while cheap passes free nothing
        self.last_full_collected = 0
        self.full_passes = 0
        self.deep_passes = 0
        self.last_full_ms = 0.0
        self._baseline = sys.getallocatedblocks()  # the heap's size in blocks at the last freeze
        self._last_full = self._last_deep = time.monotonic()
        self._deep_held_since: float | None = None  # a due deep pass waits since (monotonic s)
        self._thresholds: tuple[int, int, int] | None = None  # CPython's, while pacing
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def begin(self) -> None:
        """Collect, freeze what exists and take over the oldest generation's passes (what
        `start` does before its first tick; tests call it directly)."""
        if self._thresholds is None:
            self._thresholds = gc.get_threshold()
            young, middle, _ = self._thresholds
            gc.set_threshold(young, middle, NO_AUTOMATIC_PASS)
        self._collect_and_freeze()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """`begin()`, then pace on `loop` (first tick after `pace_s`)."""
        self.begin()
        self._loop = loop
        self._timer = loop.call_later(self.pace_s, self._tick)

    def refreeze(self) -> None:
        """Make the next tick a deep pass: for what a process set up after `start()` (a
        cluster member's broker, built when it becomes the leader)."""
        self._last_deep = float("-inf")

    def stop(self) -> None:
        """Stop pacing and give everything back to the collector's own schedule."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None
        gc.unfreeze()

    def tick(self) -> None:
        """One step of the schedule (the timer calls it; tests may call it directly)."""
        now = time.monotonic()
        if now - self._last_deep >= self.deep_every_s and not self._hold_deep(now):
            self._deep_held_since = None
            t0 = time.perf_counter()
            gc.unfreeze()
            self._collect_and_freeze()
            self.last_full_ms = (time.perf_counter() - t0) * 1000
            self.deep_passes += 1
            self._last_deep = self._last_full = now
            log.info("gc: deep pass froze the heap in %.0f ms (freed %d objects)",
                     self.last_full_ms, self.last_full_collected)
            return
        since = now - self._last_full
        if since < self.cheap_every_s and since < self.full_every_s:
            return
        cheap = sys.getallocatedblocks() - self._baseline < self.full_when_grown_below
        if not cheap and since >= self.full_every_s and since < 2 * self.full_every_s and (
                self.busy is not None and self.busy()):
            # a flood is under way (issue 49: a forced pass over the 2 million objects a
            # greedy consumer's unacked messages keep took 979 ms, the bystander's worst
            # round trip): most floods end, their messages go, and the pass is cheap then.
            # `busy` looks back BUSY_WITHIN_S (LoopLagProbe.was_active_within): on 29 Nov a
            # 106 ms pass still fell inside a greedy flood whose loop was below the busy
            # load at the one instant the tick asked; and a 338 ms one inside a flood on two
            # workers, each waiting for one of 2 vCPUs, so never 0.7 busy by its own CPU
            # share: an active loop (load 0.2 or a tick 5 ms late) now counts
            return
        if since >= self.full_every_s or cheap:
            t0 = time.perf_counter()
            self.last_full_collected = gc.collect()
            self.last_full_ms = (time.perf_counter() - t0) * 1000
            self.cheap_every_s = (self.full_cheap_every_s
                                  if self.last_full_collected >= USEFUL_COLLECTED
                                  else min(2 * self.cheap_every_s, self.full_every_s))
            self.full_passes += 1
            self._last_full = now
            if self.last_full_ms > 50:
                log.info("full cyclic collection took %.0f ms", self.last_full_ms)

    def _hold_deep(self, now: float) -> bool:
        """Should a due deep pass wait? While the loop is active (`busy`), up to
        FULL_EVERY_S after it fell due: it scans every object, the frozen ones too (15-25 ms
        on an idle broker, as long as a forced full pass over whatever a flood holds)."""
        if self.busy is None or not self.busy():
            return False
        if self._deep_held_since is None:
            self._deep_held_since = now
        return now - self._deep_held_since < self.full_every_s

    def _collect_and_freeze(self) -> None:
        self.last_full_collected = gc.collect()
        gc.freeze()
        self._baseline = sys.getallocatedblocks()

    def _tick(self) -> None:
        try:
            self.tick()
        finally:
            if self._loop is not None and self._timer is not None:
                self._timer = self._loop.call_later(self.pace_s, self._tick)
