# bench/fairness.py — `python -m bench.fairness URI [URI_B …]`: does one busy connection make
# everybody else wait? (issue 26 item 4, issue 49 item 1)
#
# Owns: two floods, each party in its own process. `slow` (issue 26): a producer of 1 KB
# messages at full speed to a queue whose consumer reads its socket slowly, and a consumer
# without acks emptying a second, pre-filled queue. `greedy` (issue 49): one producer at full
# speed to two queues alternately, a consumer with unlimited prefetch that never acks on the
# first, a no-ack consumer reading 1 KiB every 50 ms through a 4 KiB receive buffer on the
# second. In both, the bystander does publish → consume round trips on its own connection
# (with confirms in `greedy`); its latency percentiles are the result.
# Talks to: the broker under test over AMQP (pika), nothing else.
# Must never: run without a bound (every loop stops by time or count).
"""Fairness under a flood. `--shape slow` (issue 26 item 4): while a producer floods
`--flood` × 1 KB messages to a queue whose consumer reads slowly, and a consumer without
acks drains a second queue holding `--backlog` messages. `--shape greedy` (issue 49 item 1,
the flood users cause): one producer publishes 1 KB messages without confirms at full speed,
in batches of 100, alternately to two queues (blocking writes: TCP back-pressure holds it);
the first queue's consumer has prefetch 0 (unlimited) and manual acks it never sends, the
second's acks nothing, has a 4 KiB receive buffer and reads 1 KiB every 50 ms. Meanwhile a
bystander measures publish → consume round trips (with confirms in `greedy`: the publish is
confirmed before the delivery is waited for) (one at a time, every `--every-ms`: 100 ms as issue 36 states the target, 5 ms as
issue 26 measured). Prints its p50 / p99 / max in ms per broker, and the broker's longest
wait for a CPU meanwhile (RunQueueWatch: the OS scheduler's share of the maximum); with
several URIs they run one after the other, `--rounds` times alternated, each run after the
1-minute load average fell below `--quiet-load`, then the median over rounds of each
figure with its range. `--json FILE` keeps every run.

    python -m bench.fairness --rounds 3 amqp://guest:guest@127.0.0.1:5672/%2F amqp://…:5691/%2F
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import statistics
import sys
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlparse

import pika

from bench.brokerproc import find_listener
from bench.latency_curve import wait_quiet

BODY = b"x" * 1024


class RunQueueWatch:
    """The broker's longest wait for a CPU while runnable (ms), and all its threads' waits
    added up (ms), from the kernel's schedstat
    (/proc/<pid>/task/<tid>/schedstat, 2nd field: ns spent on a run queue). Sampled every
    2 ms for each thread; the kernel adds a wait when the thread gets the CPU back, so the
    largest step between two samples is the longest single wait, near enough. A bystander
    maximum close to it is the OS scheduler's doing (more runnable processes than cores),
    not the broker's loop. A `--workers N` broker's workers (the listener's children, found
    once at the start) are watched with it. Reports None when the broker is not a local
    process."""

    def __init__(self, uri: str) -> None:
        url = urlparse(uri)
        self.pid = find_listener(url.hostname or "127.0.0.1", url.port or 5672)
        self.max_ms: float | None = None
        self.total_ms: int | None = None  # all its threads' waits added up over the watch
        self._pids: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RunQueueWatch:
        if self.pid is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _find_pids(self) -> list[int]:
        """The broker's process and its children (a `--workers N` broker's workers)."""
        pids = [self.pid] if self.pid is not None else []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == self.pid:
                pids.append(int(entry))
        return pids

    def _waits(self) -> dict[str, int]:
        out = {}
        for pid in self._pids:
            base = f"/proc/{pid}/task"
            try:
                tids = os.listdir(base)
            except OSError:
                continue
            for tid in tids:
                try:
                    with open(f"{base}/{tid}/schedstat") as f:
                        out[tid] = int(f.read().split()[1])
                except (OSError, IndexError, ValueError):
                    continue
        return out

    def _run(self) -> None:
        self._pids = self._find_pids()
        try:
            first = last = self._waits()
        except OSError:
            return
        worst = 0
        while not self._stop.wait(0.002):
            try:
                now = self._waits()
            except OSError:
                break
            for tid, ns in now.items():
                worst = max(worst, ns - last.get(tid, ns))
            last = now
        self.max_ms = round(worst / 1e6, 1)
        self.total_ms = round(sum(ns - first.get(tid, ns) for tid, ns in last.items()) / 1e6)


def _flood(uri: str, queue: str, n: int, seconds: float) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    deadline = time.monotonic() + seconds
    for i in range(n):
        ch.basic_publish("", queue, BODY)
        if i % 1000 == 0 and time.monotonic() > deadline:
            break
    conn.close()


def _slow_consumer(uri: str, queue: str, seconds: float) -> None:
    """Consumes with acks off and a tiny receive buffer, reading its socket slowly."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    sock = conn._impl._transport._sock  # noqa: SLF001 - a slow reader on purpose
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    ch = conn.channel()
    ch.basic_consume(queue, lambda *a: None, auto_ack=True)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        conn.process_data_events(0)
        time.sleep(0.01)
    os._exit(0)  # a clean close would wait for everything the broker still has queued to us


