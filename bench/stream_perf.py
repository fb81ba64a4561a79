# bench/stream_perf.py — `python -m bench.stream_perf`: the stream protocol's throughput,
# publish with confirms then consume from `first`, against several servers in one alternated
# session (issue 37 item 10).
#
# Owns: the session plan (rounds × sizes × targets, alternated), each run's stream (created,
# filled, read, deleted), the servers' CPU and RSS while they work, the JSON document
# ("bench-stream-perf/1") and its markdown table.
# Talks to: the servers through bench.stream_client; /proc through bench.brokerproc.
# Must never: leave its stream behind, or run a point without waiting for a quiet machine.
"""Stream protocol throughput: for each round, size and target (alternated), one client
connection publishes `size`-byte AMQP 1.0 messages for `-z` seconds (batches of 100, at
most 10 000 unconfirmed), then a second connection reads the stream from `first` until it
has every confirmed message (or `-z` × 3 seconds pass). Before each run it waits until the
1-minute load average is below `--quiet-load`. Per run: confirmed msg/s, consumed msg/s,
and the server's CPU (cores: CPU seconds / wall seconds) and peak RSS in each phase.

A target named ``floor`` is bench.stream_sink (started here when ``--floor`` is given): a
server that confirms at once and serves canned chunks, i.e. the client's own ceiling.

    python -m bench.stream_perf --target rabbitmq=127.0.0.1:5552 \\
        --target pybroker=127.0.0.1:5553 --floor --sizes 12,1024 --rounds 3 -z 30 \\
        --json /tmp/stream-perf.json
    python -m bench.stream_perf --table /tmp/stream-perf.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

from bench.brokerproc import BrokerSampler
from bench.latency_curve import wait_quiet
from bench.stream_client import StreamClient


async def _sampled(sampler: BrokerSampler | None, coro: Any) -> tuple[Any, dict]:
    """Run `coro` while sampling the server every 0.5 s: (its result, cpu cores, rss peak)."""
    if sampler is None:
        return await coro, {}
    before = sampler.cpu_rss()
    t0 = time.monotonic()
    peak = before[1] if before else 0
    task = asyncio.ensure_future(coro)
    while not task.done():
        await asyncio.wait({task}, timeout=0.5)
        now = sampler.cpu_rss()
        if now:
            peak = max(peak, now[1])
    after = sampler.cpu_rss()
    wall = time.monotonic() - t0
    usage = {}
    if before and after and wall > 0:
        usage = {"cpu_cores": round((after[0] - before[0]) / wall, 3),
                 "rss_peak_mb": round(peak / 1e6, 1)}
    return task.result(), usage


async def one_run(host: str, port: int, size: int, seconds: float,
                  user: str = "guest", password: str = "guest") -> dict:
    """Publish for `seconds`, then read everything back; the run's figures."""
    sampler = BrokerSampler.for_uri(host, port)
    stream = f"stream-perf-{uuid.uuid4().hex[:8]}"
    admin = await StreamClient.connect(host, port, user, password, name="stream-perf-admin")
    try:
        await admin.create_stream(stream)
        pub = await StreamClient.connect(host, port, user, password, name="stream-perf-pub")
        await pub.declare_publisher(1, stream)
        published, pub_use = await _sampled(sampler, pub.publish_for(seconds, size))
        await pub.close()
        con = await StreamClient.connect(host, port, user, password, name="stream-perf-con")
        consumed, con_use = await _sampled(
            sampler, con.consume(stream, int(published["confirmed"]), seconds * 3))
        await con.close()
    finally:
        try:
            await admin.delete_stream(stream)
        finally:
            await admin.close()
    return {"size": size, "publish": published, "consume": consumed,
            "server_publish": pub_use, "server_consume": con_use}


def _median(xs: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(xs), 1), "min": round(min(xs), 1),
            "max": round(max(xs), 1)}


