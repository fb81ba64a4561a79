"""Spark test fixtures: one SparkSession per test session, AMQP helpers on the `broker` fixture.

The `amqp` source learns each queue's type before reading (spark_jobs.amqp.queue_type). The
session exports no $AMQP_MANAGEMENT_URI, so every read learns it as a new user's would: over
AMQP, from basic.consume's refusal of x-stream-offset on a classic queue (this broker >= 0.2,
RabbitMQ >= 3.10). `management_uri` names the API for the tests of the other probe
(test_queue_type.py): the embedded broker's, or BROKER_TEST_API_URL's against another broker.

Every test here is marked `spark`. PySpark and py4j emit a few warnings of their own (resource
and deprecation warnings from worker sockets); they are not ours, so they are filtered here
rather than failing the run under `filterwarnings = error`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pika
import pytest
from amqp_helpers import connect

pyspark = pytest.importorskip("pyspark", minversion="4.0")

SPARK_WARNINGS = [
    "ignore::ResourceWarning",
    "ignore::DeprecationWarning:pyspark.*",
    "ignore::DeprecationWarning:py4j.*",
    "ignore::FutureWarning:pyspark.*",
    "ignore::UserWarning:pyspark.*",
]


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.spark)
            for spec in SPARK_WARNINGS:
                item.add_marker(pytest.mark.filterwarnings(spec))


@pytest.fixture(scope="session")
def management_uri(broker) -> str | None:
    """The management API of the broker under test, or None (RabbitMQ without
    BROKER_TEST_API_URL: the AMQP probe applies there)."""
    if os.environ.get("BROKER_TEST_URI"):
        return os.environ.get("BROKER_TEST_API_URL")
    return broker.api_url if broker.management_port else None


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from spark_jobs.session import build_session

    session = build_session("local[2]", app_name="pytest-spark", extra={
        # Progress of idle triggers is reported at once, so tests can poll for it.
        "spark.sql.streaming.noDataProgressEventInterval": "0",
        "spark.sql.streaming.pollingDelay": "20ms",
    })
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.fixture
def stream_port(broker) -> int:
    """The stream protocol port of the broker under test (BROKER_TEST_STREAM_PORT against
    another broker; those tests skip without it)."""
    if os.environ.get("BROKER_TEST_URI"):
        port = os.environ.get("BROKER_TEST_STREAM_PORT")
        if not port:
            pytest.skip("BROKER_TEST_STREAM_PORT not set")
        return int(port)
    return broker.stream_port


@pytest.fixture
def amqp_uri(broker) -> str:
    """The broker's URI for the data source's `uri` option."""
    return broker.url


@pytest.fixture
def queues(amqp_uri, unique):
    """{declared x-queue-type: queue name}, each classic-like one holding one message."""
    names = {t: unique(f"spark-type-{t}") for t in ("classic", "quorum", "stream")}
    with connect(amqp_uri) as conn:
        ch = conn.channel()
        for t, name in names.items():
            ch.queue_declare(name, durable=True, arguments={"x-queue-type": t})
            if t != "stream":
                ch.basic_publish("", name, b"keep me", pika.BasicProperties(delivery_mode=2))
    yield names
    with connect(amqp_uri) as conn:
        ch = conn.channel()
        for name in names.values():
            ch.queue_delete(name)
