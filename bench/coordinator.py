# bench/coordinator.py — one benchmark run, seen from the parent process.
#
# Owns: declaring the topology, starting the worker processes, the run's phases (publishing ->
# stopping -> draining -> done), per-second aggregation (progress line, timeline), broker
# sampling, error handling (a worker error or death ends the run, reported, never a hang), the
# final result document and tearing the topology down.
# Talks to: bench.worker (pipes), bench.topology, bench.brokerproc, bench.report.
# Must never: do client protocol work itself (workers do), or wait on a pipe without a timeout.
"""``run(scenario) -> result dict`` (schema in bench.report)."""

from __future__ import annotations

import asyncio
import datetime
import json
import multiprocessing as mp
import time
from multiprocessing.connection import wait
from typing import Any

from bench import report, topology
from bench.amqp import URI, AMQPError
from bench.brokerproc import BrokerSampler
from bench.histogram import Histogram
from bench.options import Scenario
from bench.worker import worker_main

SETUP_TIMEOUT = 30.0  # s for workers to connect and declare consumers
STOP_TIMEOUT = 10.0  # s for workers to close and send their final report


class Run:
    """State of one run in the coordinator (one instance per `run()` call)."""

    def __init__(self, sc: Scenario, plan: topology.Plan, out: Any) -> None:
        self.sc = sc
        self.plan = plan
        self.out = out
        self.pipes: list[Any] = []
        self.procs: list[Any] = []
        self.latest: dict[int, dict[str, Any]] = {}  # worker -> cumulative stats
        self.ready: set[int] = set()
        self.producers_done: dict[int, dict[int, dict[str, int]]] = {}
        self.finals: dict[int, dict[str, Any]] = {}
        self.errors: list[str] = []
        self.latency = Histogram()
        self.confirm_latency = Histogram()
        self.tick_latency = Histogram()
        self.timeline: list[dict[str, Any]] = []

    # pipe handling ----------------------------------------------------------------------------

    def pump(self, timeout: float) -> None:
        """Handle worker messages for up to ``timeout`` seconds (returns after one batch)."""
        live = [p for i, p in enumerate(self.pipes) if i not in self.finals]
        if not live:
            time.sleep(max(0.0, timeout))
            return
        for pipe in wait(live, timeout):
            i = self.pipes.index(pipe)
            try:
                msg = pipe.recv()
            except (EOFError, OSError):
                if i not in self.finals:
                    self.errors.append(f"w{i}: worker process exited without a final report")
                    self.finals[i] = {}
                continue
            self.handle(i, msg)

    def handle(self, i: int, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "ready":
            self.ready.add(i)
        elif kind == "stats":
            self.add_stats(i, msg[1])
        elif kind == "producers_done":
            self.producers_done[i] = msg[1]
        elif kind == "error":
            self.errors.append(msg[1])
        elif kind == "final":
            if msg[1]:
                self.add_stats(i, msg[1]["stats"])
            self.finals[i] = msg[1]

    def add_stats(self, i: int, st: dict[str, Any]) -> None:
        self.latest[i] = st
        for h, key in ((self.latency, "latency"), (self.tick_latency, "latency"),
                       (self.confirm_latency, "confirm_latency")):
            h.merge_sparse(st[key])
        self.latency.max_us = max(self.latency.max_us, st["latency_max_us"])
        self.tick_latency.max_us = max(self.tick_latency.max_us, st["latency_max_us"])
        self.confirm_latency.max_us = max(self.confirm_latency.max_us,
                                          st["confirm_latency_max_us"])

    def totals(self) -> dict[str, Any]:
        keys = ("published", "published_bytes", "confirmed", "nacked", "returned", "resent",
                "timed_out", "consumed", "consumed_bytes", "blocked_seconds")
        tot: dict[str, Any] = {k: sum(s[k] for s in self.latest.values()) for k in keys}
        tot["blocked"] = any(s["blocked"] for s in self.latest.values())
        return tot

    def send_all(self, *msg: Any) -> None:
        for i, pipe in enumerate(self.pipes):
            if i not in self.finals:
                try:
                    pipe.send(msg)
                except (BrokenPipeError, OSError):
                    self.finals.setdefault(i, {})


def _context() -> Any:
    """forkserver with bench.worker preloaded: workers start in ~10 ms instead of a fresh
    interpreter's ~0.5 s per process (spawn), and without fork's hazards in threaded parents."""
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["bench.worker"])
        return ctx
    return mp.get_context("spawn")


