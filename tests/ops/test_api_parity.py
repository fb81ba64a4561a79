"""RabbitMQ 3.10.8 management endpoints added for issue 24: health checks, the cluster name,
global parameters, vhost and user limits, feature flags, extensions, users bulk-delete,
queue sync actions and the node's process / socket figures. Every test also passes against
RabbitMQ 3.10.8 (BROKER_TEST_URI / BROKER_TEST_API); where RabbitMQ answers 500 for a
missing object, this broker answers 404 and the test says so. Each test removes what it
creates."""

from __future__ import annotations

import uuid

import pika
import pytest

from tests.ops.conftest import RABBITMQ

JSON = {"content-type": "application/json"}


def uniq(prefix: str) -> str:
    return f"parity-{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def vhost(api):
    name = uniq("vh")
    assert api.put(f"/api/vhosts/{name}").status_code == 201
    yield name
    api.delete(f"/api/vhosts/{name}")


@pytest.fixture
def user(api):
    name = uniq("u")
    assert api.put(f"/api/users/{name}", json={"password": "pw", "tags": ""}).status_code == 201
    yield name
    api.delete(f"/api/users/{name}")


@pytest.fixture
def manager(api):
    """A user tagged only `management` (with access to "/"): (name, password)."""
    name = uniq("m")
    api.put(f"/api/users/{name}", json={"password": "pw", "tags": "management"})
    api.put(f"/api/permissions/%2F/{name}", json={"configure": ".*", "write": ".*",
                                                  "read": ".*"})
    yield api.as_user(name, "pw")
    api.delete(f"/api/users/{name}")


def node_name(api) -> str:
    return api.get("/api/overview").json()["node"]


# -- health checks ------------------------------------------------------------------------
def test_health_checks_that_pass(api):
    for path in ("alarms", "local-alarms", "virtual-hosts"):
        r = api.get(f"/api/health/checks/{path}")
        assert (r.status_code, r.json()) == (200, {"status": "ok"}), path
    for path in ("node-is-mirror-sync-critical", "node-is-quorum-critical"):
        r = api.get(f"/api/health/checks/{path}")
        assert (r.status_code, r.json()) == (200, {"status": "ok",
                                                   "reason": "single node cluster"})
    assert api.get("/api/healthchecks/node").json() == {"status": "ok"}
    assert api.get(f"/api/healthchecks/node/{node_name(api)}").json() == {"status": "ok"}
    assert api.get("/api/healthchecks/node/rabbit@no-such-host").status_code == 404


def test_certificate_expiration_arguments(api):
    # no TLS listener here (nor on the reference RabbitMQ): nothing expires
    for within, unit in (("1", "months"), ("2", "WEEKS"), ("0", "days"), ("10", "years")):
        r = api.get(f"/api/health/checks/certificate-expiration/{within}/{unit}")
        assert (r.status_code, r.json()) == (200, {"status": "ok"})
    r = api.get("/api/health/checks/certificate-expiration/1/fortnights")
    assert r.status_code == 400
    assert r.json() == {"error": "bad_request", "reason": "Time unit not recognised. "
                        "Supported units: days, weeks, months, years."}
    r = api.get("/api/health/checks/certificate-expiration/soon/days")
    assert (r.status_code, r.json()["reason"]) == (400, "Invalid expiration value.")


def test_port_listener(api, broker):
    r = api.get(f"/api/health/checks/port-listener/{broker.port}")
    assert (r.status_code, r.json()) == (200, {"status": "ok", "port": broker.port})
    r = api.get("/api/health/checks/port-listener/1")
    assert r.status_code == 503
    body = r.json()
    assert {k: body[k] for k in ("status", "reason", "missing")} == {
        "status": "failed", "reason": "No active listener", "missing": 1}
    assert broker.port in body["ports"]
    assert api.get("/api/health/checks/port-listener/http").status_code == 400


def test_protocol_listener(api):
    for asked, protocol in (("amqp", "amqp"), ("amqp091", "amqp"), ("AMQP0-9-1", "amqp"),
                            ("http", "http"), ("management", "http")):
        r = api.get(f"/api/health/checks/protocol-listener/{asked}")
        assert (r.status_code, r.json()) == (200, {"status": "ok", "protocol": protocol})
    r = api.get("/api/health/checks/protocol-listener/mqtt")
    assert r.status_code == 503
    body = r.json()
    assert {k: body[k] for k in ("status", "reason", "missing")} == {
        "status": "failed", "reason": "No active listener", "missing": "mqtt"}
    assert {"amqp", "http"} <= set(body["protocols"])


