# bench/storage_confirm.py — persistent publishing with confirms through the storage path.
#
# Owns: starting a broker subprocess on a temporary data dir and running one PerfTest-style
# scenario against it (1 producer, 1 consumer, 1 durable queue, persistent 1 KB, confirms,
# manual acks, 30 s) through bench.coordinator, sampling the broker's RSS; prints a JSON summary.
# Talks to: bench.storage_proc (broker subprocess), bench.coordinator (the run).
# Must never: leave the broker running or its data dir behind.
"""Persistent confirm rates: ``python -m bench.storage_confirm`` (1 KB, 30 s).

The same run against a broker that is already up (no subprocess)::

    python -m bench -u storage-confirm -e '' -x 1 -y 1 -s 1024 -f persistent -c 1000 \\
        -q 500 -A 100 -z 30 --uri amqp://guest:guest@127.0.0.1:5672/%2F
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from typing import Any

from bench import storage_proc as sp
from bench.options import Scenario


def scenario(url: str, a: argparse.Namespace) -> Scenario:
    """The run: one durable queue on the default exchange, persistent messages of a.size
    bytes, a.window outstanding confirms, prefetch a.prefetch, ack multiple every 100."""
    return Scenario(uri=url, name="storage-confirm", queue="storage-confirm", exchange="",
                    producers=1, consumers=1, size=a.size, flags=("persistent",),
                    confirm=a.window, prefetch=a.prefetch, multi_ack_every=min(100, a.prefetch),
                    time=a.time, quiet=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.storage_confirm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=1024, help="body bytes (>= 16)")
    p.add_argument("--time", type=float, default=30.0, help="publishing seconds")
    p.add_argument("--window", type=int, default=1000, help="outstanding confirms")
    p.add_argument("--prefetch", type=int, default=500, help="consumer basic.qos")
    p.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE",
                   help="broker config override (python -m broker --set), e.g. "
                        "queue_index_embed_msgs_below=0")
    p.add_argument("--data-dir", help="parent of the temporary data dir (default: TMPDIR)")
    p.add_argument("--json", help="also write the summary to FILE")
    a = p.parse_args(argv)
    from bench.coordinator import run

    data = tempfile.mkdtemp(prefix="storage-confirm-", dir=a.data_dir)
    extra = [x for kv in a.broker_set for x in ("--set", kv)]
    out: dict[str, Any] = {"benchmark": "storage_confirm", "size": a.size, "time": a.time,
                           "window": a.window, "prefetch": a.prefetch, "broker_set": a.broker_set}
    try:
        with sp.BrokerProc(data, *extra) as b:
            b.start()
            with sp.RssSampler(b.pid) as sampler:
                sampler.set_phase("run")
                doc = run(scenario(b.url, a), out=lambda _line: None)
            b.stop()
    finally:
        shutil.rmtree(data, ignore_errors=True)
    out.update({k: doc[k] for k in ("environment", "rates", "totals", "latency_ms",
                                    "confirm_latency_ms", "duration_s", "errors", "ok")})
    out["verification"] = {k: v for k, v in doc["verification"].items() if k != "producers"}
    out["peak_rss_mb"] = sp.mb(sampler.peak("run"))
    text = json.dumps(out, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
