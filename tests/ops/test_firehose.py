"""The firehose tracer (rabbitmq.com/firehose.html, rabbit_trace.erl): every vhost's
`amq.rabbitmq.trace` exchange, tracing turned on and off over the HTTP API and with
brokerctl trace_on / trace_off, and the trace copies of publishes and deliveries, read
byte for byte (each field's AMQP type tag checked). Each test works in a vhost of its own, so
traffic elsewhere never reaches its trace queue. Passes against RabbitMQ 3.10.8 with the
management plugin (BROKER_TEST_URI / BROKER_TEST_API), except the restart test (ours only).
"""

from __future__ import annotations

import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from pamqp import commands

from broker.embedded import EmbeddedBroker
from tests.integration.rawamqp import RawClient
from tests.ops.conftest import EXTERNAL, Api
from tests.polling import wait_for
from tests.typed_tables import longstrs, plain, typed_table

TRACE = "amq.rabbitmq.trace"


def encoded_headers(headers: dict) -> list[tuple[str, str, Any]]:
    """`headers` as pika encodes them, read back typed."""
    pieces: list[bytes] = []
    pika.data.encode_table(pieces, headers)
    return typed_table(b"".join(pieces)[4:])


# -- fixtures ---------------------------------------------------------------------------------
@pytest.fixture
def vhost(api: Api) -> Iterator[str]:
    """A fresh vhost (its creator, guest, gets full permissions) with tracing off; tracing
    is turned off and the vhost deleted afterwards."""
    name = f"firehose-{uuid.uuid4().hex[:8]}"
    assert api.put(f"/api/vhosts/{api.q(name)}", json={}).status_code == 201
    yield name
    api.put(f"/api/vhosts/{api.q(name)}", json={"tracing": False})
    api.delete(f"/api/vhosts/{api.q(name)}")


@pytest.fixture
def connect(broker, vhost: str) -> Iterator[Any]:
    """connect() -> a pika BlockingConnection to the test's vhost (closed afterwards)."""
    opened: list[pika.BlockingConnection] = []

    def make() -> pika.BlockingConnection:
        conn = pika.BlockingConnection(pika.ConnectionParameters(
            broker.host, broker.port, vhost, pika.PlainCredentials("guest", "guest")))
        opened.append(conn)
        return conn
    yield make
    for conn in opened:
        if conn.is_open:
            conn.close()


@pytest.fixture
def raw(broker, vhost: str) -> Iterator[RawClient]:
    """A raw client on the test's vhost, channel 1 open, to read trace copies byte for byte."""
    client = RawClient(broker.host, broker.port)
    client.handshake(vhost=vhost)
    client.open_channel(1)
    yield client
    client.close_socket()


