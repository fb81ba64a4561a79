"""/api/operator-policies, /api/operator-policies/{vhost}, /api/operator-policies/{vhost}/{name}
(GET, PUT, DELETE): operator policies, which cap what user policies and queue arguments may
set (rabbitmq.com/parameters.html#operator-policy). Listing needs access to the vhost;
reading one, PUT and DELETE need the administrator tag (rabbit_mgmt_wm_operator_policy
is_authorized_admin). Bodies and shapes are the policies' own; the definition may hold only
`expires`, `message-ttl`, `max-length`, `max-length-bytes`, `max-in-memory-length`,
`max-in-memory-bytes` and `delivery-limit` (400 otherwise), and each merges with a user
policy and a declare argument by the lower value (broker/policies.py). Source: RabbitMQ
3.10.8 rabbit_mgmt_wm_operator_policies / _operator_policy, rabbit_policy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from broker.management import shapes
from broker.management.auth import current, require_admin, require_vhost, visible_vhosts
from broker.management.context import broker
from broker.management.http import list_reply, no_content, not_found, param, reply
from broker.management.policies import put_policy

if TYPE_CHECKING:
    from broker.vhost import VHost

routes = web.RouteTableDef()


def _sorted(v: VHost) -> list[dict]:
    return [shapes.policy(p) for p in sorted(v.operator_policies.values(),
                                             key=lambda p: p.name)]


@routes.get("/api/operator-policies")
async def list_all(request: web.Request) -> web.Response:
    b = broker(request)
    return list_reply(request, [item for v in visible_vhosts(b, current(request))
                                for item in _sorted(b.vhosts[v])])


@routes.get("/api/operator-policies/{vhost}")
async def list_vhost(request: web.Request) -> web.Response:
    b = broker(request)
    vhost = param(request, "vhost")
    require_vhost(b, current(request), vhost)
    return list_reply(request, _sorted(b.vhosts[vhost]))


def _admin_vhost(request: web.Request) -> str:
    b = broker(request)
    user = current(request)
    require_admin(user)
    vhost = param(request, "vhost")
    require_vhost(b, user, vhost)
    return vhost


@routes.get("/api/operator-policies/{vhost}/{name}")
async def get_one(request: web.Request) -> web.Response:
    vhost = _admin_vhost(request)
    p = broker(request).vhosts[vhost].operator_policies.get(param(request, "name"))
    if p is None:
        raise not_found()
    return reply(shapes.policy(p))


@routes.put("/api/operator-policies/{vhost}/{name}")
async def put(request: web.Request) -> web.Response:
    """{"pattern": "^orders\\\\.", "definition": {"max-length": 10000}, "priority": 0,
    "apply-to": "queues"}: 201 created, 204 replaced, 400 invalid."""
    v = broker(request).vhosts[_admin_vhost(request)]
    return await put_policy(request, v.operator_policies, v.set_operator_policy)


@routes.delete("/api/operator-policies/{vhost}/{name}")
async def delete(request: web.Request) -> web.Response:
    vhost = _admin_vhost(request)
    if not broker(request).vhosts[vhost].clear_operator_policy(param(request, "name")):
        raise not_found()
    return no_content()
