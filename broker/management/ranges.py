"""Sample ranges of the HTTP API's query string: `lengths_age` / `lengths_incr`,
`msg_rates_age` / `msg_rates_incr`, `data_rates_age` / `data_rates_incr` and
`node_stats_age` / `node_stats_incr` (seconds), as rabbit_mgmt_util:range/1 and
range_ceil/1 read them in RabbitMQ 3.10.8.

Owns: `Range` (first, last, incr in ms since the epoch), `Ranges` (one optional `Range`
per kind), `parse` (query → `Ranges`, or `RangeError` with RabbitMQ's 400 text) and
`points` (the timestamps a range asks samples for).
Talked to by: the API handlers (queues, exchanges, connections, users' vhosts, overview),
which turn `RangeError` into a 400, and broker/management/samples.py, which reads
`Ranges` and `points`.
Must never: look at the broker or at stored samples; it only reads the query and the clock
it is given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

MAX_RANGE = 500  # rabbit_mgmt_util ?MAX_RANGE: at most age div incr + 1 samples a series
KINDS = ("lengths", "msg_rates", "data_rates", "node_stats")
_INT = re.compile(r"[+-]?[0-9]+\Z")  # what Erlang's list_to_integer/1 accepts


class RangeError(ValueError):
    """A range whose age or incr is not positive, or with age div incr above 500; the text
    is RabbitMQ's reason, "Invalid range parameters: age A, incr I"."""


@dataclass(frozen=True, slots=True)
class Range:
    """The samples one kind asks for: timestamps `first`, `first + incr`, ... up to `last`
    (ms since the epoch; `last` is the clock rounded to `incr`)."""

    first: int  # ms: last - age
    last: int  # ms: now rounded down (up for lengths) to a multiple of incr
    incr: int  # ms between two samples


@dataclass(frozen=True, slots=True)
class Ranges:
    """One optional `Range` per kind; all None (`NO_RANGES`) when the query asks none,
    and then nothing in an answer changes."""

    lengths: Range | None = None  # queue lengths: queues' messages*, the overview's queue_totals
    msg_rates: Range | None = None  # message_stats everywhere; vhosts' messages* too
    data_rates: Range | None = None  # connections' (and vhosts') recv_oct / send_oct
    node_stats: Range | None = None  # nodes' figures (parsed and checked, nothing sampled)

    def any(self) -> bool:
        return any((self.lengths, self.msg_rates, self.data_rates, self.node_stats))


NO_RANGES = Ranges()


def _int(query: Mapping[str, str], name: str) -> int | None:
    """The query's first `name` as an integer, None when absent or not an integer (then
    RabbitMQ's int/2 answers undefined and the kind has no range)."""
    raw = query.get(name)
    if raw is None or not _INT.match(raw):
        return None
    return int(raw)


def _range(query: Mapping[str, str], kind: str, now_ms: int, ceil: bool) -> Range | None:
    age, incr = _int(query, f"{kind}_age"), _int(query, f"{kind}_incr")
    if age is None or incr is None:
        return None
    if not (age > 0 and incr > 0 and age // incr <= MAX_RANGE):
        raise RangeError(f"Invalid range parameters: age {age}, incr {incr}")
    age_ms, incr_ms = age * 1000, incr * 1000
    last = now_ms // incr_ms * incr_ms
    if ceil and last != now_ms:
        last += incr_ms
    return Range(first=last - age_ms, last=last, incr=incr_ms)


def parse(query: Mapping[str, str], now_ms: int, ceil_lengths: bool = True) -> Ranges:
    """The four kinds' ranges of `query` at `now_ms`. With `ceil_lengths`, `lengths` takes
    the ceiling of the clock (its newest sample is the current length:
    rabbit_mgmt_util:range_ceil/1, used by the queue, connection and node endpoints; the
    overview uses range/1, the floor); the other kinds always take the floor (only
    finished intervals). A kind needs both `_age` and `_incr` as integers; otherwise it has
    no range. Raises `RangeError` (a 400) for age <= 0, incr <= 0 or age div incr > 500."""
    return Ranges(*(_range(query, kind, now_ms, ceil=ceil_lengths and kind == "lengths")
                    for kind in KINDS))


def points(rng: Range) -> list[int]:
    """The sample timestamps of `rng`, oldest first: first, first + incr, ... <= last (age
    div incr + 1 of them when incr divides age)."""
    return list(range(rng.first, rng.last + 1, rng.incr))
