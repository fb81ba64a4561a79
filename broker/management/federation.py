"""Federation links in the HTTP API (rabbitmq_federation_management 3.10.8,
rabbit_federation_mgmt.erl, is the reference):

- `GET /api/federation-links`, `/api/federation-links/{vhost}`: every link, as
  rabbit_federation_status reports it: `exchange`+`upstream_exchange` or
  `queue`+`upstream_queue`+`consumer_tag`, `type`, `vhost`, `upstream`, `id`, `status`
  (starting | running | error), `local_connection` (the name of its connection to this
  broker) and `local_channel` (that channel, as /api/channels shows it) while running, or
  `error`, `uri` (without credentials), `timestamp`, `node`.
- `GET /api/federation-links/state/down`, `/api/federation-links/{vhost}/state/down`: those
  neither running nor starting.
- `DELETE /api/federation-links/vhost/{vhost}/{id}/{node}/restart`: restart one link
  (404 when there is none).
Reading needs the monitoring (or administrator) tag, as RabbitMQ's is_authorized_monitor.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from broker.management import shapes
from broker.management.auth import current, require_monitor, require_vhost
from broker.management.context import broker, sampler
from broker.management.http import list_reply, no_content, not_found, param

routes = web.RouteTableDef()


def _links(request: web.Request, vhost: str | None, down: bool) -> web.Response:
    b = broker(request)
    user = current(request)
    require_monitor(user)
    if vhost is not None:
        require_vhost(b, user, vhost)
    items: list[dict[str, Any]] = b.federation.status(vhost)
    if down:
        items = [i for i in items if i["status"] not in ("running", "starting")]
    by_name = {shapes.connection_name(c): c for c in b.connections}
    for item in items:  # rabbit_federation_mgmt format: the link's channel here
        conn = by_name.get(item.get("local_connection", ""))
        ch = conn.channels.get(1) if conn is not None else None
        if ch is not None and ch.opened:
            item["local_channel"] = shapes.channel(b, sampler(request), ch)
    return list_reply(request, items)


@routes.get("/api/federation-links")
async def all_links(request: web.Request) -> web.Response:
    return _links(request, None, False)


@routes.get("/api/federation-links/state/down")
async def all_down(request: web.Request) -> web.Response:
    return _links(request, None, True)


@routes.get("/api/federation-links/{vhost}")
async def vhost_links(request: web.Request) -> web.Response:
    return _links(request, param(request, "vhost"), False)


@routes.get("/api/federation-links/{vhost}/state/down")
async def vhost_down(request: web.Request) -> web.Response:
    return _links(request, param(request, "vhost"), True)


@routes.delete("/api/federation-links/vhost/{vhost}/{id}/{node}/restart")
async def restart(request: web.Request) -> web.Response:
    b = broker(request)
    user = current(request)
    require_monitor(user)
    require_vhost(b, user, param(request, "vhost"))
    if not await b.federation.restart(param(request, "id")):
        raise not_found()
    return no_content()
