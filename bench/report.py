# bench/report.py — the result document, the progress line and the exactly-once verdict.
#
# Owns: the JSON result schema ("bench-result/1"), its validation, the environment header,
# the per-second progress line, and the verification of counts and checksums per producer.
# Pure apart from reading version/machine facts in `environment()`.
# Talks to: bench.coordinator (builds results), bench.compare and bench.plot (read them).
# Must never: talk to a broker.
"""Result document ``bench-result/1`` (one JSON object per run).

Top-level keys (units in names or below):

- ``schema`` "bench-result/1"; ``environment`` {machine, os, python, uvloop, pamqp, commit,
  cpus, loadavg}; ``scenario`` (every option, password redacted); ``started_at`` (ISO UTC)
- ``duration_s`` {publishing, consuming, total}
- ``totals`` {published, confirmed, nacked, returned, resent, timed_out, consumed} (messages)
- ``rates`` {publish, confirm, consume} msg/s and {publish_mb_s, consume_mb_s} MB/s (10^6 B,
  body bytes)
- ``latency_ms`` and ``confirm_latency_ms`` {p50, p95, p99, p99.9, max, count}
- ``broker`` {pid, name, rss_peak_bytes, cpu_seconds, cpu_percent_mean, cpu_percent_peak,
  cpu_us_per_message (CPU µs per message consumed, else published)} or null when the broker
  is not a local process
- ``blocked_seconds`` (connection.blocked time summed over connections)
- ``verification`` {status: ok|failed|skipped, mode, expected, consumed, lost, duplicated,
  checksum_ok, reason, producers: {id: {...}}}
- ``timeline`` [{t, published, confirmed, consumed (msg/s in that second), nacked,
  latency_ms {p50, p99, max}, broker_cpu_percent, broker_rss_bytes, blocked}]
- ``errors`` [str]; ``ok`` (no errors and verification not failed)
"""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from typing import Any

from bench.histogram import Histogram

SCHEMA = "bench-result/1"
REQUIRED: dict[str, type | tuple[type, ...]] = {
    "schema": str,
    "environment": dict,
    "scenario": dict,
    "started_at": str,
    "duration_s": dict,
    "totals": dict,
    "rates": dict,
    "latency_ms": dict,
    "confirm_latency_ms": dict,
    "broker": (dict, type(None)),
    "blocked_seconds": (int, float),
    "verification": dict,
    "timeline": list,
    "errors": list,
    "ok": bool,
}
TOTALS = ("published", "confirmed", "nacked", "returned", "resent", "timed_out", "consumed")
RATES = ("publish", "confirm", "consume", "publish_mb_s", "consume_mb_s")
PCTS = ("p50", "p95", "p99", "max", "count")


def check_schema(doc: dict[str, Any]) -> list[str]:
    """Problems with a result document (empty list = valid ``bench-result/1``)."""
    problems = [f"missing {k}" for k in REQUIRED if k not in doc]
    problems += [
        f"{k} is {type(doc[k]).__name__}"
        for k, t in REQUIRED.items()
        if k in doc and not isinstance(doc[k], t)
    ]
    if problems:
        return problems
    if doc["schema"] != SCHEMA:
        problems.append(f"schema {doc['schema']!r}")
    problems += [f"totals.{k} missing" for k in TOTALS if not isinstance(doc["totals"].get(k), int)]
    problems += [f"rates.{k} missing" for k in RATES if not isinstance(doc["rates"].get(k),
                                                                       (int, float))]
    for key in ("latency_ms", "confirm_latency_ms"):
        problems += [f"{key}.{p} missing" for p in PCTS if p not in doc[key]]
    if doc["verification"].get("status") not in ("ok", "failed", "skipped"):
        problems.append("verification.status")
    return problems


