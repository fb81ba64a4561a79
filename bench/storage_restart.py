# bench/storage_restart.py — restart times of a broker holding 1 000 000 persistent messages.
#
# Owns: one run of "fill Q durable queues with M persistent messages each (confirms on), then
# kill -9 while idle and restart, then SIGTERM and restart", timing each boot (Popen -> ready
# line -> first passive queue.declare-ok) and checking every queue's message_count after each.
# Talks to: bench.storage_proc (broker subprocess, client steps).
# Must never: leave the broker running or its data dir behind.
"""Restart times: ``python -m bench.storage_restart`` (10 queues x 100 000 x 1 KB).

Order: fill -> idle -> kill -9 -> restart (dirty recovery: journals and segments replayed,
store scanned) -> verify -> SIGTERM -> restart (clean recovery: recovery terms and the store
snapshot trusted) -> verify. The kill -9 comes first so that it hits the broker in the state
right after filling; the clean shutdown then stops a full broker. With --clean-first: fill ->
SIGTERM -> clean restart -> verify -> idle -> kill -9 -> restart -> verify. Target (storage
issue): clean restart < 10 s to a successful passive declare. Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from bench import storage_proc as sp


def _names(a: argparse.Namespace) -> list[str]:
    return [f"storage-restart-{i}" for i in range(a.queues)]


async def _fill(url: str, a: argparse.Namespace) -> dict[str, Any]:
    args = {"x-queue-mode": "lazy"} if a.mode == "lazy" else {}
    conns = [await sp.connect(url, f"fill-{i}") for i in range(a.connections)]
    try:
        admin = await conns[0].channel()
        for q in _names(a):
            await sp.declare(admin, q, arguments=args)
        chans = [await conns[i % len(conns)].channel() for i in range(a.queues)]
        t0 = time.monotonic()
        res = await asyncio.gather(*(
            sp.publish(ch, q, a.messages, size=a.size, window=a.window, producer_id=i)
            for i, (ch, q) in enumerate(zip(chans, _names(a), strict=True))))
        secs = time.monotonic() - t0
        counts = [await sp.declare(admin, q, passive=True) for q in _names(a)]
    finally:
        for c in conns:
            await c.close()
    confirmed = sum(r["confirmed"] for r in res)
    return {"seconds": round(secs, 2), "confirmed": confirmed,
            "nacked": sum(r["nacked"] for r in res),
            "timed_out": sum(r["timed_out"] for r in res),
            "rate_msg_s": round(confirmed / secs), "counts": counts}


async def _first_declare(url: str, queue: str) -> None:
    conn = await sp.connect(url, "restart-probe")
    try:
        await sp.declare(await conn.channel(), queue, passive=True)
    finally:
        await conn.close()


async def _counts(url: str, a: argparse.Namespace) -> list[int]:
    conn = await sp.connect(url, "restart-verify")
    try:
        ch = await conn.channel()
        return [await sp.declare(ch, q, passive=True) for q in _names(a)]
    finally:
        await conn.close()


def _boot(b: sp.BrokerProc, a: argparse.Namespace) -> dict[str, Any]:
    """Start `b`; time to ready and to the first passive declare-ok; then check counts."""
    ready = b.start()
    sp.run(_first_declare(b.url, _names(a)[0]))
    declared = time.monotonic() - b.started_at
    counts = sp.run(_counts(b.url, a))
    recovery = [ln.strip() for ln in b.output().splitlines()
                if "recovery took" in ln or "durable queues recovered" in ln]
    return {"ready_s": round(ready, 3), "first_passive_declare_s": round(declared, 3),
            "counts": counts, "counts_ok": counts == [a.messages] * a.queues,
            "rss_after_boot_mb": sp.mb(b.rss_bytes()), "log": recovery[-2:],
            "loadavg": [round(x, 2) for x in os.getloadavg()]}


def _du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _d, fs in os.walk(path) for f in fs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.storage_restart", description=__doc__)
    p.add_argument("--queues", type=int, default=10)
    p.add_argument("--messages", type=int, default=100_000, help="per queue")
    p.add_argument("--size", type=int, default=1024, help="body bytes (>= 16)")
    p.add_argument("--mode", choices=["lazy", "default"], default="lazy",
                   help="x-queue-mode of the queues (lazy keeps the filling broker small)")
    p.add_argument("--window", type=int, default=1000, help="outstanding confirms per queue")
    p.add_argument("--connections", type=int, default=2, help="publishing connections")
    p.add_argument("--idle", type=float, default=2.0, help="seconds idle before kill -9")
    p.add_argument("--clean-first", action="store_true",
                   help="SIGTERM the filled broker first, then kill -9 the recovered one")
    p.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE",
                   help="broker config override (python -m broker --set), e.g. "
                        "queue_index_max_journal_entries=8192")
    p.add_argument("--data-dir", help="parent of the temporary data dir (default: TMPDIR)")
    p.add_argument("--json", help="also write the summary to FILE")
    a = p.parse_args(argv)
    extra = [x for kv in a.broker_set for x in ("--set", kv)]
    data = tempfile.mkdtemp(prefix="storage-restart-", dir=a.data_dir)
    out: dict[str, Any] = {"benchmark": "storage_restart", "queues": a.queues,
                           "messages_per_queue": a.messages, "size": a.size, "mode": a.mode,
                           "broker_set": a.broker_set,
                           "environment_before": sp.machine()}
    try:
        with sp.BrokerProc(data, *extra) as b:
            b.start()
            out["fill"] = sp.run(_fill(b.url, a))
            out["rss_after_fill_mb"] = sp.mb(b.rss_bytes())
            time.sleep(a.idle)
            out["disk_bytes"] = _du(data)
            if a.clean_first:
                code, took = b.stop()
                out["clean_stop"] = {"exit": code, "seconds": round(took, 3)}
            else:
                b.kill()
        for step in (["clean", "kill9"] if a.clean_first else ["kill9", "clean"]):
            with sp.BrokerProc(data, *extra) as b:
                out[f"{step}_restart"] = _boot(b, a)
                if step == "kill9" or not a.clean_first:
                    code, took = b.stop()
                    out.setdefault("clean_stop", {"exit": code, "seconds": round(took, 3)})
                else:
                    time.sleep(a.idle)
                    b.kill()
        out["environment_after"] = sp.machine()
    finally:
        shutil.rmtree(data, ignore_errors=True)
    doc = json.dumps(out, indent=1)
    print(doc)
    if a.json:
        with open(a.json, "w") as f:
            f.write(doc + "\n")
    ok = all(out[k]["counts_ok"] for k in ("kill9_restart", "clean_restart"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
