"""pytest plugin: an AMQP broker for your tests (registered through the `pytest11` entry
point, so installing the package is enough).

A package of its own, outside `broker`, that imports `broker` only when a fixture runs: pytest
loads entry-point plugins before it applies `pythonpath`, and importing `broker` that early
would pin the installed copy over a checkout's.

Owns: the command-line options `--amqp-url` and `--amqp-broker-port` and the fixtures
`amqp_broker`, `amqp_url` and `amqp_broker_factory`. It starts brokers only through
`broker.embedded.EmbeddedBroker` and touches the running broker only through its façade
(`Broker.add_vhost`, `Broker.delete_vhost`, `Users.set_permissions`), on the broker's loop.
Helpers to wait for a queue's depth and to read a queue without consuming it are in
`broker.testing` (they speak AMQP through pika, so they work against any broker).

Fixtures:
- `amqp_broker` (session): an `AmqpBroker` handle (`url`, `host`, `port`); by default an
  embedded broker on 127.0.0.1 with an ephemeral port (or `--amqp-broker-port`) and data in a
  temporary directory; with `--amqp-url` the external broker at that URL (e.g. RabbitMQ in CI).
- `amqp_url` (function): an AMQP URL for a fresh vhost `test-<hex>` that only this test sees,
  deleted with everything in it afterwards. With `--amqp-url` it is that URL unchanged (an
  external broker's vhosts are not ours to create).
- `amqp_broker_factory` (function): `factory(**overrides) -> EmbeddedBroker`, started, with any
  `BrokerConfig` field overridden (e.g. `confirm_on="ack"`, `vm_memory_high_watermark=0.1`);
  every broker it made is stopped after the test. Skips the test under `--amqp-url`.
"""

from __future__ import annotations

import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

DEFAULT_USER = "guest"


@dataclass
class AmqpBroker:
    """What a test needs to reach the broker: `url` (the default vhost, e.g.
    amqp://guest:guest@127.0.0.1:PORT/%2F), `host`, `port`, and `embedded`, the
    `EmbeddedBroker` (None for an external broker)."""

    url: str
    embedded: Any = None

    @property
    def host(self) -> str:
        return urllib.parse.urlsplit(self.url).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        return urllib.parse.urlsplit(self.url).port or 5672

    def url_for(self, vhost: str) -> str:
        """The same URL with `vhost` (percent-encoded) as its path."""
        parts = urllib.parse.urlsplit(self.url)
        return urllib.parse.urlunsplit(
            parts._replace(path="/" + urllib.parse.quote(vhost, safe="")))


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("amqp", "AMQP broker fixtures (pybroker-amqp)")
    group.addoption("--amqp-url", default=None, metavar="URL",
                    help="use the broker at this AMQP URL instead of starting one "
                         "(e.g. amqp://guest:guest@localhost:5672/%%2F)")
    group.addoption("--amqp-broker-port", type=int, default=0, metavar="PORT",
                    help="port for the embedded broker (default: ephemeral)")


@pytest.fixture(scope="session")
def amqp_broker(pytestconfig: pytest.Config) -> Iterator[AmqpBroker]:
    """The session's broker (module docstring)."""
    url = pytestconfig.getoption("amqp_url")
    if url:
        yield AmqpBroker(url)
        return
    from broker.embedded import EmbeddedBroker

    embedded = EmbeddedBroker(port=pytestconfig.getoption("amqp_broker_port")).start()
    try:
        yield AmqpBroker(embedded.url, embedded)
    finally:
        embedded.stop()


@pytest.fixture
def amqp_url(amqp_broker: AmqpBroker) -> Iterator[str]:
    """A URL on a fresh vhost of the session's broker, deleted after the test."""
    embedded = amqp_broker.embedded
    if embedded is None:
        yield amqp_broker.url
        return
    vhost = f"test-{uuid.uuid4().hex[:12]}"

    def create() -> None:
        b = embedded.broker
        b.add_vhost(vhost)
        b.users.set_permissions(DEFAULT_USER, vhost, ".*", ".*", ".*")

    embedded.call(create)
    try:
        yield amqp_broker.url_for(vhost)
    finally:
        embedded.call(lambda: embedded.broker.delete_vhost(vhost))


@pytest.fixture
def amqp_broker_factory(pytestconfig: pytest.Config) -> Iterator[Callable[..., Any]]:
    """factory(**BrokerConfig overrides) -> a started EmbeddedBroker, stopped afterwards."""
    if pytestconfig.getoption("amqp_url"):
        pytest.skip("amqp_broker_factory starts its own brokers; --amqp-url is set")
    from broker.embedded import EmbeddedBroker

    started: list[EmbeddedBroker] = []

    def factory(**overrides: Any) -> EmbeddedBroker:
        b = EmbeddedBroker(**overrides).start()
        started.append(b)
        return b

    yield factory
    for b in started:
        b.stop()
