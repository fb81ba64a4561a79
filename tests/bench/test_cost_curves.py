"""bench/cost_curves.py at tiny sizes against the broker fixture: every message published at
the low rate arrives, the figures are sane, nothing is left behind, and the plot is drawn."""

from __future__ import annotations

import json

from bench import cost_curves


def test_queue_and_connection_curves_at_tiny_sizes(broker, tmp_path) -> None:
    q_json, c_json = tmp_path / "q.json", tmp_path / "c.json"
    assert cost_curves.main(["queues", broker.url, "--counts", "1,5", "--seconds", "1",
                             "--idle-seconds", "0.5", "--settle-seconds", "0.2", "--rate", "100",
                             "--name", "t",
                             "--json", str(q_json)]) == 0
    assert cost_curves.main(["connections", broker.url, "--counts", "20", "--seconds", "1",
                             "--idle-seconds", "0.5", "--busy-rate", "200",
                             "--json", str(c_json)]) == 0
    queues = json.loads(q_json.read_text())
    assert queues["schema"] == "bench-cost-curves/1"
    assert [p["queues"] for p in queues["queues"]] == [1, 5]
    for p in queues["queues"]:
        assert p["sent"] > 50 and p["consumed"] == p["sent"]
        assert p["latency_ms"]["p50"] is not None and p["latency_ms"]["p50"] >= 0
    point = json.loads(c_json.read_text())["connections"][0]
    assert point["connections"] == 20 and point["consumed"] == point["sent"] > 100
    if hasattr(broker, "broker"):  # in-process: nothing left behind
        assert not [q for q in broker.broker.vhosts["/"].queues if q.startswith("cc-")]
    out = tmp_path / "curves.png"
    assert cost_curves.main(["plot", str(q_json), str(c_json), "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000