def _publish_frames(queue: str, body: bytes, channel: int = 1) -> bytes:
    """basic.publish to the default exchange with routing key `queue`, its content header
    and body, encoded once (pamqp) so that a flood costs the client next to nothing."""
    from pamqp import body as pbody
    from pamqp import commands, frame, header
    return b"".join((
        frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue), channel),
        frame.marshal(header.ContentHeader(0, len(body), commands.Basic.Properties()), channel),
        frame.marshal(pbody.ContentBody(body), channel)))


def _greedy_flood(uri: str, queues: tuple[str, str], seconds: float,
                  ready: Any = None) -> None:
    """Full speed, no confirms, 100 to one queue then 100 to the other, as pre-encoded
    frames written with blocking sends on the channel pika opened: TCP back-pressure (and a
    broker that stops reading) is the only brake."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    if ready is not None:
        ready.set()
    conn.channel()  # channel 1
    sock = conn._impl._transport._sock  # noqa: SLF001 - raw writes, pika is too slow a flood
    sock.setblocking(True)
    batches = [_publish_frames(q, BODY) * 100 for q in queues]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for batch in batches:
            sock.sendall(batch)
    os._exit(0)  # the broker may hold much of it unconsumed: no clean close to wait for


def _never_acks(uri: str, queue: str, seconds: float, ready: Any = None) -> None:
    """basic.qos 0 (unlimited) and manual acks that never come: every delivery stays
    unacked, so the queue pushes everything it gets at this consumer's socket."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    if ready is not None:
        ready.set()
    ch = conn.channel()
    ch.basic_qos(prefetch_count=0)
    ch.basic_consume(queue, lambda *a: None, auto_ack=False)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        conn.process_data_events(0.05)
    os._exit(0)


