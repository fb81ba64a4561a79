# bench/celery_app.py — the Celery app of the end-to-end benchmark (bench/celery_e2e.py).
#
# Owns: the no-op task and how it records that it ran.
# Talks to: a `celery worker` subprocess started by bench.celery_e2e, and its producers.
# Must never: return results (results are off: the benchmark measures the broker path).
"""A no-op Celery task that appends its number to a file, so a run can check every task
ran exactly once. Configured from the environment: BENCH_CELERY_BROKER (AMQP URL),
BENCH_CELERY_QUEUE (the queue), BENCH_CELERY_LOG (the file tasks append to),
BENCH_CELERY_PREFETCH (worker prefetch multiplier)."""

from __future__ import annotations

import os

from celery import Celery

app = Celery("bench_celery", broker=os.environ.get("BENCH_CELERY_BROKER", "amqp://"))
app.conf.update(
    task_default_queue=os.environ.get("BENCH_CELERY_QUEUE", "bench.celery"),
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=int(os.environ.get("BENCH_CELERY_PREFETCH", "100")),
    worker_hijack_root_logger=False,
)
_LOG = os.environ.get("BENCH_CELERY_LOG")
_out = open(_LOG, "a", buffering=1) if _LOG else None  # noqa: SIM115 - for the worker's life


@app.task
def noop(n: int) -> None:
    """Does nothing but note that task `n` ran (one line, flushed)."""
    if _out is not None:
        _out.write(f"{n}\n")
