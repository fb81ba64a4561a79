# bench/storage_proc.py — the broker subprocess and client helpers of the storage benchmarks.
#
# Owns: starting `python -m broker` from this checkout on an ephemeral port with a temporary
# data dir (the ready line gives the port, as tests/recovery/brokerproc.py does), SIGTERM /
# SIGKILL, sampling the broker's RSS from /proc/<pid>/status, and the few async client steps
# the storage scripts share (declare, publish N with confirms, drain N in order) on the bench's
# own client (bench.amqp, bench.publisher).
# Talks to: bench.storage_lazy, bench.storage_restart, bench.storage_confirm.
# Must never: leave a broker process running (use `with BrokerProc(...)`), or import tests/.
"""Broker subprocess + RSS sampler + shared client steps for the storage benchmarks."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import Any

from pamqp import commands

from bench import wire
from bench.amqp import URI, Channel, Connection
from bench.options import Scenario
from bench.publisher import Publisher

READY = re.compile(rb"ready to accept connections on ([\d.]+):(\d+)")
ROOT = Path(__file__).resolve().parents[1]  # the checkout whose broker/ we run


class BrokerProc:
    """`python -m broker --port 0 --data-dir DATA` run from ROOT (PYTHONPATH=ROOT).

    `start()` returns the seconds from Popen to the ready line; `url` is then valid.
    `stop()` sends SIGTERM and returns (exit code, seconds to exit); `kill()` sends SIGKILL.
    Use as a context manager so the process is killed on any error.
    """

    def __init__(self, data_dir: str | Path, *extra: str) -> None:
        self.data_dir = str(data_dir)  # durable state of this broker
        self.extra = extra  # more CLI flags
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0  # from the ready line
        self.started_at = 0.0  # monotonic time of Popen
        self.ready_at = 0.0  # monotonic time the ready line was read
        self.log: deque[bytes] = deque(maxlen=400)  # last log lines (for errors)
        self._ready = threading.Event()
        self._pump: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 300.0) -> float:
        """Start and wait for the ready line; returns seconds from Popen to ready."""
        cmd = [sys.executable, "-m", "broker", "--port", "0", "--data-dir", self.data_dir,
               *self.extra]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self._ready.clear()
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        self._pump = threading.Thread(target=self._read_log, daemon=True)
        self._pump.start()
        deadline = self.started_at + timeout
        while not self._ready.wait(0.01):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("broker did not start:\n" + self.output())
        return self.ready_at - self.started_at

    def _read_log(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.append(line)
            if not self._ready.is_set():
                m = READY.search(line)
                if m:
                    self.ready_at = time.monotonic()
                    self.port = int(m.group(2))
                    self._ready.set()

    def stop(self, timeout: float = 120.0) -> tuple[int, float]:
        """SIGTERM and wait: (exit code, seconds until it exited)."""
        assert self.proc is not None
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        took = time.monotonic() - t0
        self._close_pipe()
        return code, took

    def kill(self) -> None:
        """SIGKILL (no-op if it already exited)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        self._close_pipe()

    def _close_pipe(self) -> None:
        if self._pump is not None:
            self._pump.join(10)
            self._pump = None
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()

    def output(self) -> str:
        return b"".join(self.log).decode(errors="replace")

    def rss_bytes(self) -> int:
        """Resident set size of the broker now, in bytes (0 if it is gone)."""
        return rss_of(self.pid)

    def __enter__(self) -> BrokerProc:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.kill()


def rss_of(pid: int) -> int:
    """VmRSS of `pid` from /proc/<pid>/status, in bytes (0 if unreadable)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


class RssSampler:
    """Samples a pid's RSS every `interval` seconds on a thread, tagged with the current
    `phase`; `peak(phase)` is the largest sample of that phase in bytes."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        self.pid = pid
        self.interval = interval  # seconds between samples
        self.phase = "start"  # label stored with each sample
        self.samples: list[tuple[float, str, int]] = []  # (monotonic s, phase, rss bytes)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> int:
        rss = rss_of(self.pid)
        self.samples.append((time.monotonic(), self.phase, rss))
        return rss

    def set_phase(self, phase: str) -> None:
        """Start a new phase (takes one sample at once so short phases are seen)."""
        self.phase = phase
        self.sample()

    def peak(self, phase: str) -> int:
        return max((r for _t, p, r in self.samples if p == phase), default=0)

    def last(self) -> int:
        return self.samples[-1][2] if self.samples else 0

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


MB = 1024 * 1024


