"""/api/policies, /api/policies/{vhost}, /api/policies/{vhost}/{name} (GET, PUT, DELETE):
policies apply at once to matching queues and exchanges (broker/policies.py has the
rules). PUT needs the policymaker or administrator tag. Sources:
rabbitmq.com/parameters.html#policies, RabbitMQ 3.10 /api/index.html."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from broker.management import shapes
from broker.management.auth import current, require_vhost, visible_vhosts
from broker.management.context import broker
from broker.management.http import (
    bad_request,
    body,
    created,
    list_reply,
    no_content,
    not_authorised,
    not_found,
    param,
    reply,
)

routes = web.RouteTableDef()


@routes.get("/api/policies")
async def list_all(request: web.Request) -> web.Response:
    b = broker(request)
    items = [shapes.policy(p) for v in visible_vhosts(b, current(request))
             for p in sorted(b.vhosts[v].policies.values(), key=lambda p: p.name)]
    return list_reply(request, items)


@routes.get("/api/policies/{vhost}")
async def list_vhost(request: web.Request) -> web.Response:
    b = broker(request)
    vhost = param(request, "vhost")
    require_vhost(b, current(request), vhost)
    return list_reply(request, [shapes.policy(p) for p in
                                sorted(b.vhosts[vhost].policies.values(), key=lambda p: p.name)])


@routes.get("/api/policies/{vhost}/{name}")
async def get_one(request: web.Request) -> web.Response:
    b = broker(request)
    vhost = param(request, "vhost")
    require_vhost(b, current(request), vhost)
    p = b.vhosts[vhost].policies.get(param(request, "name"))
    if p is None:
        raise not_found()
    return reply(shapes.policy(p))


def _writer(request: web.Request) -> str:
    b = broker(request)
    user = current(request)
    vhost = param(request, "vhost")
    require_vhost(b, user, vhost)
    if not user.is_policymaker:
        raise not_authorised("Not policymaker user")
    return vhost


async def put_policy(request: web.Request, table: dict, setter: Any) -> web.Response:
    """PUT of a policy or an operator policy: the body {"pattern", "definition",
    "priority" (0), "apply-to" ("all")} given to `setter(name, pattern, definition,
    priority, apply_to)`; 201 created, 204 replaced (`name` was in `table`), 400 for a
    missing key or what `setter` refuses (its ValueError text)."""
    data = await body(request)
    for key in ("pattern", "definition"):
        if key not in data:
            raise bad_request(f"key_missing: {key}")
    name = param(request, "name")
    existed = name in table
    try:
        setter(name, str(data["pattern"]), data["definition"], data.get("priority", 0),
               data.get("apply-to", "all"))
    except ValueError as exc:
        raise bad_request(str(exc)) from None
    return no_content() if existed else created()


@routes.put("/api/policies/{vhost}/{name}")
async def put(request: web.Request) -> web.Response:
    """{"pattern": "^ttl\\\\.", "definition": {"message-ttl": 60000}, "priority": 0,
    "apply-to": "queues"}: 201 created, 204 replaced, 400 invalid."""
    v = broker(request).vhosts[_writer(request)]
    return await put_policy(request, v.policies, v.set_policy)


@routes.delete("/api/policies/{vhost}/{name}")
async def delete(request: web.Request) -> web.Response:
    vhost = _writer(request)
    if not broker(request).vhosts[vhost].clear_policy(param(request, "name")):
        raise not_found()
    return no_content()
