"""bench.celery_e2e against the session broker: a short real run (a solo Celery worker
subprocess, two producer processes) moves every task exactly once and reports a rate."""

from __future__ import annotations

import os

import pytest

from bench import celery_e2e

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_short_run_moves_every_task_once(broker, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)  # the worker imports bench.celery_app from here
    res = celery_e2e.run_once(broker.url, producers=2, tasks=300, prefetch=50, timeout=120)
    assert res["exactly_once"] and res["tasks"] == 600
    assert res["tasks_per_s"] > 0


def test_a_lost_task_fails_the_run(tmp_path) -> None:
    log = tmp_path / "ran.txt"
    log.write_text("0\n1\n")
    with pytest.raises(RuntimeError):
        celery_e2e._wait_lines(log, 3, 0.2)