def _start_workers(run: Run) -> None:
    ctx = _context()
    for i, (prods, conss) in enumerate(run.plan.workers):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=worker_main, args=(run.sc, prods, conss, child, f"w{i}"),
                           name=f"bench-w{i}", daemon=True)
        proc.start()
        child.close()
        run.pipes.append(parent)
        run.procs.append(proc)


def _expected(run: Run) -> int:
    """Messages the consumers should see: each producer's sent count × queues it reaches."""
    total = 0
    for per in run.producers_done.values():
        for pid, p in per.items():
            total += p["count"] * run.plan.fanout.get(pid, 1)
    return total


def execute(run: Run, sampler: BrokerSampler | None) -> dict[str, float]:
    """Drive the phases; returns timing marks (monotonic s). Errors land in ``run.errors``."""
    sc = run.sc
    n = len(run.pipes)
    deadline = time.monotonic() + SETUP_TIMEOUT
    while len(run.ready) < n and not run.errors and time.monotonic() < deadline:
        run.pump(0.2)
    if len(run.ready) < n:
        if not run.errors:
            run.errors.append(f"workers not ready within {SETUP_TIMEOUT} s")
        return {}
    t0 = time.monotonic()
    marks = {"start": t0, "consume_start": t0}
    run.send_all("start")
    phase = "publishing"
    next_tick = t0 + 1.0
    prev = run.totals()
    last_consumed, last_progress = 0, t0
    has_consumers = bool(run.plan.consumers)
    while phase != "done":
        now = time.monotonic()
        run.pump(max(0.0, min(next_tick, now + 0.1) - now))
        now = time.monotonic()
        tot = run.totals()
        if tot["consumed"] > last_consumed:
            last_consumed, last_progress = tot["consumed"], now
            marks["last_consume"] = now
        if run.errors or len(run.finals) == n:
            break
        if phase == "publishing":
            if sc.time and now - t0 >= sc.time:
                run.send_all("stop_producers")
                marks["publish_end"] = now
                phase = "stopping"
            elif len(run.producers_done) == n:
                marks["publish_end"] = now
                phase = "stopping"
        if phase == "stopping" and len(run.producers_done) == n:
            marks.setdefault("confirm_end", now)
            phase = "draining"
            last_progress = now
            if sc.consume_after_publish:
                run.send_all("start_consumers")
                marks["consume_start"] = now
        elif phase == "stopping" and now - marks["publish_end"] > sc.confirm_timeout + 5:
            run.errors.append("producers did not finish (confirms outstanding)")
            break
        if phase == "draining":
            if not has_consumers or tot["consumed"] >= _expected(run):
                phase = "done"
            elif now - last_progress > sc.drain_timeout:
                phase = "done"
                marks["drain_timed_out"] = now
        if now >= next_tick:
            _tick(run, now - t0, tot, prev, sampler)
            prev = tot
            next_tick += 1.0
    marks["end"] = time.monotonic()
    return marks


def _tick(run: Run, t: float, tot: dict[str, Any], prev: dict[str, Any],
          sampler: BrokerSampler | None) -> None:
    d = {k: tot[k] - prev[k] for k in ("published", "confirmed", "nacked", "consumed")}
    b = sampler.sample(time.monotonic()) if sampler is not None else None
    pct = run.tick_latency.percentiles()
    run.timeline.append({
        "t": round(t, 1), **d,
        "latency_ms": {k: pct[k] for k in ("p50", "p99", "max")},
        "broker_cpu_percent": round(b[0], 1) if b else None,
        "broker_rss_bytes": b[1] if b else None,
        "blocked": tot["blocked"],
    })
    if not run.sc.quiet:
        run.out(report.progress_line(t, d, run.tick_latency, b, tot["blocked"]))
    run.tick_latency = Histogram()


def _shutdown(run: Run) -> None:
    run.send_all("stop")
    deadline = time.monotonic() + STOP_TIMEOUT
    while len(run.finals) < len(run.pipes) and time.monotonic() < deadline:
        run.pump(0.2)
    for i, proc in enumerate(run.procs):
        proc.join(max(0.1, deadline - time.monotonic()))
        if proc.is_alive():
            proc.terminate()
            proc.join(2)
            run.errors.append(f"w{i}: terminated (did not stop within {STOP_TIMEOUT} s)")
    for pipe in run.pipes:
        pipe.close()


