# bench/memory.py — the memory and flow-control benchmark (issue 10's "Done when").
#
# Owns: runs against a broker subprocess with vm_memory_high_watermark.absolute (512MB):
# "transient" (4 producers publish 1 KB transient messages as fast as they can for 60 s to a
# queue with no consumer, then one consumer drains it), "transient-alarm" (the same with
# vm_memory_high_watermark_paging_ratio 1.0: no paging before the watermark, so the memory
# alarm is what stops the producers until paging catches up) and "persistent" (2 000 000
# persistent 1 KB messages into a default-mode durable queue from 4 producers, then
# drained), with the
# broker's RSS sampled every second and the producers' connection.blocked episodes; the JSON
# summary and the PNG plot under bench/results/memory/.
# Talks to: bench.storage_proc (broker subprocess, RSS sampler, ordered drain), bench.amqp and
# bench.publisher (the producers).
# Must never: leave the broker running or its data dir behind.
"""Memory benchmark: ``python -m bench.memory`` (every run) or
``--run transient|transient-alarm|persistent``.

Prints one JSON document per run and writes ``bench/results/memory/<run>.json`` and
``memory.png`` (RSS per second; shaded where a producer was blocked). Sizes: MB = 10^6 bytes,
as the broker's "512MB". Targets: transient run: RSS never above watermark + 10 %, producers
blocked and unblocked, every message drained once; persistent run: RSS under 400 MB, every
message drained in order (per producer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections import deque
from typing import Any

from bench import storage_proc as sp
from bench.options import Scenario
from bench.publisher import Publisher

QUEUE = "bench-memory"
MB = 1_000_000
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "memory")
ALARM = re.compile(r"vm_memory_high_watermark (set|clear)\. Memory used:(\d+) allowed:(\d+)")


class Episodes:
    """Polls the producers' connections every 20 ms: blocked episodes (connection.blocked
    to connection.unblocked) as [start_s, end_s] relative to t0."""

    def __init__(self, conns: list[Any], t0: float) -> None:
        self.conns = conns
        self.t0 = t0
        self.spans: list[list[float]] = []  # [start, end] of "some producer blocked"
        self.blocked_now = False
        self.max_blocked = 0  # most producers blocked at once

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            n = sum(1 for c in self.conns if c.blocked)
            self.max_blocked = max(self.max_blocked, n)
            now = time.monotonic() - self.t0
            if n and not self.blocked_now:
                self.spans.append([round(now, 2), -1.0])
            elif not n and self.blocked_now:
                self.spans[-1][1] = round(now, 2)
            self.blocked_now = bool(n)
            try:
                await asyncio.wait_for(stop.wait(), 0.02)
            except TimeoutError:
                pass
        if self.blocked_now:
            self.spans[-1][1] = round(time.monotonic() - self.t0, 2)


async def _produce_and_drain(b: sp.BrokerProc, sampler: sp.RssSampler, a: argparse.Namespace,
                             run: str, out: dict[str, Any]) -> None:
    persistent = run == "persistent"
    admin = await sp.connect(b.url, "memory-admin")
    conns = [await sp.connect(b.url, f"memory-producer-{i}") for i in range(a.producers)]
    try:
        ch = await admin.channel()
        await sp.declare(ch, QUEUE)
        per_producer = a.messages // a.producers if persistent else 0
        sc = Scenario(size=a.size, flags=("persistent",) if persistent else (),
                      confirm=a.window, pmessages=per_producer, time=0 if persistent else 1,
                      confirm_timeout=300.0)
        pubs = []
        for i, conn in enumerate(conns):
            pub = Publisher(await conn.channel(), i, "", QUEUE, sc)
            await pub.setup()
            pubs.append(pub)
        t0 = sampler.samples[0][0]
        episodes = Episodes(conns, t0)
        stop = asyncio.Event()
        watcher = asyncio.create_task(episodes.run(stop))
        sampler.set_phase("publishing")
        started = time.monotonic()
        tasks = [asyncio.create_task(p.run()) for p in pubs]
        timeline = []
        while not all(t.done() for t in tasks):
            await asyncio.wait(tasks, timeout=1.0)
            elapsed = time.monotonic() - started
            timeline.append([round(time.monotonic() - t0, 1),
                             sum(p.published for p in pubs), sum(p.confirmed for p in pubs),
                             sum(1 for c in conns if c.blocked)])
            if not persistent and elapsed >= a.seconds:
                for p in pubs:
                    p.stopping = True
        for t in tasks:
            t.result()  # raises what a publisher hit
        secs = time.monotonic() - started
        stop.set()
        await watcher
        sent = sum(p.next_seq for p in pubs)
        confirmed = sum(p.confirmed for p in pubs)
        out["publish"] = {
            "seconds": round(secs, 1), "sent": sent, "confirmed": confirmed,
            "nacked": sum(p.nacked for p in pubs), "timed_out": sum(p.timed_out for p in pubs),
            "rate_msg_s": round(confirmed / secs) if secs else None,
            "blocked_seconds_per_producer": [round(c.blocked_seconds, 1) for c in conns],
        }
        out["blocked_episodes"] = episodes.spans
        out["max_producers_blocked_at_once"] = episodes.max_blocked
        out["client_timeline"] = timeline  # [t s, published, confirmed, producers blocked]
        sampler.set_phase("idle")
        out["message_count_after_publish"] = await sp.declare(ch, QUEUE, passive=True)
        await asyncio.sleep(a.idle)
        sampler.set_phase("draining")
        drain = sp.OrderedDrain(await admin.channel(), QUEUE, sent, prefetch=a.prefetch,
                                ack_every=a.ack_every)
        dsecs = await drain.run()
        out["drain"] = {"expected": sent, "received": drain.received, "seconds": round(dsecs, 1),
                        "rate_msg_s": round(drain.received / dsecs) if dsecs else None,
                        "first_out_of_order": drain.first_bad}
        # OrderedDrain checks seq 0, 1, 2... per producer: no loss, no duplicate, in order
        out["exactly_once_in_order"] = drain.ordered and drain.received == sent
        sampler.set_phase("drained")
        out["message_count_after_drain"] = await sp.declare(ch, QUEUE, passive=True)
    finally:
        for c in [*conns, admin]:
            await c.close()


RUNS = {  # run -> broker settings of its own
    "transient": [],
    "transient-alarm": ["vm_memory_high_watermark_paging_ratio=1.0"],
    "persistent": [],
}


def one_run(run: str, a: argparse.Namespace) -> dict[str, Any]:
    """Start a broker, produce and drain, stop it; returns the run's summary."""
    extra = ["--set", f"vm_memory_high_watermark.absolute={a.watermark}",
             "--set", "management.tcp.port=0", "--set", "prometheus.tcp.port=0"]
    extra += [x for kv in RUNS[run] + a.broker_set for x in ("--set", kv)]
    data = tempfile.mkdtemp(prefix=f"memory-{run}-", dir=a.data_dir)
    out: dict[str, Any] = {
        "benchmark": "memory", "run": run, "watermark": a.watermark, "size": a.size,
        "producers": a.producers, "confirm_window": a.window,
        "seconds" if run != "persistent" else "messages":
            a.seconds if run != "persistent" else a.messages,
        "broker_set": RUNS[run] + a.broker_set, "environment_before": sp.machine()}
    try:
        with sp.BrokerProc(data, *extra) as b:
            b.log = deque(maxlen=200_000)  # every alarm line, not only the last 400 lines
            out["boot_seconds"] = round(b.start(), 3)
            with sp.RssSampler(b.pid, interval=1.0) as sampler:
                out["rss_idle_empty_mb"] = round(sampler.sample() / MB, 1)
                sp.run(_produce_and_drain(b, sampler, a, run, out))
            code, _ = b.stop()
            out["broker_exit"] = code
            log = b.output()
        alarms = [(m.group(1), int(m.group(2)), int(m.group(3))) for m in ALARM.finditer(log)]
        out["broker_alarm_lines"] = {"set": sum(1 for k, _u, _l in alarms if k == "set"),
                                     "clear": sum(1 for k, _u, _l in alarms if k == "clear"),
                                     "first": alarms[:4]}
        t0 = sampler.samples[0][0]
        out["rss_series_mb"] = [[round(t - t0, 1), ph, round(r / MB, 1)]
                                for t, ph, r in sampler.samples]
        out["peak_rss_mb"] = {ph: round(sampler.peak(ph) / MB, 1)
                              for ph in ("publishing", "idle", "draining", "drained")}
        out["peak_rss_mb"]["all"] = round(max(r for _t, _p, r in sampler.samples) / MB, 1)
        out["environment_after"] = sp.machine()
    finally:
        shutil.rmtree(data, ignore_errors=True)
    out["checks"] = _checks(run, a, out)
    out["ok"] = all(out["checks"].values())
    return out


