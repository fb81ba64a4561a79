"""The management HTTP API's objects against the running broker, with a real HTTP client
(requests) and real AMQP clients (pika): queues, exchanges, bindings, connections, channels,
consumers, get/publish, pagination. The same tests pass against RabbitMQ 3.10.8 with the
management plugin (BROKER_TEST_URI + BROKER_TEST_API), except those marked `ours_only`."""

from __future__ import annotations

import time
import uuid

import pika
import pytest

from tests.ops.conftest import RABBITMQ
from tests.polling import wait_for


@pytest.fixture
def amqp(broker):
    conns = []

    def connect(name: str | None = None) -> pika.BlockingConnection:
        params = pika.URLParameters(broker.url)
        if name:
            params.client_properties = {"connection_name": name}
        c = pika.BlockingConnection(params)
        conns.append(c)
        return c

    yield connect
    for c in conns:
        if c.is_open:
            c.close()


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


V = "%2F"


def test_overview_counts_objects_and_messages(api, amqp):
    q = uniq("ov")
    ch = amqp().channel()
    ch.queue_declare(q, exclusive=True)
    ch.confirm_delivery()
    for _ in range(3):
        ch.basic_publish("", q, b"x")
    # RabbitMQ's statistics lag by up to its 5 s collection interval
    o = wait_for(lambda: (lambda o: o if o["object_totals"]["connections"] >= 1
                          and o["queue_totals"].get("messages_ready", 0) >= 3
                          and o.get("message_stats", {}).get("publish", 0) >= 3 else None)(
        api.get("/api/overview").json()), timeout=15)
    for key in ("management_version", "rabbitmq_version", "node", "object_totals",
                "queue_totals", "message_stats", "listeners", "exchange_types"):
        assert key in o
    assert o["object_totals"]["queues"] >= 1
    assert o["object_totals"]["connections"] >= 1
    assert o["queue_totals"]["messages_ready"] >= 3
    assert o["message_stats"]["publish"] >= 3
    assert "rate" in o["message_stats"]["publish_details"]


def test_queue_put_get_delete(api):
    q = uniq("apiq")
    path = f"/api/queues/{V}/{q}"
    r = api.put(path, json={"durable": True, "auto_delete": False,
                            "arguments": {"x-max-length": 10}})
    assert r.status_code == 201
    assert api.put(path, json={"durable": True, "arguments": {"x-max-length": 10}}
                   ).status_code == 204
    r = api.put(path, json={"durable": True, "arguments": {"x-max-length": 11}})
    assert r.status_code == 400
    assert r.json()["error"] == "bad_request"
    assert "inequivalent arg 'x-max-length'" in r.json()["reason"]
    j = wait_for(lambda: (lambda j: j if "messages" in j else None)(api.get(path).json()),
                 timeout=15)
    assert (j["name"], j["vhost"], j["durable"], j["auto_delete"]) == (q, "/", True, False)
    assert j["arguments"] == {"x-max-length": 10}
    for key in ("messages", "messages_ready", "messages_unacknowledged", "consumers",
                "state", "node", "message_bytes", "policy", "exclusive"):
        assert key in j
    assert api.delete(path).status_code == 204
    r = api.get(path)
    assert r.status_code == 404
    assert r.json() == {"error": "Object Not Found", "reason": "Not Found"}


def test_queue_depths_and_consumers(api, amqp):
    q = uniq("depth")
    ch = amqp().channel()
    ch.queue_declare(q, exclusive=True)
    ch.confirm_delivery()
    for i in range(5):
        ch.basic_publish("", q, b"m%d" % i)
    ch.basic_qos(prefetch_count=2)
    ch.basic_consume(q, lambda *a: None, consumer_tag="ctag-1")
    path = f"/api/queues/{V}/{q}"

    def settled():
        ch.connection.process_data_events(0.05)
        j = api.get(path).json()
        return j if j.get("messages_unacknowledged") == 2 and j.get("messages") == 5 else None

    j = wait_for(settled, timeout=15)
    assert (j["messages"], j["messages_ready"], j["consumers"]) == (5, 3, 1)
    assert j["memory"] > 0
    assert j["exclusive"] is True
    consumers = [c for c in api.get("/api/consumers").json() if c["queue"]["name"] == q]
    assert len(consumers) == 1
    c = consumers[0]
    assert (c["consumer_tag"], c["ack_required"], c["prefetch_count"]) == ("ctag-1", True, 2)
    assert c["queue"]["vhost"] == "/"
    assert "connection_name" in c["channel_details"]


