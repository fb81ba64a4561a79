# bench/cost_curves.py — how a broker's cost grows with the number of queues and connections.
#
# Owns: the two curves of the performance issue (15, item 3) and their plot: broker RSS, CPU
# while idle and at a low rate, and rates/latency, for N queues with one consumer each and for
# M idle connections beside one busy publisher/consumer pair.
# Talks to: the broker under test over AMQP (bench.amqp's light client, heartbeats off) and
# its process through bench.brokerproc (RSS, CPU time from /proc, when it runs here).
# Must never: leave queues or connections behind (each point cleans up before the next).
"""Cost curves: broker resources versus queues and versus idle connections.

    python -m bench.cost_curves queues URI [--counts 1,10,100,1000,10000] [--json F]
    python -m bench.cost_curves connections URI [--counts 1000,10000] [--json F]
    python -m bench.cost_curves plot A.json [B.json ...] --out curves.png

queues: for each N, declare N queues (cc-q-<i>, not durable) with one auto-ack consumer each
(all on one consumer connection, spread over channels of 500 consumers), wait
`--settle-seconds`, then measure the broker's CPU (%, 100 = one core) over `--idle-seconds`
with nothing happening (what idle queues cost), then publish `--rate` msg/s in all (round-robin over the queues through the
default exchange, 16-byte bodies carrying a timestamp) for `--seconds` and measure the CPU,
the rates and the end-to-end latency (p50/p99, ms). RSS (MB) after setup and after the load.
connections: for each M, open M connections (handshake done, one channel each, heartbeat 0
so only the broker's own timers count), measure RSS and idle CPU, then run one publisher and
one consumer on their own queue at `--busy-rate` msg/s and measure its rates, latency and CPU.

Output (--json): {"schema": "bench-cost-curves/1", "name", "uri", "loadavg_before",
"loadavg_after", "queues": [point...], "connections": [point...]}, one point per count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import struct
import sys
import time
from typing import Any

from pamqp import commands

from bench.amqp import URI, Connection
from bench.brokerproc import BrokerSampler

SCHEMA = "bench-cost-curves/1"
CONSUMERS_PER_CHANNEL = 500
OPEN_BATCH = 200  # connections opened concurrently
_BODY = struct.Struct("!QQ")  # the bench's body header: monotonic ns, tag


class Probe:
    """CPU (%) and RSS (MB) of the broker process between two marks; None when the broker
    does not run on this machine."""

    def __init__(self, uri: URI) -> None:
        self.sampler = BrokerSampler.for_uri(uri.host, uri.port)

    def mark(self) -> tuple[float, float] | None:
        """(monotonic s, CPU s so far) of the broker."""
        if self.sampler is None:
            return None
        got = self.sampler.cpu_rss()
        return None if got is None else (time.monotonic(), got[0])

    def cpu_since(self, mark: tuple[float, float] | None) -> float | None:
        """Mean CPU % of the broker since `mark`."""
        now = self.mark()
        if mark is None or now is None or now[0] <= mark[0]:
            return None
        return round(100.0 * (now[1] - mark[1]) / (now[0] - mark[0]), 2)

    def rss_mb(self) -> float | None:
        if self.sampler is None:
            return None
        got = self.sampler.cpu_rss()
        return None if got is None else round(got[1] / 1e6, 1)


class Latencies:
    """Deliveries counted and end-to-end latencies (ms) from the bodies' timestamps."""

    def __init__(self) -> None:
        self.count = 0
        self.samples: list[float] = []
        self.expected = -1  # set by drained(): the count to wake it at
        self.all_in = asyncio.Event()

    def on_deliver(self, _dtag: int, ts_ns: int, _tag: int, _size: int, now_ns: int) -> None:
        self.count += 1
        if len(self.samples) < 200_000:
            self.samples.append((now_ns - ts_ns) / 1e6)
        if self.count == self.expected:
            self.all_in.set()

    async def drained(self, expected: int, within: float = 10.0) -> None:
        """Wait (at most `within` s) until `expected` deliveries have arrived."""
        self.expected = expected
        if self.count >= expected:
            return
        try:
            await asyncio.wait_for(self.all_in.wait(), within)
        except TimeoutError:
            pass  # reported as consumed < sent

    def summary(self) -> dict[str, float | None]:
        if not self.samples:
            return {"p50": None, "p99": None}
        ordered = sorted(self.samples)
        return {"p50": round(statistics.median(ordered), 3),
                "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 3)}


async def _publish_for(ch: Any, keys: list[str], rate: float, seconds: float) -> int:
    """Publish `rate` msg/s in all, round-robin over routing keys `keys` (default exchange),
    for `seconds`; returns how many were sent. Paced every 10 ms."""
    sent = 0
    start = time.monotonic()
    n = len(keys)
    while True:
        elapsed = time.monotonic() - start
        if elapsed >= seconds:
            return sent
        due = int(elapsed * rate) + 1
        while sent < due:
            key = keys[sent % n]
            ch.send(commands.Basic.Publish(exchange="", routing_key=key))
            body = _BODY.pack(time.monotonic_ns(), sent)
            ch.conn.write(_content(ch.id, body))
            sent += 1
        await asyncio.sleep(0.01)


def _content(channel: int, body: bytes) -> bytes:
    """Content header (no properties) + one body frame on `channel`."""
    head = struct.pack("!BHIHHQH", 2, channel, 14, 60, 0, len(body), 0) + b"\xce"
    return head + struct.pack("!BHI", 3, channel, len(body)) + body + b"\xce"


async def queues_point(uri: URI, n: int, rate: float, seconds: float, idle: float,
                       settle: float = 6.0) -> dict:
    """One point of the queue curve (see the module docstring)."""
    probe = Probe(uri)
    rss_before = probe.rss_mb()
    t0 = time.monotonic()
    admin = await Connection.open(uri, "cc-admin")
    ach = await admin.channel()
    names = [f"cc-q-{i}" for i in range(n)]
    for name in names:
        await ach.rpc(commands.Queue.Declare(queue=name), commands.Queue.DeclareOk)
    consumer = await Connection.open(uri, "cc-consumer")
    lat = Latencies()
    for start in range(0, n, CONSUMERS_PER_CHANNEL):
        ch = await consumer.channel()
        ch.on_deliver = lat.on_deliver
        for name in names[start:start + CONSUMERS_PER_CHANNEL]:
            await ch.rpc(commands.Basic.Consume(queue=name, no_ack=True),
                         commands.Basic.ConsumeOk)
    setup_s = time.monotonic() - t0
    rss_setup = probe.rss_mb()
    await asyncio.sleep(settle)  # past the queues' last busy-time work (a RAM report 5 s on)
    mark = probe.mark()
    await asyncio.sleep(idle)
    idle_cpu = probe.cpu_since(mark)
    publisher = await Connection.open(uri, "cc-publisher")
    pch = await publisher.channel()
    mark = probe.mark()
    t1 = time.monotonic()
    sent = await _publish_for(pch, names, rate, seconds)
    await lat.drained(sent)
    elapsed = time.monotonic() - t1
    busy_cpu = probe.cpu_since(mark)
    rss_after = probe.rss_mb()
    for name in names:
        await ach.rpc(commands.Queue.Delete(queue=name), commands.Queue.DeleteOk)
    for conn in (publisher, consumer, admin):
        await conn.close()
    return {"queues": n, "setup_s": round(setup_s, 2), "rss_before_mb": rss_before,
            "rss_setup_mb": rss_setup, "rss_after_mb": rss_after, "idle_cpu_pct": idle_cpu,
            "busy_cpu_pct": busy_cpu, "rate_target": rate,
            "publish_rate": round(sent / seconds, 1), "consume_rate": round(lat.count / elapsed, 1),
            "sent": sent, "consumed": lat.count, "latency_ms": lat.summary()}


async def _open_many(uri: URI, m: int, batch_size: int = OPEN_BATCH) -> list[Connection]:
    conns: list[Connection] = []
    for start in range(0, m, batch_size):
        batch = await asyncio.gather(*(Connection.open(uri, f"cc-idle-{i}")
                                       for i in range(start, min(m, start + batch_size))))
        conns.extend(batch)
    await asyncio.gather(*(c.channel() for c in conns))
    return conns


async def connections_point(uri: URI, m: int, busy_rate: float, seconds: float,
                            idle: float, open_batch: int = OPEN_BATCH) -> dict:
    """One point of the connection curve (see the module docstring)."""
    probe = Probe(uri)
    rss_before = probe.rss_mb()
    t0 = time.monotonic()
    idle_conns = await _open_many(uri, m, open_batch)
    open_s = time.monotonic() - t0
    rss_open = probe.rss_mb()
    await asyncio.sleep(1.0)
    mark = probe.mark()
    await asyncio.sleep(idle)
    idle_cpu = probe.cpu_since(mark)
    admin = await Connection.open(uri, "cc-busy")
    cch = await admin.channel()
    await cch.rpc(commands.Queue.Declare(queue="cc-busy", auto_delete=True),
                  commands.Queue.DeclareOk)
    lat = Latencies()
    cch.on_deliver = lat.on_deliver
    await cch.rpc(commands.Basic.Consume(queue="cc-busy", no_ack=True), commands.Basic.ConsumeOk)
    publisher = await Connection.open(uri, "cc-busy-pub")
    pch = await publisher.channel()
    mark = probe.mark()
    t1 = time.monotonic()
    sent = await _publish_for(pch, ["cc-busy"], busy_rate, seconds)
    await lat.drained(sent)
    elapsed = time.monotonic() - t1
    busy_cpu = probe.cpu_since(mark)
    rss_after = probe.rss_mb()
    await publisher.close()
    await admin.close()
    for start in range(0, len(idle_conns), OPEN_BATCH):
        await asyncio.gather(*(c.close() for c in idle_conns[start:start + OPEN_BATCH]))
    return {"connections": m, "open_s": round(open_s, 2), "rss_before_mb": rss_before,
            "rss_open_mb": rss_open, "rss_after_mb": rss_after, "idle_cpu_pct": idle_cpu,
            "busy_cpu_pct": busy_cpu, "busy_rate_target": busy_rate,
            "publish_rate": round(sent / seconds, 1), "consume_rate": round(lat.count / elapsed, 1),
            "sent": sent, "consumed": lat.count, "latency_ms": lat.summary()}


def raise_nofile(needed: int) -> None:
    """Raise this process's open-file soft limit to the hard limit; warn when too low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < needed:
        print(f"warning: open-file hard limit {hard} < {needed} needed (ulimit -Hn)",
              file=sys.stderr)


async def run(args: argparse.Namespace) -> dict:
    uri = URI.parse(args.uri)
    doc: dict[str, Any] = {"schema": SCHEMA, "name": args.name, "uri": args.uri,
                           "loadavg_before": os.getloadavg(), "queues": [], "connections": []}
    counts = [int(c) for c in args.counts.split(",")]
    for count in counts:
        if args.curve == "queues":
            point = await queues_point(uri, count, args.rate, args.seconds, args.idle_seconds,
                                       args.settle_seconds)
        else:
            raise_nofile(count + 100)
            point = await connections_point(uri, count, args.busy_rate, args.seconds,
                                            args.idle_seconds, args.open_batch)
        doc[args.curve].append(point)
        print(json.dumps(point), flush=True)
    doc["loadavg_after"] = os.getloadavg()
    return doc


def plot(paths: list[str], out: str) -> None:
    """RSS and idle/busy CPU versus queues and versus connections, one line per file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    docs = []
    for path in paths:
        with open(path) as f:
            docs.append(json.load(f))
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for row, (curve, key) in enumerate((("queues", "queues"), ("connections", "connections"))):
        for doc in docs:
            points = doc.get(curve) or []
            if not points:
                continue
            xs = [p[key] for p in points]
            label = doc.get("name") or doc.get("uri")
            axes[row][0].plot(xs, [p.get("rss_after_mb") for p in points], marker="o",
                              label=f"{label} RSS")
            axes[row][1].plot(xs, [p.get("idle_cpu_pct") for p in points], marker="o",
                              label=f"{label} idle")
            axes[row][1].plot(xs, [p.get("busy_cpu_pct") for p in points], marker="x",
                              linestyle="--", label=f"{label} busy")
        axes[row][0].set(xscale="log", xlabel=curve, ylabel="broker RSS after the run (MB)",
                         title=f"memory vs {curve}")
        axes[row][1].set(xscale="log", xlabel=curve, ylabel="broker CPU (% of a core)",
                         title=f"CPU vs {curve} (idle, and at the low rate)")
        for ax in axes[row]:
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cost_curves", description=__doc__)
    sub = ap.add_subparsers(dest="curve", required=True)
    for curve, counts in (("queues", "1,10,100,1000,10000"), ("connections", "1000,10000")):
        p = sub.add_parser(curve)
        p.add_argument("uri", nargs="?", default="amqp://guest:guest@127.0.0.1:5672/%2F")
        p.add_argument("--counts", default=counts)
        p.add_argument("--name", default="", help="label of the broker in the JSON and plot")
        p.add_argument("--rate", type=float, default=200.0, help="queues: msg/s in all")
        p.add_argument("--busy-rate", type=float, default=5000.0,
                       help="connections: msg/s of the busy pair")
        p.add_argument("--seconds", type=float, default=10.0)
        p.add_argument("--open-batch", type=int, default=OPEN_BATCH,
                       help="connections: how many are opened concurrently")
        p.add_argument("--idle-seconds", type=float, default=10.0)
        p.add_argument("--settle-seconds", type=float, default=6.0,
                       help="queues: wait after setup before the idle window (a queue reports "
                            "its RAM use once more 5 s after its last activity)")
        p.add_argument("--json", help="write the result document here")
    p = sub.add_parser("plot")
    p.add_argument("files", nargs="+")
    p.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.curve == "plot":
        plot(args.files, args.out)
        return 0
    doc = asyncio.run(run(args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
