"""bench.fairness against the session broker: a short real run (flood, slow consumer, drain
and bystander in their own processes) reports the bystander's round trips."""

from __future__ import annotations

from bench import fairness


def test_a_short_run_measures_the_bystander(broker) -> None:
    res = fairness.run(broker.url, flood=3000, backlog=500, seconds=4.0)
    assert res["count"] > 50
    assert 0 < res["p50"] <= res["p99"] <= res["max"]
