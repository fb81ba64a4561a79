# bench/scaleout.py — `python -m bench.scaleout`: a shovel and a federated exchange between
# two brokers, this broker's or RabbitMQ's (issue 21 item 7).
#
# Owns: filling a source queue, timing a dynamic shovel that drains it to the other broker,
# and timing a federated exchange (publish on A, consume on B) with per-message latency.
# Talks to: the two brokers over AMQP (broker.shovel.client), this broker's HTTP API or
# RabbitMQ's rabbitmqctl to set parameters and policies, /proc for the brokers' CPU time.
# Must never: run without a bound (every wait has a deadline), or leave its parameters,
# policies and queues behind.
"""Shovel and federation throughput between two brokers on this machine.

    python -m bench.scaleout --system ours --a amqp://guest:guest@127.0.0.1:5701/%2F \\
        --b amqp://guest:guest@127.0.0.1:5702/%2F --a-api http://127.0.0.1:15701 \\
        --b-api http://127.0.0.1:15702
    python -m bench.scaleout --system rabbitmq --a amqp://guest:guest@127.0.0.1:5672/%2F \\
        --b amqp://guest:guest@127.0.0.1:5673/%2F --a-node rabbit@HOST --b-node peer@localhost

Shovel: N persistent 1 KB messages are put in a queue on A (confirmed), then a dynamic
shovel on A (on-confirm, src-prefetch-count 1000) moves them to a queue on B; the rate is N
over the time from setting the shovel to the last message being in B's queue. Federation:
B's fanout exchange federates from A's (on-confirm, prefetch-count 1000); one publisher on
A sends persistent 1 KB messages for `--seconds` with a confirm window of 500, a consumer
on B's bound queue (no acks) records each message's latency (publish → delivery on B);
the rate is what B received per second. Without `--rate` the publisher outruns the link
(a backlog builds: that measures the link's capacity, and latency grows with the backlog);
with `--rate` below both systems' capacity the latency is the link's own. Each phase reports both brokers' CPU time per
message (µs) and the 1-minute load average. Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import struct
import subprocess
import sys
import time
import uuid
from typing import Any

import requests
from pamqp import commands

from bench.brokerproc import BrokerSampler
from broker.protocol.encoding import encode_properties
from broker.shovel.client import Client, Endpoint

BODY = 1024
PERSISTENT = encode_properties(commands.Basic.Properties(delivery_mode=2))
_TS = struct.Struct("!Q")


class Admin:
    """Set and clear runtime parameters and policies on one broker: this broker's HTTP
    API, or rabbitmqctl -n NODE for RabbitMQ (its management plugin stays off while
    timing)."""

    def __init__(self, api: str | None, node: str | None) -> None:
        self.api, self.node = api, node
        self.http = requests.Session()
        self.http.auth = ("guest", "guest")

    def _ctl(self, *args: str) -> None:
        subprocess.run(["rabbitmqctl", "-q", "-n", str(self.node), *args], check=True,
                       capture_output=True, timeout=60)

    def set_parameter(self, component: str, name: str, value: dict) -> None:
        if self.api:
            r = self.http.put(f"{self.api}/api/parameters/{component}/%2F/{name}",
                              json={"value": value}, timeout=30)
            r.raise_for_status()
        else:
            self._ctl("set_parameter", component, name, json.dumps(value))

    def clear_parameter(self, component: str, name: str) -> None:
        if self.api:
            self.http.delete(f"{self.api}/api/parameters/{component}/%2F/{name}", timeout=30)
        else:
            subprocess.run(["rabbitmqctl", "-q", "-n", str(self.node), "clear_parameter",
                            component, name], capture_output=True, timeout=60)

    def set_policy(self, name: str, pattern: str, definition: dict) -> None:
        if self.api:
            r = self.http.put(f"{self.api}/api/policies/%2F/{name}", json={
                "pattern": pattern, "definition": definition, "apply-to": "exchanges"},
                timeout=30)
            r.raise_for_status()
        else:
            self._ctl("set_policy", "--apply-to", "exchanges", name, pattern,
                      json.dumps(definition))

    def clear_policy(self, name: str) -> None:
        if self.api:
            self.http.delete(f"{self.api}/api/policies/%2F/{name}", timeout=30)
        else:
            subprocess.run(["rabbitmqctl", "-q", "-n", str(self.node), "clear_policy", name],
                           capture_output=True, timeout=60)


async def _connect(uri: str) -> Client:
    return await Client.connect(Endpoint.parse(uri), "bench.scaleout", "bench")


async def _depth(client: Client, queue: str) -> int:
    ok = await client.rpc(1, commands.Queue.Declare(queue=queue, passive=True),
                          commands.Queue.DeclareOk)
    return int(ok.message_count)


async def _publish_confirmed(client: Client, exchange: str, key: str, n: int | None,
                             seconds: float | None, window: int = 500,
                             rate: float = 0.0) -> int:
    """Publish persistent 1 KB messages (a send timestamp in the first 8 bytes) with
    publisher confirms and at most `window` unconfirmed; `n` of them, or for `seconds`;
    at most `rate` msg/s when it is > 0. Returns how many were confirmed."""
    confirmed = 0
    sent = 0
    wake = asyncio.Event()

    def on_confirm(tag: int, multiple: bool, ack: bool) -> None:
        nonlocal confirmed
        if not ack:
            raise RuntimeError("nack")
        confirmed = tag if multiple else confirmed + 1
        wake.set()

    client.on_confirm = on_confirm
    await client.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    pad = b"x" * (BODY - 8)
    start = time.monotonic()
    deadline = start + seconds if seconds is not None else None
    while True:
        if rate > 0 and sent >= (time.monotonic() - start) * rate:
            await asyncio.sleep(0.001)
            continue
        if (n is not None and sent >= n) or (deadline is not None
                                             and time.monotonic() >= deadline):
            break
        while sent - confirmed >= window:
            wake.clear()
            await asyncio.wait_for(wake.wait(), 30)
        client.publish(exchange, key, PERSISTENT, _TS.pack(time.perf_counter_ns()) + pad)
        sent += 1
        if sent % 100 == 0:
            await asyncio.sleep(0)
    end = time.monotonic() + 60
    while confirmed < sent and time.monotonic() < end:
        wake.clear()
        await asyncio.wait_for(wake.wait(), 30)
    return confirmed


def _cpu(samplers: list[BrokerSampler | None]) -> list[float | None]:
    out: list[float | None] = []
    for s in samplers:
        v = s.cpu_rss() if s is not None else None
        out.append(v[0] if v is not None else None)
    return out


def _cpu_per_msg(before: list[float | None], after: list[float | None],
                 n: int) -> list[float | None]:
    return [round((b2 - b1) / n * 1e6, 1) if b1 is not None and b2 is not None and n else None
            for b1, b2 in zip(before, after, strict=True)]


async def shovel(args: argparse.Namespace, a_admin: Admin, samplers: list) -> dict[str, Any]:
    src, dest, name = (f"bench-{p}-{uuid.uuid4().hex[:6]}" for p in ("src", "dest", "shovel"))
    a, b = await _connect(args.a), await _connect(args.b)
    try:
        await a.rpc(1, commands.Queue.Declare(queue=src, durable=True), commands.Queue.DeclareOk)
        await b.rpc(1, commands.Queue.Declare(queue=dest, durable=True),
                    commands.Queue.DeclareOk)
        await _publish_confirmed(a, "", src, args.messages, None)
        cpu0 = _cpu(samplers)
        t0 = time.monotonic()
        a_admin.set_parameter("shovel", name, {
            "src-uri": args.shovel_src_uri or "amqp://", "src-queue": src,
            "dest-uri": args.b, "dest-queue": dest, "ack-mode": "on-confirm",
            "src-prefetch-count": 1000})
        deadline = t0 + 600
        while await _depth(b, dest) < args.messages and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        elapsed = time.monotonic() - t0
        moved = await _depth(b, dest)
        cpu1 = _cpu(samplers)
        a_admin.clear_parameter("shovel", name)
        return {"messages": args.messages, "moved": moved, "seconds": round(elapsed, 2),
                "rate": round(moved / elapsed), "cpu_us_per_msg": _cpu_per_msg(
                    cpu0, cpu1, moved), "load1": os.getloadavg()[0]}
    finally:
        for client, q in ((a, src), (b, dest)):
            try:
                await client.rpc(1, commands.Queue.Delete(queue=q), commands.Queue.DeleteOk)
            finally:
                await client.close()


async def federation(args: argparse.Namespace, b_admin: Admin,
                     samplers: list) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    x, q, up, pol = f"bench-fx-{tag}", f"bench-fq-{tag}", f"bench-up-{tag}", f"bench-pol-{tag}"
    a, b = await _connect(args.a), await _connect(args.b)
    latencies: list[int] = []
    try:
        await a.rpc(1, commands.Exchange.Declare(exchange=x, exchange_type="fanout",
                                                 durable=True), commands.Exchange.DeclareOk)
        await b.rpc(1, commands.Exchange.Declare(exchange=x, exchange_type="fanout",
                                                 durable=True), commands.Exchange.DeclareOk)
        await b.rpc(1, commands.Queue.Declare(queue=q, durable=True), commands.Queue.DeclareOk)
        await b.rpc(1, commands.Queue.Bind(queue=q, exchange=x), commands.Queue.BindOk)
        b_admin.set_parameter("federation-upstream", up, {"uri": args.a,
                                                          "prefetch-count": 1000})
        b_admin.set_policy(pol, f"^{x}$", {"federation-upstream": up})
        # the link is up once A routes x to its federation queue: wait for a probe
        deadline = time.monotonic() + 60
        got_probe = asyncio.Event()

        def on_delivery(d: Any) -> None:
            body = d[5]
            if body == b"probe":
                got_probe.set()
                return
            latencies.append(time.perf_counter_ns() - _TS.unpack_from(body)[0])

        b.on_delivery = on_delivery
        await b.rpc(1, commands.Basic.Consume(queue=q, no_ack=True), commands.Basic.ConsumeOk)
        while not got_probe.is_set() and time.monotonic() < deadline:
            a.publish(x, "", PERSISTENT, b"probe")
            try:
                await asyncio.wait_for(got_probe.wait(), 0.5)
            except TimeoutError:
                pass
        await asyncio.sleep(1.0)  # late probes drain
        cpu0 = _cpu(samplers)
        t0 = time.monotonic()
        sent = await _publish_confirmed(a, x, "", None, args.seconds, rate=args.rate)
        deadline = time.monotonic() + 60
        while len(latencies) < sent and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        elapsed = time.monotonic() - t0
        cpu1 = _cpu(samplers)
        lat = sorted(latencies)

        def pct(p: float) -> float | None:
            return round(lat[min(len(lat) - 1, int(p * len(lat)))] / 1e6, 2) if lat else None
        return {"sent": sent, "received": len(lat), "seconds": round(elapsed, 2),
                "rate": round(len(lat) / elapsed), "p50_ms": pct(0.5), "p99_ms": pct(0.99),
                "cpu_us_per_msg": _cpu_per_msg(cpu0, cpu1, len(lat)),
                "load1": os.getloadavg()[0]}
    finally:
        b_admin.clear_policy(pol)
        b_admin.clear_parameter("federation-upstream", up)
        await b.close()  # its consumer goes with it; delete on a fresh connection
        b = await _connect(args.b)
        await b.rpc(1, commands.Queue.Delete(queue=q), commands.Queue.DeleteOk)
        await b.rpc(1, commands.Exchange.Delete(exchange=x), commands.Exchange.DeleteOk)
        await a.rpc(1, commands.Exchange.Delete(exchange=x), commands.Exchange.DeleteOk)
        await a.close()
        await b.close()


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    a_admin = Admin(args.a_api, args.a_node)
    b_admin = Admin(args.b_api, args.b_node)
    samplers = [BrokerSampler.for_uri(Endpoint.parse(u).host, Endpoint.parse(u).port)
                for u in (args.a, args.b)]
    out: dict[str, Any] = {"system": args.system, "load1_start": os.getloadavg()[0]}
    if "shovel" in args.phases:
        out["shovel"] = await shovel(args, a_admin, samplers)
    if "federation" in args.phases:
        out["federation"] = await federation(args, b_admin, samplers)
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scaleout", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--system", required=True, help="a label: ours or rabbitmq")
    p.add_argument("--a", required=True, help="AMQP URI of broker A (source, upstream)")
    p.add_argument("--b", required=True, help="AMQP URI of broker B (destination, downstream)")
    p.add_argument("--a-api", help="this broker's HTTP API on A (else --a-node)")
    p.add_argument("--b-api", help="this broker's HTTP API on B (else --b-node)")
    p.add_argument("--a-node", help="RabbitMQ node name of A (rabbitmqctl -n)")
    p.add_argument("--b-node", help="RabbitMQ node name of B (rabbitmqctl -n)")
    p.add_argument("--shovel-src-uri", help="the shovel's src-uri (default amqp://: A itself)")
    p.add_argument("--messages", type=int, default=50_000, help="shovel: messages to move")
    p.add_argument("--seconds", type=float, default=10.0, help="federation: publishing time")
    p.add_argument("--rate", type=float, default=0.0,
                   help="federation: publish at most this many msg/s (0: as fast as A confirms)")
    p.add_argument("--phases", default="shovel,federation")
    args = p.parse_args(argv)
    print(json.dumps(asyncio.run(main_async(args)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
