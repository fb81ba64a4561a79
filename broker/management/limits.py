"""Vhost and user limits in the HTTP API (RabbitMQ 3.10.8's rabbit_mgmt_wm_limits.erl,
rabbit_mgmt_wm_limit.erl, rabbit_mgmt_wm_user_limits.erl, rabbit_mgmt_wm_user_limit.erl;
the limits themselves: broker/limits.py, kept by broker/users.py):

- `GET /api/vhost-limits`: `[{"vhost", "value": {"max-connections": N, ...}}]` for the
  visible vhosts that have limits; `GET /api/vhost-limits/{vhost}`: that vhost's (or []),
  404 for an unknown vhost.
- `GET /api/user-limits`, `/api/user-limits/{user}`: `[{"user", "value": {...}}]` likewise
  (any management user sees them, as in RabbitMQ); 404 for an unknown user.
- `PUT /api/vhost-limits/{vhost}/{name}`, `/api/user-limits/{user}/{name}` with
  `{"value": integer}` (-1: no limit): 204; 400 "[{key_missing,value}]", 400 for an unknown
  limit or a value that is not an integer (RabbitMQ's texts); an unknown vhost is 404
  {"error": "not_found", "reason": "vhost_not_found"}, an unknown user 400
  ["no_such_user", user]. `DELETE` the same paths: 204 (also when that limit was not set).
  Administrator only. RabbitMQ 3.10.8 answers 500 to a DELETE for an unknown vhost or user;
  this broker 404.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from broker import limits as rules
from broker.management.auth import current, require_admin, require_vhost, visible_vhosts
from broker.management.context import broker
from broker.management.http import bad_request, body, no_content, not_found, param, reply
from broker.users import NoSuchUser, NoSuchVhost

routes = web.RouteTableDef()


def _erlang(value: Any) -> str:
    """How RabbitMQ's error texts print a JSON value (a string is an Erlang binary)."""
    return f'<<"{value}">>' if isinstance(value, str) else json.dumps(value)


async def _value(request: web.Request, known: tuple[str, ...], wrap: str) -> tuple[str, int]:
    """(limit name, integer value) of a PUT; 400 with RabbitMQ's text otherwise. `wrap`
    formats the text ("Validation failed" around vhost limit errors)."""
    data = await body(request)
    if "value" not in data:
        raise bad_request("[{key_missing,value}]")
    name, value = param(request, "name"), data["value"]
    if name not in known:
        scope = "limits" if known == rules.VHOST_LIMITS else "user-limits"
        raise bad_request(wrap.format(
            f'Unrecognised terms [{{<<"{name}">>,{_erlang(value)}}}] in {scope}'))
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(wrap.format(
            f"{name} should be a number, actually was {_erlang(value)}"))
    return name, value


# -- vhost limits -------------------------------------------------------------------------
@routes.get("/api/vhost-limits")
async def list_vhost_limits(request: web.Request) -> web.Response:
    b = broker(request)
    return reply([{"vhost": v, "value": dict(b.users.limits_of_vhost(v))}
                  for v in visible_vhosts(b, current(request))
                  if b.users.limits_of_vhost(v)])


@routes.get("/api/vhost-limits/{vhost}")
async def get_vhost_limits(request: web.Request) -> web.Response:
    b, vhost = broker(request), param(request, "vhost")
    require_vhost(b, current(request), vhost)
    values = dict(b.users.limits_of_vhost(vhost))
    return reply([{"vhost": vhost, "value": values}] if values else [])


@routes.put("/api/vhost-limits/{vhost}/{name}")
async def put_vhost_limit(request: web.Request) -> web.Response:
    require_admin(current(request))
    b, vhost = broker(request), param(request, "vhost")
    if vhost not in b.vhosts:
        return reply({"error": "not_found", "reason": "vhost_not_found"}, status=404)
    name, value = await _value(request, rules.VHOST_LIMITS, "Validation failed\n\n{}\n")
    try:
        b.users.set_vhost_limits(vhost, {name: value})
    except NoSuchVhost:
        raise not_found() from None
    return no_content()


@routes.delete("/api/vhost-limits/{vhost}/{name}")
async def delete_vhost_limit(request: web.Request) -> web.Response:
    require_admin(current(request))
    b, vhost = broker(request), param(request, "vhost")
    if vhost not in b.vhosts:
        raise not_found()
    b.users.clear_vhost_limit(vhost, param(request, "name"))
    return no_content()


# -- user limits --------------------------------------------------------------------------
def _user_item(name: str, values: dict[str, int]) -> dict:
    return {"user": name, "value": dict(values)}


@routes.get("/api/user-limits")
async def list_user_limits(request: web.Request) -> web.Response:
    users = broker(request).users
    return reply([_user_item(u.name, users.user_limits[u.name]) for u in users.list_users()
                  if users.user_limits.get(u.name)])


@routes.get("/api/user-limits/{user}")
async def get_user_limits(request: web.Request) -> web.Response:
    users, name = broker(request).users, param(request, "user")
    if users.user(name) is None:
        raise not_found()
    values = users.user_limits.get(name)
    return reply([_user_item(name, values)] if values else [])


@routes.put("/api/user-limits/{user}/{name}")
async def put_user_limit(request: web.Request) -> web.Response:
    require_admin(current(request))
    users, user = broker(request).users, param(request, "user")
    name, value = await _value(request, rules.USER_LIMITS, "{}")
    try:
        users.set_user_limits(user, {name: value})
    except NoSuchUser:
        return reply({"error": "bad_request", "reason": ["no_such_user", user]}, status=400)
    return no_content()


@routes.delete("/api/user-limits/{user}/{name}")
async def delete_user_limit(request: web.Request) -> web.Response:
    require_admin(current(request))
    users, user = broker(request).users, param(request, "user")
    if users.user(user) is None:
        raise not_found()
    users.clear_user_limit(user, param(request, "name"))
    return no_content()
