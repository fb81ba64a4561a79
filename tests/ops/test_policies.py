"""Policies through the API (rabbitmq.com/parameters.html#policies): they apply at once to
existing and new queues, the highest priority wins, and for TTL / length / expiry the lower
of argument and policy wins while dead-lettering and overflow arguments win over the
policy. Also passes against RabbitMQ 3.10.8."""

from __future__ import annotations

import time
import uuid

import pika
import pytest

from tests.polling import wait_for


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def policy(api):
    made: list[str] = []

    def put(name: str, pattern: str, definition: dict, priority: int = 0,
            apply_to: str = "queues") -> None:
        r = api.put(f"/api/policies/%2F/{name}", json={
            "pattern": pattern, "definition": definition, "priority": priority,
            "apply-to": apply_to})
        assert r.status_code in (201, 204), r.text
        made.append(name)

    yield put
    for name in made:
        api.delete(f"/api/policies/%2F/{name}")


def count(ch, q: str) -> int:
    return ch.queue_declare(q, passive=True).method.message_count


def test_policy_applies_to_an_existing_queue_at_once(api, ch, policy):
    prefix = uniq("pol")
    q = f"{prefix}-q"
    ch.queue_declare(q, exclusive=True)
    for i in range(5):
        ch.basic_publish("", q, b"%d" % i)
    policy(prefix, f"^{prefix}", {"max-length": 2})
    wait_for(lambda: count(ch, q) == 2, timeout=10)
    j = wait_for(lambda: (lambda j: j if j.get("policy") == prefix else None)(
        api.get(f"/api/queues/%2F/{q}").json()), timeout=10)
    assert j["effective_policy_definition"] == {"max-length": 2}
    p = api.get(f"/api/policies/%2F/{prefix}").json()
    assert (p["name"], p["pattern"], p["apply-to"], p["definition"]) == (
        prefix, f"^{prefix}", "queues", {"max-length": 2})
    assert api.delete(f"/api/policies/%2F/{prefix}").status_code == 204
    for i in range(5):
        ch.basic_publish("", q, b"%d" % i)
    assert count(ch, q) == 7  # no limit any more


def test_highest_priority_policy_wins(ch, policy):
    prefix = uniq("prio")
    q = f"{prefix}-q"
    policy(f"{prefix}-low", f"^{prefix}", {"max-length": 1}, priority=1)
    policy(f"{prefix}-high", f"^{prefix}", {"max-length": 3}, priority=5)
    ch.queue_declare(q, exclusive=True)
    for i in range(5):
        ch.basic_publish("", q, b"%d" % i)
    wait_for(lambda: count(ch, q) == 3, timeout=10)


def test_lower_of_argument_and_policy_wins_for_max_length(ch, policy):
    prefix = uniq("min")
    policy(prefix, f"^{prefix}", {"max-length": 4})
    q1, q2 = f"{prefix}-arg-lower", f"{prefix}-policy-lower"
    ch.queue_declare(q1, exclusive=True, arguments={"x-max-length": 2})
    ch.queue_declare(q2, exclusive=True, arguments={"x-max-length": 10})
    for i in range(6):
        ch.basic_publish("", q1, b"%d" % i)
        ch.basic_publish("", q2, b"%d" % i)
    wait_for(lambda: (count(ch, q1), count(ch, q2)) == (2, 4), timeout=10)


def test_policy_message_ttl_and_dead_lettering(ch, policy):
    prefix = uniq("dlx")
    q, dl = f"{prefix}-q", f"{prefix}-dead"
    ch.queue_declare(dl, exclusive=True)
    policy(prefix, f"^{prefix}-q$", {"message-ttl": 100, "dead-letter-exchange": "",
                                     "dead-letter-routing-key": dl})
    ch.queue_declare(q, exclusive=True)
    time.sleep(0.2)  # the policy reached the new queue
    ch.basic_publish("", q, b"short-lived")
    wait_for(lambda: count(ch, dl) == 1, timeout=10)
    _m, props, body = ch.basic_get(dl, auto_ack=True)
    assert body == b"short-lived"
    assert props.headers["x-death"][0]["reason"] == "expired"


def test_declared_overflow_wins_over_the_policy(ch, policy):
    prefix = uniq("ovf")
    q = f"{prefix}-q"
    policy(prefix, f"^{prefix}", {"max-length": 1, "overflow": "drop-head"})
    ch.queue_declare(q, exclusive=True, arguments={"x-overflow": "reject-publish"})
    time.sleep(0.2)
    ch.basic_publish("", q, b"first")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", q, b"second")
    _m, _p, body = ch.basic_get(q, auto_ack=True)
    assert body == b"first"


