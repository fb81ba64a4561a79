"""RabbitMQ's firehose tracer (`rabbit_trace.erl`, rabbitmq.com/firehose.html): while
tracing is on for a vhost, every publish in it and every delivery from it (consumer
deliveries and basic.get) is copied to the vhost's `amq.rabbitmq.trace` exchange (topic,
durable, internal), with routing key `publish.<exchange name>` or `deliver.<queue name>`.

Owns: which vhosts trace (RabbitMQ's `trace_vhosts` application env: a set of names kept in
memory only, so a restart turns tracing off; a name may be on before its vhost exists, as
`rabbitmqctl trace_on -p NAME` allows), turning it on and off (`start` / `stop`, which also
refresh every open channel of the vhost, as `rabbit_channel:refresh_config_local`), and
building and routing the trace copies (`Tracer.tap_in` / `tap_out`).
Talked to by: the management API (PUT /api/vhosts/{name} `tracing`, GET's `tracing`), the
broker when it adds a vhost (`init`), channels (`ChannelProcess.trace` is the vhost's
`Tracer` or None: one attribute check per publish batch or delivery).
Must never: trace a message whose exchange is the trace exchange itself (nothing published
to it is traced, so consuming trace copies makes no more); block, or wait on a queue (the
copies are cast, with no credit flow and no confirm, as `rabbit_basic:publish`); import the
channel, vhost or broker modules (they import this; the types below are structural).

Trace copy (rabbit_trace `trace/5`, `msg_to_table/1`): the original body; properties with
only `headers`, a table of, in this order, `exchange_name` (longstr), `routing_keys` (array of
longstr: the routing key, CC, BCC), `properties` (table of the properties that are set, in
the reverse of their AMQP order: integers as signedint, `headers` as the table received,
others longstr), `node` (longstr), then for a publish `vhost`, `connection`, `channel`
(signedint), `user`, `routed_queues` (array of longstr: the queues the exchange routed to,
sorted; for the default exchange the routing keys named, whether or not such a queue exists),
for a delivery `redelivered` (signedint 0/1), `vhost`, `connection`, `channel`, `user`.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from broker.connection_names import NamedConnection, connection_name
from broker.direct_reply_to import PREFIX as REPLY_PREFIX
from broker.message import Message
from broker.queue_process import PUBLISH
from broker.sender_selected import routing_keys

if TYPE_CHECKING:
    from broker.queue_process import QueueProcess

log = logging.getLogger("broker.trace")

TRACE_EXCHANGE = "amq.rabbitmq.trace"
# the trace copy's properties: the headers flag (0x2000) alone, then the table
_HEADERS_ONLY = b"\x20\x00"
# no persistence, priority, expiration, user_id or reply_to (Message.from_wire's `hot`)
_NOTHING_HOT = (None, None, None, None, None)
# basic's 14 properties in AMQP order, with their wire kind: s shortstr, t table, o octet,
# T timestamp (64-bit); property i is flag bit 15 - i
_PROPERTIES = (
    ("content_type", "s"), ("content_encoding", "s"), ("headers", "t"),
    ("delivery_mode", "o"), ("priority", "o"), ("correlation_id", "s"), ("reply_to", "s"),
    ("expiration", "s"), ("message_id", "s"), ("timestamp", "T"), ("type", "s"),
    ("user_id", "s"), ("app_id", "s"), ("cluster_id", "s"),
)
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I32 = struct.Struct(">i")


class TracedConnection(NamedConnection, Protocol):
    """A channel's connection as the tracer reads it: its name and its user."""

    @property
    def username(self) -> str: ...


class TracedChannel(Protocol):
    """A channel as the tracer reads it (broker/channel.py's ChannelProcess)."""

    @property
    def conn(self) -> TracedConnection: ...

    @property
    def number(self) -> int: ...  # the channel number on the wire

    trace: Tracer | None  # the tracer it uses (rabbit_channel's trace_state)


