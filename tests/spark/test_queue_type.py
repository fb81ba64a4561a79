"""The `amqp` source learns a queue's type before it reads (issue 33 item 1), without side
effects (the refusals that follow from it: test_type_refusals.py).

The probe is the management API where one is named, else basic.consume with x-stream-offset
on RabbitMQ >= 3.10 and on this broker >= 0.2 (both refuse it on a classic queue before a
message moves); each test runs both probes against the broker under test (run them with
BROKER_TEST_URI=amqp://guest:guest@127.0.0.1:5672/%2F and BROKER_TEST_API_URL for RabbitMQ).
"""

from __future__ import annotations

import pytest
from amqp_helpers import connect

from spark_jobs.amqp import queue_type
from spark_jobs.amqp.options import AmqpOptionError, AmqpOptions

RABBITMQ_3_10 = {"product": "RabbitMQ", "platform": "Erlang/OTP 25.2.3", "version": "3.10.8"}
PYBROKER = {"product": "pybroker-amqp", "platform": "Python 3.11.7", "version": "0.2.0",
            "copyright": "pybroker-amqp authors"}


@pytest.mark.parametrize("props, refuses", [
    (RABBITMQ_3_10, True),
    ({**RABBITMQ_3_10, "version": "4.1.0"}, True),
    ({**RABBITMQ_3_10, "version": b"3.13.7"}, True),
    ({**RABBITMQ_3_10, "version": "3.9.29"}, False),  # streams, but no type-aware check
    ({**RABBITMQ_3_10, "platform": "Python 3.11.7"}, False),  # another calling itself RabbitMQ
    (PYBROKER, True),
    ({**PYBROKER, "product": "RabbitMQ"}, True),  # this broker with product = RabbitMQ
    ({**PYBROKER, "version": "0.1.0"}, False),  # accepted x-stream-offset on classic queues
    ({}, False),
])
def test_the_amqp_probe_is_used_only_where_the_server_refuses_foreign_arguments(props,
                                                                                refuses):
    assert queue_type.refuses_foreign_consumer_arguments(props) is refuses


def _probes(management_uri: str | None) -> list[dict[str, str]]:
    """Options for each probe the broker under test answers: the AMQP one (no managementUri),
    and the management API's when there is one."""
    return [{}] + ([{"managementUri": management_uri}] if management_uri else [])


def _options(uri: str, queue: str, **extra: str) -> AmqpOptions:
    return AmqpOptions.from_options({"uri": uri, "queue": queue, "batchTimeoutMs": "10000",
                                     **extra})


def test_the_probe_names_each_type_and_leaves_the_queue_as_it_was(amqp_uri, management_uri,
                                                                  queues, monkeypatch):
    monkeypatch.delenv("AMQP_MANAGEMENT_URI", raising=False)
    for extra in _probes(management_uri):
        found = {t: queue_type.detect(_options(amqp_uri, q, **extra))
                 for t, q in queues.items()}
        assert found == {"classic": "classic", "quorum": "quorum", "stream": "stream"}, extra
    with connect(amqp_uri) as conn:
        ch = conn.channel()
        for t in ("classic", "quorum"):
            method, _props, body = ch.basic_get(queues[t], auto_ack=True)
            assert (body, method.redelivered) == (b"keep me", False)  # never delivered before


def test_without_a_probe_queue_type_must_be_given_and_nothing_is_touched(
        amqp_uri, queues, monkeypatch):
    """A server the AMQP probe does not know (RabbitMQ < 3.10, say), no management API."""
    monkeypatch.delenv("AMQP_MANAGEMENT_URI", raising=False)
    monkeypatch.setattr(queue_type, "refuses_foreign_consumer_arguments", lambda props: False)
    with pytest.raises(AmqpOptionError) as e:
        queue_type.resolve(_options(amqp_uri, queues["stream"]), streaming=True)
    assert "queueType" in str(e.value) and "managementUri" in str(e.value)
    given = _options(amqp_uri, queues["classic"], queueType="classic")
    assert queue_type.resolve(given, streaming=True) == "classic"  # taken as given
    with connect(amqp_uri) as conn:
        method, _props, _body = conn.channel().basic_get(queues["classic"], auto_ack=True)
        assert method.redelivered is False


def test_a_missing_queue_is_named(amqp_uri, management_uri, unique, monkeypatch):
    monkeypatch.delenv("AMQP_MANAGEMENT_URI", raising=False)
    name = unique("spark-missing")
    for extra in _probes(management_uri):
        with pytest.raises(AmqpOptionError) as e:
            queue_type.detect(_options(amqp_uri, name, **extra))
        assert f"no queue '{name}'" in str(e.value), extra
