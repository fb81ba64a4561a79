"""The rest of the API: node and health endpoints, per-vhost and per-connection lists,
users without permissions, topic permissions, per-vhost definitions import, and the
management server being off by configuration. Also passes against RabbitMQ 3.10.8 (the
last test is ours)."""

from __future__ import annotations

import uuid

import pika
import pytest
import requests

from tests.ops.conftest import EXTERNAL, RABBITMQ
from tests.polling import wait_for


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_nodes_and_health(api):
    nodes = api.get("/api/nodes").json()
    assert len(nodes) == 1
    node = nodes[0]
    for key in ("name", "running", "mem_used", "mem_limit", "mem_alarm", "disk_free",
                "disk_free_limit", "disk_free_alarm", "fd_used", "uptime"):
        assert key in node, key
    assert node["name"].startswith("rabbit@") and node["running"] is True
    assert api.get(f"/api/nodes/{node['name']}").json()["name"] == node["name"]
    # RabbitMQ 3.10.8 answers 500 (it tries to reach that node); this broker says 404
    assert api.get("/api/nodes/rabbit@no-such-host").status_code == (500 if RABBITMQ else 404)
    assert api.get("/api/health/checks/alarms").json() == {"status": "ok"}
    assert api.get("/api/health/checks/local-alarms").json() == {"status": "ok"}
    assert api.get("/api/aliveness-test/%2F").json() == {"status": "ok"}