def test_purge_and_delete_if_empty(api, amqp):
    q = uniq("purge")
    ch = amqp().channel()
    ch.queue_declare(q)
    ch.confirm_delivery()
    ch.basic_publish("", q, b"x")
    path = f"/api/queues/{V}/{q}"
    r = api.delete(path, params={"if-empty": "true"})
    assert r.status_code == 400
    assert api.delete(path + "/contents").status_code == 204
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    assert api.delete(path, params={"if-empty": "true"}).status_code == 204


@pytest.mark.parametrize(("ackmode", "left", "redelivered_after"), [
    ("ack_requeue_true", 2, True), ("ack_requeue_false", 0, None),
    ("reject_requeue_true", 2, True), ("reject_requeue_false", 0, None)])
def test_get_messages_ack_modes(api, amqp, ackmode, left, redelivered_after):
    q = uniq("get")
    ch = amqp().channel()
    ch.queue_declare(q)  # the API refuses get on another connection's exclusive queue
    ch.confirm_delivery()
    ch.basic_publish("", q, b"hello", pika.BasicProperties(
        content_type="text/plain", headers={"k": "v"}, delivery_mode=2, priority=3))
    ch.basic_publish("", q, b"\xff\x00binary")
    r = api.post(f"/api/queues/{V}/{q}/get",
                 json={"count": 5, "ackmode": ackmode, "encoding": "auto", "truncate": 50000})
    assert r.status_code == 200
    msgs = r.json()
    assert [m["payload"] for m in msgs] == ["hello", "/wBiaW5hcnk="]
    assert [m["payload_encoding"] for m in msgs] == ["string", "base64"]
    first = msgs[0]
    assert first["redelivered"] is False
    assert first["routing_key"] == q and first["exchange"] == ""
    assert first["payload_bytes"] == 5
    assert first["properties"]["content_type"] == "text/plain"
    assert first["properties"]["headers"] == {"k": "v"}
    assert first["properties"]["delivery_mode"] == 2
    assert first["properties"]["priority"] == 3
    assert first["message_count"] == 1
    assert wait_for(lambda: ch.queue_declare(q, passive=True).method.message_count == left)
    if redelivered_after is not None:
        method, _p, _b = ch.basic_get(q, auto_ack=True)
        assert method.redelivered is redelivered_after
    ch.queue_delete(q)


def test_get_rejects_a_bad_ackmode(api, amqp):
    q = uniq("get")
    amqp().channel().queue_declare(q)
    r = api.post(f"/api/queues/{V}/{q}/get", json={"count": 1, "ackmode": "nope",
                                                   "encoding": "auto"})
    # RabbitMQ 3.10.8 answers 500 (its handler crashes); this broker says why, with 400
    assert r.status_code == (500 if RABBITMQ else 400)
    api.delete(f"/api/queues/{V}/{q}")


def test_exclusive_queues_are_locked_for_get_purge_delete(api, amqp):
    """RabbitMQ's API refuses get, purge and delete on another connection's exclusive queue
    with 400 and the AMQP 405 RESOURCE_LOCKED text (3.10.8, checked)."""
    q = uniq("excl")
    ch = amqp().channel()
    ch.queue_declare(q, exclusive=True)
    r = api.post(f"/api/queues/{V}/{q}/get", json={"count": 1, "ackmode": "ack_requeue_true",
                                                   "encoding": "auto"})
    assert r.status_code == 400
    assert r.json()["reason"].startswith("405 RESOURCE_LOCKED - cannot obtain exclusive")
    for method, path in (("DELETE", f"/api/queues/{V}/{q}/contents"),
                         ("DELETE", f"/api/queues/{V}/{q}")):
        r = api.request(method, path)
        assert r.status_code == 400
        assert r.json()["reason"].startswith("cannot obtain exclusive access to locked queue")


