# bench/celery_e2e.py — `python -m bench.celery_e2e`: Celery end to end against one broker or
# two brokers alternately.
#
# Owns: starting a solo Celery worker, N producer processes that `delay()` a no-op task, the
# tasks/s figure and the exactly-once check, and the A B A B … comparison.
# Talks to: bench.celery_app (the task), the broker under test over AMQP, /proc for the
# broker's CPU (bench.brokerproc).
# Must never: count a run whose tasks did not all run exactly once.
"""Celery end to end (issue 26): N producers `delay()` a no-op task, one solo worker with a
prefetch, results off; the rate is tasks run per second from the first publish to the last
task run, and every task must have run exactly once.

    python -m bench.celery_e2e --uri amqp://guest:guest@127.0.0.1:5672/%2F
    python -m bench.celery_e2e --compare URI_A URI_B --names rabbitmq ours --rounds 3

Each run uses a fresh queue, `--producers` processes of `--tasks` tasks each; the worker is
`celery worker --pool solo --prefetch-multiplier P` (P = `--prefetch`). Where the broker is a
local process (found by its port), its CPU seconds over the run are reported too.

Each run also reports where the machine's CPU went, in µs per task: the broker's, the
worker's (from /proc) and the producers' (their own getrusage over the publishing loop),
and the machine's idle share (/proc/stat). On a machine the clients saturate, the tasks/s
ratio of two brokers follows the total CPU per task, so `--compare` prints the ratio CPU
alone predicts beside the measured one: the broker's share is what a broker can change.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue as queue_mod
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from bench.brokerproc import BrokerSampler

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _produce(uri: str, queue: str, first: int, count: int, ready: Any, go: Any,
             cpu_out: Any) -> None:
    os.environ["BENCH_CELERY_BROKER"] = uri
    os.environ["BENCH_CELERY_QUEUE"] = queue
    from bench.celery_app import noop

    with noop.app.connection_for_write() as conn:  # connect before the clock starts
        conn.ensure_connection(max_retries=3)
        noop.apply_async((first,), connection=conn)  # warm: declare the queue
        ready.release()
        go.wait()
        cpu0 = _own_cpu()
        for n in range(first + 1, first + count):
            noop.apply_async((n,), connection=conn)
        cpu_out.put(_own_cpu() - cpu0)


def _own_cpu() -> float:
    """CPU seconds (user + system) this process has used."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _pid_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) of a live local process, from /proc, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def _machine_idle() -> tuple[int, int] | None:
    """(idle + iowait, total) jiffies of all CPUs from /proc/stat, or None."""
    try:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:9]]
    except OSError:
        return None
    return values[3] + values[4], sum(values)


def run_once(uri: str, producers: int = 2, tasks: int = 10_000, prefetch: int = 100,
             timeout: float = 300.0) -> dict[str, Any]:
    """One run: {"tasks", "seconds", "tasks_per_s", "exactly_once", "broker_cpu_s",
    "cpu_us_per_task"}. Raises RuntimeError if the tasks did not all run exactly once."""
    queue = f"bench.celery.{uuid.uuid4().hex[:8]}"
    workdir = Path(tempfile.mkdtemp(prefix="bench-celery-"))
    log = workdir / "ran.txt"
    env = {**os.environ, "BENCH_CELERY_BROKER": uri, "BENCH_CELERY_QUEUE": queue,
           "BENCH_CELERY_LOG": str(log), "BENCH_CELERY_PREFETCH": str(prefetch)}
    with open(workdir / "worker.log", "wb") as worker_log:  # the child keeps its own fd
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "bench.celery_app", "worker", "--pool=solo",
             "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "warning",
             "-n", f"bench-{queue}@%h", "-Q", queue],
            env=env, stdout=subprocess.DEVNULL, stderr=worker_log)
    total = producers * tasks
    try:
        ctx = mp.get_context("spawn")
        ready, go, cpu_out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_produce,
                             args=(uri, queue, i * tasks, tasks, ready, go, cpu_out))
                 for i in range(producers)]
        for p in procs:
            p.start()
        for _ in procs:
            if not ready.acquire(timeout=60):
                raise RuntimeError("a producer did not connect")
        _wait_lines(log, producers, 60)  # the warm-up tasks ran: the worker is consuming
        cpu0, worker0, idle0 = _broker_cpu(uri), _pid_cpu(worker.pid), _machine_idle()
        t0 = time.monotonic()
        go.set()
        _wait_lines(log, total, timeout)
        seconds = time.monotonic() - t0
        cpu1, worker1, idle1 = _broker_cpu(uri), _pid_cpu(worker.pid), _machine_idle()
        cpu = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
        worker_cpu = worker1 - worker0 if worker0 is not None and worker1 is not None else None
        idle = (None if idle0 is None or idle1 is None or idle1[1] == idle0[1]
                else (idle1[0] - idle0[0]) / (idle1[1] - idle0[1]))
        producer_cpu: float | None = 0.0
        for _ in procs:
            try:
                producer_cpu += cpu_out.get(timeout=30)  # type: ignore[operator]
            except queue_mod.Empty:
                producer_cpu = None
                break
        for p in procs:
            p.join(30)
    finally:
        worker.kill()
        worker.wait(30)
    ran = [int(line) for line in log.read_text().split()]
    exactly_once = sorted(ran) == list(range(total))
    if not exactly_once:
        raise RuntimeError(f"{len(ran)} task runs for {total} tasks, "
                           f"{len(set(ran))} distinct: not exactly once")
    timed = total - producers  # the warm-up tasks ran before the clock started
    return {"tasks": total, "seconds": round(seconds, 3),
            "tasks_per_s": round(timed / seconds, 1), "exactly_once": exactly_once,
            "broker_cpu_s": None if cpu is None else round(cpu, 3),
            "cpu_us_per_task": None if cpu is None else round(cpu * 1e6 / timed, 2),
            "worker_cpu_us_per_task": _per_task(worker_cpu, timed),
            "producers_cpu_us_per_task": _per_task(producer_cpu, timed),
            "machine_idle": None if idle is None else round(idle, 3)}