def test_a_management_user_may_run_health_checks(manager):
    assert manager.get("/api/health/checks/alarms").status_code == 200
    assert manager.get("/api/health/checks/protocol-listener/amqp").status_code == 200
    assert manager.get("/api/healthchecks/node").status_code == 200


# -- cluster name and global parameters ---------------------------------------------------
def test_cluster_name_is_settable_and_reverts_when_its_parameter_goes(api, broker, manager):
    original = api.get("/api/cluster-name").json()["name"]
    name = uniq("cluster")
    assert manager.put("/api/cluster-name", json={"name": name}).status_code == 401
    assert api.put("/api/cluster-name", json={}).status_code == 400
    try:
        assert api.put("/api/cluster-name", json={"name": name}).status_code == 204
        assert api.get("/api/cluster-name").json() == {"name": name}
        assert manager.get("/api/cluster-name").json() == {"name": name}
        assert api.get("/api/overview").json()["cluster_name"] == name
        assert api.get("/api/global-parameters/cluster_name").json() == {
            "name": "cluster_name", "value": name}
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        try:
            props = conn._impl.server_properties
            assert props["cluster_name"] in (name, name.encode())
        finally:
            conn.close()
    finally:
        assert api.delete("/api/global-parameters/cluster_name").status_code == 204
    assert api.get("/api/cluster-name").json() == {"name": original}


def test_global_parameters(api, manager):
    params = api.get("/api/global-parameters").json()
    ids = [p["value"] for p in params if p["name"] == "internal_cluster_id"]
    assert len(ids) == 1 and ids[0].startswith("rabbitmq-cluster-id-")
    name = uniq("g")
    assert api.get(f"/api/global-parameters/{name}").status_code == 404
    assert api.put(f"/api/global-parameters/{name}", json={"value": {"a": 1}}).status_code == 201
    try:
        assert api.get(f"/api/global-parameters/{name}").json() == {"name": name,
                                                                    "value": {"a": 1}}
        assert api.put(f"/api/global-parameters/{name}", json={"value": "s"}).status_code == 204
        assert {"name": name, "value": "s"} in api.get("/api/global-parameters").json()
        exported = api.get("/api/definitions").json()["global_parameters"]
        assert {"name": name, "value": "s"} in exported
        r = api.put(f"/api/global-parameters/{name}", json={})
        assert (r.status_code, r.json()["reason"]) == (400, "[{key_missing,value}]")
        # policymaker or administrator only
        assert manager.get("/api/global-parameters").status_code == 401
        assert manager.put(f"/api/global-parameters/{name}",
                           json={"value": 1}).status_code == 401
    finally:
        assert api.delete(f"/api/global-parameters/{name}").status_code == 204
    assert api.delete(f"/api/global-parameters/{name}").status_code == 404
    assert api.get(f"/api/global-parameters/{name}").status_code == 404


