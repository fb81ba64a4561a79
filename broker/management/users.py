"""/api/users (also POST /api/users/bulk-delete), /api/vhosts, /api/permissions, /api/topic-permissions and their per-user /
per-vhost forms: list, create or update (PUT: 201 created, 204 updated), delete.
Writes need the administrator tag (401 otherwise); reads of other users' data too.
Sources: rabbitmq.com/management.html, rabbitmq.com/access-control.html, RabbitMQ 3.10
/api/index.html."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker import trace
from broker.management import samples, shapes
from broker.management.auth import current, require_admin, require_vhost, visible_vhosts
from broker.management.body_fields import parse_bool
from broker.management.context import broker, sampler
from broker.management.http import (
    bad_request,
    body,
    created,
    list_reply,
    no_content,
    not_found,
    param,
    reply,
)
from broker.management.ranges import Ranges
from broker.passwords import decode_hash
from broker.users import NoSuchUser, NoSuchVhost

if TYPE_CHECKING:
    from broker.started import StartedBroker

routes = web.RouteTableDef()


def tags_of(value: Any) -> list[str]:
    """RabbitMQ accepts tags as "a,b" or ["a", "b"]."""
    if value is None:
        return []
    if isinstance(value, str):
        return [t.strip() for t in value.split(",") if t.strip()]
    if isinstance(value, list):
        return [str(t) for t in value]
    raise bad_request("tags must be a string or a list")


# -- users --------------------------------------------------------------------------------
@routes.get("/api/users")
async def list_users(request: web.Request) -> web.Response:
    require_admin(current(request))
    users = broker(request).users
    return list_reply(request, [shapes.user(u, users.user_limits.get(u.name))
                                for u in users.list_users()])


@routes.get("/api/users/without-permissions")
async def without_permissions(request: web.Request) -> web.Response:
    require_admin(current(request))
    users = broker(request).users
    have = {p.user for p in users.list_permissions()}
    return reply([shapes.user(u, users.user_limits.get(u.name)) for u in users.list_users()
                  if u.name not in have])


@routes.post("/api/users/bulk-delete")
async def bulk_delete(request: web.Request) -> web.Response:
    """{"users": [names]}: delete them in order, 204 (rabbit_mgmt_wm_users_bulk_delete.erl).
    An unknown name stops there: 400 ["no_such_user", name] (those before it are gone)."""
    require_admin(current(request))
    data = await body(request)
    if "users" not in data:
        raise bad_request("[{key_missing,users}]")
    names = data["users"]
    if not isinstance(names, list):
        raise bad_request("users must be a list")
    for name in names:
        if not broker(request).delete_user(str(name)):  # closes its connections too
            return reply({"error": "bad_request", "reason": ["no_such_user", name]},
                         status=400)
    return no_content()


def _user(request: web.Request) -> Any:
    require_admin(current(request))
    u = broker(request).users.user(param(request, "name"))
    if u is None:
        raise not_found()
    return u


@routes.get("/api/users/{name}")
async def get_user(request: web.Request) -> web.Response:
    u = _user(request)
    return reply(shapes.user(u, broker(request).users.user_limits.get(u.name)))


@routes.put("/api/users/{name}")
async def put_user(request: web.Request) -> web.Response:
    """{"password": "...", "tags": "administrator"} or {"password_hash": base64,
    "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": [...]}; an empty
    password_hash makes a user that can log in only with EXTERNAL."""
    require_admin(current(request))
    users = broker(request).users
    name = param(request, "name")
    data = await body(request)
    existed = users.user(name) is not None
    tags = tags_of(data.get("tags"))
    try:
        if "password" in data:
            users.add_user(name, str(data["password"]), tags=tags)
        elif "password_hash" in data:
            users.add_user(name, password_hash=decode_hash(str(data["password_hash"])),
                           hashing_algorithm=data.get("hashing_algorithm") or
                           "rabbit_password_hashing_sha256", tags=tags)
        elif existed:
            users.set_user_tags(name, tags)
        else:
            raise bad_request("key_missing: password or password_hash")
    except ValueError as exc:
        raise bad_request(str(exc)) from None
    return no_content() if existed else created()


@routes.delete("/api/users/{name}")
async def delete_user(request: web.Request) -> web.Response:
    """Delete the user; its connections are closed with 320 (`Broker.delete_user`); 404
    unknown."""
    require_admin(current(request))
    if not broker(request).delete_user(param(request, "name")):
        raise not_found()
    return no_content()


@routes.get("/api/users/{name}/permissions")
async def user_permissions(request: web.Request) -> web.Response:
    u = _user(request)
    return reply([shapes.permission(p) for p in broker(request).users.list_permissions()
                  if p.user == u.name])


@routes.get("/api/users/{name}/topic-permissions")
async def user_topic_permissions(request: web.Request) -> web.Response:
    """The user's topic permissions in every vhost ([] when none; 404 unknown user)."""
    u = _user(request)
    return reply([shapes.topic_permission(p)
                  for p in broker(request).users.list_topic_permissions() if p.user == u.name])