def _per_task(cpu_s: float | None, tasks: int) -> float | None:
    return None if cpu_s is None else round(cpu_s * 1e6 / tasks, 1)


def _broker_cpu(uri: str) -> float | None:
    """CPU seconds the local broker process listening on the URI's port has used, or None."""
    u = urlparse(uri)
    sampler = BrokerSampler.for_uri(u.hostname or "127.0.0.1", u.port or 5672)
    got = sampler.cpu_rss() if sampler is not None else None
    return got[0] if got is not None else None


def _wait_lines(path: Path, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {n} tasks ran within {timeout} s")
        time.sleep(0.05)


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{x * 100:.0f} %"


def cpu_bound_ratio(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """The B/A tasks/s ratio that CPU alone predicts when every process shares a saturated
    machine: (all CPU per task under A) / (all CPU per task under B), each the sum of the
    broker's, the worker's and the producers' µs per task. None when a figure is missing
    (a remote broker)."""
    keys = ("cpu_us_per_task", "worker_cpu_us_per_task", "producers_cpu_us_per_task")
    if any(r.get(k) is None for r in (a, b) for k in keys):
        return None
    return sum(a[k] for k in keys) / sum(b[k] for k in keys)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.celery_e2e", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--uri", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    p.add_argument("--compare", nargs=2, metavar=("URI_A", "URI_B"))
    p.add_argument("--names", nargs=2, default=("A", "B"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--tasks", type=int, default=10_000, help="tasks per producer")
    p.add_argument("--prefetch", type=int, default=100, help="worker prefetch multiplier")
    p.add_argument("--json", help="write the runs and medians here")
    ns = p.parse_args(argv)
    sides = list(zip(ns.names, ns.compare, strict=True)) if ns.compare else [("broker", ns.uri)]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in sides}
    for rnd in range(1, (ns.rounds if ns.compare else 1) + 1):
        for name, uri in sides:
            res = run_once(uri, ns.producers, ns.tasks, ns.prefetch)
            res["load"] = os.getloadavg()[0]
            runs[name].append(res)
            print(f"round {rnd} {name:>10}: {res['tasks_per_s']:,.0f} tasks/s, CPU us/task: "
                  f"broker {res['cpu_us_per_task']}, worker {res['worker_cpu_us_per_task']}, "
                  f"producers {res['producers_cpu_us_per_task']}; machine idle "
                  f"{_pct(res['machine_idle'])}; exactly once, load {res['load']:.2f}",
                  flush=True)
    medians = {name: statistics.median(r["tasks_per_s"] for r in rs) for name, rs in runs.items()}
    if ns.compare:
        a, b = (medians[n] for n in ns.names)
        print(f"median tasks/s: {ns.names[0]} {a:,.0f}, {ns.names[1]} {b:,.0f}, "
              f"{ns.names[1]}/{ns.names[0]} {b / a:.2f}")
        predicted = [cpu_bound_ratio(ra, rb)
                     for ra, rb in zip(runs[ns.names[0]], runs[ns.names[1]], strict=True)]
        if all(x is not None for x in predicted):
            print("ratio CPU alone predicts, per round (all processes' CPU per task, A over B): "
                  + ", ".join(f"{x:.2f}" for x in predicted))
    if ns.json:
        Path(ns.json).write_text(json.dumps({"schema": "bench-celery-e2e/1", "runs": runs,
                                             "medians": medians}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
