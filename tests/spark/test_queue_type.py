"""The `amqp` source learns a queue's type before it reads (issue 33 item 1), without side
effects (the refusals that follow from it: test_type_refusals.py).

The probe is the management API where one is named (the embedded broker's, through
$AMQP_MANAGEMENT_URI, see conftest.py), else basic.consume with x-stream-offset on RabbitMQ
>= 3.10 (run these with BROKER_TEST_URI=amqp://guest:guest@127.0.0.1:5672/%2F to exercise it).
"""

from __future__ import annotations

import os

import pytest
from amqp_helpers import connect

from spark_jobs.amqp import queue_type
from spark_jobs.amqp.options import AmqpOptionError, AmqpOptions

RABBITMQ_3_10 = {"product": "RabbitMQ", "platform": "Erlang/OTP 25.2.3", "version": "3.10.8"}


@pytest.mark.parametrize("props, refuses", [
    (RABBITMQ_3_10, True),
    ({**RABBITMQ_3_10, "version": "4.1.0"}, True),
    ({**RABBITMQ_3_10, "version": b"3.13.7"}, True),
    ({**RABBITMQ_3_10, "version": "3.9.29"}, False),  # streams, but no type-aware check
    ({**RABBITMQ_3_10, "platform": "Python 3.11.7"}, False),  # a broker calling itself RabbitMQ
    ({"product": "pybroker-amqp", "platform": "Python 3.11.7", "version": "0.9"}, False),
    ({}, False),
])
def test_the_amqp_probe_is_used_only_where_the_server_refuses_foreign_arguments(props,
                                                                                refuses):
    assert queue_type.refuses_foreign_consumer_arguments(props) is refuses


def _server_is_rabbitmq(uri: str) -> bool:
    with connect(uri) as conn:
        return queue_type.refuses_foreign_consumer_arguments(conn._impl.server_properties)


def _options(uri: str, queue: str, **extra: str) -> AmqpOptions:
    return AmqpOptions.from_options({"uri": uri, "queue": queue, "batchTimeoutMs": "10000",
                                     **extra})


def test_the_probe_names_each_type_and_leaves_the_queue_as_it_was(amqp_uri, management_uri,
                                                                  queues):
    if management_uri is None and not _server_is_rabbitmq(amqp_uri):
        pytest.skip("no management API named and not RabbitMQ >= 3.10: no probe applies")
    extra = {"managementUri": management_uri} if management_uri else {}
    rabbitmq = _server_is_rabbitmq(amqp_uri)
    found = {t: queue_type.detect(_options(amqp_uri, q, **extra)) for t, q in queues.items()}
    # this project's broker has no quorum queues: it declares them as classic ones
    assert found == {"classic": "classic", "quorum": "quorum" if rabbitmq else "classic",
                     "stream": "stream"}
    with connect(amqp_uri) as conn:
        ch = conn.channel()
        for t in ("classic", "quorum"):
            method, _props, body = ch.basic_get(queues[t], auto_ack=True)
            assert (body, method.redelivered) == (b"keep me", False)  # never delivered before


def test_without_a_probe_queue_type_must_be_given_and_nothing_is_touched(
        amqp_uri, queues, monkeypatch):
    if os.environ.get("BROKER_TEST_URI") and _server_is_rabbitmq(amqp_uri):
        pytest.skip("RabbitMQ >= 3.10 is probed over AMQP")
    monkeypatch.delenv("AMQP_MANAGEMENT_URI", raising=False)
    with pytest.raises(AmqpOptionError) as e:
        queue_type.resolve(_options(amqp_uri, queues["stream"]), streaming=True)
    assert "queueType" in str(e.value) and "managementUri" in str(e.value)
    given = _options(amqp_uri, queues["classic"], queueType="classic")
    assert queue_type.resolve(given, streaming=True) == "classic"  # taken as given
    with connect(amqp_uri) as conn:
        method, _props, _body = conn.channel().basic_get(queues["classic"], auto_ack=True)
        assert method.redelivered is False


def test_a_missing_queue_is_named(amqp_uri, management_uri, unique):
    if management_uri is None and not _server_is_rabbitmq(amqp_uri):
        pytest.skip("no probe applies")
    extra = {"managementUri": management_uri} if management_uri else {}
    name = unique("spark-missing")
    with pytest.raises(AmqpOptionError) as e:
        queue_type.detect(_options(amqp_uri, name, **extra))
    assert f"no queue '{name}'" in str(e.value)
