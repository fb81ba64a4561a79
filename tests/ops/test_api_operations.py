"""RabbitMQ 3.10.8 API paths for node operations (issue 24): /api/auth, authentication
attempts per protocol, connections by user name (list and close), rebalance, vhost start
and /api/all-configuration. Passes against RabbitMQ 3.10.8 too (BROKER_TEST_URI /
BROKER_TEST_API)."""

from __future__ import annotations

import time
import uuid

import pika
import pytest


@pytest.fixture
def node(api) -> str:
    return api.get("/api/overview").json()["node"]


def _attempts(api, node: str, protocol: str) -> dict:
    rows = api.get(f"/api/auth/attempts/{node}").json()
    return next((r for r in rows if r["protocol"] == protocol),
                {"auth_attempts": 0, "auth_attempts_failed": 0, "auth_attempts_succeeded": 0})


def test_auth_settings_and_attempts(api, broker, node):
    assert api.get("/api/auth").json()["enable_uaa"] is False
    before = _attempts(api, node, "amqp091")
    bad = pika.URLParameters(broker.url.replace("guest:guest", "guest:wrong"))
    with pytest.raises(pika.exceptions.AMQPError):
        pika.BlockingConnection(bad)
    pika.BlockingConnection(pika.URLParameters(broker.url)).close()
    after = _attempts(api, node, "amqp091")
    assert after["auth_attempts_failed"] == before["auth_attempts_failed"] + 1
    assert after["auth_attempts_succeeded"] >= before["auth_attempts_succeeded"] + 1
    assert _attempts(api, node, "http")["auth_attempts_succeeded"] > 0
    assert api.get(f"/api/auth/attempts/{node}/source").json() == []


def test_connections_by_user_name_listed_and_closed(api, broker):
    user = f"cu-{uuid.uuid4().hex[:8]}"
    assert api.put(f"/api/users/{user}", json={"password": "pw", "tags": ""}).status_code == 201
    api.put(f"/api/permissions/%2F/{user}", json={"configure": ".*", "write": ".*",
                                                   "read": ".*"})
    try:
        conn = pika.BlockingConnection(pika.URLParameters(
            broker.url.replace("guest:guest", f"{user}:pw")))
        deadline = time.monotonic() + 15
        while not api.get(f"/api/connections/username/{user}").json():
            assert time.monotonic() < deadline, "the connection was never listed"
            time.sleep(0.2)
        assert api.get("/api/connections/username/nobody-here").json() == []
        assert api.delete(f"/api/connections/username/{user}",
                          headers={"X-Reason": "bye"}).status_code == 204
        with pytest.raises(pika.exceptions.ConnectionClosed) as info:
            conn.process_data_events(time_limit=5)
            conn.channel()
        assert "bye" in str(info.value)
    finally:
        api.delete(f"/api/users/{user}")


def test_rebalance_vhost_start_and_all_configuration(api, node):
    assert api.post("/api/rebalance/queues").status_code == 204
    assert api.post(f"/api/vhosts/%2F/start/{node}").status_code == 204
    conf = api.get("/api/all-configuration").json()
    assert {"users", "vhosts", "queues", "exchanges", "bindings", "policies"} <= set(conf)


def test_reset_keeps_live_counters_as_rabbitmq_does(api, broker, node):
    """DELETE /api/reset: RabbitMQ 3.10.8 empties its statistics database, and a live
    queue reports its cumulative counters again (3 publishes, a reset, 1 more: 4);
    queue lengths are not statistics and stay."""
    name = f"reset-{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.queue_declare(name)
    try:
        def published() -> int:  # the queue's own counter (the overview counts every test's)
            stats = api.get(f"/api/queues/%2F/{name}").json().get("message_stats") or {}
            return stats.get("publish", 0)

        for _ in range(3):
            ch.basic_publish("", name, b"x")
        deadline = time.monotonic() + 15
        while published() < 3:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert api.delete("/api/reset").status_code == 204
        assert api.delete(f"/api/reset/{node}").status_code == 204
        ch.basic_publish("", name, b"y")
        deadline = time.monotonic() + 15
        while published() != 4:
            assert time.monotonic() < deadline, published()
            time.sleep(0.2)
        assert api.get(f"/api/queues/%2F/{name}").json()["messages"] == 4
    finally:
        ch.queue_delete(name)
        conn.close()
