"""The behaviour suite (tests/integration: pika, aio-pika, kombu and raw frames, the tests
that run against any broker) against a broker of two worker processes (issue 47 item 5: the
suite runs with workers = 2 as well as 1). The tests that need the in-process broker skip
there, as they do against RabbitMQ; every other one must pass. About 90 s on 2 cores."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(900)
def test_the_integration_suite_passes_against_two_workers(workers_broker):
    broker = workers_broker(2, **{"prometheus.tcp.port": 0})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BROKER_", "PYTEST_"))}
    env.update(BROKER_TEST_URI=broker.url,
               BROKER_TEST_API=f"http://127.0.0.1:{broker.api_port}")
    out = subprocess.run([sys.executable, "-m", "pytest", "tests/integration", "-q",
                          "-p", "no:cacheprovider", "-p", "no:randomly", "--timeout", "60"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=880)
    tail = "\n".join(out.stdout.splitlines()[-40:])
    assert out.returncode == 0, tail
    assert " passed" in tail and " failed" not in tail, tail