def test_exchange_put_publish_delete(api, amqp):
    x, q = uniq("apix"), uniq("apixq")
    ch = amqp().channel()
    ch.queue_declare(q, exclusive=True)
    path = f"/api/exchanges/{V}/{x}"
    assert api.put(path, json={"type": "topic", "durable": False}).status_code == 201
    assert api.put(path, json={"type": "topic", "durable": False}).status_code == 204
    assert api.put(path, json={"type": "direct", "durable": False}).status_code == 400
    j = api.get(path).json()
    assert (j["name"], j["type"], j["durable"], j["internal"]) == (x, "topic", False, False)
    ch.queue_bind(q, x, "a.*")
    r = api.post(path + "/publish", json={"routing_key": "a.b", "payload": "via api",
                                          "payload_encoding": "string",
                                          "properties": {"headers": {"h": 1}}})
    assert r.json() == {"routed": True}
    r = api.post(path + "/publish", json={"routing_key": "zzz", "payload": "",
                                          "payload_encoding": "string", "properties": {}})
    assert r.json() == {"routed": False}
    method, props, body = wait_for(lambda: (lambda g: g if g[0] else None)(ch.basic_get(q)))
    assert body == b"via api" and props.headers == {"h": 1}
    src = api.get(path + "/bindings/source").json()
    assert [(b["destination"], b["routing_key"]) for b in src] == [(q, "a.*")]
    assert api.delete(path).status_code == 204
    assert api.get(path).status_code == 404


def test_default_exchange_is_amq_default(api):
    j = api.get(f"/api/exchanges/{V}/amq.default").json()
    assert j["name"] == "" and j["type"] == "direct"
    names = {x["name"] for x in api.get(f"/api/exchanges/{V}").json()}
    assert {"", "amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"} <= names


def test_bindings_create_get_delete_by_properties_key(api, amqp):
    x, q, x2 = uniq("bx"), uniq("bq"), uniq("bx2")
    ch = amqp().channel()
    ch.queue_declare(q)  # the API cannot bind another connection's exclusive queue
    api.put(f"/api/exchanges/{V}/{x}", json={"type": "direct", "durable": False})
    api.put(f"/api/exchanges/{V}/{x2}", json={"type": "fanout", "durable": False})
    base = f"/api/bindings/{V}/e/{x}/q/{q}"
    r = api.post(base, json={"routing_key": "rk", "arguments": {}})
    assert r.status_code == 201
    # RabbitMQ 3.10.8: "{destination}/{properties key}" (rabbit-hole reads the key after "/")
    assert r.headers["Location"] == f"{q}/rk"
    listed = api.get(base).json()
    assert [(b["source"], b["destination"], b["destination_type"], b["routing_key"])
            for b in listed] == [(x, q, "queue", "rk")]
    key = listed[0]["properties_key"]
    assert api.get(f"{base}/{key}").json()["routing_key"] == "rk"
    assert any(b["source"] == "" and b["destination"] == q
               for b in api.get(f"/api/queues/{V}/{q}/bindings").json())
    r = api.post(f"/api/bindings/{V}/e/{x}/e/{x2}", json={"routing_key": "", "arguments": {}})
    assert r.status_code == 201
    e2e = api.get(f"/api/bindings/{V}/e/{x}/e/{x2}").json()
    assert [(b["destination_type"], b["properties_key"]) for b in e2e] == [("exchange", "~")]
    assert api.delete(f"/api/bindings/{V}/e/{x}/e/{x2}/~").status_code == 204
    assert api.delete(f"{base}/{key}").status_code == 204
    assert api.get(base).json() == []
    assert api.get(f"/api/bindings/{V}/e/nope-{x}/q/{q}").json() == []
    assert api.post(f"/api/bindings/{V}/e/nope-{x}/q/{q}", json={"routing_key": "k"}
                    ).status_code == 404
    assert api.get(f"/api/bindings/{V}/e/nope-{x}/q/{q}/k").status_code == 404
    for name in (x, x2):
        api.delete(f"/api/exchanges/{V}/{name}")
    api.delete(f"/api/queues/{V}/{q}")