# -- limits -------------------------------------------------------------------------------
def test_vhost_limits(api, vhost, manager):
    q = api.q(vhost)
    assert api.get(f"/api/vhost-limits/{q}").json() == []
    assert api.put(f"/api/vhost-limits/{q}/max-connections",
                   json={"value": 10}).status_code == 204
    assert api.put(f"/api/vhost-limits/{q}/max-queues", json={"value": -1}).status_code == 204
    expected = {"vhost": vhost, "value": {"max-connections": 10, "max-queues": -1}}
    assert api.get(f"/api/vhost-limits/{q}").json() == [expected]
    assert expected in api.get("/api/vhost-limits").json()
    assert vhost not in [i["vhost"] for i in manager.get("/api/vhost-limits").json()]
    assert manager.put(f"/api/vhost-limits/{q}/max-queues",
                       json={"value": 1}).status_code == 401
    params = api.get("/api/definitions").json()["parameters"]
    assert {"vhost": vhost, "component": "vhost-limits", "name": "limits",
            "value": expected["value"]} in params

    r = api.put(f"/api/vhost-limits/{q}/max-queues", json={"value": "5"})
    assert (r.status_code, r.json()["reason"]) == (
        400, 'Validation failed\n\nmax-queues should be a number, actually was <<"5">>\n')
    r = api.put(f"/api/vhost-limits/{q}/max-queues", json={"value": 1.5})
    assert (r.status_code, r.json()["reason"]) == (
        400, "Validation failed\n\nmax-queues should be a number, actually was 1.5\n")
    r = api.put(f"/api/vhost-limits/{q}/max-foo", json={"value": 5})
    assert (r.status_code, r.json()["reason"]) == (
        400, 'Validation failed\n\nUnrecognised terms [{<<"max-foo">>,5}] in limits\n')
    r = api.put(f"/api/vhost-limits/{q}/max-queues", json={})
    assert (r.status_code, r.json()["reason"]) == (400, "[{key_missing,value}]")
    r = api.put("/api/vhost-limits/no-such-vhost-x/max-queues", json={"value": 1})
    assert (r.status_code, r.json()) == (404, {"error": "not_found",
                                               "reason": "vhost_not_found"})
    assert api.get("/api/vhost-limits/no-such-vhost-x").status_code == 404

    assert api.delete(f"/api/vhost-limits/{q}/max-queues").status_code == 204
    assert api.delete(f"/api/vhost-limits/{q}/max-queues").status_code == 204
    assert api.get(f"/api/vhost-limits/{q}").json() == [
        {"vhost": vhost, "value": {"max-connections": 10}}]
    assert api.delete(f"/api/vhost-limits/{q}/max-connections").status_code == 204
    assert api.get(f"/api/vhost-limits/{q}").json() == []


def test_a_vhost_limit_applies(api, vhost, broker):
    assert api.put(f"/api/vhost-limits/{api.q(vhost)}/max-connections",
                   json={"value": 0}).status_code == 204
    # 204 on RabbitMQ, which gave the vhost's creator (guest) permissions already
    assert api.put(f"/api/permissions/{api.q(vhost)}/guest",
                   json={"configure": ".*", "write": ".*", "read": ".*"}).status_code in (
                       201, 204)
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(pika.URLParameters(
            broker.url.rsplit("/", 1)[0] + "/" + api.q(vhost)))


def test_user_limits(api, user, manager):
    assert api.get(f"/api/user-limits/{user}").json() == []
    assert api.put(f"/api/user-limits/{user}/max-connections",
                   json={"value": 3}).status_code == 204
    assert api.put(f"/api/user-limits/{user}/max-channels", json={"value": 4}).status_code == 204
    expected = {"user": user, "value": {"max-connections": 3, "max-channels": 4}}
    assert api.get(f"/api/user-limits/{user}").json() == [expected]
    assert expected in api.get("/api/user-limits").json()
    assert expected in manager.get("/api/user-limits").json()  # as in RabbitMQ
    assert api.get(f"/api/users/{user}").json()["limits"] == expected["value"]
    exported = [u for u in api.get("/api/definitions").json()["users"] if u["name"] == user]
    assert exported[0]["limits"] == expected["value"]
    assert manager.put(f"/api/user-limits/{user}/max-channels",
                       json={"value": 1}).status_code == 401

    r = api.put(f"/api/user-limits/{user}/max-foo", json={"value": 4})
    assert (r.status_code, r.json()["reason"]) == (
        400, 'Unrecognised terms [{<<"max-foo">>,4}] in user-limits')
    r = api.put(f"/api/user-limits/{user}/max-channels", json={"value": "x"})
    assert (r.status_code, r.json()["reason"]) == (
        400, 'max-channels should be a number, actually was <<"x">>')
    r = api.put("/api/user-limits/no-such-user-x/max-channels", json={"value": 1})
    assert (r.status_code, r.json()["reason"]) == (400, ["no_such_user", "no-such-user-x"])
    assert api.get("/api/user-limits/no-such-user-x").status_code == 404

    assert api.delete(f"/api/user-limits/{user}/max-channels").status_code == 204
    assert api.delete(f"/api/user-limits/{user}/max-channels").status_code == 204
    assert api.get(f"/api/user-limits/{user}").json() == [
        {"user": user, "value": {"max-connections": 3}}]


