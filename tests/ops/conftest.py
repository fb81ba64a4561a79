"""Fixtures for the operations tests (HTTP API, Prometheus, brokerctl): `api`, a requests
session on the management API of the session broker (or, with BROKER_TEST_URI set, of the
broker at BROKER_TEST_API, default http://127.0.0.1:15672 — a RabbitMQ with the management
plugin), and `metrics_url`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from urllib.parse import quote

import pika
import pytest
import requests

EXTERNAL = bool(os.environ.get("BROKER_TEST_URI"))
# ... and that broker is a RabbitMQ (the default), or this broker in another shape
# (BROKER_TEST_TARGET=broker: tests/workers runs these tests against two worker processes),
# whose answers are this broker's
RABBITMQ = EXTERNAL and os.environ.get("BROKER_TEST_TARGET", "rabbitmq") == "rabbitmq"


class Api:
    """HTTP client for one management API: `get/put/post/delete(path, **kw)` with the
    base URL and basic auth filled in; `q(vhost)` percent-encodes a path segment."""

    def __init__(self, base: str, auth: tuple[str, str] = ("guest", "guest")) -> None:
        self.base = base.rstrip("/")
        self.session = requests.Session()
        self.session.auth = auth

    @staticmethod
    def q(segment: str) -> str:
        return quote(segment, safe="")

    def request(self, method: str, path: str, **kw: object) -> requests.Response:
        kw.setdefault("timeout", 30)
        return self.session.request(method, self.base + path, **kw)  # type: ignore[arg-type]

    def get(self, path: str, **kw: object) -> requests.Response:
        return self.request("GET", path, **kw)

    def put(self, path: str, **kw: object) -> requests.Response:
        return self.request("PUT", path, **kw)

    def post(self, path: str, **kw: object) -> requests.Response:
        return self.request("POST", path, **kw)

    def delete(self, path: str, **kw: object) -> requests.Response:
        return self.request("DELETE", path, **kw)

    def as_user(self, user: str, password: str) -> Api:
        return Api(self.base, (user, password))


@pytest.fixture(scope="session")
def api_base(broker) -> str:
    if EXTERNAL:
        return os.environ.get("BROKER_TEST_API", "http://127.0.0.1:15672")
    return broker.api_url


@pytest.fixture
def api(api_base) -> Iterator[Api]:
    a = Api(api_base)
    yield a
    a.session.close()


@pytest.fixture(scope="session")
def metrics_url(broker) -> str:
    if EXTERNAL:
        return os.environ.get("BROKER_TEST_METRICS", "http://127.0.0.1:15692")
    return f"http://127.0.0.1:{broker.prometheus_port}"


@pytest.fixture
def ours_only() -> None:
    """Skip a test of a feature RabbitMQ does not have when BROKER_TEST_URI names one."""
    if RABBITMQ:
        pytest.skip("a feature beyond RabbitMQ's API")


@pytest.fixture
def ch(broker) -> Iterator[pika.adapters.blocking_connection.BlockingChannel]:
    """A pika channel in confirm mode on the broker under test (closed afterwards)."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = conn.channel()
    channel.confirm_delivery()
    yield channel
    if conn.is_open:
        conn.close()