def test_per_vhost_lists(api, broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    q = uniq("pv")
    ch.queue_declare(q, exclusive=True)
    ch.basic_consume(q, lambda *a: None, consumer_tag="pv-consumer")
    try:
        assert wait_for(lambda: any(c["vhost"] == "/" for c in
                                    api.get("/api/vhosts/%2F/connections").json()), timeout=15)
        assert wait_for(lambda: api.get("/api/vhosts/%2F/channels").json(), timeout=15)
        assert wait_for(lambda: any(c["consumer_tag"] == "pv-consumer" for c in
                                    api.get("/api/consumers/%2F").json()), timeout=15)
        x = uniq("pvx")
        api.put(f"/api/exchanges/%2F/{x}", json={"type": "fanout", "durable": False})
        api.post(f"/api/bindings/%2F/e/amq.fanout/e/{x}", json={"routing_key": ""})
        dest = api.get(f"/api/exchanges/%2F/{x}/bindings/destination").json()
        assert [(b["source"], b["destination"]) for b in dest] == [("amq.fanout", x)]
        api.delete(f"/api/exchanges/%2F/{x}")
    finally:
        conn.close()


def test_users_without_permissions_and_topic_permissions(api):
    name = uniq("np")
    api.put(f"/api/users/{name}", json={"password": "p", "tags": ""})
    try:
        assert name in [u["name"] for u in api.get("/api/users/without-permissions").json()]
        api.put(f"/api/permissions/%2F/{name}", json={"configure": "", "write": ".*",
                                                       "read": ".*"})
        assert name not in [u["name"] for u in
                            api.get("/api/users/without-permissions").json()]
        r = api.put(f"/api/topic-permissions/%2F/{name}", json={
            "exchange": "amq.topic", "write": "^a", "read": ".*"})
        assert r.status_code in (201, 204)
        tp = [p for p in api.get("/api/topic-permissions").json() if p["user"] == name]
        assert [(p["exchange"], p["write"], p["read"]) for p in tp] == [("amq.topic", "^a", ".*")]
        assert api.delete(f"/api/topic-permissions/%2F/{name}").status_code == 204
    finally:
        api.delete(f"/api/users/{name}")


def test_per_vhost_definitions_import(api):
    vhost = uniq("dv")
    api.put(f"/api/vhosts/{vhost}")
    try:
        r = api.post(f"/api/definitions/{vhost}", json={
            "queues": [{"name": "imported-q", "durable": True, "auto_delete": False,
                        "arguments": {"x-max-length": 3}}],
            "exchanges": [{"name": "imported-x", "type": "direct", "durable": True,
                           "auto_delete": False, "internal": False, "arguments": {}}],
            "bindings": [{"source": "imported-x", "destination": "imported-q",
                          "destination_type": "queue", "routing_key": "k", "arguments": {}}],
            "policies": []})
        assert r.status_code in (201, 204), r.text
        got = api.get(f"/api/definitions/{vhost}").json()
        assert [q["name"] for q in got["queues"]] == ["imported-q"]
        assert [b["routing_key"] for b in got["bindings"]] == ["k"]
    finally:
        api.delete(f"/api/vhosts/{vhost}")


def test_management_off_by_configuration(ours_only, tmp_path):
    """management.tcp.port = 0 and prometheus.tcp.port = 0: nothing listens, no aiohttp
    app is built (the default of EmbeddedBroker; its start-up time is in the README)."""
    import sys

    from broker.embedded import EmbeddedBroker

    with EmbeddedBroker(data_dir=str(tmp_path)) as b:
        assert b.broker.management is None and b.management_port is None
    with EmbeddedBroker(data_dir=str(tmp_path), management_tcp_port=-1,
                        prometheus_tcp_port=0) as b:
        assert b.management_port and b.broker.management.prometheus_port is None
    assert "broker.management.app" in sys.modules  # imported only once asked for


def test_memory_breakdown(api, broker):
    """GET /api/nodes/{node}/memory[/relative] (rabbit_mgmt_wm_node_memory): RabbitMQ's keys,
    strategy rss, totals; the relative form in whole percentages with total 100; a message
    held in RAM shows in queue_procs (a check this broker can make exactly; RabbitMQ's
    figure there includes its processes' heaps)."""
    node = api.get("/api/overview").json()["node"]
    mem = api.get(f"/api/nodes/{node}/memory").json()["memory"]
    for key in ("connection_readers", "connection_writers", "queue_procs", "other_proc",
                "binary", "code", "mnesia", "msg_index", "strategy", "total"):
        assert key in mem, key
    assert set(mem["total"]) == {"erlang", "rss", "allocated"} and mem["total"]["rss"] > 0
    rel = api.get(f"/api/nodes/{node}/memory/relative").json()["memory"]
    assert rel["total"] == 100 and all(isinstance(v, int) for v in rel.values())
    assert api.get("/api/nodes/rabbit@no-such-node/memory").status_code == 404


@pytest.mark.skipif(EXTERNAL, reason="RabbitMQ's queue_procs is its processes' heaps")
def test_memory_breakdown_counts_queued_bytes(api, broker):
    node = api.get("/api/overview").json()["node"]
    before = api.get(f"/api/nodes/{node}/memory").json()["memory"]["queue_procs"]
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    name = "mem-breakdown-q"
    ch.queue_declare(name)
    try:
        ch.basic_publish("", name, b"x" * 1_000_000)
        conn.process_data_events(time_limit=0.2)
        after = api.get(f"/api/nodes/{node}/memory").json()["memory"]["queue_procs"]
        assert after - before >= 1_000_000
    finally:
        ch.queue_delete(name)
        conn.close()


def test_memory_ets_forms(api):
    """GET /api/nodes/{node}/memory/ets[/{filter}][/relative] (rabbit_mgmt_wm_node_memory_ets):
    200 with `ets_tables_memory` in every form, "no_tables" for a filter matching no table
    (this broker has no ETS tables, so every form answers that), 404 for another node."""
    node = api.get("/api/overview").json()["node"]
    for tail in ("", "/relative", "/management", "/management/relative"):
        r = api.get(f"/api/nodes/{node}/memory/ets{tail}")
        assert r.status_code == 200 and "ets_tables_memory" in r.json(), tail
    assert api.get(f"/api/nodes/{node}/memory/ets/no_such_table").json() == {
        "ets_tables_memory": "no_tables"}
    assert api.get("/api/nodes/rabbit@no-such-node/memory/ets").status_code == 404


def test_form_login(api):
    """POST /api/login (rabbit_mgmt_wm_login): the UI's form login. Right credentials of a
    management user: 200, "ok" and the cookie auth = base64(user:password); wrong ones: 401
    "Login failed"; a user without a management tag: 401; GET: 405."""
    url = api.base + "/api/login"
    ok = requests.post(url, data={"username": "guest", "password": "guest"}, timeout=10)
    assert ok.status_code == 200 and ok.json() == "ok"
    assert ok.cookies.get("auth") == "Z3Vlc3Q6Z3Vlc3Q="
    bad = requests.post(url, data={"username": "guest", "password": "nope"}, timeout=10)
    assert bad.status_code == 401
    assert bad.json() == {"error": "not_authorized", "reason": "Login failed"}
    name = uniq("plain")
    assert api.put(f"/api/users/{name}", json={"password": "pw", "tags": ""}).status_code in (
        201, 204)
    try:
        plain = requests.post(url, data={"username": name, "password": "pw"}, timeout=10)
        assert plain.status_code == 401
    finally:
        api.delete(f"/api/users/{name}")
    assert requests.get(url, timeout=10).status_code == 405
