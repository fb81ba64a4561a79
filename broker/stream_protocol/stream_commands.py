"""The stream protocol's commands that manage streams (issue 37 items 1 and 6), after
RabbitMQ 3.13.7's `rabbit_stream_reader.erl` and `rabbit_stream_manager.erl`: create and
delete stream, metadata, stream_stats, partitions, route, create and delete super stream.

Owns: each command's checks and response codes. Talks to: the connection that received the
command through `CommandConnection` (permissions, its vhost, its stream queues, sending),
broker/stream_protocol/core.py for every byte, super_streams.py for creating a super
stream. Must never: touch the connection's socket or state; close a connection (these
commands answer with a response code, as RabbitMQ's do).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from broker import errors
from broker.stream_protocol import core
from broker.stream_protocol.super_streams import CREATE_ARGUMENTS, create_super_stream

log = logging.getLogger("broker.stream_protocol")


class CommandConnection(Protocol):
    """An open stream connection as these commands see it
    (broker.stream_protocol.reader.StreamConnection)."""

    @property
    def peer(self) -> Any: ...  # the client's address, for log lines

    def send(self, data: bytes) -> None: ...

    def allowed(self, name: str, permission: str) -> bool: ...  # configure / write / read

    def stream(self, name: str) -> Any | None: ...  # the vhost's stream queue `name`

    def current_vhost(self) -> Any: ...  # broker.vhost.VHost the connection opened

    def endpoint(self) -> tuple[str, int]: ...  # what metadata advertises for this listener


def create_stream(conn: CommandConnection, f: core.Frame) -> None:
    """create_stream: configure permission (ACCESS_REFUSED), known arguments only
    (PRECONDITION_FAILED), STREAM_ALREADY_EXISTS for an equivalent existing stream and
    PRECONDITION_FAILED for other arguments or another queue type
    (rabbit_stream_manager:create/4)."""
    name = f.fields["stream"] or ""
    if not conn.allowed(name, "configure"):
        conn.send(core.response(core.CREATE_STREAM, f.corr, core.ACCESS_REFUSED))
        return
    args: dict[str, Any] = {"x-queue-type": "stream"}
    for key, value in f.fields["arguments"].items():
        arg = CREATE_ARGUMENTS.get(key)
        if arg is None:
            conn.send(core.response(core.CREATE_STREAM, f.corr, core.PRECONDITION_FAILED))
            return
        args[arg] = int(value) if value.isdigit() else value
    vhost = conn.current_vhost()
    if name in vhost.queues:
        try:
            vhost.declare_queue(name, durable=True, arguments=args)
            code = core.STREAM_ALREADY_EXISTS
        except errors.AMQPError:
            code = core.PRECONDITION_FAILED
        conn.send(core.response(core.CREATE_STREAM, f.corr, code))
        return
    try:
        vhost.declare_queue(name, durable=True, arguments=args)
    except errors.AMQPError as exc:
        log.warning("stream connection %s: cannot create stream '%s': %s", conn.peer,
                    name, exc)
        code = core.ACCESS_REFUSED if getattr(exc, "reply_code", 0) == 403 \
            else core.PRECONDITION_FAILED
        conn.send(core.response(core.CREATE_STREAM, f.corr, code))
        return
    conn.send(core.response(core.CREATE_STREAM, f.corr, core.OK))


def delete_stream(conn: CommandConnection, f: core.Frame) -> None:
    """delete_stream: configure permission, STREAM_DOES_NOT_EXIST for a missing stream; the
    stream's publishers and consumers are told (metadata_update)."""
    name = f.fields["stream"] or ""
    if not conn.allowed(name, "configure"):
        conn.send(core.response(core.DELETE_STREAM, f.corr, core.ACCESS_REFUSED))
        return
    q = conn.stream(name)
    if q is None:
        conn.send(core.response(core.DELETE_STREAM, f.corr, core.STREAM_DOES_NOT_EXIST))
        return
    conn.current_vhost().delete_queue_now(q)  # tells its clients
    conn.send(core.response(core.DELETE_STREAM, f.corr, core.OK))


def metadata(conn: CommandConnection, f: core.Frame) -> None:
    """metadata: this node as the one broker, leader of every stream that exists."""
    host, port = conn.endpoint()
    out: list[tuple[str, int, int, list[int]]] = []
    for name in f.fields["streams"]:
        if conn.stream(name) is not None:
            out.append((name, core.OK, 0, []))
        else:
            out.append((name, core.STREAM_DOES_NOT_EXIST, 0xFFFF, []))
    conn.send(core.metadata_response(f.corr, [(host, port)], out))


