"""The Celery app of the quorum-queue tests (issue 34 item 8), configured as Celery 5.5+
documents for quorum queues: the task queue declared with `x-queue-type: quorum` (here also
`x-delivery-limit` 2 and a dead-letter queue), a topic default exchange so native delayed
delivery can route countdowns back to it, and `worker_detect_quorum_queues` (the default)
turning global QoS off. Environment: CELERY_TEST_BROKER, CELERY_TEST_QUORUM_QUEUE,
CELERY_TEST_DIR."""

from __future__ import annotations

import os
import time
from pathlib import Path

from celery import Celery
from celery.exceptions import Reject
from kombu import Exchange, Queue

QUEUE = os.environ["CELERY_TEST_QUORUM_QUEUE"]
DEAD = f"{QUEUE}.dead"
app = Celery("celery_quorum_app", broker=os.environ["CELERY_TEST_BROKER"], backend="rpc://")
app.conf.update(
    task_default_queue=QUEUE,
    task_default_exchange=QUEUE,
    task_default_exchange_type="topic",
    task_default_routing_key=QUEUE,
    task_queues=[Queue(QUEUE, Exchange(QUEUE, type="topic"), routing_key=QUEUE,
                       queue_arguments={"x-queue-type": "quorum", "x-delivery-limit": 2,
                                        "x-dead-letter-exchange": "",
                                        "x-dead-letter-routing-key": DEAD})],
    worker_detect_quorum_queues=True,
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    result_expires=None,
)
DIR = Path(os.environ["CELERY_TEST_DIR"])


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task
def stamp(name: str) -> float:
    """Records when it ran (s since the epoch) in DIR/<name>.ran, one line per run."""
    now = time.time()
    with open(DIR / f"{name}.ran", "a") as f:
        f.write(f"{now}\n")
    return now


@app.task(acks_late=True)
def poison(name: str) -> None:
    """Counts its attempt, then rejects its message with requeue: a poison message."""
    with open(DIR / f"{name}.attempts", "a") as f:
        f.write("x")
    raise Reject("poison", requeue=True)
