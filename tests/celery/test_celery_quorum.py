"""Celery on quorum queues (issue 34 item 8), end to end with a real worker subprocess:
the worker detects the quorum queue and consumes with per-consumer QoS (global QoS would be
refused with 540); a task whose message every worker rejects is dead-lettered after
`x-delivery-limit`; Celery's native delayed delivery (28 quorum queues with message TTLs and
at-least-once dead-lettering between them) runs a task with countdown=5 once and on time.
Passes against RabbitMQ 3.10.8 too (BROKER_TEST_URI)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pika
import pytest

from tests.celery.celery_env import HERE, celery_env, import_app
from tests.polling import wait_for


@pytest.fixture(scope="module")
def env(broker, tmp_path_factory):
    d = tmp_path_factory.mktemp("celery-quorum")
    values = {"CELERY_TEST_BROKER": broker.url,
              "CELERY_TEST_QUORUM_QUEUE": f"celery-qq-{uuid.uuid4().hex[:8]}",
              "CELERY_TEST_DIR": str(d)}
    with celery_env(values) as environment:
        yield environment


@pytest.fixture(scope="module")
def app(env):
    module = import_app("celery_quorum_app")
    yield module
    module.app.close()


@pytest.fixture(scope="module")
def worker(env, app, broker):
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
        conn.channel().queue_declare(app.DEAD, durable=True)
    log_path = Path(env["CELERY_TEST_DIR"]) / "worker.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "celery_quorum_app", "worker",
             "--pool=threads", "--concurrency=2", "--without-gossip", "--without-mingle",
             "--without-heartbeat", "-l", "info", "-n", f"qq-{uuid.uuid4().hex[:6]}@%h"],
            cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=log)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
        ch = conn.channel()
        for q in (app.QUEUE, app.DEAD):
            ch.queue_delete(q)


def test_a_task_runs_on_a_quorum_queue(app, worker, env):
    assert app.add.delay(2, 3).get(timeout=30) == 5
    log = (Path(env["CELERY_TEST_DIR"]) / "worker.log").read_text()
    # Celery saw the quorum queue and consumes with per-consumer QoS
    assert "global qos is disabled" in log.lower() and "NOT_IMPLEMENTED" not in log


def test_a_poisoned_task_is_dead_lettered_after_the_delivery_limit(app, worker, env, broker):
    name = f"poison-{uuid.uuid4().hex[:6]}"
    app.poison.delay(name)
    attempts = Path(env["CELERY_TEST_DIR"]) / f"{name}.attempts"
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
        ch = conn.channel()
        _m, props, body = wait_for(lambda: (lambda r: r if r[0] else None)(
            ch.basic_get(app.DEAD, auto_ack=True)), timeout=30)
    assert name.encode() in body
    assert props.headers["x-death"][0]["reason"] == "delivery_limit"
    assert attempts.read_text() == "xxx"  # limit 2: the third return dead-letters it


@pytest.mark.timeout(60)
def test_a_countdown_runs_once_on_time_through_native_delayed_delivery(app, worker, env):
    name = f"later-{uuid.uuid4().hex[:6]}"
    sent = time.time()
    result = app.stamp.apply_async((name,), countdown=5)
    ran_at = result.get(timeout=30)
    assert 4.5 <= ran_at - sent < 8, ran_at - sent
    time.sleep(2)  # no second run
    assert len((Path(env["CELERY_TEST_DIR"]) / f"{name}.ran").read_text().split()) == 1
