"""The operations suite (tests/ops: the management API, Prometheus, brokerctl, the UI,
shovels, federation, sharding, the firehose) against a broker of two worker processes (issue
47 items 4 and 5: operations see one broker, and the suite runs with workers = 2 as well as
1). BROKER_TEST_TARGET=broker tells those tests that the broker at BROKER_TEST_URI is this
one, so they expect this broker's answers where RabbitMQ's differ; the tests that need the
in-process broker skip, as they do against RabbitMQ. About 2 minutes on 2 cores."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(900)
def test_the_operations_suite_passes_against_two_workers(workers_broker):
    metrics = free_port()
    broker = workers_broker(2, **{"prometheus.tcp.port": metrics})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BROKER_", "PYTEST_"))}
    env.update(BROKER_TEST_URI=broker.url, BROKER_TEST_TARGET="broker",
               BROKER_TEST_API=f"http://127.0.0.1:{broker.api_port}",
               BROKER_TEST_METRICS=f"http://127.0.0.1:{metrics}")
    out = subprocess.run([sys.executable, "-m", "pytest", "tests/ops", "-q",
                          "-p", "no:cacheprovider", "-p", "no:randomly", "--timeout", "120"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=880)
    tail = "\n".join(out.stdout.splitlines()[-40:])
    assert out.returncode == 0, tail
    assert " passed" in tail and " failed" not in tail, tail
