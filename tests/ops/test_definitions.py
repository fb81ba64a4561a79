"""Definitions export and import in RabbitMQ's JSON format (rabbitmq.com/definitions.html):
a round trip between two brokers, a per-vhost export, `load_definitions` at boot, and a
file exported from a real RabbitMQ 3.10.8 (tests/ops/data/rabbitmq-3.10.8-definitions.json)
imported here."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pika
import pytest

from tests.ops.conftest import Api

DATA = Path(__file__).parent / "data"


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_export_shape(api, broker):
    q, x = uniq("defq"), uniq("defx")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.exchange_declare(x, "topic", durable=True)
    ch.queue_declare(q, durable=True, arguments={"x-max-length": 7})
    ch.queue_bind(q, x, "a.#")
    try:
        d = api.get("/api/definitions").json()
        for key in ("rabbit_version", "users", "vhosts", "permissions", "policies", "queues",
                    "exchanges", "bindings"):
            assert key in d
        assert {"name": q, "vhost": "/", "durable": True, "auto_delete": False,
                "arguments": {"x-max-length": 7}} in d["queues"]
        assert any(e["name"] == x and e["type"] == "topic" for e in d["exchanges"])
        assert {"source": x, "vhost": "/", "destination": q, "destination_type": "queue",
                "routing_key": "a.#", "arguments": {}} in d["bindings"]
        guest = next(u for u in d["users"] if u["name"] == "guest")
        assert guest["hashing_algorithm"] == "rabbit_password_hashing_sha256"
        assert not any(e["name"].startswith("amq.") or e["name"] == "" for e in d["exchanges"])
        per_vhost = api.get("/api/definitions/%2F").json()
        assert "users" not in per_vhost
        assert any(qq["name"] == q and "vhost" not in qq for qq in per_vhost["queues"])
    finally:
        ch.queue_delete(q)
        ch.exchange_delete(x)
        conn.close()


def test_round_trip_into_a_fresh_broker(tmp_path, ours_only):
    from broker.embedded import EmbeddedBroker

    with EmbeddedBroker(data_dir=str(tmp_path / "a"), management_tcp_port=-1) as a:
        api = Api(a.api_url)
        assert api.put("/api/vhosts/shop").status_code == 201
        assert api.put("/api/users/alice", json={"password": "s3cret", "tags": "management"}
                       ).status_code == 201
        assert api.put("/api/permissions/shop/alice", json={
            "configure": "^orders", "write": ".*", "read": ".*"}).status_code == 201
        assert api.put("/api/policies/shop/ttl", json={
            "pattern": "^orders", "definition": {"message-ttl": 60000},
            "apply-to": "queues"}).status_code == 201
        assert api.put("/api/exchanges/shop/orders", json={"type": "topic"}).status_code == 201
        assert api.put("/api/queues/shop/orders.eu", json={
            "durable": True, "arguments": {"x-max-priority": 5}}).status_code == 201
        assert api.post("/api/bindings/shop/e/orders/q/orders.eu", json={
            "routing_key": "eu.#"}).status_code == 201
        exported = api.get("/api/definitions").json()
    with EmbeddedBroker(data_dir=str(tmp_path / "b"), management_tcp_port=-1) as b:
        api = Api(b.api_url)
        r = api.post("/api/definitions", json=exported)
        assert r.status_code == 204, r.text
        assert api.get("/api/queues/shop/orders.eu").json()["arguments"] == {
            "x-max-priority": 5}
        assert api.get("/api/policies/shop/ttl").json()["definition"] == {"message-ttl": 60000}
        assert api.get("/api/permissions/shop/alice").json()["configure"] == "^orders"
        url = b.url.replace("guest:guest", "alice:s3cret").rsplit("/", 1)[0] + "/shop"
        conn = pika.BlockingConnection(pika.URLParameters(url))  # the hash came across
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("orders", "eu.new", b"routed by the imported binding")
        assert ch.queue_declare("orders.eu", passive=True).method.message_count == 1
        conn.close()
        assert api.get("/api/definitions").json()["bindings"] == exported["bindings"]


def test_load_definitions_at_boot(tmp_path, ours_only):
    from broker.embedded import EmbeddedBroker

    path = tmp_path / "defs.json"
    path.write_text(json.dumps({
        "vhosts": [{"name": "boot"}],
        "permissions": [{"user": "guest", "vhost": "boot", "configure": ".*",
                         "write": ".*", "read": ".*"}],
        "queues": [{"name": "from-file", "vhost": "boot", "durable": True,
                    "auto_delete": False, "arguments": {}}],
    }))
    with EmbeddedBroker(data_dir=str(tmp_path / "d"), load_definitions=str(path)) as b:
        url = b.url.rsplit("/", 1)[0] + "/boot"
        conn = pika.BlockingConnection(pika.URLParameters(url))
        conn.channel().queue_declare("from-file", passive=True)
        conn.close()


def test_import_reports_failures(api, ours_only):
    r = api.post("/api/definitions", json={"queues": [
        {"name": "x", "vhost": "no-such-vhost", "durable": True, "arguments": {}}]})
    assert r.status_code == 400
    assert "no-such-vhost" in r.json()["reason"]


def test_a_rabbitmq_3_10_export_imports_here(tmp_path, ours_only):
    """The file was exported from RabbitMQ 3.10.8 (GET /api/definitions)."""
    from broker.embedded import EmbeddedBroker

    exported = json.loads((DATA / "rabbitmq-3.10.8-definitions.json").read_text())
    with EmbeddedBroker(data_dir=str(tmp_path), management_tcp_port=-1) as b:
        api = Api(b.api_url)
        r = api.post("/api/definitions", json=exported)
        assert r.status_code == 204, r.text
        ours = api.get("/api/definitions").json()
        for key in ("queues", "exchanges", "bindings", "policies"):
            for item in exported[key]:
                assert item in ours[key] or {k: v for k, v in item.items()} in ours[key], (
                    key, item)
        for u in exported["users"]:
            mine = next(x for x in ours["users"] if x["name"] == u["name"])
            assert mine["password_hash"] == u["password_hash"]
        # a user from the file logs in with its RabbitMQ password hash
        url = b.url.replace("guest:guest", "imported:imported-pw").rsplit("/", 1)[0] + "/shop"
        conn = pika.BlockingConnection(pika.URLParameters(url))
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("orders", "eu.new", b"x", pika.BasicProperties(priority=3))
        assert ch.queue_declare("orders.eu", passive=True).method.message_count == 1
        conn.close()


@pytest.mark.parametrize("bad", ["not json", "[1, 2]"])
def test_import_rejects_non_objects(api, bad, ours_only):
    r = api.post("/api/definitions", data=bad, headers={"Content-Type": "application/json"})
    assert r.status_code == 400


def test_our_export_imports_into_the_broker_under_test(api, broker, tmp_path):
    """Export from a fresh embedded broker, import into the broker under test: with
    BROKER_TEST_URI + BROKER_TEST_API that is a real RabbitMQ 3.10.8 (checked: 204, the
    objects appear, the user logs in with the exported hash)."""
    from broker.embedded import EmbeddedBroker

    vhost, user = uniq("fromours"), uniq("ouruser")
    with EmbeddedBroker(data_dir=str(tmp_path), management_tcp_port=-1) as src:
        a = Api(src.api_url)
        a.put(f"/api/vhosts/{vhost}")
        a.put(f"/api/users/{user}", json={"password": "our-pw", "tags": "management"})
        for who in (user, "guest"):
            a.put(f"/api/permissions/{vhost}/{who}", json={
                "configure": ".*", "write": ".*", "read": ".*"})
        a.put(f"/api/policies/{vhost}/lim", json={
            "pattern": "^q", "definition": {"max-length": 5}, "apply-to": "queues"})
        a.put(f"/api/exchanges/{vhost}/x1", json={"type": "topic"})
        a.put(f"/api/queues/{vhost}/q1", json={"durable": True,
                                                "arguments": {"x-message-ttl": 1000}})
        a.post(f"/api/bindings/{vhost}/e/x1/q/q1", json={"routing_key": "a.#"})
        exported = a.get("/api/definitions").json()
    exported["users"] = [u for u in exported["users"] if u["name"] == user]
    try:
        r = api.post("/api/definitions", json=exported)
        assert r.status_code in (201, 204), r.text
        back = api.get(f"/api/definitions/{vhost}").json()
        assert [q["arguments"] for q in back["queues"] if q["name"] == "q1"] == [
            {"x-message-ttl": 1000}]
        assert any(b["source"] == "x1" and b["routing_key"] == "a.#" for b in back["bindings"])
        assert [p["definition"] for p in back["policies"]] == [{"max-length": 5}]
        url = broker.url.replace("guest:guest", f"{user}:our-pw").rsplit("/", 1)[0] + "/" + vhost
        pika.BlockingConnection(pika.URLParameters(url)).close()
    finally:
        api.delete(f"/api/vhosts/{vhost}")
        api.delete(f"/api/users/{user}")


def test_load_definitions_at_boot_with_shovel_and_federation_parameters(tmp_path, ours_only):
    """A definitions file at boot may hold runtime parameters of the shovel and federation
    components, as RabbitMQ exports them: the broker starts, the shovel runs (it moves a
    message) and the upstream is stored. (Boot used to fail with AttributeError: the file
    was read before the shovel and federation supervisors existed.)"""
    from broker.embedded import EmbeddedBroker

    path = tmp_path / "defs.json"
    path.write_text(json.dumps({
        "queues": [{"name": q, "vhost": "/", "durable": True, "auto_delete": False,
                    "arguments": {}} for q in ("boot-src", "boot-dst")],
        "parameters": [
            {"component": "shovel", "vhost": "/", "name": "boot-shovel",
             "value": {"src-uri": "amqp://", "src-queue": "boot-src",
                       "dest-uri": "amqp://", "dest-queue": "boot-dst"}},
            {"component": "federation-upstream", "vhost": "/", "name": "boot-upstream",
             "value": {"uri": "amqp://127.0.0.1:1"}},
        ],
    }))
    with EmbeddedBroker(data_dir=str(tmp_path / "d"), load_definitions=str(path)) as b:
        import asyncio

        async def names() -> set[str]:  # on the broker's thread (SQLite is per thread)
            return {p.name for p in b.broker.definitions.list_parameters()}

        stored = asyncio.run_coroutine_threadsafe(names(), b.broker.loop).result(10)
        assert {"boot-shovel", "boot-upstream"} <= stored
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        ch.basic_publish("", "boot-src", b"moved by the shovel from the file")
        got = None
        for _ in range(100):
            got = ch.basic_get("boot-dst", auto_ack=True)[2]
            if got is not None:
                break
            conn.sleep(0.05)
        conn.close()
        assert got == b"moved by the shovel from the file"
