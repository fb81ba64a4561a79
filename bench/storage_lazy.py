# bench/storage_lazy.py — the lazy-queue RSS check of the storage issue.
#
# Owns: one run of "fill a durable lazy queue with N persistent 1 KB messages (confirms on),
# then drain it with a manual-ack consumer", with the broker's RSS sampled every 0.5 s, and its
# JSON summary. Talks to: bench.storage_proc (broker subprocess, sampler, client steps).
# Must never: leave the broker running or its data dir behind.
"""Lazy queue memory check: ``python -m bench.storage_lazy --messages 1000000``.

Prints JSON: peak RSS (MiB) while filling and while draining, publish and drain rates (msg/s),
whether every message came back in publish order, and the machine/load figures. Target
(storage issue): RSS under 300 MB throughout for 1 000 000 messages.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
from typing import Any

from bench import storage_proc as sp

QUEUE = "storage-lazy"


async def _fill_and_drain(b: sp.BrokerProc, sampler: sp.RssSampler, a: argparse.Namespace,
                          out: dict[str, Any]) -> None:
    conn = await sp.connect(b.url, "storage-lazy")
    try:
        admin = await conn.channel()
        await sp.declare(admin, QUEUE, arguments={"x-queue-mode": "lazy"})
        pub_ch = await conn.channel()
        sampler.set_phase("filling")
        res = await sp.publish(pub_ch, QUEUE, a.messages, size=a.size, window=a.window)
        out["publish"] = {**res, "rate_msg_s": round(res["confirmed"] / res["seconds"])}
        sampler.set_phase("idle")
        out["message_count_after_fill"] = await sp.declare(admin, QUEUE, passive=True)
        await asyncio.sleep(a.idle)  # RSS after the fill settles (GC, flushes)
        sampler.set_phase("draining")
        drain = sp.OrderedDrain(await conn.channel(), QUEUE, a.messages, prefetch=a.prefetch,
                                ack_every=a.ack_every)
        secs = await drain.run()
        out["drain"] = {"received": drain.received, "seconds": secs,
                        "rate_msg_s": round(drain.received / secs) if secs else None,
                        "first_out_of_order": drain.first_bad}
        out["ordered"] = drain.ordered and drain.received == a.messages
        sampler.set_phase("drained")
        out["message_count_after_drain"] = await sp.declare(admin, QUEUE, passive=True)
    finally:
        await conn.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.storage_lazy", description=__doc__)
    p.add_argument("--messages", type=int, default=1_000_000, help="messages to publish")
    p.add_argument("--size", type=int, default=1024, help="body bytes (>= 16)")
    p.add_argument("--window", type=int, default=2000, help="outstanding confirms")
    p.add_argument("--prefetch", type=int, default=500, help="consumer basic.qos")
    p.add_argument("--ack-every", type=int, default=100, help="ack multiple every N")
    p.add_argument("--idle", type=float, default=2.0, help="seconds between fill and drain")
    p.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE",
                   help="broker config override (python -m broker --set), e.g. "
                        "queue_index_max_journal_entries=8192")
    p.add_argument("--data-dir", help="parent of the temporary data dir (default: TMPDIR)")
    p.add_argument("--keep", action="store_true", help="keep the data dir")
    p.add_argument("--json", help="also write the summary to FILE")
    a = p.parse_args(argv)
    extra = [x for kv in a.broker_set for x in ("--set", kv)]
    data = tempfile.mkdtemp(prefix="storage-lazy-", dir=a.data_dir)
    out: dict[str, Any] = {"benchmark": "storage_lazy", "messages": a.messages, "size": a.size,
                           "broker_set": a.broker_set,
                           "environment_before": sp.machine()}
    try:
        with sp.BrokerProc(data, *extra) as b:
            out["boot_seconds"] = round(b.start(), 3)
            with sp.RssSampler(b.pid) as sampler:
                out["rss_idle_empty_mb"] = sp.mb(sampler.sample())
                sp.run(_fill_and_drain(b, sampler, a, out))
            code, _ = b.stop()
            out["broker_exit"] = code
        out["peak_rss_fill_mb"] = sp.mb(sampler.peak("filling"))
        out["peak_rss_idle_mb"] = sp.mb(sampler.peak("idle"))
        out["peak_rss_drain_mb"] = sp.mb(sampler.peak("draining"))
        out["rss_end_mb"] = sp.mb(sampler.last())
        out["rss_series_mb"] = [[round(t - sampler.samples[0][0], 1), ph, sp.mb(r)]
                                for t, ph, r in sampler.samples[:: max(1, len(sampler.samples) // 60)]]
        out["environment_after"] = sp.machine()
    finally:
        if not a.keep:
            shutil.rmtree(data, ignore_errors=True)
    doc = json.dumps(out, indent=1)
    print(doc)
    if a.json:
        with open(a.json, "w") as f:
            f.write(doc + "\n")
    ok = out.get("ordered") and max(out["peak_rss_fill_mb"], out["peak_rss_drain_mb"]) < 300
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
