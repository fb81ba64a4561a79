"""Policies on a quorum queue (issue 34 item 2), as RabbitMQ 3.10.8 resolves them
(rabbit_quorum_queue:ra_machine_config/1, dead_letter_handler/2): the lower of argument and
policy for the limits, `delivery-limit` and `message-ttl`; the policy's for `overflow` and
`expires`; the argument's for dead-lettering; keys a quorum queue does not support
(`queue-mode`, `ha-mode`, ...) ignored, not refused. Also passes against RabbitMQ 3.10.8
(BROKER_TEST_URI / BROKER_TEST_API)."""

from __future__ import annotations

import time
import uuid

import pika
import pytest

from tests.polling import wait_for

QUORUM = {"x-queue-type": "quorum"}


@pytest.fixture
def policy(api):
    made: list[str] = []

    def put(pattern: str, definition: dict) -> None:
        name = f"qp-{uuid.uuid4().hex[:8]}"
        r = api.put(f"/api/policies/%2F/{name}", json={
            "pattern": pattern, "definition": definition, "apply-to": "queues"})
        assert r.status_code in (201, 204), r.text
        made.append(name)

    yield put
    for name in made:
        api.delete(f"/api/policies/%2F/{name}")


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _deliveries_until_gone(ch, q: str) -> int:
    """get + reject(requeue) until the queue has nothing: how many gets found the message."""
    n = 0
    while n < 10:
        method, _props, _body = ch.basic_get(q)
        if method is None:
            return n
        n += 1
        ch.basic_reject(method.delivery_tag, requeue=True)
    return n


@pytest.mark.parametrize("arguments, definition, when", [
    ({}, {"delivery-limit": 1}, "before"),
    ({}, {"delivery-limit": 1}, "after"),
    ({"x-delivery-limit": 5}, {"delivery-limit": 1}, "before"),
    ({"x-delivery-limit": 1}, {"delivery-limit": 5}, "before"),
    ({"x-delivery-limit": 5}, {"delivery-limit": 1}, "after"),
])
def test_the_lower_delivery_limit_wins(ch, policy, arguments, definition, when):
    q = _name("qp-dl")
    if when == "before":
        policy(f"^{q}$", definition)
    ch.queue_declare(q, durable=True, arguments={**QUORUM, **arguments})
    if when == "after":
        policy(f"^{q}$", definition)
        time.sleep(0.5)  # the policy reaches the queue
    ch.basic_publish("", q, b"poison")
    assert _deliveries_until_gone(ch, q) == 2  # limit 1: the second return drops it
    ch.queue_delete(q)


def test_the_lower_message_ttl_wins(ch, policy):
    low, high = _name("qp-ttl-low"), _name("qp-ttl-high")
    policy(f"^{low}$", {"message-ttl": 100})
    policy(f"^{high}$", {"message-ttl": 60000})
    ch.queue_declare(low, durable=True, arguments={**QUORUM, "x-message-ttl": 60000})
    ch.queue_declare(high, durable=True, arguments={**QUORUM, "x-message-ttl": 100})
    for q in (low, high):
        ch.basic_publish("", q, b"short-lived")
    time.sleep(0.6)
    for q in (low, high):
        assert ch.basic_get(q, auto_ack=True) == (None, None, None), q
        ch.queue_delete(q)


def test_the_overflow_policy_wins_over_the_argument(ch, policy):
    """A classic queue keeps its argument's drop-head (tests/ops/test_policies.py); a
    quorum queue takes the policy's reject-publish."""
    q = _name("qp-overflow")
    policy(f"^{q}$", {"overflow": "reject-publish"})
    ch.queue_declare(q, durable=True, arguments={
        **QUORUM, "x-overflow": "drop-head", "x-max-length": 1})
    ch.basic_publish("", q, b"a")
    ch.basic_publish("", q, b"b")  # takes it past the limit: accepted
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", q, b"c")
    assert ch.queue_declare(q, passive=True).method.message_count == 2
    ch.queue_delete(q)


