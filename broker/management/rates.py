"""Rates for the API's `*_details` objects: every `SAMPLE_INTERVAL` seconds the counters of
every channel, queue and vhost (broker/stats.py) and the queue lengths are read once, and
each value's rate (per second, over the last interval) is kept until the next sample.

Cost: one pass over channels and queues every 5 s while the management server runs; nothing
per message (RabbitMQ's collect_statistics_interval is 5000 ms too).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable
from typing import Any

from broker.management.history import History

SAMPLE_INTERVAL = 5.0  # seconds (RabbitMQ collect_statistics_interval = 5000 ms)


class RateSampler:
    """Keeps, per object key, the last sampled values and their rates (per second), and
    their bounded history for sample ranges (`history`, broker/management/history.py)."""

    def __init__(self) -> None:
        self._last: dict[Hashable, tuple[float, dict[str, float]]] = {}
        self._rates: dict[Hashable, dict[str, float]] = {}
        self._task: asyncio.Task | None = None
        self.history = History()  # samples for ?lengths_age=...&lengths_incr=... ranges

    def observe(self, key: Hashable, values: dict[str, float], now: float | None = None,
                wall_ms: int | None = None) -> None:
        """Record `values` of object `key` at `now` (monotonic s); rates are the change
        since the previous observation divided by the time between them. The history
        records them at `wall_ms` (ms since the epoch; the clock when None)."""
        self.history.record(key, values, int(time.time() * 1000) if wall_ms is None
                            else wall_ms)
        now = time.monotonic() if now is None else now
        prev = self._last.get(key)
        if prev is not None and now > prev[0]:
            dt = now - prev[0]
            self._rates[key] = {k: (v - prev[1].get(k, v)) / dt for k, v in values.items()}
        self._last[key] = (now, dict(values))

    def clear(self) -> None:
        """Statistics reset: forget every sample and rate (rates read 0 until two samples
        have been taken again)."""
        self._last.clear()
        self._rates.clear()
        self.history.clear()

    def rate(self, key: Hashable, field: str) -> float:
        """Last rate of `field` of `key` (0.0 before two samples)."""
        return round(self._rates.get(key, {}).get(field, 0.0), 1)

    def forget_missing(self, live: set[Hashable]) -> None:
        """Drop state of objects that no longer exist."""
        for key in [k for k in self._last if k not in live]:
            self._last.pop(key, None)
            self._rates.pop(key, None)
        self.history.forget_missing(live)

    def start(self, sample: Any, interval: float = SAMPLE_INTERVAL) -> None:
        """Run `sample(self)` now and every `interval` seconds on the running loop."""
        async def loop() -> None:
            while True:
                sample(self)
                await asyncio.sleep(interval)

        self._task = asyncio.get_running_loop().create_task(loop())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None


def with_details(sampler: RateSampler, key: Hashable, values: dict[str, Any]) -> dict[str, Any]:
    """{"publish": 5, "publish_details": {"rate": 1.0}, ...}: RabbitMQ's shape for counters
    and lengths."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        out[name] = value
        out[f"{name}_details"] = {"rate": sampler.rate(key, name)}
    return out


def summed_details(sampler: RateSampler, keys: list[Hashable],
                   values: dict[str, Any]) -> dict[str, Any]:
    """As `with_details`, each rate the sum of the rates of `keys` (a user's visible vhosts:
    RabbitMQ's overview for a non-monitoring user sums its vhosts' samples), so a vhost
    that goes away takes its counts with it instead of showing a negative rate."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        out[name] = value
        out[f"{name}_details"] = {"rate": round(sum(sampler.rate(k, name) for k in keys), 1)}
    return out