# -- vhosts -------------------------------------------------------------------------------
def _vhost_defs(b: StartedBroker) -> dict[str, Any]:
    return {d.name: d for d in b.definitions.list_vhosts()}


def _vhost_json(request: web.Request, name: str, d: Any, ranges: Ranges, now_ms: int) -> dict:
    """A vhost's JSON (`d` its definition, for description and tags); with a range, its
    message_stats / messages* (msg_rates) and recv_oct / send_oct (data_rates) samples."""
    b, s = broker(request), sampler(request)
    out = shapes.vhost(b, s, b.vhosts[name], getattr(d, "description", ""),
                       getattr(d, "tags", ()))
    if ranges.any():
        live = shapes.vhost_octets(b, b.vhosts[name]) if ranges.data_rates else None
        samples.vhost(out, s, ("vhost", name), ranges, now_ms, live)
    return out


@routes.get("/api/vhosts")
async def list_vhosts(request: web.Request) -> web.Response:
    b = broker(request)
    ranges, now_ms = samples.from_request(request, "invalid_range_parameters")
    defs = _vhost_defs(b)
    items = [_vhost_json(request, n, defs.get(n), ranges, now_ms)
             for n in visible_vhosts(b, current(request))]
    return list_reply(request, items)


@routes.get("/api/vhosts/{name}")
async def get_vhost(request: web.Request) -> web.Response:
    b = broker(request)
    name = param(request, "name")
    require_vhost(b, current(request), name)
    ranges, now_ms = samples.from_request(request)
    return reply(_vhost_json(request, name, _vhost_defs(b).get(name), ranges, now_ms))


@routes.put("/api/vhosts/{name}")
async def put_vhost(request: web.Request) -> web.Response:
    """{"description": "...", "tags": "a,b", "tracing": true} (all optional): 201 created,
    204 updated. A new vhost gives the user who created it permissions ".*" ".*" ".*", as
    RabbitMQ's. `tracing` true / false turns the firehose on / off (rabbit_vhost:put_vhost
    calls rabbit_trace:start / stop; broker/trace.py); absent leaves it; anything else is
    400 not_boolean."""
    require_admin(current(request))
    b = broker(request)
    name = param(request, "name")
    if not name:
        raise bad_request("vhost name must not be empty")
    data = await body(request)
    tracing = parse_bool(data, "tracing", False) if "tracing" in data else None
    existed = name in b.vhosts
    b.definitions.add_vhost(name, str(data.get("description", "")), tags_of(data.get("tags")))
    b.add_vhost(name)
    if not existed:  # RabbitMQ 3.10.8 grants the creating user full permissions (checked)
        b.users.set_permissions(current(request).name, name, ".*", ".*", ".*")
    if tracing is not None:
        (trace.start if tracing else trace.stop)(b, name)
    return no_content() if existed else created()


def _admin_vhost(request: web.Request) -> str:
    """The `{name}` vhost of the path for an administrator: 401 otherwise, 404 unknown."""
    require_admin(current(request))
    name = param(request, "name")
    if name not in broker(request).vhosts:
        raise not_found()
    return name


@routes.delete("/api/vhosts/{name}")
async def delete_vhost(request: web.Request) -> web.Response:
    """Delete the vhost and all in it; answers at once, its connections are closed with
    320 without waiting for them (`Broker.delete_vhost`); 404 unknown."""
    broker(request).delete_vhost(_admin_vhost(request))
    return no_content()


@routes.get("/api/vhosts/{name}/permissions")
async def vhost_permissions(request: web.Request) -> web.Response:
    name = _admin_vhost(request)
    return reply([shapes.permission(p) for p in broker(request).users.list_permissions()
                  if p.vhost == name])


# -- permissions --------------------------------------------------------------------------
@routes.get("/api/permissions")
async def list_permissions(request: web.Request) -> web.Response:
    require_admin(current(request))
    return list_reply(request, [shapes.permission(p)
                                for p in broker(request).users.list_permissions()],
                      name_of=lambda i: i["user"])


def _perm_key(request: web.Request) -> tuple[str, str]:
    require_admin(current(request))
    return param(request, "vhost"), param(request, "user")


