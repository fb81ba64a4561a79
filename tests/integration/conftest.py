"""Fixtures for the integration suite: pika connections to the `broker` fixture's broker.

`connection`/`channel` are a fresh pika BlockingConnection (and a channel on it) per test, closed
at teardown. `embedded_only` skips tests that need their own broker with special settings when
BROKER_TEST_URI points at an external broker (e.g. a real RabbitMQ).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pika
import pytest
from helpers import N_BEFORE


@pytest.fixture
def params(broker) -> pika.URLParameters:
    return pika.URLParameters(broker.url)


@pytest.fixture
def connect(broker) -> Iterator[Callable[..., pika.BlockingConnection]]:
    """connect(**url_query) -> a new BlockingConnection, closed at teardown if still open."""
    opened: list[pika.BlockingConnection] = []

    def _connect(**kw: object) -> pika.BlockingConnection:
        p = pika.URLParameters(broker.url)
        for k, v in kw.items():
            setattr(p, k, v)
        c = pika.BlockingConnection(p)
        opened.append(c)
        return c

    yield _connect
    for c in opened:
        if c.is_open:
            c.close()


@pytest.fixture
def connection(connect) -> pika.BlockingConnection:
    return connect()


@pytest.fixture
def channel(connection):
    return connection.channel()


@pytest.fixture
def embedded_only() -> None:
    if os.environ.get("BROKER_TEST_URI"):
        pytest.skip("needs an EmbeddedBroker with special settings; BROKER_TEST_URI is set")


@pytest.fixture
def pub(connection):
    """A confirm-mode channel: every publish has reached its queues when it returns."""
    ch = connection.channel()
    ch.confirm_delivery()
    return ch


@pytest.fixture
def bystander(connect, unique):
    """A connection opened before the bad one, with N_BEFORE confirmed messages queued."""
    conn = connect()
    ch = conn.channel()
    q = unique("bystander")
    ch.queue_declare(q, auto_delete=False)
    ch.confirm_delivery()
    for i in range(N_BEFORE):
        ch.basic_publish("", q, f"m{i}".encode(), pika.BasicProperties(delivery_mode=2))
    yield conn, ch, q
    if ch.is_open:
        ch.queue_delete(q)


@pytest.fixture
def cpub(broker):
    """A raw confirm-mode publisher that records every basic.ack/nack (confirmpub.py)."""
    from confirmpub import ConfirmPublisher

    p = ConfirmPublisher(broker.host, broker.port)
    yield p
    p.c.close_socket()


@pytest.fixture
def declare(connect, unique):
    """declare(mode=None, **queue_declare kw) -> name of a new shared queue, deleted at teardown."""
    setup = connect().channel()
    made: list[str] = []

    def _declare(mode: str | None = None, arguments: dict | None = None, **kw: object) -> str:
        q = unique(f"cm-{mode or 'default'}")
        args = dict(arguments or {})
        if mode is not None:
            args["x-confirm-on"] = mode
        setup.queue_declare(q, arguments=args, **kw)
        made.append(q)
        return q

    yield _declare
    ch = connect().channel()
    for q in made:
        ch.queue_delete(q)
