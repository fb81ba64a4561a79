"""Celery 5.7 end to end: a real worker subprocess against the broker, the rpc:// result
backend, retries with countdown, acks_late after a killed worker, groups and chords, and
`celery inspect ping` (a broadcast over the celery.pidbox fanout exchange)."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from celery import group

from tests.celery.celery_env import HERE, celery_env, import_app
from tests.polling import wait_for


@pytest.fixture(scope="module")
def env(broker, tmp_path_factory):
    d = tmp_path_factory.mktemp("celery")
    values = {"CELERY_TEST_BROKER": broker.url, "CELERY_TEST_QUEUE": f"celery-{uuid.uuid4().hex[:8]}",
              "CELERY_TEST_DIR": str(d)}
    with celery_env(values) as environment:
        yield environment


@pytest.fixture(scope="module")
def app(env):
    module = import_app("celery_app")
    yield module
    module.app.close()


def start_worker(env, hostname: str, concurrency: int = 4,
                 queues: str | None = None) -> subprocess.Popen:
    """A `celery worker` subprocess (thread pool) consuming the default queue or `queues`."""
    log = open(Path(env["CELERY_TEST_DIR"]) / f"{hostname.split('@')[0]}.log", "wb")  # noqa: SIM115
    with log:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "--pool=threads",
             f"--concurrency={concurrency}", "--without-gossip", "--without-mingle",
             "--without-heartbeat", "-l", "warning", "-n", hostname,
             *(["-Q", queues] if queues else [])],
            cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=log)


def stop(proc: subprocess.Popen) -> None:
    """Kill the worker: a warm shutdown (SIGTERM) is handled only when the worker's event
    loop next wakes, up to 10 s later when it is idle, which the suite can't afford; the
    broker requeues whatever the worker had unacked when its connection drops."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


@pytest.fixture(scope="module")
def worker(env, app):
    proc = start_worker(env, f"w1-{uuid.uuid4().hex[:6]}@%h")
    yield proc
    stop(proc)


def test_delay_and_rpc_result(app, worker):
    assert app.add.delay(2, 3).get(timeout=20) == 5


def test_inspect_ping_reaches_the_worker(app, worker):
    replies = wait_for(lambda: app.app.control.inspect(timeout=1.0).ping(), timeout=20)
    assert any(r == {"ok": "pong"} for r in replies.values())


def test_retry_with_countdown(app, worker):
    name = uuid.uuid4().hex
    assert app.flaky.delay(name, 2).get(timeout=20) == 3


def test_group_of_500(app, worker):
    res = group(app.add.s(i, i) for i in range(500))().get(timeout=60)
    assert res == [2 * i for i in range(500)]


def test_chord_with_a_storing_backend(env, tmp_path):
    """rpc:// does not support chords (Celery refuses them); with the filesystem backend
    the header's results are joined and the body runs once."""
    results = tmp_path / "results"
    results.mkdir()
    queue = f"chord-{uuid.uuid4().hex[:8]}"
    cenv = dict(env, CELERY_TEST_BACKEND=f"file://{results}", CELERY_TEST_QUEUE=queue)
    code = (
        "import celery_app as c\n"
        "from celery import chord\n"
        "r = chord(c.add.s(i, 1) for i in range(20))(c.tsum.s())\n"
        "print(r.get(timeout=30))\n"
    )
    proc = start_worker(cenv, f"chord-{queue}@%h")
    try:
        out = subprocess.run([sys.executable, "-c", code], cwd=HERE, env=cenv,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == str(sum(range(1, 21)))
    finally:
        stop(proc)


def test_countdown_runs_later(app, worker):
    r = app.add.apply_async((1, 1), countdown=0.5)
    assert r.get(timeout=20) == 2


def test_acks_late_task_runs_again_after_the_worker_is_killed(app, env):
    """acks_late: the message is acked after the task returns; a worker killed mid-task
    (SIGKILL, its connection drops) leaves it unacked, the broker requeues it, and the next
    worker runs it again."""
    name = uuid.uuid4().hex
    queue = f"late-{name[:8]}"
    attempts = Path(env["CELERY_TEST_DIR"]) / f"{name}.attempts"
    victim = start_worker(env, f"victim-{name[:6]}@%h", concurrency=1, queues=queue)
    rescuer = None
    try:
        r = app.slow_once.apply_async((name,), queue=queue)
        # the attempt is written, not only the file created: a victim killed between the
        # two would leave the rescuer's attempt counted as the first (and sleeping 60 s)
        wait_for(lambda: attempts.exists() and attempts.stat().st_size >= 1, timeout=20)
        victim.send_signal(signal.SIGKILL)  # mid-task, before the late ack
        victim.wait(10)
        rescuer = start_worker(env, f"rescuer-{name[:6]}@%h", concurrency=1, queues=queue)
        assert r.get(timeout=30) == 2
    finally:
        stop(victim)
        if rescuer is not None:
            stop(rescuer)


def test_task_queue_with_message_ttl(app, env):
    """task_queues with message TTL (kombu.Queue(message_ttl=...)): a task nobody takes in
    time is gone from the queue, as with RabbitMQ."""
    from kombu import Queue

    from broker.testing import queue_depth

    name = f"ttl-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, routing_key=name, message_ttl=0.2, auto_delete=False)
    app.add.apply_async((1, 2), queue=queue, routing_key=name)
    assert queue_depth(env["CELERY_TEST_BROKER"], name) == 1
    wait_for(lambda: queue_depth(env["CELERY_TEST_BROKER"], name) == 0, timeout=5)
    with app.app.connection_for_write() as conn:
        queue(conn.default_channel).delete()


def test_priority_task_queue_runs_higher_priority_first(app, env):
    """task_queues with x-max-priority (kombu.Queue(max_priority=...)) and apply_async(
    priority=...): tasks queued while no worker runs are taken highest priority first, as
    with RabbitMQ (docs.celeryq.dev, "Routing Tasks", RabbitMQ message priorities)."""
    from kombu import Queue

    from broker.testing import queue_depth

    name = f"prio-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, routing_key=name, max_priority=9, auto_delete=False)
    order = [(0, "p0-a"), (5, "p5-a"), (9, "p9"), (5, "p5-b"), (1, "p1"), (0, "p0-b")]
    for priority, label in order:
        app.record.apply_async((name, label), queue=queue, routing_key=name,
                               priority=priority)
    assert queue_depth(env["CELERY_TEST_BROKER"], name) == len(order)
    path = Path(env["CELERY_TEST_DIR"]) / f"{name}.order"
    # the worker declares the queue from task_queues, with the same x-max-priority
    proc = start_worker(dict(env, CELERY_TEST_PRIORITY_QUEUE=name), f"{name}@%h",
                        concurrency=1, queues=name)
    try:
        wait_for(lambda: path.exists() and len(path.read_text().split()) == len(order),
                 timeout=30)
    finally:
        stop(proc)
    assert path.read_text().split() == ["p9", "p5-a", "p5-b", "p1", "p0-a", "p0-b"]
    with app.app.connection_for_write() as conn:
        queue(conn.default_channel).delete()