class TracedVHost(Protocol):
    """A vhost as the tracer sees it: its name, the tracer it hands new channels, and
    routing a trace copy (broker/vhost.py's VHost)."""

    @property
    def name(self) -> str: ...

    trace: Tracer | None  # set while tracing is on

    def route_message(self, exchange_name: str, routing_key: str,
                      message: Any) -> Sequence[QueueProcess]: ...


class TracedReader(Protocol):
    """A connection as `start` / `stop` see it: its vhost and its channels."""

    @property
    def vhost(self) -> TracedVHost | None: ...

    @property
    def channels(self) -> Mapping[int, TracedChannel]: ...


class TracingBroker(Protocol):
    """The broker as `start` / `stop` / `init` see it."""

    @property
    def trace_vhosts(self) -> set[str]: ...  # names of the vhosts that trace

    @property
    def vhosts(self) -> Mapping[str, TracedVHost]: ...

    @property
    def connections(self) -> Iterable[TracedReader]: ...

    def node_name(self) -> str: ...


def enabled(broker: TracingBroker, vhost: str) -> bool:
    """Tracing is on for `vhost` (rabbit_trace:enabled; the vhost need not exist)."""
    return vhost in broker.trace_vhosts


def init(broker: TracingBroker, vhost: TracedVHost) -> None:
    """Give a vhost being added its tracer if tracing was turned on for its name."""
    vhost.trace = Tracer(vhost, broker.node_name()) if enabled(broker, vhost.name) else None


def start(broker: TracingBroker, vhost: str) -> None:
    """Turn tracing on for `vhost` (rabbitmqctl trace_on, rabbit_trace:start): idempotent;
    the vhost need not exist. Not persisted: a restart turns it off, as in RabbitMQ."""
    _switch(broker, vhost, True)


def stop(broker: TracingBroker, vhost: str) -> None:
    """Turn tracing off for `vhost` (rabbitmqctl trace_off, rabbit_trace:stop): idempotent."""
    _switch(broker, vhost, False)


def _switch(broker: TracingBroker, vhost: str, on: bool) -> None:
    """rabbit_trace:start/stop: log, change the set of traced vhosts, refresh the tracers."""
    word = "enabled" if on else "disabled"
    if enabled(broker, vhost) == on:
        log.info("Tracing is already %s for vhost '%s'", word, vhost)
        return
    log.info("%s tracing for vhost '%s'", "Enabling" if on else "Disabling", vhost)
    if on:
        broker.trace_vhosts.add(vhost)
    else:
        broker.trace_vhosts.discard(vhost)
    _refresh(broker, vhost)


def _refresh(broker: TracingBroker, name: str) -> None:
    """The vhost's tracer and every open channel's copy of it follow the setting at once
    (rabbit_channel:refresh_config_local)."""
    vhost = broker.vhosts.get(name)
    if vhost is None:
        return
    init(broker, vhost)
    for conn in broker.connections:
        if conn.vhost is vhost:
            for ch in conn.channels.values():
                ch.trace = vhost.trace


