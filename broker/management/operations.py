"""Node operations of RabbitMQ 3.10.8's API that a single node answers simply: GET /api/auth
(the OAuth 2 / UAA settings the login page reads: off), GET /api/auth/attempts/{node} and
.../source (authentication attempts per protocol; per source is off, so []), POST
/api/rebalance/queues (204: queue leaders to spread exist only for quorum and mirrored
queues, and there is one node), POST /api/vhosts/{vhost}/start/{node} (204: the vhost is
running on this node), GET /api/all-configuration (the older name of GET /api/definitions),
DELETE /api/reset[/{node}] (the rate history starts again; live objects' counters read as
RabbitMQ shows them after its reset).
Errors: 404 for another node's name or an unknown vhost, 401 for a non-administrator where
RabbitMQ wants one. Sources: rabbit_mgmt_dispatcher, rabbit_mgmt_wm_auth,
rabbit_mgmt_wm_auth_attempts, rabbit_mgmt_wm_rebalance_queues, rabbit_mgmt_wm_vhost_restart,
rabbit_mgmt_wm_reset."""

from __future__ import annotations

from aiohttp import web

from broker.management import shapes
from broker.management.auth import current, require_admin, require_monitor
from broker.management.context import broker, sampler
from broker.management.definitions import export_definitions
from broker.management.http import no_content, not_found, param, reply
from broker.management.sampling import reset_statistics

routes = web.RouteTableDef()


@routes.get("/api/auth")
async def auth(request: web.Request) -> web.Response:
    """{"enable_uaa": false, "uaa_client_id": "", "uaa_location": ""} (no OAuth 2)."""
    return reply({"enable_uaa": False, "uaa_client_id": "", "uaa_location": ""})


def this_node(request: web.Request, key: str = "node") -> None:
    """404 unless the path's `{node}` is this broker's node name."""
    if param(request, key) != shapes.node_name(broker(request)):
        raise not_found()


@routes.get("/api/auth/attempts/{node}")
async def auth_attempts(request: web.Request) -> web.Response:
    require_monitor(current(request))
    this_node(request)
    return reply(broker(request).auth_attempts.as_list())


@routes.get("/api/auth/attempts/{node}/source")
async def auth_attempts_source(request: web.Request) -> web.Response:
    require_monitor(current(request))
    this_node(request)
    return reply([])  # track_auth_attempt_source is off (RabbitMQ's default)


@routes.post("/api/rebalance/queues")
async def rebalance(request: web.Request) -> web.Response:
    require_admin(current(request))
    return no_content()


@routes.post("/api/vhosts/{vhost}/start/{node}")
async def start_vhost(request: web.Request) -> web.Response:
    require_admin(current(request))
    this_node(request)
    if param(request, "vhost") not in broker(request).vhosts:
        raise not_found()
    return no_content()


@routes.delete("/api/reset")
async def reset(request: web.Request) -> web.Response:
    """Statistics reset: the rate history is dropped (sampling.reset_statistics says what
    RabbitMQ shows afterwards, and why the counters read the same here)."""
    require_admin(current(request))
    reset_statistics(broker(request), sampler(request))
    return no_content()


@routes.delete("/api/reset/{node}")
async def reset_node(request: web.Request) -> web.Response:
    require_admin(current(request))
    this_node(request)
    reset_statistics(broker(request), sampler(request))
    return no_content()


@routes.get("/api/all-configuration")
async def all_configuration(request: web.Request) -> web.Response:
    require_admin(current(request))
    return reply(export_definitions(broker(request)))
