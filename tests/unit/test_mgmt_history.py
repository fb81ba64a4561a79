"""The management sampler's range history (broker/management/history.py) and the range
parser (ranges.py), without a broker: clocks are passed in."""

from __future__ import annotations

import pytest

from broker.management.history import History
from broker.management.ranges import Range, RangeError, parse, points
from broker.management.samples import details

T0 = 1_000_000_000_000  # ms, a multiple of every level interval


def test_values_are_a_step_function_and_zero_before_the_first_entry():
    h = History()
    h.record(("queue", "/", "q"), {"messages": 1, "publish": 1}, T0 + 1000)
    h.record(("queue", "/", "q"), {"messages": 1, "publish": 1}, T0 + 6000)  # unchanged
    h.record(("queue", "/", "q"), {"messages": 4, "publish": 5}, T0 + 11000)
    got = h.values_at(("queue", "/", "q"), ["publish", "messages", "nope"],
                      [T0, T0 + 5000, T0 + 10000, T0 + 15000], 15000)
    assert got == [[0, 0, 0], [1, 1, 0], [1, 1, 0], [5, 4, 0]]
    assert h.values_at(("queue", "/", "other"), ["messages"], [T0], 5000) is None


def test_one_entry_per_interval_newest_wins():
    h = History()
    key = ("queue", "/", "q")
    for i in range(5):  # five changes within one 5 s interval
        h.record(key, {"messages": i}, T0 + i * 200)
    assert len(h._series[key].rings[0]) == 2  # one [ts, value] entry
    assert h.values_at(key, ["messages"], [T0 + 4999], 60000) == [[4]]


def test_rings_are_bounded_and_the_oldest_kept_entry_stands_for_before():
    h = History()
    key = ("queue", "/", "q")
    for i in range(1000):  # a change every 5 s for 5000 s
        h.record(key, {"messages": i}, T0 + i * 5000)
    five, sixty = h._series[key].rings
    assert len(five) == (605 // 5 + 2) * 2 and len(sixty) == (3600 // 60 + 2) * 2
    # 600 s back: from the 5 s level; 3000 s back: from the 60 s level
    now = T0 + 999 * 5000
    assert h.values_at(key, ["messages"], [now - 600_000], 600_000) == [[999 - 120]]
    # (one entry per 60 s: at most one interval, 12 changes, behind)
    coarse = h.values_at(key, ["messages"], [now - 3_000_000], 3_000_000)[0][0]
    assert 999 - 600 - 12 <= coarse <= 999 - 600
    # beyond the largest window: the oldest kept value
    assert h.values_at(key, ["messages"], [T0], 7_200_000)[0][0] > 0


def test_forget_and_clear():
    h = History()
    h.record(("queue", "/", "a"), {"messages": 1}, T0)
    h.record(("vhost", "/"), {"messages": 1}, T0)
    h.forget_missing({("vhost", "/")})
    assert len(h) == 1
    h.clear()
    assert len(h) == 0


def test_parse_ranges():
    r = parse({"lengths_age": "60", "lengths_incr": "5", "msg_rates_age": "60",
               "msg_rates_incr": "5"}, T0 + 1234)
    assert r.lengths == Range(T0 + 5000 - 60000, T0 + 5000, 5000)  # ceil
    assert r.msg_rates == Range(T0 - 60000, T0, 5000)  # floor
    assert r.data_rates is None and r.node_stats is None
    assert parse({"lengths_age": "60", "lengths_incr": "5"}, T0 + 1, False).lengths.last == T0
    assert not parse({"lengths_age": "x", "lengths_incr": "5"}, T0).any()
    assert len(points(Range(T0 - 60000, T0, 5000))) == 13
    for age, incr in (("0", "5"), ("5", "0"), ("-5", "5"), ("501", "1")):
        with pytest.raises(RangeError) as err:
            parse({"data_rates_age": age, "data_rates_incr": incr}, T0)
        assert str(err.value) == f"Invalid range parameters: age {int(age)}, incr {incr}"


def test_details_shape():
    d = details([(T0, 0), (T0 + 5000, 2), (T0 + 10000, 3)])
    assert d == {"rate": 0.2, "samples": [{"sample": 3, "timestamp": T0 + 10000},
                                          {"sample": 2, "timestamp": T0 + 5000},
                                          {"sample": 0, "timestamp": T0}],
                 "avg_rate": 0.3, "avg": pytest.approx(5 / 3)}
    assert details([(T0, 7)]) == {"rate": 0.0, "samples": [{"sample": 7, "timestamp": T0}]}
