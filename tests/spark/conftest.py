"""Spark test fixtures: one SparkSession per test session, AMQP helpers on the `broker` fixture.

Every test here is marked `spark`. PySpark and py4j emit a few warnings of their own (resource
and deprecation warnings from worker sockets); they are not ours, so they are filtered here
rather than failing the run under `filterwarnings = error`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

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
def amqp_uri(broker) -> str:
    """The broker's URI for the data source's `uri` option."""
    return broker.url
