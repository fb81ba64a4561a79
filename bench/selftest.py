# bench/selftest.py — `python -m bench selftest`: the client's hot paths without a network.
#
# Owns: two in-process micro-benchmarks — building publish batches (PublishTemplate.build) and
# consuming deliveries (Connection.data_received -> Consumer.on_deliver, fed 64 KiB chunks of
# pre-encoded deliver/header/body frames) — reported in msg/s per process.
# Talks to: bench.wire, bench.amqp, bench.consumer (in-process only; no sockets).
# Must never: open connections.
"""Per-process ceilings of the publish and consume hot paths (msg/s, one core)."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from pamqp import commands, frame, header

from bench import wire
from bench.amqp import Connection
from bench.consumer import Consumer, Tally


class _NullTransport:
    """Swallows writes (acks) like a socket that is never full."""

    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return False


def deliveries(n: int, body_size: int, channel: int = 1) -> bytes:
    """n deliver + header + body frame triples, tags (0, seq), as a broker would send them."""
    props = commands.Basic.Properties(delivery_mode=1)
    head = frame.marshal(header.ContentHeader(0, body_size, props), channel)
    parts = []
    for i in range(n):
        parts.append(frame.marshal(commands.Basic.Deliver("ctag-1", i + 1, False, "", "q"),
                                   channel))
        parts.append(head)
        body = wire.BODY_HEADER.pack(time.monotonic_ns(), i) + bytes(body_size - 16)
        parts.append(wire.FRAME_HEADER_STRUCT.pack(3, channel, body_size) + body + b"\xce")
    return b"".join(parts)


def consume_rate(body_size: int = 16, seconds: float = 1.0, auto_ack: bool = True,
                 chunk: int = 65536) -> float:
    """msg/s through Connection.data_received + Consumer.on_deliver in this process."""
    loop = asyncio.new_event_loop()
    try:
        conn = Connection(loop)
        conn.transport = _NullTransport()  # type: ignore[assignment]
        from bench.amqp import Channel

        ch = Channel(conn, 1)
        conn.channels[1] = ch
        tally = Tally()
        Consumer(ch, "q", tally, auto_ack=auto_ack, prefetch=0, ack_every=1)
        data = deliveries(20000, body_size)
        chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)]
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            for c in chunks:
                conn.data_received(c)
        return tally.consumed / (time.perf_counter() - start)
    finally:
        loop.close()


def publish_rate(body_size: int = 16, seconds: float = 1.0) -> float:
    """msg/s of PublishTemplate.build (copy template + patch timestamp and tag), in the
    publisher's batch size."""
    t = wire.PublishTemplate(1, "", "q", body_size)
    batch = t.batch
    n = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        t.build(batch, time.monotonic_ns(), n)
        n += batch
    return n / (time.perf_counter() - start)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench selftest", description=__doc__)
    p.add_argument("-s", "--size", type=int, default=16, help="body size in bytes")
    p.add_argument("--seconds", type=float, default=1.0)
    ns = p.parse_args(argv)
    out: dict[str, Any] = {
        "body_size": ns.size,
        "publish_build_msg_s": round(publish_rate(ns.size, ns.seconds)),
        "consume_autoack_msg_s": round(consume_rate(ns.size, ns.seconds, True)),
        "consume_ack_each_msg_s": round(consume_rate(ns.size, ns.seconds, False)),
    }
    print(json.dumps(out))
    return 0
