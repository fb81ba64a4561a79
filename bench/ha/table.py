# bench/ha/table.py — the README table from `python -m bench.ha --json` documents.
#
# Owns: turning one or more result documents into the Markdown rows of
# bench/results/ha/README.md (engine, members, layout, batch, in flight, commits/s, p50/p99,
# recovery after kill -9, entries lost, RabbitMQ's quorum queue beside, load average).
# Talks to: nothing but the files it is given. Must never: run anything.
"""``python -m bench.ha.table round-2.json [round-3.json ...]``: Markdown tables on stdout."""

from __future__ import annotations

import json
import sys


def _n(x: float) -> str:
    return f"{x:,.0f}".replace(",", " ")


def tables(path: str) -> str:
    with open(path) as f:
        doc = json.load(f)
    rq = doc.get("rabbitmq_quorum") or {}
    rq_rate = (rq.get("rates") or {}).get("confirm")
    out = [f"### `{path.rsplit('/', 1)[-1]}` — started {doc['started']}, load "
           f"{doc['load_avg_start'][0]} at the start, {doc['load_avg_end'][0]} at the end", ""]
    out += ["| engine | members | layout | batch | in flight | commits/s | entries/s | "
            "p50 ms | p99 ms | load (1 min) |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for e in doc["engines"]:
        for r in e["runs"]:
            out.append(f"| {e['engine']} {e['version']} | {e['members']} | "
                       f"{'packed' if r.get('pack') else 'per-key'} | {r['batch']} | "
                       f"{r['inflight']} | {_n(r['commits_per_s'])} | {_n(r['entries_per_s'])} | "
                       f"{r['p50_ms']} | {r['p99_ms']} | {r['load_avg'][0]} |")
    out += ["", "Quorum queue on the engine (a publish commit of *batch* messages, then a settle "
            "commit; 8 writers):", "",
            "| engine | layout | batch | msg/s | publish p50 / p99 ms | settle p50 / p99 ms | "
            "RabbitMQ 3.10.8 quorum queue msg/s (same session) | ratio | load (1 min) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for e in doc["engines"]:
        for r in e.get("quorum_queue", []):
            ratio = f"{r['msg_per_s'] / rq_rate:.2f}" if rq_rate else "—"
            out.append(f"| {e['engine']} | {'packed' if r.get('pack') else 'per-key'} | "
                       f"{r['batch']} | {_n(r['msg_per_s'])} | {r['publish_p50_ms']} / "
                       f"{r['publish_p99_ms']} | {r['settle_p50_ms']} / {r['settle_p99_ms']} | "
                       f"{_n(rq_rate) if rq_rate else '—'} | {ratio} | {r['load_avg'][0]} |")
    out += ["", "kill -9 of the leader (batch of the kill run, 4 writers, 15 s):", "",
            "| engine | killed | new leader elected after s | commits resumed after s | "
            "entries confirmed | lost (new leader) | restarted member caught up after s | "
            "lost (restarted member) | load (1 min) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for e in doc["engines"]:
        k = e.get("kill")
        if k:
            out.append(f"| {e['engine']} | {k['killed']} | {k['leader_elected_s']} | "
                       f"{k['recovery_s']} | {_n(k['entries_confirmed'])} | {k['entries_lost']} | "
                       f"{k['restarted_member_caught_up_s']} | "
                       f"{k['restarted_member_entries_lost']} | {k['load_avg'][0]} |")
    if rq:
        lat = rq.get("confirm_latency_ms") or {}
        out += ["", f"RabbitMQ 3.10.8, single node, `x-queue-type=quorum`, paper shape "
                f"(2 producers × 2 channels, 3 consumers × 3 channels, 1 queue), 1 KB persistent "
                f"with confirms: **{_n(rq_rate)} msg/s** confirmed, consumed "
                f"{_n(rq['rates']['consume'])} msg/s, confirm latency p50 {lat.get('p50')} ms / "
                f"p99 {lat.get('p99')} ms; load {rq['load_avg_before'][0]} before, "
                f"{rq['load_avg_after'][0]} after."]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    for path in (sys.argv[1:] if argv is None else argv):
        print(tables(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
