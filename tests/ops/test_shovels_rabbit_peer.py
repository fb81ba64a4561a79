"""This broker's dynamic shovels with RabbitMQ 3.10.8 at the other end (issue 21: "either end
may be this broker or any AMQP 0-9-1 broker"). Runs only with BROKER_TEST_URI set (the
RabbitMQ to use); an EmbeddedBroker of this broker, with its HTTP API, runs the shovels:
RabbitMQ's queue → here, here → RabbitMQ's queue, and RabbitMQ's amq.topic (with a binding
key) → here; messages arrive once, in order, with their properties.
(tests/ops/test_shovels.py, with BROKER_TEST_URI, covers RabbitMQ's shovels with this broker
at the other end.)"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pika
import pytest

from tests.ops.amqp_messages import connect, get_all
from tests.ops.conftest import EXTERNAL, Api
from tests.polling import wait_for

pytestmark = pytest.mark.skipif(not EXTERNAL, reason="needs a RabbitMQ: BROKER_TEST_URI")


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def ours() -> Iterator[object]:
    from broker.embedded import EmbeddedBroker

    b = EmbeddedBroker(node_name="shovels@localhost", management_tcp_port=-1).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def rabbit() -> str:
    return os.environ["BROKER_TEST_URI"]


_conn = connect


def _fill(url: str, queue: str, n: int) -> list[pika.BasicProperties]:
    props = [pika.BasicProperties(delivery_mode=2, message_id=f"m{i}", headers={"i": i})
             for i in range(n)]
    with _conn(url) as conn:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True)
        ch.confirm_delivery()
        for i in range(n):
            ch.basic_publish("", queue, b"%d" % i, props[i])
    return props


def _drain(url: str, queue: str, n: int, timeout: float = 20.0) -> list:
    """n messages from `queue` (acked), waiting for the queue too: [(properties, body)]."""
    return [(props, body) for _m, props, body in get_all(url, queue, n, timeout,
                                                            wait_for_queue=True)]


@pytest.mark.parametrize("direction", ["from-rabbitmq", "to-rabbitmq"])
def test_a_queue_is_shovelled_between_rabbitmq_and_this_broker(ours, rabbit, direction):
    api = Api(ours.api_url)
    src_url, dest_url = (rabbit, ours.url) if direction == "from-rabbitmq" else (ours.url,
                                                                                 rabbit)
    src, dest, name = uniq("sh-src"), uniq("sh-dest"), uniq("shovel")
    props = _fill(src_url, src, 200)
    r = api.put(f"/api/parameters/shovel/%2F/{name}", json={"value": {
        "src-uri": src_url, "src-queue": src, "dest-uri": dest_url, "dest-queue": dest,
        "src-prefetch-count": 50}})
    assert r.status_code == 201, r.text
    try:
        got = _drain(dest_url, dest, 200)
        assert [b for _p, b in got] == [b"%d" % i for i in range(200)]
        assert [(p.message_id, p.headers, p.delivery_mode) for p, _b in got] == [
            (p.message_id, p.headers, 2) for p in props]
    finally:
        api.delete(f"/api/parameters/shovel/%2F/{name}")
        wait_for(lambda: all(s["name"] != name for s in api.get("/api/shovels").json()))
        for url, q in ((src_url, src), (dest_url, dest)):
            with _conn(url) as conn:
                conn.channel().queue_delete(q)


def test_rabbitmq_exchange_to_this_broker(ours, rabbit):
    api = Api(ours.api_url)
    dest, name = uniq("sh-dest"), uniq("shovel")
    r = api.put(f"/api/parameters/shovel/%2F/{name}", json={"value": {
        "src-uri": rabbit, "src-exchange": "amq.topic", "src-exchange-key": "orders.#",
        "dest-uri": "amqp://", "dest-queue": dest, "dest-add-forward-headers": True}})
    assert r.status_code == 201, r.text
    try:
        wait_for(lambda: any(s["name"] == name and s["state"] == "running"
                             for s in api.get("/api/shovels").json()), timeout=20)
        with _conn(rabbit) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_publish("amq.topic", "orders.eu", b"o1")
            ch.basic_publish("amq.topic", "invoices.eu", b"not me")
        (props, body), = _drain(ours.url, dest, 1)
        assert body == b"o1"
        assert props.headers["x-shovelled"][0]["src-exchange"] == "amq.topic"
        assert _drain(ours.url, dest, 1, timeout=0.5) == []
    finally:
        api.delete(f"/api/parameters/shovel/%2F/{name}")
        with _conn(ours.url) as conn:
            conn.channel().queue_delete(dest)
