"""Runtime parameters and shovels in the HTTP API (RabbitMQ 3.10's paths and shapes):

- `GET /api/parameters`, `/api/parameters/{component}`, `/api/parameters/{component}/{vhost}`
  list `{"vhost", "component", "name", "value"}`; `GET/PUT/DELETE
  /api/parameters/{component}/{vhost}/{name}`. PUT takes `{"value": {...}}` (the other keys
  are optional, as RabbitMQ's): 201 created, 204 replaced, 400 "Validation failed" with
  the errors, one per line. Components: `shovel` (broker/shovel), `federation-upstream` and
  `federation-upstream-set` (broker/federation); another is 400
  "component X not found". Writing needs the policymaker or administrator tag
  (rabbit_mgmt_util:is_authorized_policies).
- `GET /api/shovels`, `/api/shovels/{vhost}`: each dynamic shovel's status (state
  starting | running | terminated, the last error as `reason`, URIs without passwords);
  `DELETE /api/shovels/vhost/{vhost}/{name}/restart` restarts one (404 when there is none).

Sources: rabbitmq.com/parameters.html, shovel-dynamic.html, rabbitmq_shovel_management's
rabbit_shovel_mgmt.erl.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

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
from broker.runtime_parameters import COMPONENTS, clear_parameter, set_parameter

routes = web.RouteTableDef()


def _item(p: Any) -> dict[str, Any]:
    return {"vhost": p.vhost, "component": p.component, "name": p.name, "value": p.value}


def _listed(request: web.Request, component: str | None = None,
            vhost: str | None = None) -> web.Response:
    b = broker(request)
    seen = set(visible_vhosts(b, current(request)))
    items = [_item(p) for p in b.definitions.list_parameters(vhost)
             if p.vhost in seen and (component is None or p.component == component)]
    return list_reply(request, items)


@routes.get("/api/parameters")
async def list_all(request: web.Request) -> web.Response:
    return _listed(request)


@routes.get("/api/parameters/{component}")
async def list_component(request: web.Request) -> web.Response:
    return _listed(request, param(request, "component"))


@routes.get("/api/parameters/{component}/{vhost}")
async def list_vhost(request: web.Request) -> web.Response:
    vhost = param(request, "vhost")
    require_vhost(broker(request), current(request), vhost)
    return _listed(request, param(request, "component"), vhost)


def _one(request: web.Request) -> tuple[str, str, str, Any]:
    b = broker(request)
    vhost = param(request, "vhost")
    require_vhost(b, current(request), vhost)
    component, name = param(request, "component"), param(request, "name")
    for p in b.definitions.list_parameters(vhost):
        if p.component == component and p.name == name:
            return vhost, component, name, p
    return vhost, component, name, None


@routes.get("/api/parameters/{component}/{vhost}/{name}")
async def get_one(request: web.Request) -> web.Response:
    _v, _c, _n, p = _one(request)
    if p is None:
        raise not_found()
    return reply(_item(p))


def _writer(request: web.Request) -> None:
    if not current(request).is_policymaker:
        raise not_authorised("Not policymaker user")


@routes.put("/api/parameters/{component}/{vhost}/{name}")
async def put(request: web.Request) -> web.Response:
    vhost, component, name, existing = _one(request)
    _writer(request)
    data = await body(request)
    if component not in COMPONENTS:
        raise bad_request(f"Validation failed\n\ncomponent {component} not found\n")
    if "value" not in data:
        raise bad_request("key_missing: value")
    errs = set_parameter(broker(request), vhost, component, name, data["value"])
    if errs:
        raise bad_request("Validation failed\n\n" + "\n".join(errs) + "\n")
    return no_content() if existing is not None else created()


@routes.delete("/api/parameters/{component}/{vhost}/{name}")
async def delete(request: web.Request) -> web.Response:
    vhost, component, name, existing = _one(request)
    _writer(request)
    if existing is None or component not in COMPONENTS:
        raise not_found()
    clear_parameter(broker(request), vhost, component, name)
    return no_content()


@routes.get("/api/shovels")
async def shovels_all(request: web.Request) -> web.Response:
    b = broker(request)
    seen = set(visible_vhosts(b, current(request)))
    return list_reply(request, [s for s in b.shovels.status() if s["vhost"] in seen])


@routes.get("/api/shovels/{vhost}")
async def shovels_vhost(request: web.Request) -> web.Response:
    b = broker(request)
    vhost = param(request, "vhost")
    require_vhost(b, current(request), vhost)
    return list_reply(request, b.shovels.status(vhost))


@routes.delete("/api/shovels/vhost/{vhost}/{name}/restart")
async def restart(request: web.Request) -> web.Response:
    b = broker(request)
    vhost = param(request, "vhost")
    require_vhost(b, current(request), vhost)
    _writer(request)
    if not await b.shovels.restart(vhost, param(request, "name")):
        raise not_found()
    return no_content()
