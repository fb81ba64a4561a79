"""The Celery app the Celery tests run in a real worker subprocess.

Configured from the environment: CELERY_TEST_BROKER (AMQP URL), CELERY_TEST_QUEUE (the
default queue, unique per test session), CELERY_TEST_DIR (a directory tasks use to record
what they did, so the tests can see attempts across worker processes).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from celery import Celery

app = Celery("celery_app", broker=os.environ["CELERY_TEST_BROKER"],
             backend=os.environ.get("CELERY_TEST_BACKEND", "rpc://"))
app.conf.update(
    task_default_queue=os.environ["CELERY_TEST_QUEUE"],
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    result_expires=None,
)
if os.environ.get("CELERY_TEST_PRIORITY_QUEUE"):  # a worker for a priority queue
    from kombu import Queue

    _pq = os.environ["CELERY_TEST_PRIORITY_QUEUE"]
    app.conf.task_queues = [Queue(_pq, routing_key=_pq, max_priority=9, auto_delete=False)]
DIR = Path(os.environ["CELERY_TEST_DIR"])


def _attempt(name: str) -> int:
    """Count one more attempt of `name` in DIR; returns the attempt number (1, 2, ...)."""
    path = DIR / f"{name}.attempts"
    with open(path, "a") as f:
        f.write("x")
    return path.stat().st_size


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task
def tsum(values: list[int]) -> int:
    return sum(values)


@app.task(bind=True, max_retries=5)
def flaky(self, name: str, failures: int) -> int:
    """Fails `failures` times (retry with a 0.2 s countdown), then returns its attempt count."""
    n = _attempt(name)
    if n <= failures:
        raise self.retry(countdown=0.2)
    return n


@app.task(acks_late=True)
def slow_once(name: str) -> int:
    """First attempt: records itself and blocks (the test kills the worker meanwhile); later
    attempts return the attempt number at once."""
    n = _attempt(name)
    if n == 1:
        time.sleep(60)
    return n


@app.task
def record(name: str, label: str) -> str:
    """Appends `label` and a newline to DIR/<name>.order (the order tasks ran in)."""
    with open(DIR / f"{name}.order", "a") as f:
        f.write(label + "\n")
    return label
