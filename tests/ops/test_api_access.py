"""Users, vhosts and permissions through the API, and what each user tag may do
(rabbitmq.com/management.html#permissions). Also passes against RabbitMQ 3.10.8."""

from __future__ import annotations

import uuid

import pika
import pytest
import requests

from tests.polling import wait_for


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def user(api):
    made: list[str] = []

    def make(tags: str = "", vhost: str | None = "/") -> tuple[str, str]:
        name, password = uniq("u"), uuid.uuid4().hex
        assert api.put(f"/api/users/{name}", json={"password": password, "tags": tags}
                       ).status_code == 201
        if vhost is not None:
            assert api.put(f"/api/permissions/{api.q(vhost)}/{name}", json={
                "configure": ".*", "write": ".*", "read": ".*"}).status_code == 201
        made.append(name)
        return name, password

    yield make
    for name in made:
        api.delete(f"/api/users/{name}")


def test_no_or_wrong_credentials_are_401(api_base):
    r = requests.get(api_base + "/api/overview", timeout=10)
    assert r.status_code == 401
    assert "Basic" in r.headers.get("WWW-Authenticate", "")
    r = requests.get(api_base + "/api/overview", auth=("guest", "wrong"), timeout=10)
    assert r.status_code == 401
    assert r.json()["error"] == "not_authorized"  # RabbitMQ 3.10's spelling


def test_user_without_management_tag_cannot_log_in(api, user):
    name, password = user(tags="")
    r = api.as_user(name, password).get("/api/overview")
    assert r.status_code == 401


def test_whoami_and_tags(api, user):
    name, password = user(tags="monitoring")
    j = api.as_user(name, password).get("/api/whoami").json()
    assert j["name"] == name
    assert j["tags"] == ["monitoring"] or j["tags"] == "monitoring"


def test_management_user_sees_only_its_vhosts_and_not_users(api, user):
    vhost = uniq("vh")
    assert api.put(f"/api/vhosts/{vhost}").status_code == 201
    try:
        name, password = user(tags="management", vhost=vhost)
        me = api.as_user(name, password)
        assert me.put(f"/api/queues/{vhost}/mine", json={"durable": False}).status_code == 201
        assert [q["vhost"] for q in me.get("/api/queues").json()] == [vhost]
        assert me.get("/api/queues/%2F").status_code == 401
        assert me.get("/api/users").status_code == 401
        assert me.put(f"/api/users/{uniq('x')}", json={"password": "p", "tags": ""}
                      ).status_code == 401
    finally:
        assert api.delete(f"/api/vhosts/{vhost}").status_code == 204


def test_user_crud_and_amqp_login(api, broker, user):
    name, password = user(tags="administrator")
    j = api.get(f"/api/users/{name}").json()
    assert j["name"] == name
    assert j["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    assert j["password_hash"]
    assert j["tags"] in (["administrator"], "administrator")
    url = broker.url.replace("guest:guest", f"{name}:{password}")
    pika.BlockingConnection(pika.URLParameters(url)).close()
    assert api.put(f"/api/users/{name}", json={"password": "new", "tags": "monitoring"}
                   ).status_code == 204
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(pika.URLParameters(url))
    assert api.delete(f"/api/users/{name}").status_code == 204
    assert api.get(f"/api/users/{name}").status_code == 404


def test_permissions_crud(api, user):
    name, _password = user(tags="", vhost=None)
    path = f"/api/permissions/%2F/{name}"
    assert api.get(path).status_code == 404
    assert api.put(path, json={"configure": "^a", "write": ".*", "read": ".*"}
                   ).status_code == 201
    j = api.get(path).json()
    assert (j["user"], j["vhost"], j["configure"], j["write"], j["read"]) == (
        name, "/", "^a", ".*", ".*")
    assert any(p["user"] == name for p in api.get("/api/permissions").json())
    assert any(p["user"] == name for p in api.get(f"/api/users/{name}/permissions").json())
    assert any(p["user"] == name for p in api.get("/api/vhosts/%2F/permissions").json())
    assert api.put(path, json={"configure": "(", "write": ".*", "read": ".*"}
                   ).status_code == 400
    assert api.delete(path).status_code == 204
    assert api.get(path).status_code == 404


def test_vhost_crud_closes_its_connections(api, broker):
    vhost = uniq("vh")
    assert api.put(f"/api/vhosts/{vhost}", json={"description": "test vhost"}
                   ).status_code == 201
    assert api.put(f"/api/vhosts/{vhost}", json={"description": "changed"}).status_code == 204
    assert api.put(f"/api/permissions/{vhost}/guest", json={
        "configure": ".*", "write": ".*", "read": ".*"}).status_code in (201, 204)
    j = api.get(f"/api/vhosts/{vhost}").json()
    assert j["name"] == vhost and j["description"] == "changed"
    conn = pika.BlockingConnection(pika.URLParameters(broker.url_for(vhost)
                                                      if hasattr(broker, "url_for") else
                                                      broker.url.rsplit("/", 1)[0] + "/" + vhost))
    conn.channel().queue_declare("in-vhost")
    assert wait_for(lambda: api.get(f"/api/queues/{vhost}/in-vhost").status_code == 200)
    assert api.delete(f"/api/vhosts/{vhost}").status_code == 204
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        for _ in range(100):
            conn.process_data_events(0.05)
    assert info.value.reply_code == 320
    assert api.get(f"/api/vhosts/{vhost}").status_code == 404
