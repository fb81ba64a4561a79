"""Delivery counting on a quorum queue (issue 34 item 4), as RabbitMQ 3.10.8's rabbit_fifo:
every return (reject or nack with requeue, the consumer's channel closing with the message
unacked) raises the message's delivery count; basic.get shows `x-delivery-count` from the
first get, a consumer only after a return; past `x-delivery-limit` the message is
dead-lettered with reason `delivery_limit`, or dropped without a dead-letter exchange. Each
test passes here and against RabbitMQ 3.10.8 (BROKER_TEST_URI); the restart tests need the
embedded broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pika
import pytest

from tests.integration.client_proc import start_client, stop_client
from tests.polling import wait_for


def quorum(**more):
    return {"x-queue-type": "quorum", **more}


def count_of(props):
    return (props.headers or {}).get("x-delivery-count")


def test_basic_get_counts_from_zero_and_the_limit_drops_without_a_dlx(connect, unique):
    """Observed on 3.10.8 with x-delivery-limit 2: gets 0 (not redelivered), 1, 2; the
    third reject drops the message."""
    ch = connect().channel()
    q = unique("qq-get")
    ch.queue_declare(q, durable=True, arguments=quorum(**{"x-delivery-limit": 2}))
    ch.confirm_delivery()
    ch.basic_publish("", q, b"poison")
    seen = []
    for _ in range(3):
        method, props, _body = ch.basic_get(q)
        seen.append((method.redelivered, count_of(props)))
        ch.basic_reject(method.delivery_tag, requeue=True)
    assert seen == [(False, 0), (True, 1), (True, 2)]
    assert ch.basic_get(q) == (None, None, None)
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    ch.queue_delete(q)


def _consume_and_reject(ch, q, times):
    """Deliveries to a consumer that rejects each with requeue: [(redelivered, count)]."""
    seen = []

    def on_message(chan, method, props, _body):
        seen.append((method.redelivered, count_of(props)))
        chan.basic_reject(method.delivery_tag, requeue=True)

    tag = ch.basic_consume(q, on_message)
    deadline = time.monotonic() + 10
    while len(seen) < times and time.monotonic() < deadline:
        ch.connection.process_data_events(time_limit=0.1)
    ch.connection.process_data_events(time_limit=0.3)  # nothing more comes
    ch.basic_cancel(tag)
    return seen


def _limited_with_dlq(ch, unique, prefix, limit):
    """A quorum queue with x-delivery-limit `limit` dead-lettering into a queue of its own;
    (queue, dead-letter queue), the channel in confirm mode."""
    q, dead = unique(prefix), unique(f"{prefix}-dead")
    ch.queue_declare(dead, durable=True)
    ch.queue_declare(q, durable=True, arguments=quorum(**{
        "x-delivery-limit": limit, "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": dead}))
    ch.confirm_delivery()
    return q, dead


def test_a_poison_message_is_dead_lettered_with_reason_delivery_limit(connect, unique):
    ch = connect().channel()
    q, dead = _limited_with_dlq(ch, unique, "qq-poison", 2)
    ch.basic_publish("", q, b"poison", pika.BasicProperties(headers={"app": "x"}))
    assert _consume_and_reject(ch, q, 3) == [(False, None), (True, 1), (True, 2)]
    got = wait_for(lambda: (lambda r: r if r[0] else None)(ch.basic_get(dead, auto_ack=True)))
    _method, props, body = got
    assert body == b"poison"
    headers = props.headers
    assert "x-delivery-count" not in headers and headers["app"] == "x"
    (death,) = headers["x-death"]
    assert (death["reason"], death["count"], death["queue"]) == ("delivery_limit", 1, q)
    assert headers["x-first-death-reason"] == "delivery_limit"
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    ch.queue_delete(q)
    ch.queue_delete(dead)


def test_nack_with_requeue_counts_each_message(connect, unique):
    ch = connect().channel()
    q = unique("qq-nack")
    ch.queue_declare(q, durable=True, arguments=quorum())
    ch.confirm_delivery()
    for body in (b"a", b"b"):
        ch.basic_publish("", q, body)
    ch.basic_qos(prefetch_count=2)
    got = []
    tag = ch.basic_consume(q, lambda c, m, p, b: got.append(m.delivery_tag))
    wait_for(lambda: len(got) == 2 or ch.connection.process_data_events(time_limit=0.05))
    ch.basic_cancel(tag)
    ch.basic_nack(got[-1], multiple=True, requeue=True)
    counts = []
    for _ in range(2):
        method, props, body = ch.basic_get(q)
        counts.append((body, method.redelivered, count_of(props)))
        ch.basic_ack(method.delivery_tag)
    assert sorted(counts) == [(b"a", True, 1), (b"b", True, 1)]
    ch.queue_delete(q)


def test_a_closed_channel_returns_what_it_held_with_the_count_raised(connect, unique):
    conn = connect()
    ch = conn.channel()
    q = unique("qq-close")
    ch.queue_declare(q, durable=True, arguments=quorum())
    ch.confirm_delivery()
    ch.basic_publish("", q, b"held")
    holder = conn.channel()
    method, props, _ = holder.basic_get(q)
    assert count_of(props) == 0
    holder.close()  # unacked: returned
    method, props, _ = wait_for(lambda: (lambda r: r if r[0] else None)(ch.basic_get(q)))
    assert (method.redelivered, count_of(props)) == (True, 1)
    ch.basic_ack(method.delivery_tag)
    ch.queue_delete(q)


def test_a_cancelled_consumer_keeps_its_messages_until_it_settles(connect, unique):
    """rabbit_fifo 3.10: basic.cancel does not return what the consumer holds; its ack
    still settles it, a later reject returns it (count 1)."""
    ch = connect().channel()
    q = unique("qq-cancel")
    ch.queue_declare(q, durable=True, arguments=quorum())
    ch.confirm_delivery()
    for body in (b"a", b"b"):
        ch.basic_publish("", q, body)
    ch.basic_qos(prefetch_count=2)
    got = []
    tag = ch.basic_consume(q, lambda c, m, p, b: got.append((m.delivery_tag, b)))
    wait_for(lambda: len(got) == 2 or ch.connection.process_data_events(time_limit=0.05))
    ch.basic_cancel(tag)
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    ch.basic_ack(got[0][0])
    ch.basic_reject(got[1][0], requeue=True)
    method, props, body = wait_for(lambda: (lambda r: r if r[0] else None)(ch.basic_get(q)))
    assert (body, count_of(props)) == (b"b", 1)
    ch.basic_ack(method.delivery_tag)
    assert ch.basic_get(q) == (None, None, None)
    ch.queue_delete(q)


def test_a_delivery_limit_of_zero_dead_letters_at_the_first_return(connect, unique):
    ch = connect().channel()
    q, dead = _limited_with_dlq(ch, unique, "qq-zero", 0)
    ch.basic_publish("", q, b"once")
    method, props, _ = ch.basic_get(q)
    assert count_of(props) == 0
    ch.basic_reject(method.delivery_tag, requeue=True)
    _m, props, body = wait_for(lambda: (lambda r: r if r[0] else None)(
        ch.basic_get(dead, auto_ack=True)))
    assert body == b"once" and props.headers["x-death"][0]["reason"] == "delivery_limit"
    ch.queue_delete(q)
    ch.queue_delete(dead)


def test_a_classic_queue_has_no_delivery_count(connect, unique):
    ch = connect().channel()
    q = unique("cq-count")
    ch.queue_declare(q, durable=True)
    ch.basic_publish("", q, b"x")
    for _ in range(3):
        method, props, _ = wait_for(lambda: (lambda r: r if r[0] else None)(ch.basic_get(q)))
        assert count_of(props) is None
        ch.basic_reject(method.delivery_tag, requeue=True)
    ch.queue_delete(q)


# -- restarts (the embedded broker's own data directory) ---------------------------------------
def _get(url, q, ack=True):
    with pika.BlockingConnection(pika.URLParameters(url)) as conn:
        ch = conn.channel()
        method, props, body = ch.basic_get(q)
        if ack:
            ch.basic_ack(method.delivery_tag)
        else:
            ch.basic_reject(method.delivery_tag, requeue=True)
        return body, method.redelivered, count_of(props)


def test_counts_survive_a_clean_restart(tmp_path, embedded_only):
    """Observed on 3.10.8 (rabbitmqctl stop_app / start_app): a message returned once and
    held unacked at the stop comes back with 2, one held but never returned with 1."""
    from broker.embedded import EmbeddedBroker

    b = EmbeddedBroker(data_dir=str(tmp_path)).start()
    try:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        ch.queue_declare("qq", durable=True, arguments=quorum(**{"x-delivery-limit": 5}))
        ch.confirm_delivery()
        for body in (b"a", b"b", b"c"):
            ch.basic_publish("", "qq", body)
        method, _p, _b = ch.basic_get("qq")
        ch.basic_reject(method.delivery_tag, requeue=True)  # a: 1
        held = [ch.basic_get("qq") for _ in range(2)]  # a (1), b (0): held at the stop
        assert [(b, count_of(p)) for _m, p, b in held] == [(b"a", 1), (b"b", 0)]
    finally:
        b.stop()
    _closed_by_broker(conn)
    b = EmbeddedBroker(data_dir=str(tmp_path)).start()
    try:
        got = [_get(b.url, "qq") for _ in range(3)]
        assert got == [(b"a", True, 2), (b"b", True, 1), (b"c", False, 0)]
    finally:
        b.stop()


@pytest.mark.timeout(120)
def test_counts_survive_kill_9(tmp_path, embedded_only):
    """A broker killed with -9: returned counts are kept, held messages count one more, and
    a message past its limit after that is dead-lettered, not delivered."""
    port = _free_port()
    data = tmp_path / "data"
    cmd = [sys.executable, "-m", "broker", "--port", str(port), "--data-dir", str(data),
           "--set", "management.tcp.port=0", "--set", "prometheus.tcp.port=0"]
    url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _listening(port), timeout=30)
        client, held = start_client("""
            import json, pika
            conn = pika.BlockingConnection(pika.URLParameters(URL))
            ch = conn.channel()
            ch.queue_declare("dead", durable=True)
            ch.queue_declare("qq", durable=True, arguments={
                "x-queue-type": "quorum", "x-delivery-limit": 2,
                "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
            ch.confirm_delivery()
            for body in (b"a", b"b"):
                ch.basic_publish("", "qq", body)
            for _ in range(2):  # a: 2 returns
                method, _p, _b = ch.basic_get("qq")
                ch.basic_reject(method.delivery_tag, requeue=True)
            held = [ch.basic_get("qq") for _ in range(2)]  # a (2), b (0), held
            print(json.dumps([[b.decode(), (p.headers or {}).get("x-delivery-count")]
                              for _m, p, b in held]), flush=True)
            input()  # hold them until killed
            """, url)
        assert held == [["a", 2], ["b", 0]]
        time.sleep(0.5)  # the index's 200 ms sync has the deliveries
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        stop_client(client)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        conn = wait_for(lambda: _try_connect(url), timeout=30)
        ch = conn.channel()
        method, props, body = ch.basic_get("qq")
        assert (body, method.redelivered, count_of(props)) == (b"b", True, 1)
        ch.basic_ack(method.delivery_tag)
        assert ch.basic_get("qq") == (None, None, None)  # a: 3 > 2, dead-lettered
        _m, props, body = ch.basic_get("dead", auto_ack=True)
        assert body == b"a" and props.headers["x-death"][0]["reason"] == "delivery_limit"
        conn.close()
    finally:
        proc.kill()
        proc.wait(10)


def _closed_by_broker(conn):
    """Read the connection.close a stopped broker sent (pika then closes its sockets)."""
    try:
        conn.process_data_events(time_limit=1)
    except pika.exceptions.AMQPError:
        pass
    assert conn.is_closed


def _listening(port):
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _try_connect(url):
    import socket

    params = pika.URLParameters(url)
    try:  # a plain connect first: pika logs every refused attempt as an error
        socket.create_connection((params.host, params.port), timeout=1).close()
    except OSError:
        return None
    return pika.BlockingConnection(params)


# -- consumers (issue 34 item 6) ------------------------------------------------------------
def _drain(conn, until, seconds=10):
    deadline = time.monotonic() + seconds
    while not until() and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)


def test_consumer_priorities_on_a_quorum_queue(connect, unique):
    """The higher x-priority consumer gets every message while it has capacity."""
    conn = connect()
    ch = conn.channel()
    q = unique("qq-prio")
    ch.queue_declare(q, durable=True, arguments=quorum())
    got: dict[str, list[bytes]] = {"low": [], "high": []}
    ch.basic_consume(q, lambda c, m, p, b: (got["low"].append(b), c.basic_ack(m.delivery_tag)),
                     arguments={"x-priority": 1})
    ch.basic_consume(q, lambda c, m, p, b: (got["high"].append(b), c.basic_ack(m.delivery_tag)),
                     arguments={"x-priority": 10})
    pub = conn.channel()
    pub.confirm_delivery()
    for i in range(20):
        pub.basic_publish("", q, str(i).encode())
    _drain(conn, lambda: len(got["high"]) + len(got["low"]) == 20)
    assert len(got["high"]) == 20 and got["low"] == []
    ch.queue_delete(q)


def test_single_active_consumer_on_a_quorum_queue(connect, unique):
    """Only the first consumer gets messages; when it is cancelled the next one takes over,
    and what the first held unacked is delivered to it with the count raised."""
    conn = connect()
    first, second = conn.channel(), conn.channel()
    q = unique("qq-sac")
    first.queue_declare(q, durable=True, arguments=quorum(**{"x-single-active-consumer": True}))
    got: dict[str, list] = {"first": [], "second": []}
    first.basic_qos(prefetch_count=1)
    first.basic_consume(q, lambda c, m, p, b: got["first"].append((m.delivery_tag, b)))
    second.basic_consume(q, lambda c, m, p, b: (got["second"].append((b, count_of(p))),
                                               c.basic_ack(m.delivery_tag)))
    pub = conn.channel()
    pub.confirm_delivery()
    for body in (b"a", b"b", b"c"):
        pub.basic_publish("", q, body)
    _drain(conn, lambda: len(got["first"]) == 1)
    time.sleep(0.2)
    conn.process_data_events(time_limit=0.1)
    assert [b for _t, b in got["first"]] == [b"a"] and got["second"] == []
    first.close()  # a (unacked) is returned: count 1
    _drain(conn, lambda: len(got["second"]) == 3)
    assert sorted(got["second"]) == [(b"a", 1), (b"b", None), (b"c", None)]
    pub.queue_delete(q)


def test_basic_get_with_auto_ack_takes_the_message(connect, unique):
    ch = connect().channel()
    q = unique("qq-autoack")
    ch.queue_declare(q, durable=True, arguments=quorum())
    ch.confirm_delivery()
    ch.basic_publish("", q, b"once")
    method, props, body = ch.basic_get(q, auto_ack=True)
    assert (body, method.redelivered, count_of(props), method.message_count) == (
        b"once", False, 0, 0)
    assert ch.basic_get(q) == (None, None, None)
    ch.queue_delete(q)


def test_a_quorum_queue_stored_by_an_earlier_version_is_converted(tmp_path, embedded_only):
    """Version 0.2.0 kept a quorum queue as a classic durable queue and wrote no delivery
    counts (issue 34 item 7). Its queue directory without the counts file comes back as a
    quorum queue: a message it had delivered and not settled counts one return (it was
    delivered before), the others none, and x-delivery-limit applies from then on."""
    import glob

    from broker.embedded import EmbeddedBroker

    b = EmbeddedBroker(data_dir=str(tmp_path)).start()
    try:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        ch.queue_declare("old-qq", durable=True, arguments=quorum(**{"x-delivery-limit": 1}))
        ch.confirm_delivery()
        for body in (b"delivered", b"ready"):
            ch.basic_publish("", "old-qq", body)
        ch.basic_get("old-qq")  # held at the stop
    finally:
        b.stop()
    _closed_by_broker(conn)
    counts = glob.glob(str(tmp_path / "**" / "delivery_counts"), recursive=True)
    assert len(counts) == 1
    os.remove(counts[0])  # as 0.2.0 left it
    b = EmbeddedBroker(data_dir=str(tmp_path)).start()
    try:
        with pika.BlockingConnection(pika.URLParameters(b.url)) as conn:
            ch = conn.channel()
            method, props, body = ch.basic_get("old-qq")
            assert (body, method.redelivered, count_of(props)) == (b"delivered", True, 1)
            ch.basic_reject(method.delivery_tag, requeue=True)  # 2 > 1: dropped
            method, props, body = ch.basic_get("old-qq", auto_ack=True)
            assert (body, count_of(props)) == (b"ready", 0)
            assert ch.basic_get("old-qq") == (None, None, None)
    finally:
        b.stop()
