"""The operations suite (tests/ops: the management API, Prometheus, brokerctl, the UI,
shovels, federation, sharding, the firehose) against a broker of two worker processes (issue
47 items 4 and 5: operations see one broker, and the suite runs with workers = 2 as well as
1). BROKER_TEST_TARGET=broker tells those tests that the broker at BROKER_TEST_URI is this
one, so they expect this broker's answers where RabbitMQ's differ; the tests that need the
in-process broker skip, as they do against RabbitMQ. About 2 minutes on 2 cores."""

from __future__ import annotations

import pytest

from tests.workers.conftest import free_port, run_suite_against


@pytest.mark.timeout(900)
def test_the_operations_suite_passes_against_two_workers(workers_broker):
    metrics = free_port()
    broker = workers_broker(2, **{"prometheus.tcp.port": metrics})
    run_suite_against(broker, "tests/ops", timeout=120, BROKER_TEST_TARGET="broker",
                      BROKER_TEST_METRICS=f"http://127.0.0.1:{metrics}")