def summarise(runs: list[dict]) -> dict:
    """{target: {size: {publish, consume: {median, min, max} msg/s, cpu and rss medians}}}."""
    out: dict[str, dict[str, Any]] = {}
    for r in runs:
        if "error" in r:
            continue
        slot = out.setdefault(r["target"], {}).setdefault(str(r["size"]), {
            "publish": [], "consume": [], "publish_cpu": [], "consume_cpu": [], "rss": []})
        slot["publish"].append(r["publish"]["rate"])
        slot["consume"].append(r["consume"]["rate"])
        for phase in ("publish", "consume"):
            use = r[f"server_{phase}"]
            if use:
                slot[f"{phase}_cpu"].append(use["cpu_cores"])
                slot["rss"].append(use["rss_peak_mb"])
    for sizes in out.values():
        for size, slot in sizes.items():
            sizes[size] = {k: _median(v) for k, v in slot.items() if v}
    return out


def table(doc: dict) -> str:
    """Markdown: per size and target, publish and consume msg/s (median, min–max over
    rounds), the server's CPU cores in each phase and its peak RSS."""
    lines = ["| size | server | publish msg/s | consume msg/s | CPU cores pub / con | "
             "peak RSS MB |", "|---|---|---:|---:|---|---:|"]
    summary = doc["summary"]
    sizes = sorted({int(s) for t in summary.values() for s in t})
    for size in sizes:
        for target, by_size in summary.items():
            s = by_size.get(str(size))
            if not s:
                continue

            def fmt(k: str, s: dict = s) -> str:
                v = s.get(k)
                return f"{v['median']:,.0f} ({v['min']:,.0f}–{v['max']:,.0f})" if v else "–"

            cpu = (f"{s['publish_cpu']['median']:.2f} / {s['consume_cpu']['median']:.2f}"
                   if "publish_cpu" in s and "consume_cpu" in s else "–")
            rss = f"{s['rss']['max']:.0f}" if "rss" in s else "–"
            lines.append(f"| {size} B | {target} | {fmt('publish')} | {fmt('consume')} | "
                         f"{cpu} | {rss} |")
    return "\n".join(lines)


def _wait_listening(port: int, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.stream_perf", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", action="append", default=[], help="NAME=HOST:PORT")
    p.add_argument("--floor", action="store_true",
                   help="also run against bench.stream_sink (target 'floor')")
    p.add_argument("--sizes", default="12,1024", help="message body bytes, comma-separated")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("-z", "--time", type=float, default=30.0, help="seconds of publishing")
    p.add_argument("--quiet-load", type=float, default=1.5)
    p.add_argument("--json", help="write the document here")
    p.add_argument("--table", metavar="JSON", help="print the table of a finished session")
    a = p.parse_args(argv)
    if a.table:
        with open(a.table) as f:
            print(table(json.load(f)))
        return
    targets = [(n, h, int(port)) for n, hp in (t.split("=", 1) for t in a.target)
               for h, port in [hp.rsplit(":", 1)]]
    sink = None
    if a.floor:
        with socket.socket() as probe:  # a free port for the null server
            probe.bind(("127.0.0.1", 0))
            sink_port = probe.getsockname()[1]
        sink = subprocess.Popen([sys.executable, "-m", "bench.stream_sink", "--port",
                                 str(sink_port)])
        _wait_listening(sink_port)
        targets.append(("floor", "127.0.0.1", sink_port))
    runs: list[dict] = []
    try:
        for rnd in range(a.rounds):
            for size in (int(x) for x in a.sizes.split(",")):
                for name, host, port in targets:
                    load = wait_quiet(a.quiet_load)
                    try:
                        r = asyncio.run(one_run(host, port, size, a.time))
                    except (OSError, RuntimeError, TimeoutError) as exc:  # recorded; the session goes on
                        r = {"size": size, "error": repr(exc)}
                    r.update(target=name, round=rnd, load_before=load)
                    runs.append(r)
                    print(json.dumps(r), flush=True)
    finally:
        if sink is not None:
            sink.terminate()
            sink.wait()
    doc = {"schema": "bench-stream-perf/1", "seconds": a.time, "rounds": a.rounds,
           "targets": {n: f"{h}:{p}" for n, h, p in targets}, "runs": runs,
           "summary": summarise(runs), "loadavg_end": list(os.getloadavg())}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
    print(table(doc))


if __name__ == "__main__":
    main()
