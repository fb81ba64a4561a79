"""/api/stream/connections, /api/stream/publishers and /api/stream/consumers (issue 37 item
7): the stream protocol's connections and what they publish and consume, under the paths
and in the shapes of RabbitMQ's rabbitmq_stream_management plugin (3.13.7:
rabbit_stream_connections_mgmt.erl, rabbit_stream_publishers_mgmt.erl,
rabbit_stream_consumers_mgmt.erl, rabbit_stream_mgmt_db.erl; the items of
rabbit_stream_metrics.erl). Users tagged monitoring or administrator see everyone's, others
their own; DELETE on a connection closes it.

Connection: name, node, user, vhost, host, port, peer_host, peer_port, protocol ("stream"),
ssl, auth_mechanism, heartbeat, frame_max, client_properties, connected_at, subscriptions.
Publisher: queue {name, vhost}, connection_details {name, user, node, peer_host, peer_port},
publisher_id, reference, published, confirmed, errored. Consumer: queue, connection_details,
subscription_id, credits, consumed, offset, offset_lag, active, activity_status, properties.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from broker.connection_names import connection_name
from broker.management import shapes
from broker.management.auth import current
from broker.management.context import broker, sampler
from broker.management.http import list_reply, no_content, not_found, param, reply
from broker.management.rates import with_details

routes = web.RouteTableDef()


def stream_connections(request: web.Request, vhost: str | None = None) -> list[Any]:
    """The open stream connections the caller may see (all for monitoring and
    administrator users, else its own), optionally of one vhost."""
    listener = broker(request).stream
    if listener is None:
        return []
    user = current(request)
    return [c for c in listener.connections if c.vhost is not None
            and (user.is_monitor or c.username == user.name)
            and (vhost is None or c.vhost == vhost)]


def _connection_json(request: web.Request, conn: Any) -> dict:
    peer = conn.peer or ("", 0)
    sock = conn.transport.get_extra_info("sockname") if conn.transport else None
    return {
        "name": connection_name(conn),
        "node": shapes.node_name(broker(request)),
        "user": conn.username,
        "vhost": conn.vhost,
        "host": sock[0] if sock else None,
        "port": sock[1] if sock else None,
        "peer_host": peer[0],
        "peer_port": peer[1],
        "protocol": "stream",
        "ssl": conn.transport is not None
        and conn.transport.get_extra_info("ssl_object") is not None,
        "auth_mechanism": conn.auth_mechanism,
        "heartbeat": conn.heartbeat,
        "frame_max": conn.frame_max,
        "client_properties": conn.client_properties,
        "connected_at": int(conn.connected_at * 1000),
        "subscriptions": len(conn.subscriptions),
        "state": "running",
    }


def as_connection(request: web.Request, conn: Any) -> dict:
    """A stream connection as GET /api/connections lists it beside AMQP 0-9-1 ones:
    rabbit_stream_reader's connection_created items (3.10.8: protocol "stream", no "type",
    timeout = heartbeat, channels and channel_max 0, user_provided_name from the client's
    connection_name) and its connection_stats (recv_oct, send_oct, recv_cnt, send_cnt,
    send_pend, state "running" or "blocked" during a resource alarm)."""
    out = _connection_json(request, conn)
    del out["subscriptions"]
    key = ("connection", id(conn))
    out.update({
        "user_who_performed_action": conn.username,
        "timeout": conn.heartbeat,
        "channels": 0,
        "channel_max": 0,
        "state": "blocked" if conn.listener.blocked and conn.publishers else "running",
        **with_details(sampler(request), key, {"recv_oct": conn.recv_oct,
                                                      "send_oct": conn.send_oct}),
        "recv_cnt": conn.recv_cnt,
        "send_cnt": conn.send_cnt,
        "send_pend": conn.transport.get_write_buffer_size() if conn.transport else 0,
        **shapes.tls_fields(conn),
    })
    name = conn.client_properties.get("connection_name")
    if name is not None:
        out["user_provided_name"] = name
    return out


def _details(request: web.Request, conn: Any) -> dict:
    peer = conn.peer or ("", 0)
    return {"name": connection_name(conn), "user": conn.username,
            "node": shapes.node_name(broker(request)), "peer_host": peer[0],
            "peer_port": peer[1]}


def _publishers(request: web.Request, conns: list[Any], stream: str | None = None
                ) -> list[dict]:
    out = []
    for conn in conns:
        for pid, pub in sorted(conn.publishers.items()):
            if stream is not None and pub.queue.name != stream:
                continue
            out.append({"queue": {"name": pub.queue.name, "vhost": conn.vhost},
                        "connection_details": _details(request, conn),
                        "publisher_id": pid, "reference": pub.reference or "",
                        "published": pub.published, "confirmed": pub.confirmed,
                        "errored": pub.errored})
    return out


def _consumers(request: web.Request, conns: list[Any]) -> list[dict]:
    out = []
    for conn in conns:
        for sid, q in sorted(conn.subscriptions.items()):
            sub = next((s for s in q.subscriptions
                        if s.client is conn and s.subscription_id == sid), None)
            if sub is None:
                continue
            last = q.log.next_offset - 1
            out.append({"queue": {"name": q.name, "vhost": conn.vhost},
                        "connection_details": _details(request, conn),
                        "subscription_id": sid, "credits": sub.credit,
                        "consumed": sub.consumed, "offset": sub.offset,
                        "offset_lag": max(0, last - sub.offset + 1) if last >= 0 else 0,
                        "active": sub.active,
                        "activity_status": _activity(sub),
                        "properties": sub.properties})
    return out


def _activity(sub: Any) -> str:
    """rabbit_stream_utils:consumer_activity_status/2: up, single_active or waiting."""
    if str(sub.properties.get("single-active-consumer", "")).lower() != "true":
        return "up"
    return "single_active" if sub.active else "waiting"


def _find(request: web.Request) -> Any:
    vhost, name = param(request, "vhost"), param(request, "name")
    for conn in stream_connections(request, vhost):
        if connection_name(conn) == name:
            return conn
    raise not_found()


@routes.get("/api/stream/connections")
async def list_connections(request: web.Request) -> web.Response:
    return list_reply(request, [_connection_json(request, c) for c in stream_connections(request)])


@routes.get("/api/stream/connections/{vhost}")
async def list_vhost_connections(request: web.Request) -> web.Response:
    conns = stream_connections(request, param(request, "vhost"))
    return list_reply(request, [_connection_json(request, c) for c in conns])


@routes.get("/api/stream/connections/{vhost}/{name}")
async def get_connection(request: web.Request) -> web.Response:
    return reply(_connection_json(request, _find(request)))


@routes.delete("/api/stream/connections/{vhost}/{name}")
async def close_connection(request: web.Request) -> web.Response:
    """Close it as rabbit_stream_connection_mgmt does: `{shutdown, Reason}` to the reader
    (X-Reason or "Closed via management plugin"), which closes the socket."""
    _find(request).force_close(request.headers.get("X-Reason", "Closed via management plugin"))
    return no_content()


@routes.get("/api/stream/connections/{vhost}/{name}/publishers")
async def connection_publishers(request: web.Request) -> web.Response:
    return list_reply(request, _publishers(request, [_find(request)]))


@routes.get("/api/stream/connections/{vhost}/{name}/consumers")
async def connection_consumers(request: web.Request) -> web.Response:
    return list_reply(request, _consumers(request, [_find(request)]))


@routes.get("/api/stream/publishers")
async def list_publishers(request: web.Request) -> web.Response:
    return list_reply(request, _publishers(request, stream_connections(request)))


@routes.get("/api/stream/publishers/{vhost}")
async def list_vhost_publishers(request: web.Request) -> web.Response:
    return list_reply(request, _publishers(request,
                                           stream_connections(request, param(request, "vhost"))))


@routes.get("/api/stream/publishers/{vhost}/{stream}")
async def list_stream_publishers(request: web.Request) -> web.Response:
    conns = stream_connections(request, param(request, "vhost"))
    return list_reply(request, _publishers(request, conns, param(request, "stream")))


@routes.get("/api/stream/consumers")
async def list_consumers(request: web.Request) -> web.Response:
    return list_reply(request, _consumers(request, stream_connections(request)))


@routes.get("/api/stream/consumers/{vhost}")
async def list_vhost_consumers(request: web.Request) -> web.Response:
    return list_reply(request, _consumers(request,
                                          stream_connections(request, param(request, "vhost"))))
