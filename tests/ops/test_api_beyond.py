"""What the API offers beyond RabbitMQ's (users of RabbitMQ and LavinMQ keep asking for
it): browse a queue without consuming or setting `redelivered`, list a queue's unacked
deliveries with their consumer and age, move messages to another queue."""

from __future__ import annotations

import time
import uuid

import pika
import pytest

from tests.polling import wait_for

pytestmark = pytest.mark.usefixtures("ours_only")


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_browse_leaves_messages_in_place(api, ch):
    q = uniq("browse")
    ch.queue_declare(q, exclusive=True)
    for i in range(10):
        ch.basic_publish("", q, b"m%d" % i)
    r = api.get(f"/api/queues/%2F/{q}/messages", params={"offset": 3, "count": 4})
    assert r.status_code == 200
    got = r.json()
    assert [m["payload"] for m in got] == ["m3", "m4", "m5", "m6"]
    assert [m["position"] for m in got] == [3, 4, 5, 6]
    assert not any(m["redelivered"] for m in got)
    assert ch.queue_declare(q, passive=True).method.message_count == 10
    method, _p, body = ch.basic_get(q, auto_ack=True)
    assert body == b"m0" and method.redelivered is False
    assert api.get(f"/api/queues/%2F/{q}/messages", params={"count": -1}).status_code == 400


def test_browse_a_paged_out_lazy_queue(api, ch):
    q = uniq("lazy")
    ch.queue_declare(q, exclusive=True, arguments={"x-queue-mode": "lazy"})
    for i in range(50):
        ch.basic_publish("", q, b"m%d" % i, pika.BasicProperties(delivery_mode=2))
    got = api.get(f"/api/queues/%2F/{q}/messages", params={"offset": 45, "count": 10}).json()
    assert [m["payload"] for m in got] == [f"m{i}" for i in range(45, 50)]


def test_browse_a_priority_queue_in_delivery_order(api, ch):
    q = uniq("pq")
    ch.queue_declare(q, exclusive=True, arguments={"x-max-priority": 5})
    for p in (1, 5, 3):
        ch.basic_publish("", q, b"p%d" % p, pika.BasicProperties(priority=p))
    got = api.get(f"/api/queues/%2F/{q}/messages").json()
    assert [m["payload"] for m in got] == ["p5", "p3", "p1"]


def test_unacked_deliveries_with_consumer_and_age(api, ch):
    q = uniq("unacked")
    ch.queue_declare(q, exclusive=True)
    for i in range(3):
        ch.basic_publish("", q, b"m%d" % i)
    ch.basic_qos(prefetch_count=2)
    ch.basic_consume(q, lambda *a: None, consumer_tag="slow-consumer")
    wait_for(lambda: (ch.connection.process_data_events(0.05),
                      len(api.get(f"/api/queues/%2F/{q}/unacked").json()) == 2)[1])
    time.sleep(0.3)
    rows = api.get(f"/api/queues/%2F/{q}/unacked").json()
    assert [r["consumer_tag"] for r in rows] == ["slow-consumer"] * 2
    assert all(r["age_ms"] >= 250 for r in rows)
    assert sorted(r["delivery_tag"] for r in rows) == [1, 2]
    assert rows[0]["channel_details"]["number"] == 1


def test_move_messages_to_another_queue(api, ch):
    src, dst = uniq("dlq"), uniq("replay")
    ch.queue_declare(src)  # moving consumes: not from another connection's exclusive queue
    ch.queue_declare(dst, exclusive=True)
    for i in range(5):
        ch.basic_publish("", src, b"m%d" % i, pika.BasicProperties(headers={"n": i}))
    r = api.post(f"/api/queues/%2F/{src}/move", json={"destination": dst, "count": 3})
    assert r.json() == {"moved": 3}
    assert ch.queue_declare(src, passive=True).method.message_count == 2
    got = []
    while True:
        method, props, body = ch.basic_get(dst, auto_ack=True)
        if method is None:
            break
        got.append((body, props.headers["n"]))
    assert got == [(b"m0", 0), (b"m1", 1), (b"m2", 2)]
    assert api.post(f"/api/queues/%2F/{src}/move", json={"destination": dst}
                    ).json() == {"moved": 2}
    assert api.post(f"/api/queues/%2F/{src}/move", json={"destination": "nope"}
                    ).status_code == 400
    ch.queue_delete(src)


def test_oldest_message_age_in_json_and_metrics(api, ch, metrics_url):
    import requests

    q = uniq("lag")
    ch.queue_declare(q, exclusive=True)
    assert api.get(f"/api/queues/%2F/{q}").json()["oldest_message_age"] is None
    ch.basic_publish("", q, b"waiting")
    time.sleep(0.3)
    ch.basic_publish("", q, b"newer")
    # with --workers N a queue on another worker's figures come with its next report
    age = wait_for(lambda: api.get(f"/api/queues/%2F/{q}").json()["oldest_message_age"],
                   timeout=10)
    assert 0.25 <= age < 30
    text = requests.get(metrics_url + "/metrics/per-object", timeout=10).text
    line = next(s for s in text.splitlines()
                if s.startswith("rabbitmq_queue_oldest_message_age_seconds{")
                and f'queue="{q}"' in s)
    assert float(line.rsplit(" ", 1)[1]) >= 0.25
    ch.basic_get(q, auto_ack=True)  # the head goes: the age is the newer message's
    assert wait_for(lambda: (lambda a: a is not None and a < age or None)(
        api.get(f"/api/queues/%2F/{q}").json()["oldest_message_age"]), timeout=10)


def test_oldest_message_age_from_the_timestamp_after_paging(api, ch):
    """A lazy queue keeps nothing in RAM: the age comes from the timestamp property."""
    q = uniq("lazylag")
    ch.queue_declare(q, exclusive=True, arguments={"x-queue-mode": "lazy"})
    stamp = int(time.time()) - 60
    ch.basic_publish("", q, b"old", pika.BasicProperties(
        delivery_mode=2, timestamp=stamp))
    age = api.get(f"/api/queues/%2F/{q}").json()["oldest_message_age"]
    assert 59 <= age < 120
