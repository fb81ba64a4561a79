"""Request bodies parsed as RabbitMQ 3.10.8's management plugin parses them (issue 24 item 1):
booleans given as strings (rabbitmqadmin sends `"durable": "true"`, `"auto_delete":
"false"`), counts given as strings, typed `arguments`, and RabbitMQ's 400 for what it
refuses. Every test here also passes against RabbitMQ 3.10.8 (BROKER_TEST_URI /
BROKER_TEST_API)."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from urllib.parse import urlparse

import pika
import pytest

from tests.polling import wait_for

# what rabbitmqadmin 3.10.8 PUTs for `declare queue name=N` with its defaults
RABBITMQADMIN_QUEUE = {"auto_delete": "false", "durable": "true", "arguments": {}}


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _survives_its_consumer(api, broker, name: str) -> None:
    """Publish, consume with one consumer, cancel it: the queue and its message stay."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("", name, b"keep me", pika.BasicProperties(delivery_mode=2))
        ch.basic_consume(name, lambda *a: None)  # takes it unacked
        ch.close()  # consumer gone, message requeued
    finally:
        conn.close()
    wait_for(lambda: api.get(f"/api/queues/%2F/{name}").status_code == 200
             and api.get(f"/api/queues/%2F/{name}").json().get("messages") == 1, timeout=15)
    info = api.get(f"/api/queues/%2F/{name}").json()
    assert (info["durable"], info["auto_delete"]) == (True, False)


def test_a_queue_declared_as_rabbitmqadmin_does_survives_its_consumer(api, broker):
    name = uniq("admin-q")
    r = api.put(f"/api/queues/%2F/{name}", json=RABBITMQADMIN_QUEUE)
    assert r.status_code == 201, r.text
    try:
        _survives_its_consumer(api, broker, name)
    finally:
        api.delete(f"/api/queues/%2F/{name}")


@pytest.mark.skipif(shutil.which("rabbitmqadmin") is None,
                    reason="rabbitmqadmin (Debian's rabbitmq-server) not installed")
def test_rabbitmqadmin_itself_declares_a_durable_queue(api, api_base, broker):
    name = uniq("admin-cli")
    port = urlparse(api_base).port
    subprocess.run(["rabbitmqadmin", "-H", "127.0.0.1", "-P", str(port), "-u", "guest",
                    "-p", "guest", "declare", "queue", f"name={name}"],
                   check=True, capture_output=True, timeout=60)
    try:
        _survives_its_consumer(api, broker, name)
    finally:
        api.delete(f"/api/queues/%2F/{name}")


@pytest.mark.parametrize(("fields", "flags"), [
    ({}, (False, False)),  # the queue.declare record's defaults
    ({"durable": "false", "auto_delete": "true"}, (False, True)),
    ({"durable": True, "auto_delete": False}, (True, False)),
    ({"durable": "true"}, (True, False)),
])
def test_queue_flags(api, fields, flags):
    name = uniq("flags-q")
    r = api.put(f"/api/queues/%2F/{name}", json=fields)
    assert r.status_code == 201, r.text
    try:
        info = api.get(f"/api/queues/%2F/{name}").json()
        assert (info["durable"], info["auto_delete"]) == flags
    finally:
        api.delete(f"/api/queues/%2F/{name}")


@pytest.mark.parametrize(("kind", "fields", "reason"), [
    ("queues", {"durable": "yes"}, ["not_boolean", "yes"]),
    ("queues", {"auto_delete": 1}, ["not_boolean", 1]),
    ("queues", {"durable": "True"}, ["not_boolean", "True"]),
    ("queues", {"durable": None}, ["not_boolean", None]),
    ("queues", {"arguments": {"x-max-length": None}}, "null_not_allowed"),
    ("exchanges", {"type": "direct", "internal": "no"}, ["not_boolean", "no"]),
])
def test_malformed_fields_are_400_with_rabbitmqs_reason(api, kind, fields, reason):
    name = uniq("bad")
    r = api.put(f"/api/{kind}/%2F/{name}", json=fields)
    try:
        assert r.status_code == 400
        assert r.json() == {"error": "bad_request", "reason": reason}
        assert api.get(f"/api/{kind}/%2F/{name}").status_code == 404
    finally:
        api.delete(f"/api/{kind}/%2F/{name}")


@pytest.mark.parametrize("raw", [b"nonsense", b"[1]"])
def test_a_body_that_is_not_a_json_object_is_not_json(api, raw):
    name = uniq("raw")
    r = api.put(f"/api/queues/%2F/{name}", data=raw,
                headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json() == {"error": "bad_request", "reason": "not_json"}


def test_exchange_flags_as_strings_and_default_type(api):
    x1, x2 = uniq("flags-x"), uniq("flags-x")
    try:
        r = api.put(f"/api/exchanges/%2F/{x1}", json={
            "type": "fanout", "durable": "false", "auto_delete": "false", "internal": "true"})
        assert r.status_code == 201, r.text
        info = api.get(f"/api/exchanges/%2F/{x1}").json()
        assert (info["type"], info["durable"], info["auto_delete"], info["internal"]) == (
            "fanout", False, False, True)
        assert api.put(f"/api/exchanges/%2F/{x2}", json={}).status_code == 201
        info = api.get(f"/api/exchanges/%2F/{x2}").json()
        assert (info["type"], info["durable"], info["auto_delete"], info["internal"]) == (
            "direct", False, False, False)
    finally:
        api.delete(f"/api/exchanges/%2F/{x1}")
        api.delete(f"/api/exchanges/%2F/{x2}")


def test_typed_arguments_keep_their_types(api):
    name = uniq("args-q")
    args = {"x-max-length": 10, "custom": {"nested": [1, "x", True, 1.5]}}
    try:
        assert api.put(f"/api/queues/%2F/{name}", json={"arguments": args}).status_code == 201
        assert api.get(f"/api/queues/%2F/{name}").json()["arguments"] == args
        r = api.put(f"/api/queues/%2F/{uniq('args-q')}",
                    json={"arguments": {"x-max-length": "10"}})  # a longstr is refused
        assert r.status_code == 400
        assert "x-max-length" in r.json()["reason"]
    finally:
        api.delete(f"/api/queues/%2F/{name}")


def test_get_counts_given_as_strings(api, broker):
    name = uniq("get-q")
    api.put(f"/api/queues/%2F/{name}", json=RABBITMQADMIN_QUEUE)
    try:
        for body in (b"one", b"two", b"three"):
            r = api.post("/api/exchanges/%2F/amq.default/publish", json={
                "routing_key": name, "properties": {}, "payload": body.decode(),
                "payload_encoding": "string"})
            assert r.json() == {"routed": True}
        r = api.post(f"/api/queues/%2F/{name}/get", json={
            "count": "2", "ackmode": "ack_requeue_true", "encoding": "auto", "truncate": "2"})
        assert [m["payload"] for m in r.json()] == ["on", "tw"]
        r = api.post(f"/api/queues/%2F/{name}/get", json={
            "count": 2.7, "ackmode": "ack_requeue_true", "encoding": "auto"})
        assert len(r.json()) == 2
        r = api.post(f"/api/queues/%2F/{name}/get", json={
            "count": "x", "ackmode": "ack_requeue_true", "encoding": "auto"})
        assert r.status_code == 400
        assert r.json()["reason"] == ["not_integer", "x"]
    finally:
        api.delete(f"/api/queues/%2F/{name}")
