"""/api/connections (GET, DELETE = close with 320 CONNECTION_FORCED and the reason from the
`X-Reason` header), /api/channels, /api/consumers and the per-vhost and per-connection
forms. Users tagged monitoring or administrator see everyone's; others their own.
Stream protocol connections are listed too, as RabbitMQ's stream plugin registers them
(protocol "stream", no channels; broker/management/streams.py `as_connection`), and DELETE
closes them. Sources: rabbitmq.com/management.html, RabbitMQ 3.10 /api/index.html."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.management import samples, shapes, streams
from broker.management.auth import ApiUser, current, require_vhost, visible_vhosts
from broker.management.context import broker, sampler
from broker.management.http import list_reply, no_content, not_found, param, reply
from broker.management.ranges import Ranges
from broker.management.rates import with_details
from broker.started import ReportedChannel, ReportedConnection

if TYPE_CHECKING:
    from broker.reader import Reader

routes = web.RouteTableDef()


def _user(conn: Any) -> str:
    return conn.json["user"] if isinstance(conn, ReportedConnection) else conn.username


def _mine(user: ApiUser, conn: Reader | ReportedConnection) -> bool:
    return user.is_monitor or _user(conn) == user.name


def _name(conn: Any) -> str:
    return (conn.json["name"] if isinstance(conn, ReportedConnection)
            else shapes.connection_name(conn))


def connections_of(request: web.Request, vhost: str | None = None,
                   stream: bool = True) -> list[Any]:
    """Open AMQP 0-9-1 connections the caller may see (with a multi-worker broker's, those
    the other workers serve: `ReportedConnection`s), then (with `stream`) stream ones."""
    b = broker(request)
    user = current(request)
    out: list[Any] = [c for c in b.connections if c.vhost is not None and _mine(user, c)
                      and (vhost is None or c.vhost.name == vhost)]
    if b.remote_connections is not None:
        out.extend(c for c in b.remote_connections()
                   if _mine(user, c) and (vhost is None or c.json["vhost"] == vhost))
    if stream:
        out.extend(streams.stream_connections(request, vhost))
    return out


def _is_stream(conn: Any) -> bool:
    """A stream protocol connection (broker/stream_protocol/reader.py StreamConnection)."""
    return getattr(conn, "protocol_name", "") == "stream"


def find_connection(request: web.Request) -> Any:
    name = param(request, "name")
    for conn in connections_of(request):
        if _name(conn) == name:
            return conn
    raise not_found()


def _conn_json(request: web.Request, conn: Any, ranges: Ranges, now_ms: int) -> dict:
    """A connection's JSON; with a `data_rates` range, recv_oct / send_oct samples."""
    s = sampler(request)
    if _is_stream(conn):
        out = streams.as_connection(request, conn)
    elif isinstance(conn, ReportedConnection):
        out = {**conn.json, **with_details(s, ("connection", id(conn)),
                                           {"recv_oct": conn.recv_oct,
                                            "send_oct": conn.send_oct})}
    else:
        out = shapes.connection(broker(request), s, conn)
    if ranges.any():
        samples.connection(out, s, ("connection", id(conn)), ranges, now_ms)
    return out


def _channel_json(request: web.Request, ch: Any, ranges: Ranges, now_ms: int) -> dict:
    """A channel's JSON; with a `msg_rates` range, message_stats samples."""
    s = sampler(request)
    if isinstance(ch, ReportedChannel):
        out = {**ch.json, "message_stats": shapes.message_stats(s, ("channel", id(ch)),
                                                                ch.message_stats)}
    else:
        out = shapes.channel(broker(request), s, ch)
    if ranges.any():
        samples.channel(out, s, ("channel", id(ch)), ranges, now_ms)
    return out


def _conn_list(request: web.Request, conns: list[Any]) -> web.Response:
    ranges, now_ms = samples.from_request(request)
    return list_reply(request, sorted((_conn_json(request, c, ranges, now_ms) for c in conns),
                                      key=lambda i: i["name"]))


@routes.get("/api/connections")
async def list_all(request: web.Request) -> web.Response:
    return _conn_list(request, connections_of(request))


@routes.get("/api/vhosts/{vhost}/connections")
async def list_vhost(request: web.Request) -> web.Response:
    vhost = param(request, "vhost")
    require_vhost(broker(request), current(request), vhost)
    return _conn_list(request, connections_of(request, vhost))


