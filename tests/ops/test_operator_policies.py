"""Operator policies (rabbitmq.com/parameters.html#operator-policy; issue 24): the API paths,
the merge with user policies and declare arguments by the lower value, the keys refused,
and their storage as `operator_policy` runtime parameters (listed, exported). Each test
passes against RabbitMQ 3.10.8 too (BROKER_TEST_URI / BROKER_TEST_API) and cleans up."""

from __future__ import annotations

import time
import uuid

import pika
import pytest

JSON = {"content-type": "application/json"}


def uniq(prefix: str) -> str:
    return f"opol-{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def amqp(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    yield conn.channel()
    conn.close()


def _depth(api, name: str, want: int, timeout: float = 10.0) -> dict:
    """The queue's JSON once its `messages` is `want` and its policy fields are in (the
    stats lag on RabbitMQ, and a queue's JSON lacks them until its first stats event)."""
    deadline = time.monotonic() + timeout
    while True:
        q = api.get(f"/api/queues/%2F/{name}").json()
        if (q.get("messages") == want and "operator_policy" in q) or \
                time.monotonic() > deadline:
            return q
        time.sleep(0.2)


@pytest.fixture
def op_policy(api):
    made: list[str] = []

    def put(name: str, pattern: str, definition: dict, status: int = 201) -> None:
        r = api.put(f"/api/operator-policies/%2F/{name}",
                    json={"pattern": pattern, "definition": definition, "apply-to": "queues"})
        assert r.status_code == status, r.text
        made.append(name)

    yield put
    for name in made:
        api.delete(f"/api/operator-policies/%2F/{name}")


def test_an_operator_policy_caps_a_queue_and_goes_away(api, amqp, op_policy):
    q = uniq("q")
    op_policy(q, f"^{q}$", {"max-length": 2})
    amqp.queue_declare(q)
    for i in range(5):
        amqp.basic_publish("", q, b"m%d" % i)
    info = _depth(api, q, 2)
    assert info["messages"] == 2
    assert info["operator_policy"] == q and info["policy"] is None
    assert info["effective_policy_definition"] == {"max-length": 2}
    listed = api.get("/api/operator-policies/%2F").json()
    assert any(p["name"] == q and p["definition"] == {"max-length": 2} for p in listed)
    assert any(p["name"] == q for p in api.get("/api/operator-policies").json())
    assert api.get(f"/api/operator-policies/%2F/{q}").json()["pattern"] == f"^{q}$"
    assert api.delete(f"/api/operator-policies/%2F/{q}").status_code == 204
    assert api.get(f"/api/operator-policies/%2F/{q}").status_code == 404
    amqp.basic_publish("", q, b"more")
    assert _depth(api, q, 3)["messages"] == 3
    amqp.queue_delete(q)


def test_the_lower_value_wins_and_other_keys_pass_through(api, amqp, op_policy):
    q = uniq("m")
    assert api.put(f"/api/policies/%2F/{q}", headers=JSON, json={
        "pattern": f"^{q}", "definition": {"max-length": 10, "message-ttl": 600000},
        "apply-to": "queues"}).status_code == 201
    try:
        op_policy(q, f"^{q}", {"max-length": 3, "message-ttl": 900000})
        amqp.queue_declare(q)
        amqp.queue_declare(q + "-arg", arguments={"x-max-length": 1})
        for i in range(6):
            amqp.basic_publish("", q, b"m%d" % i)
            amqp.basic_publish("", q + "-arg", b"m%d" % i)
        info = _depth(api, q, 3)
        assert info["messages"] == 3
        assert info["effective_policy_definition"] == {"max-length": 3, "message-ttl": 600000}
        assert (info["policy"], info["operator_policy"]) == (q, q)
        assert _depth(api, q + "-arg", 1)["messages"] == 1  # the argument is lower still
    finally:
        amqp.queue_delete(q)
        amqp.queue_delete(q + "-arg")
        api.delete(f"/api/policies/%2F/{q}")


@pytest.mark.parametrize("definition", [{"ha-mode": "all"}, {"overflow": "reject-publish"},
                                        {"max-length": -1}, {}])
def test_keys_an_operator_policy_may_not_hold_are_400(op_policy, definition):
    op_policy(uniq("bad"), "^x$", definition, status=400)


def test_stored_as_operator_policy_parameters_and_exported(api, op_policy):
    name = uniq("p")
    op_policy(name, "^nothing$", {"message-ttl": 1000})
    params = api.get("/api/parameters/operator_policy").json()
    assert any(p["name"] == name and p["value"]["definition"] == {"message-ttl": 1000}
               for p in params)
    exported = api.get("/api/definitions").json()["parameters"]
    assert any(p["component"] == "operator_policy" and p["name"] == name for p in exported)


def test_only_administrators_write_them(api, op_policy):
    user = uniq("u")
    assert api.put(f"/api/users/{user}", json={"password": "pw", "tags": "policymaker"}
                   ).status_code == 201
    try:
        api.put(f"/api/permissions/%2F/{user}", json={"configure": ".*", "write": ".*",
                                                       "read": ".*"})
        r = api.as_user(user, "pw").put(f"/api/operator-policies/%2F/{uniq('x')}", json={
            "pattern": "^x$", "definition": {"max-length": 1}})
        assert r.status_code == 401
    finally:
        api.delete(f"/api/users/{user}")
