"""`*_details` with samples for the API's sample ranges: when a request asks for a range
(broker/management/ranges.py), each field of the kind the range names gets RabbitMQ
3.10.8's details, {"rate": R, "samples": [{"sample": V, "timestamp": ms}, ... newest
first], "avg_rate": X, "avg": Y} (rabbit_mgmt_stats:format_range/6): `rate` from the two
newest samples, `avg_rate` from the newest and the oldest, `avg` the mean of the samples;
one sample gives {"rate": 0.0, "samples": [...]} only.

Which fields get which range (rabbit_mgmt_db): `lengths` = a queue's messages,
messages_ready, messages_unacknowledged and the overview's queue_totals; `msg_rates` =
every `message_stats` (queues, channels, vhosts, the overview) and a vhost's messages*;
`data_rates` = connections' and vhosts' recv_oct / send_oct. Exchanges, nodes (and
`node_stats`) have nothing sampled here: their ranges are only checked.

Values come from the sampler's history (broker/management/history.py); a sample at or
after the request's clock (the newest `lengths` sample: range_ceil rounds up) is the value
the object shows now, so a queue declared a moment ago already has its newest sample.

Owns: turning (history, range, the JSON object) into the `*_details` of that object.
Talked to by: the API handlers (`from_request` at the start; the object functions after
shapes.py built an object, only when the request has a range). Must never: change an object when the request has no range.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from typing import Any

from aiohttp import web

from broker.management.history import summed
from broker.management.http import bad_request
from broker.management.ranges import Range, RangeError, Ranges, parse, points
from broker.management.rates import RateSampler

LENGTHS = ("messages", "messages_ready", "messages_unacknowledged")
BYTES = ("recv_oct", "send_oct")


def from_request(request: web.Request, error: str = "bad_request",
                 ceil_lengths: bool = True) -> tuple[Ranges, int]:
    """(the request's ranges, the clock in ms they were taken at; `ceil_lengths` as
    ranges.parse: False for the overview). 400 {"error": `error`,
    "reason": "Invalid range parameters: age A, incr I"} for a bad range: RabbitMQ 3.10.8
    says "invalid_range_parameters" on the /api/queues, /api/exchanges and /api/vhosts
    lists, "bad_request" elsewhere (checked)."""
    now_ms = int(time.time() * 1000)
    try:
        return parse(request.query, now_ms, ceil_lengths), now_ms
    except RangeError as exc:
        raise bad_request(str(exc), error) from None


def details(samples: list[tuple[int, int]]) -> dict[str, Any]:
    """RabbitMQ's details of one field from its samples [(timestamp ms, value)], oldest
    first (rabbit_mgmt_stats: calculate_rate, append_sample, average)."""
    out: dict[str, Any] = {
        "rate": 0.0,
        "samples": [{"sample": v, "timestamp": t} for t, v in reversed(samples)],
    }
    if len(samples) > 1:
        (t0, v0), (t1, v1) = samples[-1], samples[-2]
        out["rate"] = (v0 - v1) * 1000 / (t0 - t1)
        first_t, first_v = samples[0]
        out["avg_rate"] = (v0 - first_v) * 1000 / (t0 - first_t)
        out["avg"] = sum(v for _, v in samples) / len(samples)
    return out


def fields_details(sampler: RateSampler, keys: Sequence[Hashable], fields: Sequence[str],
                   rng: Range, live: dict[str, Any], now_ms: int) -> dict[str, dict]:
    """{field: details} of `fields` summed over the series `keys` at the timestamps of
    `rng`; samples at or after `now_ms` take the `live` values."""
    times = points(rng)
    age = rng.last - rng.first
    rows = [sampler.history.values_at(k, fields, times, age) for k in keys]
    grid = summed(rows, len(fields), len(times))
    for i, t in enumerate(times):
        if t >= now_ms:
            grid[i] = [live.get(f, 0) for f in fields]
    return {f: details([(t, row[j]) for t, row in zip(times, grid, strict=True)])
            for j, f in enumerate(fields)}


def _apply(obj: dict, sampler: RateSampler, keys: Sequence[Hashable], fields: Sequence[str],
           rng: Range, now_ms: int) -> None:
    """Replace obj's `<field>_details` with the range's details for every field it has."""
    present = [f for f in fields if f in obj]
    for f, d in fields_details(sampler, keys, present, rng, obj, now_ms).items():
        obj[f"{f}_details"] = d


def _stats_fields(stats: dict) -> list[str]:
    return [k for k in stats if not k.endswith("_details")]


def _message_stats(obj: dict, sampler: RateSampler, keys: Sequence[Hashable], rng: Range,
                   now_ms: int) -> None:
    stats = obj.get("message_stats")
    if isinstance(stats, dict):
        _apply(stats, sampler, keys, _stats_fields(stats), rng, now_ms)


def queue(obj: dict, sampler: RateSampler, key: Hashable, ranges: Ranges, now_ms: int) -> None:
    """A queue: `lengths` on messages*, `msg_rates` on message_stats."""
    if ranges.lengths:
        _apply(obj, sampler, [key], LENGTHS, ranges.lengths, now_ms)
    if ranges.msg_rates:
        _message_stats(obj, sampler, [key], ranges.msg_rates, now_ms)


def channel(obj: dict, sampler: RateSampler, key: Hashable, ranges: Ranges,
            now_ms: int) -> None:
    """A channel: `msg_rates` on message_stats."""
    if ranges.msg_rates:
        _message_stats(obj, sampler, [key], ranges.msg_rates, now_ms)


def connection(obj: dict, sampler: RateSampler, key: Hashable, ranges: Ranges,
               now_ms: int) -> None:
    """A connection: `data_rates` on recv_oct / send_oct."""
    if ranges.data_rates:
        _apply(obj, sampler, [key], BYTES, ranges.data_rates, now_ms)


def vhost(obj: dict, sampler: RateSampler, key: Hashable, ranges: Ranges, now_ms: int,
          live_bytes: dict[str, int] | None = None) -> None:
    """A vhost: `msg_rates` on message_stats and messages* (rabbit_mgmt_db picks the
    msg_rates range for vhost_msg_stats), `data_rates` on recv_oct / send_oct, which a
    range adds from `live_bytes` (the vhost's bytes now, sampling.vhost_bytes)."""
    if ranges.msg_rates:
        _message_stats(obj, sampler, [key], ranges.msg_rates, now_ms)
        _apply(obj, sampler, [key], LENGTHS, ranges.msg_rates, now_ms)
    if ranges.data_rates and live_bytes is not None:
        obj.update(live_bytes)
        _apply(obj, sampler, [key], BYTES, ranges.data_rates, now_ms)


def overview(obj: dict, sampler: RateSampler, vhost_keys: Sequence[Hashable],
             ranges: Ranges, now_ms: int) -> None:
    """The overview: `lengths` on queue_totals, `msg_rates` on message_stats, both the sum
    of the visible vhosts' series (rabbit_mgmt_data:overview_data sums their slides)."""
    totals = obj.get("queue_totals")
    if ranges.lengths and isinstance(totals, dict):
        _apply(totals, sampler, vhost_keys, LENGTHS, ranges.lengths, now_ms)
    if ranges.msg_rates:
        _message_stats(obj, sampler, vhost_keys, ranges.msg_rates, now_ms)