def stream_stats(conn: CommandConnection, f: core.Frame) -> None:
    """stream_stats: first_chunk_id, committed_chunk_id and last_chunk_id, -1 for what the
    stream lacks yet (osiris:get_stats/1, osiris 1.8 in RabbitMQ 3.13)."""
    q = conn.stream(f.fields["stream"] or "")
    if q is None:
        conn.send(core.response(core.STREAM_STATS, f.corr, core.STREAM_DOES_NOT_EXIST,
                                core.int_map({})))
        return
    log_ = q.log
    stats = {"first_chunk_id": log_.first_offset if log_.next_offset > log_.first_offset
             else -1,
             "committed_chunk_id": log_.last_chunk,
             "last_chunk_id": log_.last_written_chunk}
    conn.send(core.response(core.STREAM_STATS, f.corr, core.OK, core.int_map(stats)))


def super_stream_partitions(conn: CommandConnection,
                            name: str) -> list[tuple[str, str]] | None:
    """[(partition stream, binding key)] of super stream `name` (the direct exchange's
    bindings to streams, in x-stream-partition-order), None when there is no such
    exchange (rabbit_stream_manager:partitions/2)."""
    exchange = conn.current_vhost().exchanges.get(name)
    if exchange is None:
        return None
    found = []
    for dest, key, args in exchange.routing.bindings():
        if isinstance(dest, str) and conn.stream(dest) is not None:
            order = (args or {}).get("x-stream-partition-order", 0)
            found.append((order, dest, key))
    found.sort(key=lambda t: (t[0], t[1]))
    return [(dest, key) for _o, dest, key in found]


def partitions(conn: CommandConnection, f: core.Frame) -> None:
    """partitions: a super stream's partition streams in order."""
    streams = super_stream_partitions(conn, f.fields["super_stream"] or "")
    if streams is None:
        conn.send(core.response(core.PARTITIONS, f.corr, core.STREAM_DOES_NOT_EXIST,
                                core.strings([])))
        return
    conn.send(core.response(core.PARTITIONS, f.corr, core.OK,
                            core.strings([s for s, _key in streams])))


def route(conn: CommandConnection, f: core.Frame) -> None:
    """route: the partitions a routing key reaches (the direct exchange's binding keys)."""
    streams = super_stream_partitions(conn, f.fields["super_stream"] or "")
    if streams is None:
        conn.send(core.response(core.ROUTE, f.corr, core.STREAM_DOES_NOT_EXIST,
                                core.strings([])))
        return
    key = f.fields["routing_key"] or ""
    conn.send(core.response(core.ROUTE, f.corr, core.OK,
                            core.strings([s for s, k in streams if k == key])))


def create_super_stream_command(conn: CommandConnection, f: core.Frame) -> None:
    """create_super_stream (3.13): a durable direct exchange with x-super-stream, one
    stream per partition, each bound with its binding key and x-stream-partition-order
    (rabbit_stream_manager:create_super_stream); what was made is undone on an error."""
    d = f.fields
    name, parts, keys = d["super_stream"] or "", d["partitions"], d["binding_keys"]
    code = create_super_stream(conn.current_vhost(), name, parts, keys, d["arguments"],
                               lambda n: conn.allowed(n, "configure"))
    conn.send(core.response(core.CREATE_SUPER_STREAM, f.corr, code))


def delete_super_stream(conn: CommandConnection, f: core.Frame) -> None:
    """delete_super_stream: configure permission on the exchange and every partition
    (ACCESS_REFUSED), STREAM_DOES_NOT_EXIST without the exchange; deletes the exchange,
    then the partitions."""
    name = f.fields["super_stream"] or ""
    streams = super_stream_partitions(conn, name)
    if not conn.allowed(name, "configure") or any(
            not conn.allowed(s_, "configure") for s_, _k in streams or []):
        conn.send(core.response(core.DELETE_SUPER_STREAM, f.corr, core.ACCESS_REFUSED))
        return
    if streams is None:
        conn.send(core.response(core.DELETE_SUPER_STREAM, f.corr, core.STREAM_DOES_NOT_EXIST))
        return
    vhost = conn.current_vhost()
    vhost.delete_exchange(name, False)
    for stream, _key in streams:
        q = conn.stream(stream)
        if q is not None:
            vhost.delete_queue_now(q)
    conn.send(core.response(core.DELETE_SUPER_STREAM, f.corr, core.OK))