def test_connections_and_channels(api, amqp):
    name = uniq("conn")
    conn = amqp(name)
    ch = conn.channel()
    ch.confirm_delivery()

    def mine():
        return [c for c in api.get("/api/connections").json()
                if c.get("user_provided_name") == name or
                (c.get("client_properties") or {}).get("connection_name") == name]

    found = wait_for(lambda: [c for c in mine() if c.get("channels") == 1], timeout=15)
    c = found[0]
    assert c["user"] == "guest" and c["vhost"] == "/" and c["protocol"] == "AMQP 0-9-1"
    assert c["channels"] == 1 and c["state"] == "running"
    one = api.get(f"/api/connections/{api.q(c['name'])}").json()
    assert one["name"] == c["name"]
    chans = wait_for(lambda: api.get(f"/api/connections/{api.q(c['name'])}/channels").json(),
                     timeout=15)
    assert chans[0]["number"] == 1 and chans[0]["confirm"] is True
    assert chans[0]["connection_details"]["name"] == c["name"]
    assert api.get(f"/api/channels/{api.q(chans[0]['name'])}").json()["number"] == 1


def test_closing_a_connection_through_the_api(api, amqp):
    name = uniq("victim")
    conn = amqp(name)
    found = wait_for(lambda: [c for c in api.get("/api/connections").json()
                              if (c.get("client_properties") or {}).get("connection_name")
                              == name], timeout=15)
    r = api.delete(f"/api/connections/{api.q(found[0]['name'])}",
                   headers={"X-Reason": "maintenance"})
    assert r.status_code == 204
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        for _ in range(100):
            conn.process_data_events(0.05)
    assert info.value.reply_code == 320
    assert info.value.reply_text == "CONNECTION_FORCED - maintenance"


def test_list_pagination_sort_and_columns(api, amqp):
    prefix = uniq("page")
    ch = amqp().channel()
    for i in range(3):
        ch.queue_declare(f"{prefix}-{i}", exclusive=True)
    j = wait_for(lambda: (lambda j: j if j["items"] and set(j["items"][0]) == {
        "name", "messages"} else None)(api.get("/api/queues", params={
            "page": 1, "page_size": 2, "name": prefix, "sort": "name", "sort_reverse": "true",
            "columns": "name,messages"}).json()), timeout=15)
    assert (j["filtered_count"], j["item_count"], j["page_count"], j["page_size"]) == (3, 2, 2, 2)
    assert [i["name"] for i in j["items"]] == [f"{prefix}-2", f"{prefix}-1"]
    assert set(j["items"][0]) == {"name", "messages"}
    assert api.get("/api/queues", params={"page": 0}).status_code == 400


def test_rates_appear_after_sampling(api, amqp, ours_only):
    """message_stats.*_details.rate comes from the 5 s sampler (0.2 s in the tests)."""
    q = uniq("rate")
    ch = amqp().channel()
    ch.queue_declare(q, exclusive=True)
    ch.confirm_delivery()
    path = f"/api/queues/{V}/{q}"
    time.sleep(0.3)

    def rated():
        for _ in range(50):
            ch.basic_publish("", q, b"x")
        j = api.get(path).json()
        return j if j["message_stats"]["publish_details"]["rate"] > 0 else None

    j = wait_for(rated, timeout=10)
    assert j["message_stats"]["publish"] >= 50
    assert j["messages_details"]["rate"] > 0
