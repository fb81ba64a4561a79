# bench/histogram.py — latency histogram shared by workers and the coordinator.
#
# Owns: the log-linear bucket layout (exact below 64 µs, then 32 buckets per power of two, so
# at most ~3 % relative error), merging, and percentiles. Pure: no I/O, no clocks.
# Talks to: bench.consumer / bench.publisher (record), bench.coordinator (merge, percentiles).
# Must never: store raw samples (a 10-minute run at 100k msg/s would hold 60M floats).
"""Log-linear latency histogram in microseconds, mergeable across processes.

Buckets: value v (µs, int >= 0) goes to ``v`` when ``v < 64``; otherwise with
``s = v.bit_length() - 6`` to ``(s << 5) + (v >> s)``. Hot-path callers inline that formula
(see `bucket`) and increment ``counts[index]`` directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

SIZE = 2048  # covers values up to 2**63 µs


def bucket(value_us: int) -> int:
    """Bucket index of a latency in µs (negative values count as 0)."""
    if value_us < 64:
        return value_us if value_us > 0 else 0
    s = value_us.bit_length() - 6
    return (s << 5) + (value_us >> s)


def bucket_value(index: int) -> float:
    """Representative value (µs) of a bucket: its midpoint."""
    if index < 64:
        return float(index)
    s = (index >> 5) - 1
    mantissa = index - (s << 5)
    low = mantissa << s
    return low + ((1 << s) - 1) / 2


class Histogram:
    """Counts per bucket; ``counts`` is a plain list so hot loops can index it directly."""

    def __init__(self) -> None:
        self.counts = [0] * SIZE
        self.max_us = 0  # exact maximum seen, in µs

    def record(self, value_us: int) -> None:
        """Add one sample (µs)."""
        self.counts[bucket(value_us)] += 1
        if value_us > self.max_us:
            self.max_us = value_us

    def take_sparse(self) -> dict[int, int]:
        """Non-zero buckets as ``{index: count}``, then reset (for per-interval reports)."""
        counts = self.counts
        sparse = {i: c for i, c in enumerate(counts) if c}
        if sparse:
            self.counts = [0] * SIZE
        return sparse

    def merge_sparse(self, sparse: Mapping[int, int]) -> None:
        """Add a ``take_sparse`` result (keys may arrive as str after JSON)."""
        for i, c in sparse.items():
            self.counts[int(i)] += c

    @property
    def total(self) -> int:
        return sum(self.counts)

    def percentiles(self, qs: Iterable[float] = (50, 95, 99, 99.9)) -> dict[str, float | None]:
        """``{"p50": ms, ...}`` for each q in percent, plus ``max`` (ms) and ``count``.

        Values are bucket midpoints converted to milliseconds; None when empty.
        """
        total = self.total
        out: dict[str, float | None] = {}
        qs = list(qs)
        if not total:
            out.update({f"p{q:g}": None for q in qs})
            out["max"] = None
            out["count"] = 0
            return out
        targets = sorted((max(1, -(-q * total // 100)), q) for q in qs)
        seen = 0
        ti = 0
        for i, c in enumerate(self.counts):
            if not c:
                continue
            seen += c
            while ti < len(targets) and seen >= targets[ti][0]:
                out[f"p{targets[ti][1]:g}"] = round(bucket_value(i) / 1000, 3)
                ti += 1
            if ti == len(targets):
                break
        top = max(i for i, c in enumerate(self.counts) if c)
        exact = self.max_us / 1000 if self.max_us else bucket_value(top) / 1000
        out["max"] = round(exact, 3)
        out["count"] = total
        return out