def test_apply_to_exchanges_alternate_exchange(api, ch, policy):
    prefix = uniq("ae")
    x, ae, q = f"{prefix}-x", f"{prefix}-ae", f"{prefix}-q"
    ch.exchange_declare(ae, "fanout", auto_delete=True)
    ch.queue_declare(q, exclusive=True)
    ch.queue_bind(q, ae)
    policy(prefix, f"^{prefix}-x$", {"alternate-exchange": ae}, apply_to="exchanges")
    ch.exchange_declare(x, "direct", auto_delete=False)
    try:
        time.sleep(0.2)
        ch.basic_publish(x, "nowhere", b"to the ae")
        wait_for(lambda: count(ch, q) == 1, timeout=10)
    finally:
        ch.exchange_delete(x)


@pytest.mark.parametrize("body", [
    {"pattern": "^x", "definition": {"no-such-key": 1}},
    {"pattern": "(", "definition": {"max-length": 1}},
    {"pattern": "^x", "definition": {"max-length": -1}},
    {"pattern": "^x", "definition": {"max-length": 1}, "apply-to": "bananas"},
    {"definition": {"max-length": 1}},
])
def test_invalid_policies_are_400(api, body):
    r = api.put(f"/api/policies/%2F/{uniq('bad')}", json=body)
    assert r.status_code == 400


def test_policies_survive_a_restart(tmp_path, ours_only):
    from broker.embedded import EmbeddedBroker
    from tests.ops.conftest import Api

    with EmbeddedBroker(data_dir=str(tmp_path), management_tcp_port=-1) as b:
        a = Api(b.api_url)
        assert a.put("/api/policies/%2F/keep", json={
            "pattern": "^kept", "definition": {"max-length": 1}}).status_code == 201
    with EmbeddedBroker(data_dir=str(tmp_path), management_tcp_port=-1) as b:
        a = Api(b.api_url)
        assert a.get("/api/policies/%2F/keep").json()["definition"] == {"max-length": 1}
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        c = conn.channel()
        c.confirm_delivery()
        c.queue_declare("kept-q", durable=True)
        for i in range(3):
            c.basic_publish("", "kept-q", b"%d" % i)
        assert c.queue_declare("kept-q", passive=True).method.message_count == 1
        conn.close()


def test_confirm_on_policy_selects_the_confirm_mode(api, broker, policy, ours_only):
    """The policy key confirm-on (ours, docs/architecture.md §6): under `ack` a publish to a queue
    without consumers is confirmed only once a consumer has acked it."""
    import threading

    prefix = uniq("con")
    q = f"{prefix}-q"
    policy(prefix, f"^{prefix}", {"confirm-on": "ack"})
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.queue_declare(q)
    ch.confirm_delivery()
    acked_at: list[float] = []

    def consume_later() -> None:
        time.sleep(0.5)
        c2 = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch2 = c2.channel()
        method, _p, _b = wait_for(lambda: (lambda g: g if g[0] else None)(ch2.basic_get(q)),
                                  timeout=10)
        acked_at.append(time.monotonic())
        ch2.basic_ack(method.delivery_tag)
        c2.close()

    t = threading.Thread(target=consume_later)
    t.start()
    ch.basic_publish("", q, b"confirmed after the ack")  # returns when the confirm arrives
    confirmed_at = time.monotonic()
    t.join(10)
    assert acked_at and confirmed_at >= acked_at[0]
    assert api.get(f"/api/queues/%2F/{q}").json()["effective_policy_definition"] == {
        "confirm-on": "ack"}
    ch.queue_delete(q)
    conn.close()


def test_a_policy_applies_to_a_predeclared_amq_exchange(api):
    """RabbitMQ 3.10.8 applies policies to amq.* exchanges like any other (rabbit-hole's
    federation spec federates amq.topic by a policy): the exchange shows it."""
    name = f"amqpol-{uuid.uuid4().hex[:8]}"
    assert api.put(f"/api/policies/%2F/{name}", json={
        "pattern": "^amq\\.direct$", "definition": {"alternate-exchange": "amq.fanout"},
        "apply-to": "exchanges", "priority": 99}).status_code == 201
    try:
        wait_for(lambda: api.get("/api/exchanges/%2F/amq.direct").json().get("policy") == name,
                 timeout=10)
    finally:
        api.delete(f"/api/policies/%2F/{name}")