def test_deleting_a_limit_of_a_missing_vhost_or_user(api):
    # RabbitMQ 3.10.8 answers 500 (its clear_limit fails on the missing object); 404 here
    status = 500 if RABBITMQ else 404
    assert api.delete("/api/vhost-limits/no-such-vhost-x/max-queues").status_code == status
    assert api.delete("/api/user-limits/no-such-user-x/max-channels").status_code == status


# -- feature flags, extensions, bulk delete, queue actions, node ----------------------------
FLAGS = {"classic_mirrored_queue_version", "drop_unroutable_metric", "empty_basic_get_metric",
         "implicit_default_bindings", "maintenance_mode_status", "quorum_queue",
         "stream_queue", "user_limits", "virtual_host_metadata"}


def test_feature_flags(api, manager):
    flags = api.get("/api/feature-flags").json()
    assert {f["name"] for f in flags} == FLAGS
    for f in flags:
        assert set(f) == {"name", "desc", "doc_url", "state", "stability", "provided_by"}
        assert (f["state"], f["stability"]) == ("enabled", "stable")
    quorum = next(f for f in flags if f["name"] == "quorum_queue")
    assert quorum == {"name": "quorum_queue", "desc": "Support queues of type `quorum`",
                      "doc_url": "https://www.rabbitmq.com/quorum-queues.html",
                      "state": "enabled", "stability": "stable", "provided_by": "rabbit"}
    assert api.put("/api/feature-flags/quorum_queue/enable", json={}).status_code == 204
    r = api.put("/api/feature-flags/no_such_flag_x/enable", json={})
    assert (r.status_code, r.json()) == (400, {"error": "bad_request", "reason": "unsupported"})
    assert manager.get("/api/feature-flags").status_code == 401


def test_extensions(api, manager):
    expected = [{"javascript": "dispatcher.js"}, {"javascript": "federation.js"},
                {"javascript": "shovel.js"}]
    assert sorted(api.get("/api/extensions").json(), key=str) == expected
    assert manager.get("/api/extensions").status_code == 200


def test_users_bulk_delete(api):
    a, b = uniq("bd"), uniq("bd")
    for name in (a, b):
        api.put(f"/api/users/{name}", json={"password": "pw", "tags": ""})
    try:
        assert api.post("/api/users/bulk-delete", json={"users": [a]}).status_code == 204
        assert api.get(f"/api/users/{a}").status_code == 404
        r = api.post("/api/users/bulk-delete", json={"users": [b, "no-such-user-x"]})
        assert (r.status_code, r.json()["reason"]) == (400, ["no_such_user", "no-such-user-x"])
        assert api.get(f"/api/users/{b}").status_code == 404  # deleted before the failure
        r = api.post("/api/users/bulk-delete", json={})
        assert (r.status_code, r.json()["reason"]) == (400, "[{key_missing,users}]")
        assert api.post("/api/users/bulk-delete", json={"users": []}).status_code == 204
    finally:
        for name in (a, b):
            api.delete(f"/api/users/{name}")


def test_queue_sync_actions(api, manager):
    q = uniq("q")
    assert api.put(f"/api/queues/%2F/{q}", json={"durable": False}).status_code == 201
    try:
        path = f"/api/queues/%2F/{q}/actions"
        assert api.post(path, json={"action": "sync"}).status_code == 204
        assert api.post(path, json={"action": "cancel_sync"}).status_code == 204
        r = api.post(path, json={"action": "rebalance"})
        assert (r.status_code, r.json()["reason"]) == (400, ["unknown", "rebalance"])
        r = api.post(path, json={})
        assert (r.status_code, r.json()["reason"]) == (400, "[{key_missing,action}]")
        assert manager.post(path, json={"action": "sync"}).status_code == 401
        assert api.get(path).status_code == 405
    finally:
        api.delete(f"/api/queues/%2F/{q}")
    # RabbitMQ 3.10.8 answers 500 for a missing queue (rabbit_amqqueue:with fails); 404 here
    missing = api.post("/api/queues/%2F/no-such-queue-x/actions", json={"action": "sync"})
    assert missing.status_code == (500 if RABBITMQ else 404)


def test_node_process_and_socket_figures(api):
    node = api.get(f"/api/nodes/{node_name(api)}").json()
    for key in ("proc_used", "proc_total", "sockets_used", "sockets_total"):
        assert isinstance(node[key], int) and node[key] >= 0, key
    assert 0 < node["proc_used"] < node["proc_total"]
    assert 0 < node["sockets_total"] <= node["fd_total"]