class Tracer:
    """The trace state of one vhost while tracing is on: what channels call for every
    publish (`tap_in`) and delivery (`tap_out`)."""

    __slots__ = ("vhost", "node")

    def __init__(self, vhost: TracedVHost, node: str) -> None:
        self.vhost = vhost  # where trace copies are routed (its amq.rabbitmq.trace)
        self.node = node  # the `node` header, e.g. "rabbit@host"

    def tap_in(self, ch: TracedChannel, message: Message,
               queues: Iterable[QueueProcess]) -> None:
        """Trace a publish on `ch` that the exchange routed to `queues` (rabbit_trace:tap_in,
        called by rabbit_channel after routing, before delivering, also in tx mode).
        `message` is as its queues get it (BCC stripped)."""
        exchange = message.exchange
        if exchange == TRACE_EXCHANGE:
            return
        keys = routing_keys(message)
        if exchange:
            names = sorted({q.name for q in queues})
        else:  # rabbit_exchange:route: the names, whether or not such a queue exists
            names = sorted({k for k in keys if not k.startswith(REPLY_PREFIX)})
        conn = ch.conn
        extra = b"".join((
            _entry(b"vhost", _longstr(self.vhost.name.encode())),
            _entry(b"connection", _longstr(connection_name(conn).encode())),
            _entry(b"channel", _signedint(ch.number)),
            _entry(b"user", _longstr(conn.username.encode())),
            _entry(b"routed_queues", _array(names)),
        ))
        self._publish(message, keys, "publish." + exchange, extra)

    def tap_out(self, ch: TracedChannel, queue_name: str, message: Message,
                redelivered: bool) -> None:
        """Trace a delivery from queue `queue_name` on `ch` (basic.deliver or basic.get-ok;
        rabbit_trace:tap_out, called by rabbit_channel's record_sent)."""
        if message.exchange == TRACE_EXCHANGE:
            return
        conn = ch.conn
        extra = b"".join((
            _entry(b"redelivered", _signedint(1 if redelivered else 0)),
            _entry(b"vhost", _longstr(self.vhost.name.encode())),
            _entry(b"connection", _longstr(connection_name(conn).encode())),
            _entry(b"channel", _signedint(ch.number)),
            _entry(b"user", _longstr(conn.username.encode())),
        ))
        self._publish(message, routing_keys(message), "deliver." + queue_name, extra)

    def _publish(self, message: Message, keys: list[str], routing_key: str,
                 extra: bytes) -> None:
        """Route the copy through amq.rabbitmq.trace and cast it to its queues (no
        channel: no credit flow, no confirm)."""
        table = b"".join((
            _entry(b"exchange_name", _longstr(message.exchange.encode())),
            _entry(b"routing_keys", _array(keys)),
            _entry(b"properties", b"F" + _sized(properties_table(message.wire_properties()))),
            _entry(b"node", _longstr(self.node.encode())),
            extra,
        ))
        copy = Message.from_wire(TRACE_EXCHANGE, routing_key, _HEADERS_ONLY + _sized(table),
                                 _NOTHING_HOT, message.body)
        queues = self.vhost.route_message(TRACE_EXCHANGE, routing_key, copy)
        if queues:
            msg = (PUBLISH, None, copy, None)
            for queue in queues:
                queue.cast(msg)


def properties_table(raw: bytes) -> bytes:
    """The `properties` table (its entries, without the length) of encoded basic
    properties `raw` (flags + list): the properties that are set, last first (rabbit_trace
    folds them in record order onto a list head), integers (delivery_mode, priority,
    timestamp) as signedint (low 32 bits, as Erlang's `V:32/signed` writes a larger one),
    the headers table as its bytes, the rest as longstr."""
    flags = int.from_bytes(raw[:2], "big")
    pos = 2
    entries = []
    for i, (name, kind) in enumerate(_PROPERTIES):
        if not flags & (0x8000 >> i):
            continue
        if kind == "s":
            n = raw[pos]
            field = _longstr(raw[pos + 1:pos + 1 + n])
            pos += 1 + n
        elif kind == "t":
            n = _U32.unpack_from(raw, pos)[0]
            field = b"F" + raw[pos:pos + 4 + n]
            pos += 4 + n
        elif kind == "o":
            field = _signedint(raw[pos])
            pos += 1
        else:
            field = _signedint(_U64.unpack_from(raw, pos)[0])
            pos += 8
        entries.append(_entry(name.encode(), field))
    entries.reverse()
    return b"".join(entries)


def _sized(data: bytes) -> bytes:
    return _U32.pack(len(data)) + data


def _entry(name: bytes, field: bytes) -> bytes:
    """A table entry: shortstr name, then the typed field value."""
    return bytes((len(name),)) + name + field


def _longstr(value: bytes) -> bytes:
    return b"S" + _sized(value)


def _signedint(value: int) -> bytes:
    return b"I" + _I32.pack((value + 2**31) % 2**32 - 2**31)


def _array(items: Iterable[str]) -> bytes:
    return b"A" + _sized(b"".join(_longstr(s.encode()) for s in items))
