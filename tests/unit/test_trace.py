"""The firehose's trace copies without sockets (broker/trace.py): the `properties` table
(rabbit_trace msg_to_table), routed_queues of the default exchange, the CC/BCC routing keys,
nothing traced for the trace exchange's own messages, and start/stop refreshing channels."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from pamqp import commands

from broker import trace
from broker.message import Message
from broker.protocol.encoding import encode_properties
from broker.queue_process import PUBLISH
from broker.sender_selected import without_bcc
from tests.typed_tables import longstrs, plain, typed_table

P = commands.Basic.Properties


@dataclass(eq=False)
class FakeQueue:
    name: str
    casts: list = field(default_factory=list)

    def cast(self, msg: Any) -> None:
        self.casts.append(msg)


@dataclass(eq=False)
class FakeVHost:
    name: str = "/"
    trace: Any = None
    trace_queue: FakeQueue = field(default_factory=lambda: FakeQueue("tq"))

    def route_message(self, exchange_name: str, routing_key: str, message: Any) -> list:
        assert exchange_name == trace.TRACE_EXCHANGE
        return [self.trace_queue]


@dataclass(eq=False)
class FakeConn:
    peer: tuple = ("127.0.0.1", 5000)
    transport: Any = None
    username: str = "guest"
    vhost: Any = None
    channels: dict = field(default_factory=dict)


@dataclass(eq=False)
class FakeChannel:
    conn: FakeConn
    number: int = 3
    trace: Any = None


@dataclass(eq=False)
class FakeBroker:
    vhosts: dict
    connections: list
    trace_vhosts: set = field(default_factory=set)

    def node_name(self) -> str:
        return "rabbit@test"


def copies(vhost: FakeVHost) -> list[tuple[str, dict, list, bytes]]:
    """(routing key, plain headers, typed headers, body) of every copy cast so far."""
    out = []
    for kind, channel, copy, seq in vhost.trace_queue.casts:
        assert (kind, channel, seq) == (PUBLISH, None, None)
        assert copy.exchange == trace.TRACE_EXCHANGE and not copy.persistent
        raw = copy.wire_properties()
        assert raw[:2] == b"\x20\x00"
        typed = typed_table(raw[6:])
        out.append((copy.routing_key, plain(typed), typed, copy.body))
    return out


def test_properties_table_is_the_set_properties_last_first_integers_as_signedint():
    ts = datetime.datetime.fromtimestamp(2**32 + 7, tz=datetime.UTC)
    raw = encode_properties(P(content_type="a/b", headers={"k": 1}, priority=4,
                              timestamp=ts, app_id="c"))
    table = typed_table(trace.properties_table(raw))
    assert [(k, t) for k, t, _v in table] == [
        ("app_id", "S"), ("timestamp", "I"), ("priority", "I"), ("headers", "F"),
        ("content_type", "S")]
    values = {k: v for k, _t, v in table}
    assert values["timestamp"] == 7  # the low 32 bits, as Erlang's V:32/signed
    size = int.from_bytes(raw[6:10], "big")  # after the flags and "a/b"
    assert values["headers"] == typed_table(raw[10:10 + size])  # the table's own bytes
    assert trace.properties_table(b"\x00\x00") == b""


def test_publish_copy_headers_and_default_exchange_routed_queues():
    vhost = FakeVHost()
    tracer = trace.Tracer(vhost, "rabbit@test")
    ch = FakeChannel(FakeConn())
    message = Message("", "q1", P(headers={"CC": ["amq.rabbitmq.reply-to.x", "q0"],
                                           "BCC": ["q9"]}), b"body")
    tracer.tap_in(ch, without_bcc(message), [FakeQueue("ignored")])
    [(rk, headers, typed, body)] = copies(vhost)
    assert (rk, body) == ("publish.", b"body")
    assert headers["routing_keys"] == ["q1", "amq.rabbitmq.reply-to.x", "q0", "q9"]
    # the default exchange "routes" to the keys named (sorted, reply-to names left out)
    assert headers["routed_queues"] == ["q0", "q1", "q9"]
    assert headers["properties"] == {"headers": {"CC": ["amq.rabbitmq.reply-to.x", "q0"]}}
    assert [(k, t) for k, t, _v in typed] == [
        ("exchange_name", "S"), ("routing_keys", "A"), ("properties", "F"), ("node", "S"),
        ("vhost", "S"), ("connection", "S"), ("channel", "I"), ("user", "S"),
        ("routed_queues", "A")]
    assert (headers["connection"], headers["channel"], headers["node"]) == (
        "127.0.0.1:5000 -> ?:0", 3, "rabbit@test")


def test_named_exchange_routed_queues_are_the_queue_names_sorted_once():
    vhost = FakeVHost()
    tracer = trace.Tracer(vhost, "n")
    tracer.tap_in(FakeChannel(FakeConn()), Message("x", "k", P(), b""),
                  [FakeQueue("b"), FakeQueue("a"), FakeQueue("b")])
    [(_rk, headers, typed, _body)] = copies(vhost)
    assert dict((k, v) for k, _t, v in typed)["routed_queues"] == longstrs("a", "b")
    assert headers["properties"] == {}


def test_nothing_of_the_trace_exchange_is_traced():
    vhost = FakeVHost()
    tracer = trace.Tracer(vhost, "n")
    own = Message(trace.TRACE_EXCHANGE, "publish.x", P(), b"")
    tracer.tap_in(FakeChannel(FakeConn()), own, [])
    tracer.tap_out(FakeChannel(FakeConn()), "tq", own, False)
    assert vhost.trace_queue.casts == []


def test_start_and_stop_refresh_open_channels_of_that_vhost_only():
    traced, other = FakeVHost("t"), FakeVHost("o")
    conns = [FakeConn(vhost=traced), FakeConn(vhost=other)]
    for conn in conns:
        conn.channels[1] = FakeChannel(conn, 1)
    broker = FakeBroker({"t": traced, "o": other}, conns)
    trace.start(broker, "t")
    trace.start(broker, "not-yet")  # allowed, as rabbitmqctl trace_on -p not-yet
    assert isinstance(traced.trace, trace.Tracer) and other.trace is None
    assert conns[0].channels[1].trace is traced.trace and conns[1].channels[1].trace is None
    assert trace.enabled(broker, "not-yet")
    later = FakeVHost("not-yet")
    trace.init(broker, later)
    assert later.trace is not None
    trace.stop(broker, "t")
    trace.stop(broker, "t")  # already off
    assert traced.trace is None and conns[0].channels[1].trace is None
