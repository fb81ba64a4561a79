# bench/streams.py — `python -m bench.streams URI [URI ...]`: a stream queue's publish rate
# with confirms and the time for C consumers to each read it all from `first` (issue 22
# item 7), for this broker or RabbitMQ (streams over AMQP 0-9-1 need no plugin there).
#
# Owns: one stream queue per run (declared, filled, read, deleted).
# Talks to: the broker over AMQP (broker.shovel.client), /proc for the broker's RSS and CPU.
# Must never: run without a bound, or leave its stream behind.
"""Stream throughput: N persistent 1 KB messages published with confirms (window 500) into
a fresh stream, then C consumers (basic.qos 1000, x-stream-offset first, an ack with
multiple every 500) each read all N at once. Prints JSON per URI: publish msg/s, read
msg/s (all consumers together), the broker's RSS before and at its peak while reading, its
CPU µs per message published and per message delivered, and the 1-minute load average.

    python -m bench.streams amqp://guest:guest@127.0.0.1:5672/%2F amqp://…:5691/%2F
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from typing import Any

from pamqp import commands

from bench.brokerproc import BrokerSampler
from bench.scaleout import PERSISTENT
from broker.shovel.client import Client, Endpoint

BODY = b"s" * 1024


async def _publish(client: Client, queue: str, n: int, window: int = 500) -> None:
    confirmed = 0
    wake = asyncio.Event()

    def on_confirm(tag: int, multiple: bool, ack: bool) -> None:
        nonlocal confirmed
        confirmed = tag if multiple else confirmed + 1
        wake.set()

    client.on_confirm = on_confirm
    await client.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    for sent in range(1, n + 1):
        while sent - confirmed > window:
            wake.clear()
            await asyncio.wait_for(wake.wait(), 60)
        client.publish("", queue, PERSISTENT, BODY)
        if sent % 200 == 0:
            await asyncio.sleep(0)
    while confirmed < n:
        wake.clear()
        await asyncio.wait_for(wake.wait(), 60)


async def _read_all(uri: str, queue: str, n: int) -> None:
    client = await Client.connect(Endpoint.parse(uri), "bench.streams reader", "bench")
    done = asyncio.Event()
    count = 0

    def on_delivery(d: Any) -> None:
        nonlocal count
        count += 1
        if count % 500 == 0 or count == n:
            client.ack(d[0], multiple=True)
        if count >= n:
            done.set()

    client.on_delivery = on_delivery
    await client.rpc(1, commands.Basic.Qos(prefetch_count=1000), commands.Basic.QosOk)
    await client.rpc(1, commands.Basic.Consume(queue=queue, arguments={
        "x-stream-offset": "first"}), commands.Basic.ConsumeOk)
    await asyncio.wait_for(done.wait(), 600)
    await client.close()


async def run(uri: str, n: int, consumers: int) -> dict[str, Any]:
    ep = Endpoint.parse(uri)
    sampler = BrokerSampler.for_uri(ep.host, ep.port)
    queue = f"bench-stream-{uuid.uuid4().hex[:8]}"
    admin = await Client.connect(ep, "bench.streams", "bench")
    out: dict[str, Any] = {"uri": uri.split("@")[-1], "messages": n, "consumers": consumers,
                           "load1_start": os.getloadavg()[0]}
    try:
        await admin.rpc(1, commands.Queue.Declare(queue=queue, durable=True, arguments={
            "x-queue-type": "stream"}), commands.Queue.DeclareOk)
        cpu_rss0 = sampler.cpu_rss() if sampler else None
        t0 = time.monotonic()
        await _publish(admin, queue, n)
        t1 = time.monotonic()
        cpu_rss1 = sampler.cpu_rss() if sampler else None
        out["publish_rate"] = round(n / (t1 - t0))
        peak = [cpu_rss1[1] if cpu_rss1 else 0]

        async def watch() -> None:
            while True:
                v = sampler.cpu_rss() if sampler else None
                if v:
                    peak[0] = max(peak[0], v[1])
                await asyncio.sleep(0.2)
        watcher = asyncio.ensure_future(watch())
        t2 = time.monotonic()
        await asyncio.gather(*(_read_all(uri, queue, n) for _ in range(consumers)))
        t3 = time.monotonic()
        watcher.cancel()
        cpu_rss2 = sampler.cpu_rss() if sampler else None
        out["read_rate"] = round(n * consumers / (t3 - t2))
        out["read_seconds"] = round(t3 - t2, 2)
        if cpu_rss0 and cpu_rss1 and cpu_rss2:
            out["cpu_us_per_published"] = round((cpu_rss1[0] - cpu_rss0[0]) / n * 1e6, 1)
            out["cpu_us_per_delivered"] = round(
                (cpu_rss2[0] - cpu_rss1[0]) / (n * consumers) * 1e6, 1)
            out["rss_mib_after_publish"] = round(cpu_rss1[1] / 2**20, 1)
            out["rss_mib_peak_reading"] = round(peak[0] / 2**20, 1)
        out["load1_end"] = os.getloadavg()[0]
    finally:
        await admin.rpc(1, commands.Queue.Delete(queue=queue), commands.Queue.DeleteOk)
        await admin.close()
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.streams", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("uris", nargs="+")
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--consumers", type=int, default=10)
    args = p.parse_args(argv)
    results = [asyncio.run(run(u, args.messages, args.consumers)) for u in args.uris]
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
