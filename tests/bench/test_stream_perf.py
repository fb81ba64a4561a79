"""bench.stream_perf (issue 37 item 10) against the embedded broker's stream listener and
the null stream server: every run publishes with confirms, reads everything back, and
reports the server's CPU and RSS."""

from __future__ import annotations

import json
from typing import Any

from bench import stream_perf
from broker.embedded import EmbeddedBroker


def test_stream_perf_runs_both_phases_against_the_broker_and_the_floor(tmp_path: Any,
                                                                       capsys: Any) -> None:
    b = EmbeddedBroker(stream_listeners_tcp_default="0", management_tcp_port=0,
                       prometheus_tcp_port=0).start()
    out = tmp_path / "perf.json"
    try:
        stream_perf.main(["--target", f"ours=127.0.0.1:{b.stream_port}", "--floor",
                          "--sizes", "12,1024", "--rounds", "1", "-z", "1",
                          "--quiet-load", "100", "--json", str(out)])
    finally:
        b.stop()
    doc = json.loads(out.read_text())
    assert [(r["target"], r["size"]) for r in doc["runs"]] == [
        ("ours", 12), ("floor", 12), ("ours", 1024), ("floor", 1024)]
    for r in doc["runs"]:
        assert "error" not in r, r
        pub, con = r["publish"], r["consume"]
        assert pub["confirmed"] == pub["published"] > 0 and pub["errored"] == 0
        assert con["records"] >= pub["confirmed"], r  # every confirmed message read back
        assert pub["rate"] > 0 and con["rate"] > 0
    assert set(doc["summary"]) == {"ours", "floor"}
    table = capsys.readouterr().out
    assert "| 12 B | ours |" in table and "| 1024 B | floor |" in table
    stream_perf.main(["--table", str(out)])
    assert "| 1024 B | ours |" in capsys.readouterr().out