def run(sc: Scenario, out: Any = print) -> dict[str, Any]:
    """Run one scenario and return the result document; writes ``--json`` when set.

    Raises AMQPError/OSError only when the topology cannot be declared; failures after that
    are reported in the document's ``errors`` (and ``ok`` is false).
    """
    sc.validate()
    uri = URI.parse(sc.uri)
    plan = topology.build_plan(sc)
    env = report.environment()
    started_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    sampler = BrokerSampler.for_uri(uri.host, uri.port)
    r = Run(sc, plan, out)
    try:
        asyncio.run(asyncio.wait_for(topology.declare(uri, plan), SETUP_TIMEOUT))
        _start_workers(r)
        marks = execute(r, sampler)
    finally:
        _shutdown(r)
        if plan.generated and not sc.keep_queues:
            try:
                asyncio.run(asyncio.wait_for(topology.delete(uri, plan), 10))
            except (AMQPError, OSError, TimeoutError) as exc:
                r.errors.append(f"cleanup: {exc!r}")
    doc = _result(r, marks, sampler, env, started_at)
    if sc.json:
        with open(sc.json, "w") as f:
            json.dump(doc, f, indent=1)
    return doc


def _result(r: Run, marks: dict[str, float], sampler: BrokerSampler | None,
            env: dict[str, Any], started_at: str) -> dict[str, Any]:
    tot = r.totals()
    t0 = marks.get("start", 0.0)
    pub_s = marks.get("publish_end", marks.get("end", t0)) - t0
    cons_s = marks.get("last_consume", t0) - marks.get("consume_start", t0)
    published: dict[int, dict[str, int]] = {}
    consumed: dict[int, list[int]] = {}
    for final in r.finals.values():
        published.update({int(k): v for k, v in final.get("published_by_producer", {}).items()})
        for k, (cnt, chk) in final.get("consumed_by_producer", {}).items():
            acc = consumed.setdefault(int(k), [0, 0])
            acc[0] += cnt
            acc[1] += chk
    if r.errors or not marks:
        verification = {"status": "skipped", "mode": "ack" if not r.sc.auto_ack else "auto-ack",
                        "reason": "run failed", "expected": 0, "consumed": 0, "lost": 0,
                        "duplicated": 0, "checksum_ok": None, "producers": {}}
    else:
        verification = report.verify(published, consumed, r.plan.fanout,
                                     auto_ack=r.sc.auto_ack, resend=r.sc.resend,
                                     has_consumers=bool(r.plan.consumers))
        if "drain_timed_out" in marks and verification["status"] == "ok":
            verification["reason"] = "drain timed out"
    return {
        "schema": report.SCHEMA,
        "environment": env,
        "scenario": r.sc.to_json(),
        "started_at": started_at,
        "duration_s": {"publishing": round(pub_s, 3), "consuming": round(cons_s, 3),
                       "total": round(marks.get("end", t0) - t0, 3)},
        "totals": {k: tot[k] for k in report.TOTALS},
        "rates": {
            "publish": report.rate(tot["published"], pub_s),
            "confirm": report.rate(tot["confirmed"], pub_s),
            "consume": report.rate(tot["consumed"], cons_s),
            "publish_mb_s": round(report.rate(tot["published_bytes"], pub_s) / 1e6, 3),
            "consume_mb_s": round(report.rate(tot["consumed_bytes"], cons_s) / 1e6, 3),
        },
        "latency_ms": r.latency.percentiles(),
        "confirm_latency_ms": r.confirm_latency.percentiles(),
        "broker": _with_cpu_per_message(sampler.summary(), tot) if sampler is not None else None,
        "blocked_seconds": round(tot["blocked_seconds"], 3),
        "verification": verification,
        "timeline": r.timeline,
        "errors": r.errors,
        "ok": not r.errors and verification["status"] != "failed",
    }


def _with_cpu_per_message(broker: dict[str, Any], tot: dict[str, Any]) -> dict[str, Any]:
    """The broker summary with ``cpu_us_per_message``: its CPU time over the run (µs) per
    message moved (consumed, else published), so two brokers' costs compare directly."""
    moved = tot["consumed"] or tot["published"]
    cpu = broker.get("cpu_seconds")
    broker["cpu_us_per_message"] = round(cpu * 1e6 / moved, 2) if moved and cpu is not None else None
    return broker
