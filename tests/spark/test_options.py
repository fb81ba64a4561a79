"""AmqpOptions parsing: failover lists, bounds, credentials from the environment, redaction."""

from __future__ import annotations

import pytest

from spark_jobs.amqp.options import AmqpOptionError, AmqpOptions, redact


def test_uri_list_forms_and_defaults(monkeypatch):
    monkeypatch.delenv("AMQP_URI", raising=False)
    assert AmqpOptions.from_options({}).uris == ("amqp://guest:guest@127.0.0.1:5672/%2F",)
    two = ("amqp://a:1@h1:5672/%2F", "amqp://a:1@h2:5673/%2F")
    assert AmqpOptions.from_options({"uri": ",".join(two)}).uris == two
    assert AmqpOptions.from_options({"uri": f'["{two[0]}", "{two[1]}"]'}).uris == two


@pytest.mark.parametrize("options, needle", [
    ({"uri": "http://h/"}, "uri"),
    ({"uri": "[not json"}, "uri"),
    ({"maxMessagesPerTrigger": "65536"}, "maxMessagesPerTrigger"),
    ({"maxMessagesPerTrigger": "0"}, "maxMessagesPerTrigger"),
    ({"confirmWindow": "many"}, "confirmWindow"),
    ({"routingKey": "a", "routingKeyColumn": "b"}, "routingKey"),
    ({"batchTimeoutMs": "50"}, "batchTimeoutMs"),
    ({"queueType": "lazy"}, "queueType"),
    ({"managementUri": "amqp://h:15672"}, "managementUri"),
])
def test_bad_options_name_the_option(options, needle):
    with pytest.raises(AmqpOptionError) as e:
        AmqpOptions.from_options(options)
    assert needle in str(e.value)


def test_credentials_from_environment_and_never_in_repr(monkeypatch):
    monkeypatch.setenv("AMQP_USERNAME", "spark")
    monkeypatch.setenv("AMQP_PASSWORD", "s3cret-pw")
    opts = AmqpOptions.from_options({"uri": "amqp://broker:5672/%2F", "heartbeat": "7"})
    (params,) = opts.connection_parameters()
    assert (params.credentials.username, params.credentials.password) == ("spark", "s3cret-pw")
    assert params.heartbeat == 7
    in_uri = AmqpOptions.from_options({"uri": "amqp://u:pw-in-uri@broker:5672/%2F"})
    assert in_uri.connection_parameters()[0].credentials.password == "pw-in-uri"
    for text in (repr(opts), repr(in_uri), in_uri.describe()):
        assert "s3cret-pw" not in text and "pw-in-uri" not in text
    assert redact("amqp://u:pw@h:1/v") == "amqp://u:***@h:1/v"


def test_reader_options_defaults_and_the_management_api_from_the_environment(monkeypatch):
    monkeypatch.delenv("AMQP_MANAGEMENT_URI", raising=False)
    opts = AmqpOptions.from_options({"queueType": "Quorum"})
    assert (opts.queue_type, opts.management_uri, opts.batch_timeout_s) == ("quorum", None, 60)
    assert AmqpOptions.from_options({}).queue_type is None  # detected when read
    monkeypatch.setenv("AMQP_MANAGEMENT_URI", "http://u:api-pw@h:15672")
    opts = AmqpOptions.from_options({"batchTimeoutMs": "2500"})
    assert (opts.management_uri, opts.batch_timeout_s) == ("http://u:api-pw@h:15672", 2.5)
    assert "api-pw" not in repr(opts)
