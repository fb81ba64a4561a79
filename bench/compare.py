# bench/compare.py — `python -m bench compare URI_A URI_B --scenario NAME`.
#
# Owns: running one named scenario against two brokers alternately (A B A B …), the medians
# per broker and the B/A ratios, printed as a table and optionally saved as JSON
# ("bench-compare/1": every run's full result plus the summary).
# Talks to: bench.scenarios, bench.options, bench.coordinator.
# Must never: compare runs taken at different times; only one interleaved session's ratios
# are meaningful on a noisy shared machine.
"""A/B comparison of two brokers on one scenario."""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from bench import options, report, scenarios

METRICS: tuple[tuple[str, str, str], ...] = (
    # (label, result path, unit)
    ("publish", "rates.publish", "msg/s"),
    ("confirm", "rates.confirm", "msg/s"),
    ("consume", "rates.consume", "msg/s"),
    ("latency p50", "latency_ms.p50", "ms"),
    ("latency p99", "latency_ms.p99", "ms"),
    ("confirm p50", "confirm_latency_ms.p50", "ms"),
    ("broker cpu", "broker.cpu_percent_mean", "%"),
    ("broker cpu/msg", "broker.cpu_us_per_message", "us"),
    ("broker rss peak", "broker.rss_peak_bytes", "MB"),
)


def pick(doc: dict[str, Any], path: str) -> float | None:
    """Value at a dotted path of a result document (None when absent)."""
    cur: Any = doc
    for part in path.split("."):
        if not isinstance(cur, dict) or cur.get(part) is None:
            return None
        cur = cur[part]
    return float(cur)


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """{side: {metric label: median over that side's runs}} and the B/A ratio under 'ratio'."""
    out: dict[str, dict[str, float | None]] = {"A": {}, "B": {}, "ratio": {}}
    for label, path, unit in METRICS:
        for side in ("A", "B"):
            vals = [v for r in runs if r["side"] == side
                    if (v := pick(r["result"], path)) is not None]
            med = statistics.median(vals) if vals else None
            if med is not None and unit == "MB":
                med = med / 1e6
            out[side][label] = med
        a, b = out["A"][label], out["B"][label]
        out["ratio"][label] = round(b / a, 3) if a and b is not None else None
    return out


def table(summary: dict[str, dict[str, float | None]], names: tuple[str, str]) -> str:
    """Plain-text table: metric | A median | B median | B/A."""
    rows = [f"{'metric':<18}{names[0]:>16}{names[1]:>16}{'B/A':>9}"]
    for label, _, unit in METRICS:
        a, b, r = summary["A"][label], summary["B"][label], summary["ratio"][label]

        def fmt(v: float | None) -> str:
            return "-" if v is None else (f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}")

        rows.append(f"{label + ' (' + unit + ')':<18}{fmt(a):>16}{fmt(b):>16}"
                    f"{'-' if r is None else f'{r:.2f}':>9}")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench compare",
                                description="Run a scenario against two brokers, A B A B …")
    p.add_argument("uri_a")
    p.add_argument("uri_b")
    p.add_argument("--scenario", required=True, choices=scenarios.NAMES)
    p.add_argument("--rounds", type=int, default=3, help="A/B pairs (>= 3 recommended)")
    p.add_argument("--names", nargs=2, default=("A", "B"), help="labels for the two brokers")
    p.add_argument("--out", help="write bench-compare/1 JSON here")
    options.add_run_options(p)
    ns = p.parse_args(argv)
    out_file = ns.out or ns.json
    ns.json = None
    runs: list[dict[str, Any]] = []
    ok = True
    from bench.coordinator import run

    for rnd in range(1, ns.rounds + 1):
        for side, uri in (("A", ns.uri_a), ("B", ns.uri_b)):
            base = scenarios.named(ns.scenario).replace(uri=uri, quiet=True)
            ns.uri = None
            sc = options.scenario_from_args(ns, base)
            doc = run(sc)
            ok &= doc["ok"]
            runs.append({"side": side, "round": rnd, "result": doc})
            print(f"round {rnd} {ns.names['AB'.index(side)]:>10}: publish "
                  f"{doc['rates']['publish']:,.0f} msg/s, consume "
                  f"{doc['rates']['consume']:,.0f} msg/s, latency p50 "
                  f"{doc['latency_ms']['p50']} ms, verification "
                  f"{doc['verification']['status']}"
                  + (f", errors {doc['errors']}" if doc["errors"] else ""), flush=True)
    summary = summarize(runs)
    print(f"\nscenario {ns.scenario}, {ns.rounds} rounds, medians "
          f"(A = {ns.names[0]}, B = {ns.names[1]}):")
    print(table(summary, tuple(ns.names)))
    if out_file:
        with open(out_file, "w") as f:
            json.dump({"schema": "bench-compare/1", "environment": report.environment(),
                       "scenario": ns.scenario, "names": list(ns.names),
                       "summary": summary, "runs": runs}, f, indent=1)
    return 0 if ok else 1