@routes.get("/api/connections/{name}")
async def get_one(request: web.Request) -> web.Response:
    conn = find_connection(request)
    ranges, now_ms = samples.from_request(request)
    return reply(_conn_json(request, conn, ranges, now_ms))


@routes.delete("/api/connections/{name}")
async def close(request: web.Request) -> web.Response:
    """Close the connection: connection.close 320 "CONNECTION_FORCED - <X-Reason or
    'Closed via management plugin'>" (RabbitMQ's text)."""
    conn = find_connection(request)
    _force_close(conn, request.headers.get("X-Reason", "Closed via management plugin"))
    return no_content()


def _force_close(conn: Any, reason: str) -> None:
    """connection.close 320 on AMQP 0-9-1; a stream connection's socket closes, as
    rabbit_mgmt_wm_connection's `Pid ! {shutdown, Reason}` makes the stream reader do."""
    if _is_stream(conn):
        conn.force_close(reason)
    else:
        conn.close(320, f"CONNECTION_FORCED - {reason}")


def _of_user(request: web.Request) -> list[Any]:
    """The connections of `username` the caller may see (its own, or any for monitoring
    and administrator users), as rabbit_mgmt_wm_connection_user_name lists them."""
    username = param(request, "username")
    return [c for c in connections_of(request) if _user(c) == username]


@routes.get("/api/connections/username/{username}")
async def list_user(request: web.Request) -> web.Response:
    return _conn_list(request, _of_user(request))


@routes.delete("/api/connections/username/{username}")
async def close_user(request: web.Request) -> web.Response:
    """Close every connection of the user (320 CONNECTION_FORCED with X-Reason, as one
    DELETE /api/connections/{name} each); 204 even when there were none."""
    reason = request.headers.get("X-Reason", "Closed via management plugin")
    for conn in _of_user(request):
        _force_close(conn, reason)
    return no_content()


def _channels(request: web.Request, conns: list[Any]) -> web.Response:
    ranges, now_ms = samples.from_request(request)
    items = [_channel_json(request, ch, ranges, now_ms) for c in conns
             for ch in _open_channels(c)]
    return list_reply(request, sorted(items, key=lambda i: i["name"]))


def _open_channels(conn: Any) -> list[Any]:
    """A connection's open channels (a reported connection's: as reported); none for a
    stream connection."""
    if _is_stream(conn):
        return []
    if isinstance(conn, ReportedConnection):
        return list(conn.channels.values())
    return [ch for ch in conn.channels.values() if ch.opened]


@routes.get("/api/connections/{name}/channels")
async def connection_channels(request: web.Request) -> web.Response:
    return _channels(request, [find_connection(request)])


@routes.get("/api/channels")
async def channels(request: web.Request) -> web.Response:
    return _channels(request, connections_of(request))


@routes.get("/api/vhosts/{vhost}/channels")
async def vhost_channels(request: web.Request) -> web.Response:
    vhost = param(request, "vhost")
    require_vhost(broker(request), current(request), vhost)
    return _channels(request, connections_of(request, vhost))


@routes.get("/api/channels/{name}")
async def channel(request: web.Request) -> web.Response:
    name = param(request, "name")
    for conn in connections_of(request):
        for ch in _open_channels(conn):
            if (ch.json["name"] if isinstance(ch, ReportedChannel)
                    else shapes.channel_name(ch)) == name:
                ranges, now_ms = samples.from_request(request)
                return reply(_channel_json(request, ch, ranges, now_ms))
    raise not_found()


def _consumers(request: web.Request, vhosts: list[str]) -> web.Response:
    b = broker(request)
    items = [shapes.consumer(b, q, c) for v in vhosts for q in b.vhosts[v].queues.values()
             for c in q.consumers]
    return list_reply(request, items, name_of=lambda i: i["consumer_tag"])


@routes.get("/api/consumers")
async def consumers(request: web.Request) -> web.Response:
    return _consumers(request, visible_vhosts(broker(request), current(request)))


@routes.get("/api/consumers/{vhost}")
async def vhost_consumers(request: web.Request) -> web.Response:
    vhost = param(request, "vhost")
    require_vhost(broker(request), current(request), vhost)
    return _consumers(request, [vhost])