@pytest.fixture
def ctl(api_base):
    def run(*args: str) -> list[str]:
        proc = subprocess.run([sys.executable, "-m", "broker.ctl", "--api", api_base, *args],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.splitlines()
    return run


def set_tracing(api: Api, vhost: str, on: bool) -> None:
    assert api.put(f"/api/vhosts/{api.q(vhost)}", json={"tracing": on}).status_code == 204


def trace_queue(ch: Any) -> str:
    """A queue bound to amq.rabbitmq.trace with "#" (it outlives the pika connection, so the
    raw client can read it; it goes with the vhost)."""
    q = f"trace-{uuid.uuid4().hex[:6]}"
    ch.queue_declare(q)
    ch.queue_bind(q, TRACE, "#")
    return q


def get_copy(raw: RawClient, q: str) -> tuple[str, bytes, bytes] | None:
    """One basic.get (no-ack) on `q`: (routing key, raw properties, body), or None when it
    is empty."""
    raw.send(commands.Basic.Get(queue=q, no_ack=True), 1)
    reply = raw.read_method_bytes()
    if isinstance(reply, commands.Basic.GetEmpty):
        return None
    assert isinstance(reply, commands.Basic.GetOk), reply
    props, body = raw.read_content_bytes()
    return reply.routing_key, props, body


def read_copies(raw: RawClient, q: str, n: int) -> list[tuple[str, list, bytes]]:
    """The next `n` trace copies in `q`: (routing key, typed headers, body); checks that a
    copy's properties are its headers alone and that nothing more is in `q` afterwards."""
    out = []
    for _ in range(n):
        got = wait_for(lambda: get_copy(raw, q), timeout=10)
        assert isinstance(got, tuple)
        routing_key, props, body = got
        assert props[:2] == b"\x20\x00", props[:2]  # the headers flag alone
        (size,) = struct.unpack_from(">I", props, 2)
        assert len(props) == 6 + size
        out.append((routing_key, typed_table(props[6:]), body))
    assert get_copy(raw, q) is None  # nothing more (no copies of copies)
    return out


def node_name(api: Api) -> bytes:
    return api.get("/api/overview").json()["node"].encode()


def connection_name(api: Api, headers: list) -> bytes:
    """The `connection` header, checked to be a name /api/connections lists."""
    name = dict((k, v) for k, _t, v in headers)["connection"]
    wait_for(lambda: name.decode() in {c["name"] for c in api.get("/api/connections").json()},
             timeout=15)
    return name


# -- the exchange -----------------------------------------------------------------------------
def test_every_vhost_has_the_internal_trace_exchange(api, vhost, connect):
    x = api.get(f"/api/exchanges/{api.q(vhost)}/{TRACE}").json()
    assert (x["type"], x["durable"], x["auto_delete"], x["internal"], x["arguments"]) == (
        "topic", True, False, True, {})
    assert TRACE in {e["name"] for e in api.get("/api/exchanges").json()
                     if e["vhost"] == vhost}
    ch = connect().channel()
    ch.exchange_declare(TRACE, passive=True)
    ch.exchange_declare(TRACE, "topic", durable=True, internal=True)  # equivalent
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        ch.exchange_delete(TRACE)
    assert (refused.value.reply_code, refused.value.reply_text) == (
        403, f"ACCESS_REFUSED - deletion of system exchange '{TRACE}' in vhost '{vhost}' "
             "not allowed")
    ch = connect().channel()
    q = trace_queue(ch)
    ch.basic_publish(TRACE, "publish.x", b"nope")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        ch.queue_declare(q, passive=True)
    assert (closed.value.reply_code, closed.value.reply_text) == (
        403, f"ACCESS_REFUSED - cannot publish to internal exchange '{TRACE}' in vhost "
             f"'{vhost}'")


def test_definitions_leave_the_trace_exchange_out_but_keep_bindings_from_it(
        api, vhost, connect):
    ch = connect().channel()
    q = trace_queue(ch)
    d = api.get(f"/api/definitions/{api.q(vhost)}").json()
    assert all(x["name"] != TRACE for x in d["exchanges"])
    assert {"source": TRACE, "destination": q, "destination_type": "queue",
            "routing_key": "#", "arguments": {}} in d["bindings"]
    # importing it back (the exchange named too, internal or not) changes nothing
    d["exchanges"].append({"name": TRACE, "type": "topic", "durable": True,
                           "auto_delete": False, "internal": False, "arguments": {}})
    assert api.post(f"/api/definitions/{api.q(vhost)}", json=d).status_code in (201, 204)
    assert api.get(f"/api/exchanges/{api.q(vhost)}/{TRACE}").json()["internal"] is True


# -- tracing on and off -----------------------------------------------------------------------
def test_api_tracing_flag_and_trace_copies(api, vhost, connect, raw):
    ch = connect().channel()
    q = trace_queue(ch)
    ch.queue_declare("q1")
    ch.exchange_declare("x", "direct")
    for queue, key in (("q2", "k"), ("q3", "k3")):
        ch.queue_declare(queue)
        ch.queue_bind(queue, "x", key)
    assert api.get(f"/api/vhosts/{api.q(vhost)}").json()["tracing"] is False
    set_tracing(api, vhost, True)
    assert api.get(f"/api/vhosts/{api.q(vhost)}").json()["tracing"] is True
    assert {v["name"]: v["tracing"] for v in api.get("/api/vhosts").json()}[vhost] is True

    headers = {"h": "v", "n": 5, "big": 2**40, "yes": True, "nested": {"a": 1},
               "list": [1, "x"]}
    ch.basic_publish("", "q1", b"one", pika.BasicProperties(
        content_type="text/plain", content_encoding="utf-8", headers=headers,
        delivery_mode=2, priority=3, correlation_id="c1", reply_to="r1", expiration="60000",
        message_id="m1", timestamp=1700000000, type="t1", user_id="guest", app_id="a1",
        cluster_id="cl1"))
    ch.basic_publish("x", "k", b"two", pika.BasicProperties(
        headers={"CC": ["k2"], "BCC": ["k3"]}))
    ch.basic_publish("x", "nowhere", b"three")
    method, _props, body = ch.basic_get("q1")
    assert body == b"one"
    ch.basic_nack(method.delivery_tag, requeue=True)
    got: list[bytes] = []
    ch.basic_consume("q1", lambda c, m, p, b: (got.append(b), c.basic_ack(m.delivery_tag)))
    wait_for(lambda: ch.connection.process_data_events(0) or got, timeout=10)
    ch.basic_get("q2", auto_ack=True)

    copies = read_copies(raw, q, 6)
    node = node_name(api)
    conn = connection_name(api, copies[0][1])
    who = [("vhost", "S", vhost.encode()), ("connection", "S", conn), ("channel", "I", 1),
           ("user", "S", b"guest")]
    full = [("cluster_id", "S", b"cl1"), ("app_id", "S", b"a1"), ("user_id", "S", b"guest"),
            ("type", "S", b"t1"), ("timestamp", "I", 1700000000),
            ("message_id", "S", b"m1"), ("expiration", "S", b"60000"),
            ("reply_to", "S", b"r1"), ("correlation_id", "S", b"c1"), ("priority", "I", 3),
            ("delivery_mode", "I", 2), ("headers", "F", encoded_headers(headers)),
            ("content_encoding", "S", b"utf-8"), ("content_type", "S", b"text/plain")]
    one = [("exchange_name", "S", b""), ("routing_keys", "A", longstrs("q1")),
           ("properties", "F", full), ("node", "S", node)]
    three = [("exchange_name", "S", b"x"), ("routing_keys", "A", longstrs("nowhere")),
             ("properties", "F", []), ("node", "S", node)]
    assert copies[0] == ("publish.", one + who + [
        ("routed_queues", "A", longstrs("q1"))], b"one")
    rk, two, body = copies[1]
    assert (rk, body) == ("publish.x", b"two")
    # the CC header as the client encoded it, BCC gone, both among the routing keys
    assert plain(two) == {
        "exchange_name": "x", "routing_keys": ["k", "k2", "k3"],
        "properties": {"headers": {"CC": ["k2"]}}, "node": node.decode(),
        "vhost": vhost, "connection": conn.decode(), "channel": 1, "user": "guest",
        "routed_queues": ["q2", "q3"]}
    assert [(k, t) for k, t, _v in two] == [
        ("exchange_name", "S"), ("routing_keys", "A"), ("properties", "F"), ("node", "S"),
        ("vhost", "S"), ("connection", "S"), ("channel", "I"), ("user", "S"),
        ("routed_queues", "A")]
    assert copies[2] == ("publish.x", three + who + [("routed_queues", "A", [])], b"three")
    assert copies[3] == ("deliver.q1", one + [("redelivered", "I", 0)] + who, b"one")
    assert copies[4] == ("deliver.q1", one + [("redelivered", "I", 1)] + who, b"one")
    rk, two_out, body = copies[5]
    assert (rk, body) == ("deliver.q2", b"two")
    assert plain(two_out) == {**{k: v for k, v in plain(two).items() if k != "routed_queues"},
                              "redelivered": 0}

    set_tracing(api, vhost, False)
    assert api.get(f"/api/vhosts/{api.q(vhost)}").json()["tracing"] is False
    ch.queue_declare("q4")
    ch.basic_publish("", "q4", b"untraced")
    assert ch.basic_get("q4", auto_ack=True)[2] == b"untraced"
    assert get_copy(raw, q) is None


def test_brokerctl_trace_on_and_off(api, vhost, connect, raw, ctl):
    ch = connect().channel()
    q = trace_queue(ch)
    ch.confirm_delivery()
    assert ctl("-p", vhost, "trace_on") == [f'Starting tracing for vhost "{vhost}" ...',
                                            f"Trace enabled for vhost {vhost}"]
    assert api.get(f"/api/vhosts/{api.q(vhost)}").json()["tracing"] is True
    ch.basic_publish("", "nobody", b"a")
    assert ctl("-p", vhost, "trace_off") == [f'Stopping tracing for vhost "{vhost}" ...',
                                             f"Trace disabled for vhost {vhost}"]
    assert api.get(f"/api/vhosts/{api.q(vhost)}").json()["tracing"] is False
    ch.basic_publish("", "nobody", b"b")  # not traced
    ctl("-p", vhost, "trace_on")
    ctl("-p", vhost, "trace_on")  # already on: the same output, still on
    ch.basic_publish("", "nobody", b"c")
    copies = read_copies(raw, q, 2)
    assert [(rk, body) for rk, _h, body in copies] == [("publish.", b"a"), ("publish.", b"c")]
    assert [dict((k, v) for k, _t, v in h)["routed_queues"] for _rk, h, _b in copies] == [
        longstrs("nobody")] * 2


def test_a_tx_publish_is_traced_when_published(api, vhost, connect, raw):
    ch = connect().channel()
    q = trace_queue(ch)
    ch.queue_declare("txq")
    set_tracing(api, vhost, True)
    ch.tx_select()
    ch.basic_publish("", "txq", b"rolled back")
    ch.tx_rollback()
    ch.basic_publish("", "txq", b"committed")
    ch.tx_commit()
    copies = read_copies(raw, q, 2)
    assert [(rk, body) for rk, _h, body in copies] == [("publish.", b"rolled back"),
                                                       ("publish.", b"committed")]
    assert ch.queue_declare("txq", passive=True).method.message_count == 1


def test_tracing_is_off_after_a_restart(tmp_path):
    """RabbitMQ keeps the traced vhosts in application env only: a restart turns tracing
    off (ours only: it restarts the broker)."""
    if EXTERNAL:
        pytest.skip("restarts its own broker")
    data = str(tmp_path)
    with EmbeddedBroker(data_dir=data, management_tcp_port=-1) as b:
        api = Api(b.api_url)
        set_tracing(api, "/", True)
        assert api.get("/api/vhosts/%2F").json()["tracing"] is True
    with EmbeddedBroker(data_dir=data, management_tcp_port=-1) as b:
        api = Api(b.api_url)
        assert api.get("/api/vhosts/%2F").json()["tracing"] is False
        assert api.get(f"/api/exchanges/%2F/{TRACE}").json()["internal"] is True