def mb(n: int | float) -> float:
    """Bytes -> MiB, rounded to 0.1."""
    return round(n / MB, 1)


# -- client steps ---------------------------------------------------------------------------
async def connect(url: str, name: str) -> Connection:
    """Open a bench client connection."""
    return await Connection.open(URI.parse(url), name)


async def declare(ch: Channel, queue: str, *, passive: bool = False,
                  arguments: dict[str, Any] | None = None) -> int:
    """queue.declare (durable); returns message_count."""
    ok = await ch.rpc(
        commands.Queue.Declare(queue=queue, durable=True, passive=passive,
                               arguments=arguments or {}),
        commands.Queue.DeclareOk, timeout=120.0)
    return int(ok.message_count)


async def publish(ch: Channel, queue: str, count: int, *, size: int = 1024,
                  window: int = 2000, producer_id: int = 0) -> dict[str, Any]:
    """Publish `count` persistent messages of `size` bytes to `queue` through the default
    exchange with publisher confirms (at most `window` outstanding). Body tag = producer_id
    << 40 | seq, seq from 0. Returns {published, confirmed, nacked, timed_out, seconds}."""
    sc = Scenario(size=size, flags=("persistent",), confirm=window, pmessages=count, time=0,
                  confirm_timeout=120.0)
    pub = Publisher(ch, producer_id, "", queue, sc)
    await pub.setup()
    t0 = time.monotonic()
    await pub.run()
    return {"published": pub.published, "confirmed": pub.confirmed, "nacked": pub.nacked,
            "timed_out": pub.timed_out, "seconds": time.monotonic() - t0}


class OrderedDrain:
    """Consumes `count` messages from `queue` with manual acks (multiple every `ack_every`)
    and basic.qos `prefetch`, checking that seqs (the body tag's low 40 bits) arrive as
    0, 1, 2, ... per producer in the order published. `ordered` is False after any gap,
    repeat or reordering; `redelivered` is not visible on the fast path and not checked."""

    def __init__(self, ch: Channel, queue: str, count: int, *, prefetch: int = 500,
                 ack_every: int = 100) -> None:
        self.ch = ch
        self.queue = queue
        self.count = count  # messages expected
        self.prefetch = prefetch
        self.ack_every = max(1, ack_every)
        self.received = 0
        self.expected: dict[int, int] = {}  # producer id -> next seq
        self.ordered = True
        self.first_bad: tuple[int, int, int] | None = None  # (producer, expected, got)
        self.done = asyncio.Event()
        self._unacked = 0
        ch.on_deliver = self.on_deliver

    def on_deliver(self, dtag: int, ts: int, tag: int, size: int, now: int) -> None:
        pid, seq = tag >> wire.SEQ_BITS, tag & wire.SEQ_MASK
        want = self.expected.get(pid, 0)
        if seq != want and self.ordered:
            self.ordered = False
            self.first_bad = (pid, want, seq)
        self.expected[pid] = seq + 1
        self.received += 1
        self._unacked += 1
        if self._unacked >= self.ack_every or self.received >= self.count:
            self._unacked = 0
            self.ch.conn.queue_frame(wire.ack_frame(self.ch.id, dtag, True))
        if self.received >= self.count:
            self.done.set()

    async def run(self, idle_timeout: float = 60.0) -> float:
        """basic.qos + basic.consume, wait until `count` arrived (or `idle_timeout` s without
        progress); returns the seconds it took."""
        await self.ch.rpc(commands.Basic.Qos(prefetch_count=self.prefetch), commands.Basic.QosOk)
        t0 = time.monotonic()
        await self.ch.rpc(commands.Basic.Consume(queue=self.queue, consumer_tag="drain"),
                          commands.Basic.ConsumeOk)
        last, last_t = 0, time.monotonic()
        while not self.done.is_set():
            try:
                await asyncio.wait_for(self.done.wait(), 1.0)
            except TimeoutError:
                pass
            if self.ch.conn.error is not None:
                raise self.ch.conn.error
            if self.received != last:
                last, last_t = self.received, time.monotonic()
            elif time.monotonic() - last_t > idle_timeout:
                break
        return time.monotonic() - t0


def machine() -> dict[str, Any]:
    """Machine, OS, Python, uvloop/pamqp versions, commit and load average (bench.report)."""
    from bench.report import environment

    return environment()


def run(coro: Any) -> Any:
    """Run a coroutine on uvloop (the bench client's loop)."""
    import uvloop

    return uvloop.run(coro)
