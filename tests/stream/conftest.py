"""The stream tests' embedded broker with the stream protocol on a free port (one per
module)."""

from __future__ import annotations

import pytest

from broker.embedded import EmbeddedBroker


@pytest.fixture(scope="module")
def sbroker():
    b = EmbeddedBroker(stream_listeners_tcp_default="0").start()
    yield b
    b.stop()