@routes.get("/api/permissions/{vhost}/{user}")
async def get_permission(request: web.Request) -> web.Response:
    vhost, user = _perm_key(request)
    for p in broker(request).users.list_permissions():
        if p.vhost == vhost and p.user == user:
            return reply(shapes.permission(p))
    raise not_found()


@routes.put("/api/permissions/{vhost}/{user}")
async def put_permission(request: web.Request) -> web.Response:
    """{"configure": ".*", "write": ".*", "read": ".*"}: 201 created, 204 updated; 400 for a
    missing key or bad regex, 404 for an unknown user or vhost."""
    vhost, user = _perm_key(request)
    data = await body(request)
    users = broker(request).users
    missing = [k for k in ("configure", "write", "read") if k not in data]
    if missing:
        raise bad_request(f"key_missing: {missing[0]}")
    existed = any(p.vhost == vhost and p.user == user for p in users.list_permissions())
    try:
        users.set_permissions(user, vhost, str(data["configure"]), str(data["write"]),
                              str(data["read"]))
    except (NoSuchUser, NoSuchVhost):
        raise not_found() from None
    except ValueError as exc:
        raise bad_request(str(exc)) from None
    return no_content() if existed else created()


@routes.delete("/api/permissions/{vhost}/{user}")
async def delete_permission(request: web.Request) -> web.Response:
    vhost, user = _perm_key(request)
    if not broker(request).users.clear_permissions(user, vhost):
        raise not_found()
    return no_content()


@routes.get("/api/vhosts/{name}/topic-permissions")
async def vhost_topic_permissions(request: web.Request) -> web.Response:
    """Every topic permission in the vhost ([] when none; 404 unknown vhost)."""
    name = _admin_vhost(request)
    return reply([shapes.topic_permission(p)
                  for p in broker(request).users.list_topic_permissions() if p.vhost == name])


@routes.get("/api/topic-permissions")
async def list_topic_permissions(request: web.Request) -> web.Response:
    require_admin(current(request))
    return reply([shapes.topic_permission(p)
                  for p in broker(request).users.list_topic_permissions()])


def _topic_permissions_of(request: web.Request) -> list[dict]:
    """The user's topic permissions in the vhost; 404 when there are none (RabbitMQ 3.10.8
    answers the same list for .../{vhost}/{user}/{exchange}, whatever the exchange)."""
    vhost, user = _perm_key(request)
    items = [shapes.topic_permission(p) for p in broker(request).users.list_topic_permissions()
             if p.vhost == vhost and p.user == user]
    if not items:
        raise not_found()
    return items


@routes.get("/api/topic-permissions/{vhost}/{user}")
async def get_topic_permissions(request: web.Request) -> web.Response:
    return reply(_topic_permissions_of(request))


@routes.get("/api/topic-permissions/{vhost}/{user}/{exchange}")
async def get_topic_permissions_exchange(request: web.Request) -> web.Response:
    return reply(_topic_permissions_of(request))


@routes.delete("/api/topic-permissions/{vhost}/{user}/{exchange}")
async def delete_topic_permission_exchange(request: web.Request) -> web.Response:
    """Drop the user's topic permission for one exchange: 204 even when it had none, as
    RabbitMQ 3.10.8 answers; 404 for an unknown user or vhost."""
    vhost, user = _perm_key(request)
    b = broker(request)
    if vhost not in b.vhosts or b.users.user(user) is None:
        raise not_found()
    b.users.clear_topic_permissions(user, vhost, param(request, "exchange"))
    return no_content()


@routes.put("/api/topic-permissions/{vhost}/{user}")
async def put_topic_permission(request: web.Request) -> web.Response:
    """{"exchange": "amq.topic", "write": "^a", "read": ".*"}: 201 for the user's first in
    the vhost, 204 after."""
    vhost, user = _perm_key(request)
    data = await body(request)
    users = broker(request).users
    exchange = str(data.get("exchange", ""))
    # 204 once the user has any topic permission in the vhost (the resource RabbitMQ
    # 3.10.8 checks is the user-and-vhost pair, not the exchange)
    existed = any(p.vhost == vhost and p.user == user for p in users.list_topic_permissions())
    try:
        users.set_topic_permissions(user, vhost, exchange, str(data.get("write", "")),
                                    str(data.get("read", "")))
    except (NoSuchUser, NoSuchVhost):
        raise not_found() from None
    except ValueError as exc:
        raise bad_request(str(exc)) from None
    return no_content() if existed else created()


@routes.delete("/api/topic-permissions/{vhost}/{user}")
async def delete_topic_permission(request: web.Request) -> web.Response:
    vhost, user = _perm_key(request)
    if not broker(request).users.clear_topic_permissions(user, vhost):
        raise not_found()
    return no_content()