def _checks(run: str, a: argparse.Namespace, out: dict[str, Any]) -> dict[str, bool]:
    from broker.config import parse_information_unit

    peak = out["peak_rss_mb"]["all"] * MB
    if run.startswith("transient"):
        limit = parse_information_unit(a.watermark)
        checks = {"rss_within_watermark_plus_10pct": peak <= 1.1 * limit,
                  "every_message_once": out["exactly_once_in_order"]}
        if run == "transient-alarm":  # the default run pages before the watermark
            checks["producers_blocked_and_unblocked"] = bool(out["blocked_episodes"]) and all(
                end >= 0 for _s, end in out["blocked_episodes"])
        return checks
    return {"rss_under_400mb": peak < 400 * MB,
            "all_delivered_in_order": out["exactly_once_in_order"]}


def plot(results: list[dict[str, Any]], path: str) -> None:
    """RSS per second of each run, watermark lines, blocked episodes shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from broker.config import parse_information_unit

    fig, axes = plt.subplots(len(results), 1, figsize=(10, 3.6 * len(results)), squeeze=False)
    for ax, res in zip(axes[:, 0], results, strict=True):
        limit = parse_information_unit(res["watermark"]) / MB
        series = res["rss_series_mb"]
        ax.plot([s[0] for s in series], [s[2] for s in series], lw=1.4, label="broker RSS")
        ax.axhline(limit, color="tab:red", lw=1, label=f"watermark {res['watermark']}")
        ax.axhline(1.1 * limit, color="tab:red", ls="--", lw=1, label="watermark + 10 %")
        ratio = next((float(kv.split("=", 1)[1]) for kv in res.get("broker_set", [])
                      if kv.startswith("vm_memory_high_watermark_paging_ratio=")), 0.5)
        if ratio < 1:
            ax.axhline(ratio * limit, color="tab:orange", ls=":", lw=1,
                       label=f"paging starts ({ratio})")
        if res["run"] == "persistent":
            ax.axhline(400, color="tab:purple", ls="--", lw=1, label="400 MB target")
        for i, (start, end) in enumerate(res["blocked_episodes"]):
            ax.axvspan(start, end, color="tab:red", alpha=0.12,
                       label="producers blocked" if i == 0 else None)
        phases: dict[str, float] = {}
        for t, ph, _r in series:
            phases.setdefault(ph, t)
        for ph in ("draining",):
            if ph in phases:
                ax.axvline(phases[ph], color="grey", lw=0.8)
                ax.text(phases[ph], ax.get_ylim()[1] * 0.95, " drain", color="grey", va="top")
        what = (f"{res['producers']} producers, 1 KB transient, {res.get('seconds')} s, no "
                "consumer, then drain" + (", paging ratio 1.0" if "alarm" in res["run"] else "")
                if res["run"].startswith("transient") else
                f"{res.get('messages'):,} persistent 1 KB, default-mode durable queue, then drain")
        ax.set_title(f"{res['run']}: {what} — peak {res['peak_rss_mb']['all']} MB", fontsize=10)
        ax.set_xlabel("s since broker start")
        ax.set_ylabel("RSS (MB)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def replot(out_dir: str = OUT) -> None:
    """Redraw memory.png from the JSON files in `out_dir` (python -m bench.memory --replot)."""
    results = []
    for run in RUNS:
        path = os.path.join(out_dir, f"{run}.json")
        if os.path.exists(path):
            with open(path) as f:
                results.append(json.load(f))
    plot(results, os.path.join(out_dir, "memory.png"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    p.add_argument("--run", choices=[*RUNS, "all"], default="all")
    p.add_argument("--watermark", default="512MB", help="vm_memory_high_watermark.absolute")
    p.add_argument("--producers", type=int, default=4, help="producer connections")
    p.add_argument("--seconds", type=float, default=60.0, help="transient run: publishing time")
    p.add_argument("--messages", type=int, default=2_000_000, help="persistent run: messages")
    p.add_argument("--size", type=int, default=1024, help="body bytes (>= 16)")
    p.add_argument("--window", type=int, default=1000, help="outstanding confirms per producer")
    p.add_argument("--prefetch", type=int, default=1000, help="drain consumer basic.qos")
    p.add_argument("--ack-every", type=int, default=200, help="drain: ack multiple every N")
    p.add_argument("--idle", type=float, default=3.0, help="seconds between publish and drain")
    p.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE",
                   help="more broker config (python -m broker --set)")
    p.add_argument("--data-dir", help="parent of the temporary data dir (default: TMPDIR)")
    p.add_argument("--out", default=OUT, help="directory for <run>.json and memory.png")
    p.add_argument("--replot", action="store_true", help="only redraw memory.png from --out")
    a = p.parse_args(argv)
    if a.replot:
        replot(a.out)
        return 0
    runs = list(RUNS) if a.run == "all" else [a.run]
    os.makedirs(a.out, exist_ok=True)
    results = []
    for run in runs:
        res = one_run(run, a)
        results.append(res)
        doc = json.dumps(res, indent=1)
        print(doc)
        with open(os.path.join(a.out, f"{run}.json"), "w") as f:
            f.write(doc + "\n")
    plot(results, os.path.join(a.out, "memory.png" if len(results) > 1 else f"{runs[0]}.png"))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
