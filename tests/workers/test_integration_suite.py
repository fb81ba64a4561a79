"""The behaviour suite (tests/integration: pika, aio-pika, kombu and raw frames, the tests
that run against any broker) against a broker of two worker processes (issue 47 item 5: the
suite runs with workers = 2 as well as 1). The tests that need the in-process broker skip
there, as they do against RabbitMQ; every other one must pass. About 90 s on 2 cores."""

from __future__ import annotations

import pytest

from tests.workers.conftest import run_suite_against


@pytest.mark.timeout(900)
def test_the_integration_suite_passes_against_two_workers(workers_broker):
    run_suite_against(workers_broker(2, **{"prometheus.tcp.port": 0}), "tests/integration")
