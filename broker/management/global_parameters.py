"""Global runtime parameters and the cluster name (RabbitMQ 3.10.8's
rabbit_mgmt_wm_global_parameters.erl, rabbit_mgmt_wm_global_parameter.erl,
rabbit_mgmt_wm_cluster_name.erl):

- `GET /api/global-parameters`: `[{"name", "value"}]` (the list query parameters apply);
  `GET/PUT/DELETE /api/global-parameters/{name}`. PUT takes `{"value": any JSON}`: 201
  created, 204 replaced, 400 without `value`; DELETE 204, 404 when there is none. Policymaker
  or administrator (rabbit_mgmt_util:is_authorized_global_parameters).
- `GET /api/cluster-name` (any management user): `{"name"}`; `PUT /api/cluster-name`
  `{"name": "..."}` (administrator) stores the `cluster_name` global parameter, 204; deleting
  that parameter brings back the default (the node name), as in RabbitMQ.

The broker keeps them (Broker.set_global_parameter, durable in the definitions database);
the definitions export lists them under "global_parameters".
"""

from __future__ import annotations

from aiohttp import web

from broker.management.auth import current, require_admin
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


def _policymaker(request: web.Request) -> None:
    if not current(request).is_policymaker:
        raise not_authorised("User not authorised to access object")


@routes.get("/api/global-parameters")
async def list_all(request: web.Request) -> web.Response:
    _policymaker(request)
    params = broker(request).global_parameters
    return list_reply(request, [{"name": n, "value": params[n]} for n in sorted(params)])


@routes.get("/api/global-parameters/{name}")
async def get_one(request: web.Request) -> web.Response:
    _policymaker(request)
    name = param(request, "name")
    params = broker(request).global_parameters
    if name not in params:
        raise not_found()
    return reply({"name": name, "value": params[name]})


@routes.put("/api/global-parameters/{name}")
async def put(request: web.Request) -> web.Response:
    _policymaker(request)
    data = await body(request)
    if "value" not in data:
        raise bad_request("[{key_missing,value}]")
    b, name = broker(request), param(request, "name")
    existed = name in b.global_parameters
    b.set_global_parameter(name, data["value"])
    return no_content() if existed else created()


@routes.delete("/api/global-parameters/{name}")
async def delete(request: web.Request) -> web.Response:
    _policymaker(request)
    if not broker(request).clear_global_parameter(param(request, "name")):
        raise not_found()
    return no_content()


@routes.get("/api/cluster-name")
async def get_cluster_name(request: web.Request) -> web.Response:
    return reply({"name": broker(request).cluster_name()})


@routes.put("/api/cluster-name")
async def put_cluster_name(request: web.Request) -> web.Response:
    """RabbitMQ 3.10.8 answers 500 for a name that is not a string; this broker 400."""
    require_admin(current(request))
    data = await body(request)
    if "name" not in data:
        raise bad_request("[{key_missing,name}]")
    if not isinstance(data["name"], str) or not data["name"]:
        raise bad_request("name must be a non-empty string")
    broker(request).set_global_parameter("cluster_name", data["name"])
    return no_content()
