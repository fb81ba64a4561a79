"""How late the event loop runs, and how long the garbage collector stops it (issue 36
item 1): the two causes of tail latency that no per-message counter shows.

- **Loop lag**: a timer asks to run every `interval` s (10 ms); each time it runs, how late
  it ran is how long everything else on the loop kept it waiting — one loop turn's batch of
  frames, a long callback, a GC pause. A message that arrived at the start of that wait
  waited as long (Node.js's `monitorEventLoopDelay` and uvloop users' loop-lag probes do the
  same).
- **GC pauses**: `gc.callbacks` time each collection by generation.

- **Busy**: the loop thread's CPU time over each interval (`time.thread_time`), smoothed
  over about two intervals; `busy` is True while it is at least `busy_load` of the wall
  time (BUSY_LOAD, 0.7, or the configuration's `consumer_bias_load`): the loop is
  saturated, and a queue serves its consumers before its publishers
  (broker/consumer_bias.py).
- **Active**: a tick whose smoothed load is at least ACTIVE_LOAD (0.2), or that ran
  ACTIVE_LAG_S (5 ms) late, finds the loop active: it serves traffic, or it waits for a CPU
  other processes hold. `was_active_within(s)` is what the GC pacer asks before a long
  pass (broker/gc_pacing.py): a CPU-starved loop is never `busy` by its own CPU share.

Both go into fixed-bucket histograms (seconds, Prometheus's conventions: cumulative counts,
a sum and a count), exported as `pybroker_event_loop_lag_seconds` and
`pybroker_gc_pause_seconds{generation}` (RabbitMQ has no such series; they carry this
broker's prefix), and the largest lag since start as `max_s`.

Owns: one timer on the broker's loop and one gc callback per process. Must never: allocate
per message, or run work of its own beyond a few arithmetic operations per sample.
"""

from __future__ import annotations

import asyncio
import bisect
import gc
import time

BUSY_LOAD = 0.7  # share of an interval's wall time the loop thread ran on a CPU: busy
# a tick at or above either of these finds the loop *active*: serving traffic, or waiting for
# a CPU that other processes hold (then its thread's share stays below BUSY_LOAD however much
# work waits: two workers and their clients on 2 vCPUs got 0.4-0.6 each in issue 49's flood)
ACTIVE_LOAD = 0.2
ACTIVE_LAG_S = 0.005

# seconds; the last bucket is +Inf
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Histogram:
    """Counts of observations (seconds) at or below each of BUCKETS, plus +Inf; sum, count
    and max. Not thread-safe beyond the GIL's atomic list updates (enough for metrics)."""

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)  # per bucket, not cumulative
        self.sum = 0.0
        self.count = 0
        self.max = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, value)] += 1
        self.sum += value
        self.count += 1
        if value > self.max:
            self.max = value

    def merge(self, other: Histogram) -> None:
        """Add `other`'s observations to these (another worker's, another exchange's)."""
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.sum += other.sum
        self.count += other.count
        self.max = max(self.max, other.max)

    def cumulative(self) -> list[tuple[str, int]]:
        """[(upper bound as Prometheus writes it, cumulative count)], +Inf last."""
        out, total = [], 0
        for bound, n in zip((*map(str, BUCKETS), "+Inf"), self.counts, strict=True):
            total += n
            out.append((bound, total))
        return out


class LoopLagProbe:
    """Samples the running loop's lag every `interval` s into `lag`; times GC pauses into
    `gc_pauses[generation]`. `start()` on the loop, `stop()` to end both."""

    def __init__(self, interval: float = 0.01, busy_load: float = BUSY_LOAD) -> None:
        self.interval = interval
        self.busy_load = busy_load  # the load at which `busy` turns True
        self.lag = Histogram()
        self.gc_pauses = [Histogram(), Histogram(), Histogram()]
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._gc_started = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self.load = 0.0  # the loop thread's CPU share, smoothed (0..1)
        self.busy = busy_load <= 0  # load >= busy_load
        self._cpu = 0.0  # thread CPU seconds at the last tick
        self._at = 0.0  # loop time of the last tick
        self._busy_at = float("-inf")  # loop time of the last tick that found it busy
        self._active_at = float("-inf")  # ... that found it active (see the module doc)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._at = self._loop.time()
        self._cpu = time.thread_time()
        self._due = self._at + self.interval
        self._handle = self._loop.call_at(self._due, self._tick)
        gc.callbacks.append(self._on_gc)

    def is_busy(self) -> bool:
        """Was the loop saturated over the last intervals (see `busy`)?"""
        return self.busy

    def was_busy_within(self, seconds: float) -> bool:
        """Was the loop saturated at any tick of the last `seconds` s? A flood's load
        dips below BUSY_LOAD between bursts (TCP back-pressure, a slice's wait), so a
        decision that costs the loop a long pause asks this, not the instant `busy`."""
        if self.busy:
            return True
        loop = self._loop
        return loop is not None and loop.time() - self._busy_at <= seconds

    def was_active_within(self, seconds: float) -> bool:
        """Did any tick of the last `seconds` s find the loop active (serving traffic, or
        waiting for a CPU; see the module docstring)?"""
        loop = self._loop
        return self.busy or (loop is not None and loop.time() - self._active_at <= seconds)

    def _tick(self) -> None:
        loop = self._loop
        assert loop is not None
        now = loop.time()
        lag = max(0.0, now - self._due)
        self.lag.observe(lag)
        cpu = time.thread_time()
        wall = now - self._at
        if wall > 0:
            self.load = 0.5 * self.load + 0.5 * min(1.0, (cpu - self._cpu) / wall)
            self.busy = self.load >= self.busy_load
            if self.busy:
                self._busy_at = now
        if lag >= ACTIVE_LAG_S or self.load >= ACTIVE_LOAD:
            self._active_at = now
        self._cpu = cpu
        self._at = now
        self._due = now + self.interval
        self._handle = loop.call_at(self._due, self._tick)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            generation = info.get("generation", 2)
            self.gc_pauses[min(generation, 2)].observe(time.perf_counter() - self._gc_started)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
