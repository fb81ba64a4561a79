"""Shared fixtures: a real broker on an ephemeral port.

`broker` (session scope) is an `EmbeddedBroker` serving 127.0.0.1:<ephemeral>. Set
BROKER_TEST_URI (e.g. amqp://guest:guest@127.0.0.1:5672/%2F) to run the same tests against
another broker, such as a real RabbitMQ, to check that a test encodes RabbitMQ's behaviour.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

from pybroker_pytest import AmqpBroker
from tests.polling import wait_for  # noqa: F401  (re-exported for tests)
from tests.skipped_areas import (  # noqa: F401  (hooks: whole areas skipped, at the end)
    pytest_collection_finish,
    pytest_configure,
    pytest_terminal_summary,
)


@pytest.fixture(scope="session")
def broker() -> Iterator[object]:
    uri = os.environ.get("BROKER_TEST_URI")
    if uri:
        yield AmqpBroker(uri)  # host, port, url of the broker at BROKER_TEST_URI
        return
    from broker.embedded import EmbeddedBroker

    # the management API and Prometheus endpoint on free ports (tests/ops), rates every 0.2 s,
    # and the stream protocol on a free port (the Spark source's streamPort reads)
    b = EmbeddedBroker(management_tcp_port=-1, prometheus_tcp_port=-1,
                       collect_statistics_interval=200,
                       stream_listeners_tcp_default="0").start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def unique() -> Callable[[str], str]:
    """unique("q") -> "q-<8 hex>": names that never collide across tests or runs."""
    return lambda prefix="t": f"{prefix}-{uuid.uuid4().hex[:8]}"




@pytest.fixture(scope="module")
def embedded_only_module() -> None:
    """Skip a module before its module-wide EmbeddedBroker starts when BROKER_TEST_URI names
    another broker (the function-scoped `embedded_only` comes too late for those)."""
    if os.environ.get("BROKER_TEST_URI"):
        pytest.skip("needs its own EmbeddedBroker; BROKER_TEST_URI is set")