def _trickle_reader(uri: str, queue: str, seconds: float, ready: Any = None) -> None:
    """No-ack consumer with a 4 KiB receive buffer that reads 1 KiB every 50 ms."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    if ready is not None:
        ready.set()
    ch = conn.channel()
    ch.basic_consume(queue, lambda *a: None, auto_ack=True)
    sock = conn._impl._transport._sock  # noqa: SLF001 - a slow reader on purpose
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            sock.recv(1024, socket.MSG_DONTWAIT)
        except BlockingIOError:
            pass
        time.sleep(0.05)
    os._exit(0)


def _drain(uri: str, queue: str, seconds: float) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.basic_consume(queue, lambda *a: None, auto_ack=True)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        conn.process_data_events(0.05)
    conn.close()


def run(uri: str, flood: int = 120_000, backlog: int = 50_000,
        seconds: float = 15.0, every_ms: float = 5.0, shape: str = "slow",
        placement: str = "any") -> dict[str, Any]:
    """One measurement of `shape` ("slow", "greedy", or "none": the bystander alone): the
    bystander's round trips in ms {p50, p99, max, count}, one every `every_ms` ms (after
    the previous one came back). `flood` and `backlog` apply to "slow" only.

    `placement` "apart" (a broker with `--workers 2`, greedy or none): the bystander's
    connection and queue on worker 1, the flood's three connections and two queues on worker
    0. The node hands a connection to the worker with the fewest (ties: the lowest index)
    and a queue goes to the worker with the fewest queues (ties: the declaring connection's,
    broker/workers/placement.py), so: the admin connection (worker 0), the bystander's
    (worker 1), the bystander's queue declared on it (worker 1), the flood's queues on the
    admin's (worker 0 twice), then each flood connection (worker 0) followed by an idle
    filler connection (worker 1) to even the counts again. "together": everything on worker
    0 and worker 1 idle, as in one process but beside a second one (a filler connection and
    a spare queue on worker 1 after each of worker 0's). "across": the bystander on worker
    1 and its queue on worker 0, and so is the greedy consumer (its queue on worker 0, it on
    worker 1): both queues' deliveries cross the same link, the case a cross-worker flood can
    hurt most; the publisher and the slow reader on worker 0, the slow reader's queue on
    worker 1. "any": in the order the processes connect. "local": as "any", but the
    bystander declares its own queue with `x-queue-master-locator: client-local`, so it
    lives on the bystander's worker (worker 1; the flood's queues on workers 0 and 1)."""
    tag = uuid.uuid4().hex[:8]
    a, b, c = f"fair-flood-{tag}", f"fair-drain-{tag}", f"fair-bystander-{tag}"
    admin = pika.BlockingConnection(pika.URLParameters(uri))
    ch = admin.channel()
    together = placement == "together"
    apart = placement == "apart" or together
    fillers: list[pika.BlockingConnection] = []
    spare: list[str] = []  # "together": queues that keep worker 1's count even
    if together:
        fillers.append(pika.BlockingConnection(pika.URLParameters(uri)))  # worker 1
        fch = fillers[0].channel()
        for q in (a, b, c):
            ch.queue_declare(q, auto_delete=False)  # worker 0 (a tie: the declarer's)
            spare.append(f"fair-spare-{len(spare)}-{tag}")
            fch.queue_declare(spare[-1], auto_delete=False)  # worker 1 (fewer queues)
    across = placement == "across"
    local = placement == "local"
    by = (pika.BlockingConnection(pika.URLParameters(uri)) if apart or across or local
          else None)
    if together:
        fillers.append(pika.BlockingConnection(pika.URLParameters(uri)))  # worker 1
    elif across and by is not None:
        ch.queue_declare(a, auto_delete=False)  # worker 0 (a tie: the declarer's)
        by.channel().queue_declare(b, auto_delete=False)  # worker 1 (fewer queues)
        ch.queue_declare(c, auto_delete=False)  # worker 0 (a tie: the declarer's)
    elif local and by is not None:
        by.channel().queue_declare(b, auto_delete=False)  # worker 1 (a tie: the declarer's)
        # worker 1, the bystander's, by the locator (the default: worker 0, fewer queues)
        by.channel().queue_declare(c, auto_delete=False,
                                   arguments={"x-queue-master-locator": "client-local"})
        ch.queue_declare(a, auto_delete=False)  # worker 0 (fewer queues), as in "any"
    elif by is not None:
        by.channel().queue_declare(c, auto_delete=False)
    for q in ((a, b) if placement == "apart" else () if together or across or local
              else (a, b, c)):
        ch.queue_declare(q, auto_delete=False)
    ctx = mp.get_context("spawn")
    if shape == "none":
        procs: list[Any] = []
    elif across:
        procs = []
        counts = [1, 1]  # connections per worker: the admin's, the bystander's
        for target, args, worker in ((_never_acks, (uri, a, seconds), 1),
                                     (_greedy_flood, (uri, (a, b), seconds), 0),
                                     (_trickle_reader, (uri, b, seconds), 0)):
            while counts.index(min(counts)) != worker:  # where the next one would go
                fillers.append(pika.BlockingConnection(pika.URLParameters(uri)))
                counts[counts.index(min(counts))] += 1
            ready = ctx.Event()
            procs.append(ctx.Process(target=target, args=(*args, ready)))
            procs[-1].start()
            if not ready.wait(30):
                raise RuntimeError("a flood connection did not open")
            counts[worker] += 1
    elif apart:
        procs = []
        for target, args in ((_never_acks, (uri, a, seconds)),
                             (_trickle_reader, (uri, b, seconds)),
                             (_greedy_flood, (uri, (a, b), seconds))):
            ready = ctx.Event()
            procs.append(ctx.Process(target=target, args=(*args, ready)))
            procs[-1].start()
            if not ready.wait(30):
                raise RuntimeError("a flood connection did not open")
            fillers.append(pika.BlockingConnection(pika.URLParameters(uri)))
    elif shape == "greedy":
        procs = [ctx.Process(target=_never_acks, args=(uri, a, seconds)),
                 ctx.Process(target=_trickle_reader, args=(uri, b, seconds)),
                 ctx.Process(target=_greedy_flood, args=(uri, (a, b), seconds))]
    else:
        for _ in range(backlog):
            ch.basic_publish("", b, BODY)
        procs = [ctx.Process(target=_slow_consumer, args=(uri, a, seconds)),
                 ctx.Process(target=_flood, args=(uri, a, flood, seconds)),
                 ctx.Process(target=_drain, args=(uri, b, seconds))]
    if by is None:
        by = pika.BlockingConnection(pika.URLParameters(uri))
    bch = by.channel()
    if shape in ("greedy", "none"):
        bch.confirm_delivery()
    got: list[float] = []
    bch.basic_consume(c, lambda *args: got.append(time.monotonic()), auto_ack=True)
    for p in procs:
        if not apart and not across:
            p.start()
    time.sleep(1.0)  # let the flood and the drain get going
    result = round_trips(uri, by, bch, c, got, seconds - 2, every_ms)
    for p in procs:
        p.join(seconds + 30)
        if p.is_alive():
            p.kill()
    by.close()
    for filler in fillers:
        filler.close()
    for q in (a, b, c, *spare):
        ch.queue_delete(q)
    admin.close()
    return result


def round_trips(uri: str, by: pika.BlockingConnection, bch: Any, queue: str,
                got: list[float], seconds: float, every_ms: float) -> dict[str, Any]:
    """The bystander's measurement: for `seconds`, publish to `queue` on channel `bch` of
    `by` and wait for the delivery that appends its arrival time to `got` (a consumer set
    up beforehand), one round trip every `every_ms` ms after the last came back. Its round
    trips in ms {p50, p99, max, count}, the load, and the broker's run-queue waits
    meanwhile (RunQueueWatch)."""
    rtts = []
    deadline = time.monotonic() + seconds
    with RunQueueWatch(uri) as watch:
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            got.clear()
            bch.basic_publish("", queue, b"ping")
            while not got and time.monotonic() - t0 < 5:
                by.process_data_events(0.001)
            if got:
                rtts.append((got[0] - t0) * 1000)
            time.sleep(every_ms / 1000)
    rtts.sort()
    return {"p50": round(statistics.median(rtts), 2),
            "p99": round(rtts[int(len(rtts) * 0.99) - 1], 2), "max": round(rtts[-1], 2),
            "count": len(rtts), "load": os.getloadavg()[0],
            "broker_runqueue_wait_max_ms": watch.max_ms,
            "broker_runqueue_wait_total_ms": watch.total_ms}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("uris", nargs="+")
    p.add_argument("--shape", choices=("slow", "greedy", "none"), default="slow",
                   help="slow: issue 26's flood; greedy: issue 49's; none: the bystander "
                        "alone (see above)")
    p.add_argument("--placement", choices=("any", "apart", "together", "across", "local"),
                   default="any",
                   help="apart: with --workers 2, the flood on worker 0 and the bystander "
                        "on worker 1; together: all of it on worker 0; across: both "
                        "consumers' deliveries cross one link; local: as any, with the "
                        "bystander's queue declared client-local (see run())")
    p.add_argument("--flood", type=int, default=120_000)
    p.add_argument("--backlog", type=int, default=50_000)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--every-ms", type=float, default=100.0,
                   help="pause between the bystander's round trips (ms)")
    p.add_argument("--rounds", type=int, default=1, help="alternated rounds over the URIs")
    p.add_argument("--quiet-load", type=float, default=0.0,
                   help="wait for the 1-minute load average to fall below this before each "
                        "run (0: do not wait)")
    p.add_argument("--json", help="write every run (bench-fairness/1) to this file")
    ns = p.parse_args(argv)
    runs: dict[str, list[dict[str, Any]]] = {uri: [] for uri in ns.uris}
    for rnd in range(1, ns.rounds + 1):
        for uri in ns.uris:
            load_before = list(wait_quiet(ns.quiet_load)) if ns.quiet_load else \
                list(os.getloadavg())
            res = run(uri, ns.flood, ns.backlog, ns.seconds, ns.every_ms, ns.shape,
                      ns.placement)
            res["load_before"] = [round(x, 2) for x in load_before]
            res["round"] = rnd
            runs[uri].append(res)
            shown = uri.split("@")[-1]
            print(f"{shown} round {rnd}: bystander round trip p50 {res['p50']} ms, p99 "
                  f"{res['p99']} ms, max {res['max']} ms over {res['count']} (load before "
                  f"{res['load_before']}); the broker's longest wait for a CPU "
                  f"{res['broker_runqueue_wait_max_ms']} ms, "
                  f"{res['broker_runqueue_wait_total_ms']} ms in all", flush=True)
    summary = {uri: {k: _spread([r[k] for r in rs]) for k in ("p50", "p99", "max")}
               for uri, rs in runs.items()}
    if ns.rounds > 1:
        for uri, fig in summary.items():
            print(f"{uri.split('@')[-1]}: median over {ns.rounds} rounds (min-max): " + ", ".join(
                f"{k} {v['median']} ({v['min']}-{v['max']}) ms" for k, v in fig.items()))
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump({"format": "bench-fairness/1", "shape": ns.shape,
                       "placement": ns.placement, "every_ms": ns.every_ms,
                       "seconds": ns.seconds, "flood": ns.flood, "backlog": ns.backlog,
                       "runs": runs, "summary": summary}, f, indent=1)
    return 0


def _spread(values: list[float]) -> dict[str, float]:
    """{median, min, max} of one figure over rounds."""
    return {"median": round(statistics.median(values), 2), "min": min(values),
            "max": max(values)}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