def environment() -> dict[str, Any]:
    """Machine, OS, Python, uvloop and pamqp versions, git commit and load average."""

    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        commit = subprocess.run(
            ["git", "-C", here, "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=5, check=False,
        ).stdout.strip() or None
    except OSError:
        commit = None
    return {
        "machine": platform.node(),
        "cpus": os.cpu_count(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "uvloop": version("uvloop"),
        "pamqp": version("pamqp"),
        "commit": commit,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def verify(published: dict[int, dict[str, int]], consumed: dict[int, list[int]],
           fanout: dict[int, int], *, auto_ack: bool, resend: bool,
           has_consumers: bool) -> dict[str, Any]:
    """Exactly-once check: for each producer, consumed count == sent × queues reached and the
    sum of consumed seqs == sum of sent seqs × queues reached.

    ``published``: {producer_id: {count, checksum, nacked, timed_out, resent}} from producers;
    ``consumed``: {producer_id: [count, sum of seqs]} merged over consumer processes.
    """
    mode = "auto-ack" if auto_ack else "ack"
    if not has_consumers or not any(fanout.values()):
        return {"status": "skipped", "mode": mode, "reason": "no consumers", "expected": 0,
                "consumed": 0, "lost": 0, "duplicated": 0, "checksum_ok": None,
                "producers": {}}
    producers: dict[str, dict[str, Any]] = {}
    lost = dup = expected_total = consumed_total = 0
    checksum_ok = True
    nacked = 0
    for pid, pub in sorted(published.items()):
        reach = fanout.get(pid, 1)
        exp_n, exp_sum = pub["count"] * reach, pub["checksum"] * reach
        got_n, got_sum = consumed.get(pid, [0, 0])
        ok_sum = got_sum == exp_sum
        checksum_ok &= ok_sum
        lost += max(0, exp_n - got_n)
        dup += max(0, got_n - exp_n)
        expected_total += exp_n
        consumed_total += got_n
        nacked += pub.get("nacked", 0) + pub.get("timed_out", 0)
        producers[str(pid)] = {"sent": pub["count"], "queues": reach, "expected": exp_n,
                               "consumed": got_n, "checksum_ok": ok_sum}
    unknown = sorted(set(consumed) - set(published))
    for pid in unknown:
        dup += consumed[pid][0]
        consumed_total += consumed[pid][0]
    status = "ok" if not lost and not dup and checksum_ok and not unknown else "failed"
    reason = None
    if status == "failed":
        parts = []
        if lost:
            parts.append(f"{lost} lost")
        if dup:
            parts.append(f"{dup} duplicated")
        if not checksum_ok:
            parts.append("checksum mismatch")
        if unknown:
            parts.append(f"messages from unknown producers {unknown}")
        if nacked and not resend:
            parts.append(f"{nacked} nacked/timed out and not resent (--resend)")
        reason = ", ".join(parts)
    return {"status": status, "mode": mode, "reason": reason, "expected": expected_total,
            "consumed": consumed_total, "lost": lost, "duplicated": dup,
            "checksum_ok": checksum_ok, "producers": producers}


def rate(n: float, seconds: float) -> float:
    """n / seconds rounded to 0.1 (0 for an empty interval)."""
    return round(n / seconds, 1) if seconds > 0 else 0.0


def progress_line(t: float, d: dict[str, float], lat: Histogram, broker: tuple | None,
                  blocked: bool) -> str:
    """PerfTest-like line: ``time 3.0 s, sent 45123 msg/s, confirmed …, received …, latency
    p50/p95/p99/max … ms``; ``d`` holds the per-second deltas."""
    p = lat.percentiles()
    fmt = "/".join("-" if p[k] is None else f"{p[k]:.2f}" for k in ("p50", "p95", "p99", "max"))
    line = (f"time {t:6.1f} s, sent {d['published']:.0f} msg/s, confirmed {d['confirmed']:.0f}"
            f" msg/s, nacked {d['nacked']:.0f}, received {d['consumed']:.0f} msg/s,"
            f" latency p50/p95/p99/max {fmt} ms")
    if broker is not None:
        line += f", broker cpu {broker[0]:.0f}% rss {broker[1] / 1e6:.0f} MB"
    if blocked:
        line += ", BLOCKED"
    return line
