"""Topic permissions in every form RabbitMQ 3.10.8's API has (issue 24 item 4): per vhost and
user, per exchange, per user and per vhost listings, deletes of one exchange or all. Passes
against RabbitMQ 3.10.8 too (BROKER_TEST_URI / BROKER_TEST_API); each test cleans up."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def user(api):
    name = f"tp-{uuid.uuid4().hex[:8]}"
    assert api.put(f"/api/users/{name}", json={"password": "pw", "tags": ""}).status_code == 201
    yield name
    api.delete(f"/api/users/{name}")


def _rows(items: list[dict]) -> set[tuple]:
    return {(i["user"], i["vhost"], i["exchange"], i["write"], i["read"]) for i in items}


def test_topic_permission_forms(api, user):
    base = f"/api/topic-permissions/%2F/{user}"
    assert api.get(base).status_code == 404  # none yet
    assert api.get(f"/api/users/{user}/topic-permissions").json() == []
    assert api.put(base, json={"exchange": "amq.topic", "write": "^a", "read": ".*"}
                   ).status_code == 201
    assert api.put(base, json={"exchange": "amq.topic", "write": "^b", "read": ".*"}
                   ).status_code == 204  # replaced
    assert api.put(base, json={"exchange": "x.t", "write": "^c", "read": "^d"}
                   ).status_code == 204  # 201 only for the user's first in the vhost
    both = {(user, "/", "amq.topic", "^b", ".*"), (user, "/", "x.t", "^c", "^d")}
    assert _rows(api.get(base).json()) == both
    assert _rows(api.get(f"{base}/x.t").json()) == both  # 3.10.8 lists them all here
    assert _rows(api.get(f"/api/users/{user}/topic-permissions").json()) == both
    assert both <= _rows(api.get("/api/vhosts/%2F/topic-permissions").json())
    assert both <= _rows(api.get("/api/topic-permissions").json())
    assert api.delete(f"{base}/x.t").status_code == 204
    assert api.delete(f"{base}/no-such-exchange").status_code == 204
    assert _rows(api.get(base).json()) == {(user, "/", "amq.topic", "^b", ".*")}
    assert api.delete(base).status_code == 204
    assert api.get(base).status_code == 404


def test_unknown_user_or_vhost_is_404(api):
    assert api.get("/api/users/no-such-user-tp/topic-permissions").status_code == 404
    assert api.get("/api/vhosts/no-such-vhost-tp/topic-permissions").status_code == 404
    assert api.get("/api/topic-permissions/no-such-vhost-tp/guest").status_code == 404
