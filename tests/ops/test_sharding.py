"""Sharding (rabbitmq_sharding, issue 21 item 3): a policy with `shards-per-node` on an
x-modulus-hash exchange creates its shard queues, bound with the policy's `routing-key`;
the exchange's name used as a queue name reaches the shard with the fewest consumers, and
deleting, purging or binding it is 406. Also passes against RabbitMQ 3.10.8 with the
rabbitmq_sharding and management plugins (BROKER_TEST_URI / BROKER_TEST_API)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pika
import pytest
from pamqp import commands

from tests.integration.rawamqp import RawClient
from tests.ops.conftest import RABBITMQ
from tests.polling import wait_for


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def sharded(api, broker) -> Iterator[tuple[str, str, list[str]]]:
    """(exchange, policy name, shard queue names) of a sharded x-modulus-hash exchange with
    3 shards and routing key "1234"; all deleted afterwards."""
    x = uniq("shard-x")
    node = api.get("/api/overview").json()["node"]
    shards = [f"sharding: {x} - {node} - {i}" for i in range(3)]
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
        conn.channel().exchange_declare(x, "x-modulus-hash", durable=True)
    policy = f"{x}-policy"
    r = api.put(f"/api/policies/%2F/{policy}", json={
        "pattern": f"^{x}$", "definition": {"shards-per-node": 3, "routing-key": "1234"},
        "apply-to": "exchanges"})
    assert r.status_code in (201, 204), r.text
    try:
        yield x, policy, shards
    finally:
        api.delete(f"/api/policies/%2F/{policy}")
        for q in shards + [f"sharding: {x} - {node} - 3"]:
            api.delete(f"/api/queues/%2F/{api.q(q)}")
        api.delete(f"/api/exchanges/%2F/{x}")


def _queue(api, name: str) -> dict:
    return api.get(f"/api/queues/%2F/{api.q(name)}").json()


def _bound(api, x: str, q: str) -> list[str]:
    return [b["routing_key"] for b in
            api.get(f"/api/bindings/%2F/e/{x}/q/{api.q(q)}").json()]


def test_a_sharding_policy_creates_and_binds_the_shards(api, broker, sharded):
    x, _policy, shards = sharded
    wait_for(lambda: all(api.get(f"/api/queues/%2F/{api.q(q)}").status_code == 200
                         for q in shards), timeout=10)
    for q in shards:
        assert _queue(api, q)["durable"] is True
        assert _bound(api, x, q) == ["1234"]
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        for i in range(300):
            ch.basic_publish(x, f"key-{i}", b"%d" % i)
        counts = [ch.queue_declare(q, passive=True).method.message_count for q in shards]
        assert sum(counts) == 300 and min(counts) > 30
        # the exchange's name as a queue: get takes from a shard
        method, _p, body = ch.basic_get(x, auto_ack=True)
        assert method is not None and body.isdigit()
    # declare answers for shard 0, under its own name (pika would wait for a declare-ok
    # naming x, so a raw client asks; RabbitMQ 3.10.8 answers the same)
    with RawClient(broker.host, broker.port) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(commands.Queue.Declare(queue=x, passive=True), 1)
        ok = raw.expect(commands.Queue.DeclareOk, 1)
        assert ok.queue == shards[0] and ok.message_count in (counts[0], counts[0] - 1)
        raw.close()


def test_consumers_of_the_exchange_name_spread_over_the_shards(api, broker, sharded):
    x, _policy, shards = sharded
    wait_for(lambda: all(api.get(f"/api/queues/%2F/{api.q(q)}").status_code == 200
                         for q in shards), timeout=10)
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
        ch = conn.channel()
        for _ in range(3):
            ch.basic_consume(x, lambda *a: None, auto_ack=True)
        for q in shards:
            assert ch.queue_declare(q, passive=True).method.consumer_count == 1


@pytest.mark.parametrize("action", ["delete", "purge", "bind"])
def test_the_exchange_name_cannot_be_deleted_purged_or_bound(broker, sharded, action):
    """rabbit_sharding_interceptor refuses them with precondition_failed; RabbitMQ 3.10.8's
    channel then crashes and the connection closes with 541 INTERNAL_ERROR (checked), where
    this broker closes the channel with the 406 the interceptor means."""
    x, _policy, _shards = sharded
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
        ch = conn.channel()
        expected = (pika.exceptions.ConnectionClosedByBroker if RABBITMQ
                    else pika.exceptions.ChannelClosedByBroker)
        with pytest.raises(expected) as info:
            {"delete": lambda: ch.queue_delete(x), "purge": lambda: ch.queue_purge(x),
             "bind": lambda: ch.queue_bind(x, "amq.direct", "k")}[action]()
    if RABBITMQ:
        assert info.value.reply_code == 541
        return
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - Can't {action} sharded queue: <<\"{x}\">>")


def test_the_policy_grows_changes_key_and_goes(api, sharded):
    x, policy, shards = sharded
    node = shards[0].split(" - ")[1]
    fourth = f"sharding: {x} - {node} - 3"
    wait_for(lambda: api.get(f"/api/queues/%2F/{api.q(shards[2])}").status_code == 200,
             timeout=10)
    api.put(f"/api/policies/%2F/{policy}", json={
        "pattern": f"^{x}$", "definition": {"shards-per-node": 4, "routing-key": "99"},
        "apply-to": "exchanges"})
    wait_for(lambda: api.get(f"/api/queues/%2F/{api.q(fourth)}").status_code == 200,
             timeout=10)
    wait_for(lambda: _bound(api, x, shards[0]) == ["99"], timeout=10)
    assert _bound(api, x, fourth) == ["99"]
    api.delete(f"/api/policies/%2F/{policy}")
    wait_for(lambda: _bound(api, x, shards[0]) == [], timeout=10)
    time.sleep(0.2)
    assert api.get(f"/api/queues/%2F/{api.q(shards[0])}").status_code == 200  # kept


def test_invalid_sharding_policies_are_400(api):
    for definition in ({"routing-key": "k"}, {"shards-per-node": "three"},
                       {"shards-per-node": -1}):
        r = api.put(f"/api/policies/%2F/{uniq('bad')}", json={
            "pattern": "^nothing$", "definition": definition, "apply-to": "exchanges"})
        assert r.status_code == 400, definition
