# spark_jobs.amqp.deadline: runs one piece of broker work (a sequence of blocking pika calls)
# on a worker thread and fails it with BatchTimeout once it has made no progress for the
# batch timeout (option batchTimeoutMs). Owns BatchTimeout and Watch.
# Talked to by the stream reader (driver probes, executor range reads) and the queue-type probe.
# Must never keep its caller waiting longer than the timeout after the work's last progress.
"""No silent hangs: a deadline on work that waits for a broker.

pika's BlockingConnection has no timeout on its RPCs (basic.qos, basic.consume, queue.declare
wait for their -ok for ever) and a consumer loop cannot tell a quiet stream from a paused
broker; heartbeats notice a silent peer only after two heartbeat intervals, and never when
heartbeats are off. So the work runs on a daemon thread that reports progress on a Watch, and
the caller gives up when the Watch has not moved for `timeout_s`.
Callers import the names (`run_with_deadline`, `Watch`), not this module: spark_jobs is
pickled by value to Spark's workers (spark_jobs/session.py), and a module object referenced
from a function would be pickled whole, with the locks it holds.
Source: pika BlockingConnection docs (call_later timers fire only inside
process_data_events, so they cannot end a blocked RPC).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class BatchTimeout(TimeoutError):
    """A read made no progress for batchTimeoutMs: the broker did not answer (paused,
    overloaded, or a network that drops packets without resetting the connection).
    The message names what was being waited for."""


class Watch:
    """Progress of one piece of work, written by its worker thread, read by the caller."""

    def __init__(self) -> None:
        self.waiting_for = "the work to start"  # what the worker waits for now (for errors)
        self.moved_at = time.monotonic()  # when the worker last made progress
        self.cancelled = False  # the caller gave up: the worker should stop at its next check

    def step(self, waiting_for: str) -> None:
        """The worker finished a step and now waits for `waiting_for` (progress)."""
        self.waiting_for = waiting_for
        self.moved_at = time.monotonic()

    def tick(self) -> None:
        """Something arrived (a delivery): progress, still waiting for the same thing."""
        self.moved_at = time.monotonic()


def run_with_deadline(work: Callable[[Watch], T], timeout_s: float, what: str) -> T:
    """work(watch) on a daemon thread; its result, or its exception re-raised here.

    `what` names the work in errors ("reading offsets [0, 100) of stream queue 'q'").
    Errors: BatchTimeout when the watch has not moved for `timeout_s` seconds; the worker is
    told to stop (watch.cancelled) and left behind: a thread blocked inside a pika RPC ends
    when its connection does.
    """
    watch = Watch()
    done = threading.Event()
    box: dict[str, object] = {}

    def main() -> None:
        try:
            box["value"] = work(watch)
        except BaseException as e:  # noqa: BLE001 - handed to the caller, re-raised there
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=main, name=f"amqp-work: {what}", daemon=True).start()
    while not done.wait(max(0.0, watch.moved_at + timeout_s - time.monotonic())):
        if time.monotonic() - watch.moved_at >= timeout_s:
            watch.cancelled = True
            raise BatchTimeout(f"amqp source: no progress for {timeout_s:g} s (batchTimeoutMs) "
                               f"{what}: waiting for {watch.waiting_for}")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]
