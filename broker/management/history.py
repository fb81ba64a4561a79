"""Bounded sample history per object, as RabbitMQ's management agent keeps one
exometer_slide per retention policy level (rabbitmq_management_agent's
`sample_retention_policies`, 3.10.8 defaults: global [{605,5},{3660,60},{29400,600},
{86400,1800}], basic [{605,5},{3600,60}], detailed [{605,5}]; {window s, interval s}).

Owns: `History`, the samples of every series (one per queue, channel, connection, vhost,
the overview), recorded by the management sampler every collect_statistics_interval and
read back at the timestamps a range asks for.

Layout of one series: the field names (a tuple shared by every series of the same shape),
the last values recorded, and per level one `array('q')` ring of entries
[ts_ms, v0, v1, ...] (8 bytes each, oldest first). An entry is written only when a value
changed (the values are a step function of time: the value at T is that of the newest entry
at or before T), at most one per level interval (a change within the interval of the newest
entry overwrites it, keeping the newest value, as exometer_slide keeps one element per
interval), and a level keeps at most window / interval + 2 entries: the oldest one beyond
that is dropped and the one after it stands for all time before (its ts becomes 0). Before
a series' first entry its values are 0 (the object did not exist; RabbitMQ pads with zeros
too). An idle object costs one entry per level; a busy one at most ~125 + ~62 entries
(basic) of 8 bytes per field.

Talked to by: broker/management/rates.py (`RateSampler.observe` records), samples.py
(`values_at` reads). Must never: run on the message path or hold references to broker
objects (keys are tuples of names and ids).
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

# {policy: ((window s, interval s), ...)}: rabbitmq_management_agent's defaults
POLICIES: dict[str, tuple[tuple[int, int], ...]] = {
    "global": ((605, 5), (3660, 60), (29400, 600), (86400, 1800)),
    "basic": ((605, 5), (3600, 60)),
    "detailed": ((605, 5),),
}
# which policy a series key (its first element) follows: rabbit_mgmt_data:retention_policy
# (queue_msg_stats, channel_stats_*, connection_stats_coarse_conn_stats are basic;
# vhost_* and the overview's totals global)
POLICY_OF_KIND = {"queue": "basic", "channel": "basic", "connection": "basic",
                  "vhost": "global", "overview": "global"}


class _Series:
    """One object's samples (see the module docstring for the layout)."""

    __slots__ = ("fields", "last", "rings")

    def __init__(self, fields: tuple[str, ...], levels: int) -> None:
        self.fields = fields  # field names, shared between series of the same shape
        self.last: tuple[int, ...] | None = None  # values of the newest entry (all levels)
        self.rings = [array("q") for _ in range(levels)]  # per level: [ts, v...] entries


class History:
    """Samples of every series, bounded per level by the retention policies."""

    def __init__(self, policies: dict[str, tuple[tuple[int, int], ...]] | None = None) -> None:
        self.policies = policies or POLICIES
        self._series: dict[Hashable, _Series] = {}
        self._fields: dict[tuple[str, ...], tuple[str, ...]] = {}  # one tuple per shape

    def levels(self, key: Hashable) -> tuple[tuple[int, int], ...]:
        """(window s, interval s) levels of the series `key` (by its first element's
        policy; basic for an unknown kind)."""
        kind = key[0] if isinstance(key, tuple) and key else None
        return self.policies[POLICY_OF_KIND.get(str(kind), "basic")]

    def record(self, key: Hashable, values: Mapping[str, Any], now_ms: int) -> None:
        """Record `values` (integers) of `key` at `now_ms` (ms since the epoch). Costs a tuple
        comparison when nothing changed, one append or overwrite per level otherwise."""
        vals = tuple(values.values())
        series = self._series.get(key)
        if series is None:
            fields = tuple(values)
            fields = self._fields.setdefault(fields, fields)
            series = self._series[key] = _Series(fields, len(self.levels(key)))
        elif vals == series.last:
            return
        if series.last is not None and len(vals) != len(series.fields):
            return  # a series changed shape: ignore (keys are per object kind)
        series.last = vals
        stride = 1 + len(vals)
        for (window, interval), ring in zip(self.levels(key), series.rings, strict=True):
            interval_ms = interval * 1000
            if ring and ring[-stride] // interval_ms == now_ms // interval_ms:
                del ring[-stride:]  # one entry per interval: the newest values win
            ring.append(now_ms)
            ring.extend(vals)
            if len(ring) > (window // interval + 2) * stride:
                del ring[:stride]
                ring[0] = 0  # the oldest kept entry now stands for all time before it

    def forget_missing(self, live: set[Hashable]) -> None:
        """Drop the series of objects that no longer exist."""
        for key in [k for k in self._series if k not in live]:
            del self._series[key]

    def clear(self) -> None:
        """DELETE /api/reset: every series starts again."""
        self._series.clear()

    def __len__(self) -> int:
        return len(self._series)

    def values_at(self, key: Hashable, fields: Sequence[str], times: Sequence[int],
                  age_ms: int) -> list[list[int]] | None:
        """[[value of each of `fields` at T] for T in `times`] (ascending ms) from the
        finest level whose window covers `age_ms` (the coarsest when none does: RabbitMQ's
        select_smallest_above); 0 before the series' first entry and for a field the series
        does not have. None when `key` has no samples yet."""
        series = self._series.get(key)
        if series is None:
            return None
        levels = self.levels(key)
        index = next((i for i, (window, _) in enumerate(levels) if window * 1000 > age_ms),
                     len(levels) - 1)
        ring = series.rings[index]
        stride = 1 + len(series.fields)
        where = {f: i for i, f in enumerate(series.fields)}
        cols = [where.get(f) for f in fields]
        out: list[list[int]] = []
        pos = -stride  # offset of the newest entry at or before T (none yet)
        n = len(ring)
        for t in times:
            while pos + stride < n and ring[pos + stride] <= t:
                pos += stride
            if pos < 0:
                out.append([0] * len(cols))
            else:
                out.append([0 if c is None else ring[pos + 1 + c] for c in cols])
        return out


def summed(rows: Iterable[list[list[int]] | None], width: int, count: int) -> list[list[int]]:
    """Element-wise sum of several series' `values_at` answers (the overview sums its
    vhosts, as rabbit_mgmt_data:lookup_all sums their slides); zeros where none."""
    total = [[0] * width for _ in range(count)]
    for row in rows:
        if row is None:
            continue
        for acc, vals in zip(total, row, strict=True):
            for i, v in enumerate(vals):
                acc[i] += v
    return total
