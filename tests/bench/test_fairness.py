"""bench.fairness against the session broker: a short real run (flood, slow consumer, drain
and bystander in their own processes) reports the bystander's round trips."""

from __future__ import annotations

from bench import fairness


def test_a_short_run_measures_the_bystander(broker) -> None:
    res = fairness.run(broker.url, flood=3000, backlog=500, seconds=4.0)
    assert res["count"] > 50
    assert 0 < res["p50"] <= res["p99"] <= res["max"]


def test_rounds_alternate_and_the_json_keeps_every_run_and_the_medians(broker, tmp_path) -> None:
    out = tmp_path / "fair.json"
    assert fairness.main(["--flood", "2000", "--backlog", "300", "--seconds", "4",
                          "--every-ms", "20", "--rounds", "2", "--json", str(out),
                          broker.url]) == 0
    import json
    doc = json.loads(out.read_text())
    assert doc["format"] == "bench-fairness/1" and doc["every_ms"] == 20
    runs = doc["runs"][broker.url]
    assert [r["round"] for r in runs] == [1, 2]
    assert all(len(r["load_before"]) == 3 and r["count"] > 20 for r in runs)
    p99 = doc["summary"][broker.url]["p99"]
    assert p99["min"] <= p99["median"] <= p99["max"]
    assert sorted([p99["min"], p99["max"]]) == sorted(r["p99"] for r in runs)