# -- this broker only: a TLS listener whose certificates expire, a restart -----------------
def test_expiring_certificates_and_a_durable_cluster_name(ours_only, tmp_path):
    """The test CA's certificates expire in a day: within a week they fail the check (with
    RabbitMQ's `expired` entries). The cluster name survives a restart."""
    from broker.embedded import EmbeddedBroker
    from tests.integration.certs import TestCA
    from tests.ops.conftest import Api

    ca = TestCA(str(tmp_path))
    server = ca.issue("parity-broker", server=True)
    cfg = dict(listeners_ssl_default="0", ssl_options_certfile=server.cert,
               ssl_options_keyfile=server.key, ssl_options_cacertfile=ca.ca.cert,
               management_tcp_port=-1, data_dir=str(tmp_path / "data"))
    b = EmbeddedBroker(**cfg).start()
    try:
        api = Api(b.api_url)
        assert api.get("/api/health/checks/certificate-expiration/0/days").json() == {
            "status": "ok"}
        r = api.get("/api/health/checks/certificate-expiration/1/weeks")
        assert r.status_code == 503
        body = r.json()
        assert (body["status"], body["reason"]) == ("failed", "Certificates expiring")
        [entry] = body["expired"]
        assert entry["protocol"] == "amqp/ssl" and entry["port"] == b.ssl_port
        assert (entry["certfile"], entry["cacertfile"]) == (server.cert, ca.ca.cert)
        assert len(entry["certfile_expires_on"]) == len(entry["cacertfile_expires_on"]) == 1
        r = api.get("/api/health/checks/protocol-listener/amqps")
        assert r.json() == {"status": "ok", "protocol": "amqp/ssl"}
        assert api.put("/api/cluster-name", json={"name": "kept"}).status_code == 204
    finally:
        b.stop()
    b = EmbeddedBroker(**cfg).start()
    try:
        assert Api(b.api_url).get("/api/cluster-name").json() == {"name": "kept"}
    finally:
        b.stop()


def test_the_creator_of_a_vhost_gets_full_permissions_there(api, vhost):
    """RabbitMQ 3.10.8 grants the user who creates a vhost ".*" ".*" ".*" on it."""
    r = api.get(f"/api/permissions/{vhost}/guest")
    assert r.status_code == 200, r.text
    perms = r.json()
    assert (perms["configure"], perms["write"], perms["read"]) == (".*", ".*", ".*")


def test_every_path_takes_a_trailing_slash(api):
    """RabbitMQ's router takes an API path with a trailing slash as without it (AMQPStorm's
    health check asks for /api/healthchecks/node/): reads, a declare and a delete."""
    name = uniq("slash")
    for path in ("/api/overview/", "/api/queues/", "/api/queues/%2F/", "/api/vhosts/%2F/",
                 "/api/healthchecks/node/"):
        assert api.get(path).status_code == 200, path
    assert api.put(f"/api/queues/%2F/{name}/", json={"durable": True}).status_code == 201
    assert api.get(f"/api/queues/%2F/{name}").json()["durable"] is True
    assert api.delete(f"/api/queues/%2F/{name}/").status_code == 204
    assert api.get(f"/api/queues/%2F/{name}").status_code == 404


def test_names_with_percent_signs_are_decoded_once(api, broker):
    """A queue named "q%7C<id>" is /api/queues/%2F/q%257C<id>: the path is decoded once, as
    RabbitMQ's router decodes it (rabbit-hole's binding spec uses such a name; a second
    decode made it "q|<id>" and 404)."""
    name = uniq("q%7C")
    x = uniq("x")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    try:
        ch.exchange_declare(x, "topic")
        ch.queue_declare(name)
        ch.queue_bind(name, x, "#")
        enc = api.q(name)
        assert api.get(f"/api/queues/%2F/{enc}").json()["name"] == name
        found = api.get(f"/api/bindings/%2F/e/{x}/q/{enc}").json()
        assert [(b["source"], b["destination"]) for b in found] == [(x, name)]
        assert api.get(f"/api/queues/%2F/{api.q(name.replace('%7C', '|'))}").status_code == 404
    finally:
        ch.queue_delete(name)
        ch.exchange_delete(x)
        conn.close()
