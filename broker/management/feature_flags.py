"""GET /api/feature-flags and PUT /api/feature-flags/{name}/enable (RabbitMQ 3.10.8's
rabbit_mgmt_wm_feature_flags.erl, rabbit_mgmt_wm_feature_flag_enable.erl; administrator).

This broker has no upgrade path between feature sets: it behaves as RabbitMQ 3.10.8 with
every flag of that version enabled, so the list is 3.10.8's flags (rabbit_core_ff.erl and
rabbitmq_management_agent's), all `"state": "enabled"`, and enabling one of them is a no-op
(204). Another name: 400 "unsupported", as RabbitMQ.
"""

from __future__ import annotations

from aiohttp import web

from broker.management.auth import current, require_admin
from broker.management.http import bad_request, list_reply, no_content, param

routes = web.RouteTableDef()

# (name, desc, doc_url, provided_by), as RabbitMQ 3.10.8's GET /api/feature-flags lists them
FLAGS = [
    ("classic_mirrored_queue_version", "Support setting version for classic mirrored queues",
     "", "rabbit"),
    ("drop_unroutable_metric", "Count unroutable publishes to be dropped in stats", "",
     "rabbitmq_management_agent"),
    ("empty_basic_get_metric", "Count AMQP `basic.get` on empty queues in stats", "",
     "rabbitmq_management_agent"),
    ("implicit_default_bindings",
     "Default bindings are now implicit, instead of being stored in the database", "",
     "rabbit"),
    ("maintenance_mode_status", "Maintenance mode status", "", "rabbit"),
    ("quorum_queue", "Support queues of type `quorum`",
     "https://www.rabbitmq.com/quorum-queues.html", "rabbit"),
    ("stream_queue", "Support queues of type `stream`", "https://www.rabbitmq.com/stream.html",
     "rabbit"),
    ("user_limits", "Configure connection and channel limits for a user", "", "rabbit"),
    ("virtual_host_metadata", "Virtual host metadata (description, tags, etc)", "", "rabbit"),
]


@routes.get("/api/feature-flags")
async def list_flags(request: web.Request) -> web.Response:
    require_admin(current(request))
    return list_reply(request, [
        {"name": n, "desc": d, "doc_url": u, "state": "enabled", "stability": "stable",
         "provided_by": p} for n, d, u, p in FLAGS])


@routes.put("/api/feature-flags/{name}/enable")
async def enable(request: web.Request) -> web.Response:
    require_admin(current(request))
    if param(request, "name") not in {f[0] for f in FLAGS}:
        raise bad_request("unsupported")
    return no_content()