@pytest.mark.timeout(60)
def test_the_expires_policy_wins_over_the_argument(api, ch, policy):
    kept, gone = _name("qp-exp-kept"), _name("qp-exp-gone")
    policy(f"^{kept}$", {"expires": 60000})
    policy(f"^{gone}$", {"expires": 1000})
    ch.queue_declare(kept, durable=True, arguments={**QUORUM, "x-expires": 1000})
    ch.queue_declare(gone, durable=True, arguments={**QUORUM, "x-expires": 60000})
    # RabbitMQ checks a quorum queue's expiry on its 5 s tick
    wait_for(lambda: api.get(f"/api/queues/%2F/{gone}").status_code == 404, timeout=20)
    assert api.get(f"/api/queues/%2F/{kept}").status_code == 200
    ch.queue_delete(kept)


def test_the_dead_letter_arguments_win_over_the_policy(ch, policy):
    q, by_arg, by_policy = _name("qp-dlx"), _name("qp-dlx-arg"), _name("qp-dlx-pol")
    for target in (by_arg, by_policy):
        ch.queue_declare(target, durable=True)
    policy(f"^{q}$", {"dead-letter-exchange": "", "dead-letter-routing-key": by_policy,
                      "delivery-limit": 0})
    ch.queue_declare(q, durable=True, arguments={
        **QUORUM, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": by_arg})
    ch.basic_publish("", q, b"dead")
    method, _p, _b = ch.basic_get(q)
    ch.basic_reject(method.delivery_tag, requeue=True)  # count 1 > 0
    got = wait_for(lambda: (lambda r: r if r[0] else None)(ch.basic_get(by_arg, auto_ack=True)))
    assert got[2] == b"dead"
    assert ch.queue_declare(by_policy, passive=True).method.message_count == 0
    for name in (q, by_arg, by_policy):
        ch.queue_delete(name)


@pytest.mark.parametrize("queue_type, unsupported", [
    ("quorum", {"queue-mode": "lazy"}), ("quorum", {"ha-mode": "all"}),
    ("classic", {"delivery-limit": 5}), ("classic", {"dead-letter-strategy": "at-most-once"}),
])
def test_a_policy_with_a_key_the_type_does_not_support_does_not_apply(
        api, ch, queue_type, unsupported):
    """rabbit_queue_type:is_policy_applicable/2: such a policy is skipped for the queue, even
    when it has the highest priority; a lower one that fits applies instead."""
    q = _name(f"qp-skip-{queue_type}")
    names = []
    for priority, definition in ((10, {"max-length": 1, **unsupported}),
                                 (0, {"max-length": 2})):
        name = _name("qp-skip")
        r = api.put(f"/api/policies/%2F/{name}", json={
            "pattern": f"^{q}$", "definition": definition, "priority": priority,
            "apply-to": "queues"})
        assert r.status_code in (201, 204), r.text
        names.append(name)
    try:
        ch.queue_declare(q, durable=True, arguments={"x-queue-type": queue_type})
        for body in (b"a", b"b", b"c"):
            ch.basic_publish("", q, body)
        wait_for(lambda: ch.queue_declare(q, passive=True).method.message_count == 2)
        time.sleep(0.3)
        assert ch.queue_declare(q, passive=True).method.message_count == 2
        shown = wait_for(lambda: (lambda j: j if j.get("policy") else None)(
            api.get(f"/api/queues/%2F/{q}").json()), timeout=15)
        assert shown["policy"] == names[1]
    finally:
        ch.queue_delete(q)
        for name in names:
            api.delete(f"/api/policies/%2F/{name}")


def test_policy_validation_of_the_quorum_keys(api):
    for definition, ok in (({"delivery-limit": 3}, True), ({"delivery-limit": -1}, False),
                           ({"dead-letter-strategy": "at-least-once"}, True),
                           ({"dead-letter-strategy": "sometimes"}, False),
                           ({"max-in-memory-length": 10}, True)):
        name = _name("qp-valid")
        r = api.put(f"/api/policies/%2F/{name}", json={
            "pattern": "^nothing-matches$", "definition": definition, "apply-to": "queues"})
        assert (r.status_code in (201, 204)) == ok, (definition, r.status_code, r.text)
        api.delete(f"/api/policies/%2F/{name}")
