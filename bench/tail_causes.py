# bench/tail_causes.py — `python -m bench.tail_causes`: what the broker's event loop and
# garbage collector did during one bench run (issue 36 item 1).
#
# Owns: reading this broker's loop-lag and GC-pause histograms from its Prometheus endpoint
# before and after a run, the difference, its percentiles, and the report beside the run's
# own latency percentiles.
# Talks to: the broker's /metrics (requests, prometheus_client's parser); `python -m bench`
# as a subprocess.
# Must never: report a percentile finer than the histogram's buckets (it gives the bucket's
# upper bound).
"""Where the tail comes from, one run at a time (issue 36 item 1).

Scrapes `pybroker_event_loop_lag_seconds` and `pybroker_gc_pause_seconds` (broker/loop_lag.py)
from ``--metrics`` before and after ``python -m bench`` runs with the arguments after ``--``,
and prints, for the run alone: the loop lag's p50 / p99 / p99.9 (bucket upper bounds) and
how many 10 ms samples were later than 5, 10 and 25 ms; each GC generation's collections,
total pause and largest bucket; beside the run's confirm and end-to-end percentiles. A loop
lag p99 near the run's latency p99 says the tail is the loop's turns (batches, callbacks,
GC); a much smaller one says it is elsewhere (queues, fsync, the client).

    python -m bench.tail_causes --metrics http://127.0.0.1:15692/metrics -- \\
        --scenario s2 --uri amqp://guest:guest@127.0.0.1:5672/%2F -z 15
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

LAG = "pybroker_event_loop_lag_seconds"
GC = "pybroker_gc_pause_seconds"


def snapshot(url: str) -> dict[str, dict[str, float]]:
    """{series key: {le: cumulative count, "sum": s, "count": n}} for the two histograms;
    the series key is the metric name plus its generation label, if any."""
    text = requests.get(url, timeout=10).text
    out: dict[str, dict[str, float]] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name not in (LAG, GC):
            continue
        for s in fam.samples:
            key = fam.name + (f"{{generation={s.labels['generation']}}}"
                              if "generation" in s.labels else "")
            cell = out.setdefault(key, {})
            if s.name.endswith("_bucket"):
                cell[s.labels["le"]] = s.value
            elif s.name.endswith("_sum"):
                cell["sum"] = s.value
            elif s.name.endswith("_count"):
                cell["count"] = s.value
    return out


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after}


def quantile(cell: dict[str, float], q: float) -> float | None:
    """The upper bound (s) of the bucket holding quantile q of the run's samples."""
    total = cell.get("count", 0.0)
    if total <= 0:
        return None
    bounds = sorted((float(k), v) for k, v in cell.items() if k not in ("sum", "count"))
    for bound, cumulative in bounds:
        if cumulative >= q * total:
            return bound
    return float("inf")


def above(cell: dict[str, float], seconds: float) -> int:
    """Samples later than `seconds` (a bucket bound)."""
    below = next((v for k, v in cell.items() if k not in ("sum", "count")
                  and float(k) == seconds), 0.0)
    return int(cell.get("count", 0.0) - below)


def report(run: dict[str, Any], before: dict, after: dict) -> dict[str, Any]:
    lag = delta(before[LAG], after[LAG])
    gcs = {}
    for gen in ("0", "1", "2"):
        key = f"{GC}{{generation={gen}}}"
        cell = delta(before.get(key, {}), after[key])
        gcs[gen] = {"collections": int(cell.get("count", 0)),
                    "pause_total_ms": round(cell.get("sum", 0.0) * 1000, 1),
                    "p99_bucket_ms": (None if (q := quantile(cell, 0.99)) is None
                                      else q * 1000)}
    return {
        "loop_lag_ms": {name: (None if (q := quantile(lag, p)) is None else q * 1000)
                        for name, p in (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999))},
        "loop_lag_samples": int(lag.get("count", 0)),
        "loop_lag_later_than": {f"{ms} ms": above(lag, ms / 1000) for ms in (5, 10, 25)},
        "gc": gcs,
        "run": {"confirm_ms": run.get("confirm_latency_ms"), "latency_ms": run.get("latency_ms"),
                "rates": run.get("rates"), "ok": run.get("ok")},
    }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    bench_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(prog="python -m bench.tail_causes", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--metrics", required=True, help="the broker's /metrics URL")
    p.add_argument("--json", default=None)
    a = p.parse_args(own)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        before = snapshot(a.metrics)
        subprocess.run([sys.executable, "-m", "bench", *bench_args, "--quiet", "--json",
                        str(out)], check=False, timeout=3600)
        after = snapshot(a.metrics)
        run = json.loads(out.read_text()) if out.exists() else {}
    doc = report(run, before, after)
    print(json.dumps(doc, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
