"""The AMQP 1.0 shovel's pure parts: amqp10_client's URI rules, RabbitMQ's 0-9-1 -> 1.0
message mapping and amqp10_msg:body_bin, and a link without proton installed (terminated,
with the reason, no crash)."""

from __future__ import annotations

import asyncio
import datetime
import sys

import pytest
from pamqp import commands

from broker.protocol.framing import ContentHeader
from broker.shovel import definition
from broker.shovel.endpoint import EndpointError, ShovelMessage

proton = pytest.importorskip("proton")

from broker.shovel.amqp10 import Amqp10Uri  # noqa: E402
from broker.shovel.amqp10_message import body_bytes, to_amqp10  # noqa: E402


def test_uris_follow_amqp10_client():
    u = Amqp10Uri.parse("amqp://fr%2Fed:pa%2Fss@my_host:9876")
    assert (u.url, u.sasl, u.user, u.password) == ("amqp://my_host:9876", "plain", "fr/ed",
                                                   "pa/ss")
    assert Amqp10Uri.parse("amqp://h").sasl == "none"
    assert Amqp10Uri.parse("amqp://h/?sasl=anon").sasl == "anon"
    assert Amqp10Uri.parse("amqps://h").url == "amqps://h:5671"
    assert Amqp10Uri.parse("amqp://h?hostname=vhost:v1").connect_options()["virtual_host"] == \
        "vhost:v1"
    for bad, why in (("amqp://h/%2f", "path_segment_not_supported"),
                     ("amqp://h?sasl=plain", "plain_sasl_missing_userinfo"),
                     ("amqp://", "no host")):
        with pytest.raises(EndpointError) as info:
            Amqp10Uri.parse(bad)
        assert why in str(info.value)


def _d(**value):
    base = {"src-uri": "amqp://", "src-queue": "q", "dest-protocol": "amqp10",
            "dest-uri": "amqp://h", "dest-address": "a"}
    base.update(value)
    assert definition.validate(base) == []
    return definition.parse("/", "s", base)


def _msg(props: commands.Basic.Properties) -> ShovelMessage:
    return ShovelMessage(7, b"body", "amq.direct", "rk",
                         ContentHeader(60, 4, props, props.marshal()))


def test_amqp091_properties_map_as_rabbit_amqp10_shovel_does():
    d = _d(**{"dest-application-properties": {"key": "value", "src-queue": "overridden"},
              "dest-message-annotations": {"x-opt": "y"},
              "dest-properties": {"subject": "s", "to": "t", "unknown": "skipped"},
              "dest-add-timestamp-header": True})
    props = commands.Basic.Properties(content_type="text/plain", delivery_mode=2,
                                      message_id="m", correlation_id="c", priority=5,
                                      app_id="app", headers={"h": "v", "n": 3, "t": {"a": 1}})
    m = to_amqp10(_msg(props), d, {"shovel-name": "s"}, 1_700_000_000_123)
    assert bytes(m.body) == b"body" and m.inferred
    assert (m.content_type, m.id, m.correlation_id, m.subject, m.address) == (
        "text/plain", "m", "c", "s", "t")
    assert m.durable is True
    assert m.creation_time == pytest.approx(1_700_000_000.123)
    assert m.annotations == {"x-opt": "y"}
    assert m.properties == {"key": "value", "src-queue": "q", "shovel-name": "s", "h": "v",
                            "n": 3, "priority": 5, "app_id": "app", "exchange": "amq.direct",
                            "routing_key": "rk"}


def test_delivery_mode_1_and_a_timestamp_cross_as_rabbitmq_sends_them():
    props = commands.Basic.Properties(
        delivery_mode=1, timestamp=datetime.datetime.fromtimestamp(1_700_000_000, datetime.UTC))
    m = to_amqp10(_msg(props), _d(), None, 0)
    assert m.properties["delivery_mode"] == 1 and not m.durable
    assert m.creation_time == pytest.approx(1_700_000.0)  # 0-9-1 seconds read as 1.0 ms


def test_body_bin():
    assert body_bytes(proton.Message(body=b"raw", inferred=True)) == b"raw"
    assert body_bytes(proton.Message(body="text")) == b"\x00\x53\x77\xa1\x04text"
    assert body_bytes(proton.Message(body=None)) == b""


def test_a_link_without_proton_terminates_with_the_reason(monkeypatch):
    import broker.shovel
    from broker.shovel.link import ShovelLink

    # as on a machine without the `amqp10` extra: importing proton fails
    monkeypatch.setitem(sys.modules, "proton", None)
    monkeypatch.delitem(sys.modules, "broker.shovel.amqp10", raising=False)
    monkeypatch.delattr(broker.shovel, "amqp10", raising=False)
    d = _d(**{"reconnect-delay": 30})

    async def run() -> ShovelLink:
        link = ShovelLink(d, lambda u: u, "c", lambda: None)
        link.start()
        for _ in range(100):
            if link.state == "terminated":
                break
            await asyncio.sleep(0.01)
        await link.stop()
        return link

    link = asyncio.run(run())
    assert link.state == "terminated"
    assert "python-qpid-proton" in (link.reason or "")
