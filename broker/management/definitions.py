"""Definitions export and import in RabbitMQ's JSON format (rabbitmq.com/definitions.html):
GET/POST /api/definitions (everything: users with `password_hash`, `hashing_algorithm` and
their limits, vhosts, permissions, topic permissions, global parameters, runtime parameters
(with vhost limits as component `vhost-limits`, name `limits`, as RabbitMQ), policies,
exchanges, queues, bindings) and
GET/POST /api/definitions/{vhost} (one vhost's policies, exchanges, queues, bindings).
`export_definitions` / `import_definitions` also serve `load_definitions` at boot and
brokerctl. Administrator only.

What is exported: every user, vhost and permission; non-exclusive queues; exchanges except
the default one and `amq.*`; bindings between exported objects (not the default
exchange's implicit ones). Import creates or updates in dependency order (vhosts, users
and their limits, permissions, global parameters, topic permissions, policies, parameters,
exchanges, queues, bindings) and reports every failure; exchanges named "" or `amq.*`
are skipped with a warning, as rabbit_definitions does (every vhost has its own).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker import __version__, errors
from broker.management import shapes
from broker.management.auth import current, require_admin
from broker.management.body_fields import to_bool
from broker.management.context import broker
from broker.management.http import bad_request, body, no_content, not_found, param, reply
from broker.passwords import decode_hash, encode_hash
from broker.runtime_parameters import set_parameter

if TYPE_CHECKING:
    from broker.started import StartedBroker
    from broker.vhost import VHost

log = logging.getLogger("broker.management")
routes = web.RouteTableDef()


def _vhost_objects(v: VHost, with_vhost: bool) -> dict[str, list[dict]]:
    def tag(d: dict) -> dict:
        if not with_vhost:
            d.pop("vhost", None)
        return d

    queues = [tag({"name": q.name, "vhost": v.name, "durable": q.durable,
                   "auto_delete": q.auto_delete, "arguments": q.arguments})
              for q in sorted(v.queues.values(), key=lambda q: q.name)
              if q.exclusive_owner is None]
    exported_q = {q["name"] for q in queues}
    exchanges = [tag({"name": x.name, "vhost": v.name, "type": x.type, "durable": x.durable,
                      "auto_delete": x.auto_delete, "internal": x.internal,
                      "arguments": x.arguments})
                 for x in sorted(v.exchanges.values(), key=lambda x: x.name)
                 if x.name and not x.name.startswith("amq.")]
    bindings = []
    for bd in shapes.bindings_of_vhost(v):
        if not bd["source"] or (bd["destination_type"] == "queue"
                                and bd["destination"] not in exported_q):
            continue
        bd.pop("properties_key", None)
        bindings.append(tag(bd))
    policies = [tag(shapes.policy(p)) for p in sorted(v.policies.values(),
                                                      key=lambda p: p.name)]
    parameters = [tag({"vhost": p.vhost, "component": p.component, "name": p.name,
                       "value": p.value})
                  for p in (v.definitions.list_parameters(v.name) if v.definitions else [])]
    if v.limits:  # RabbitMQ keeps vhost limits as the runtime parameter vhost-limits/limits
        parameters.append(tag({"vhost": v.name, "component": "vhost-limits",
                               "name": "limits", "value": dict(v.limits)}))
    return {"parameters": parameters, "policies": policies, "queues": queues,
            "exchanges": exchanges, "bindings": bindings}


def export_definitions(b: StartedBroker, vhost: str | None = None) -> dict:
    """The broker's definitions (or one vhost's) as RabbitMQ's JSON document."""
    head = {"rabbit_version": "3.10.8", "rabbitmq_version": "3.10.8",
            "product_name": b.config.product, "product_version": __version__}
    if vhost is not None:
        return {**head, **_vhost_objects(b.vhosts[vhost], with_vhost=False)}
    users = b.users
    out: dict[str, Any] = {
        **head,
        "users": [{"name": u.name, "password_hash": encode_hash(u.password_hash),
                   "hashing_algorithm": u.hashing_algorithm, "tags": list(u.tags),
                   "limits": dict(users.user_limits.get(u.name) or {})}
                  for u in users.list_users()],
        "vhosts": [{"name": d.name, "description": d.description, "tags": list(d.tags),
                    "metadata": {"description": d.description, "tags": list(d.tags)}}
                   for d in b.definitions.list_vhosts()],
        "permissions": [shapes.permission(p) for p in users.list_permissions()],
        "topic_permissions": [shapes.topic_permission(p)
                              for p in users.list_topic_permissions()],
        "global_parameters": [{"name": n, "value": value}
                              for n, value in sorted(b.global_parameters.items())],
    }
    merged: dict[str, list] = {"parameters": [], "policies": [], "queues": [],
                               "exchanges": [], "bindings": []}
    for name in sorted(b.vhosts):
        for key, items in _vhost_objects(b.vhosts[name], with_vhost=True).items():
            merged[key] += items
    return {**out, **merged}


def _tags(value: Any) -> list[str]:
    if isinstance(value, str):
        return [t for t in (s.strip() for s in value.split(",")) if t]
    return [str(t) for t in value or []]


def import_definitions(b: StartedBroker, data: dict, vhost: str | None = None) -> list[str]:
    """Create or update everything in `data` (a RabbitMQ definitions document); with
    `vhost`, the document's objects go to that vhost. Returns the failures as texts (empty
    when everything was imported)."""
    failures: list[str] = []

    def attempt(what: str, fn: Any, *args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except (errors.AMQPError, ValueError, LookupError, KeyError, TypeError) as exc:
            failures.append(f"{what}: {getattr(exc, 'reply_text', None) or exc}")

    if vhost is None:
        for d in data.get("vhosts", []):
            def add_vhost(d: dict = d) -> None:
                meta = d.get("metadata") or {}
                b.definitions.add_vhost(d["name"], d.get("description", meta.get(
                    "description", "")), _tags(d.get("tags", meta.get("tags", []))))
                b.add_vhost(d["name"])
            attempt(f"vhost {d.get('name')!r}", add_vhost)
        for u in data.get("users", []):
            def add_user(u: dict = u) -> None:
                if "password" in u:
                    b.users.add_user(u["name"], u["password"], tags=_tags(u.get("tags")))
                else:
                    b.users.add_user(u["name"], password_hash=decode_hash(
                        u.get("password_hash", "")), hashing_algorithm=u.get(
                        "hashing_algorithm") or "rabbit_password_hashing_sha256",
                        tags=_tags(u.get("tags")))
            attempt(f"user {u.get('name')!r}", add_user)
            if u.get("limits"):
                attempt(f"limits of user {u.get('name')!r}",
                        lambda u=u: b.users.set_user_limits(u["name"], u["limits"]))
        for p in data.get("permissions", []):
            attempt(f"permissions of {p.get('user')!r} in {p.get('vhost')!r}",
                    lambda p=p: b.users.set_permissions(p["user"], p["vhost"],
                                                        p["configure"], p["write"], p["read"]))
        for g in data.get("global_parameters", []):
            attempt(f"global parameter {g.get('name')!r}",
                    lambda g=g: b.set_global_parameter(str(g["name"]), g["value"]))
        for p in data.get("topic_permissions", []):
            attempt(f"topic permissions of {p.get('user')!r}",
                    lambda p=p: b.users.set_topic_permissions(
                        p["user"], p["vhost"], p["exchange"], p["write"], p["read"]))

    def target(item: dict) -> VHost:
        name = vhost if vhost is not None else item.get("vhost", b.config.default_vhost)
        if name not in b.vhosts:
            raise LookupError(f"no vhost '{name}'")
        return b.vhosts[name]

    for p in data.get("policies", []):
        attempt(f"policy {p.get('name')!r}", lambda p=p: target(p).set_policy(
            p["name"], p["pattern"], p["definition"], p.get("priority", 0),
            p.get("apply-to", "all")))
    for p in data.get("parameters", []):
        def add_parameter(p: dict = p) -> None:
            if p.get("component") == "vhost-limits":
                b.users.set_vhost_limits(target(p).name, p["value"])
                return
            errs = set_parameter(b, target(p).name, str(p.get("component")), p["name"],
                                 p["value"])
            if errs:
                raise ValueError("; ".join(errs))
        attempt(f"parameter {p.get('name')!r}", add_parameter)
    for x in data.get("exchanges", []):
        name = x.get("name")
        if name == "" or (isinstance(name, str) and name.startswith("amq.")):
            # rabbit_definitions add_exchange_int: every vhost has these already
            if name:
                log.warning("Skipping import of an exchange whose name begins with 'amq.', "
                            "name: %s", name)
            else:
                log.warning("Not importing the default exchange")
            continue
        attempt(f"exchange {x.get('name')!r}", lambda x=x: target(x).declare_exchange(
            x["name"], x["type"], durable=to_bool(x.get("durable"), True),
            auto_delete=to_bool(x.get("auto_delete"), False),
            internal=to_bool(x.get("internal"), False),
            arguments=x.get("arguments") or {}, check_reserved=True))
    for q in data.get("queues", []):
        attempt(f"queue {q.get('name')!r}", lambda q=q: target(q).declare_queue(
            q["name"], durable=to_bool(q.get("durable"), True),
            auto_delete=to_bool(q.get("auto_delete"), False),
            arguments=q.get("arguments") or {}))
    for bd in data.get("bindings", []):
        attempt(f"binding {bd.get('source')!r} -> {bd.get('destination')!r}",
                lambda bd=bd: target(bd).bind(
                    bd.get("destination_type", "queue"), bd["destination"], bd["source"],
                    bd.get("routing_key", ""), bd.get("arguments") or {}))
    return failures


@routes.get("/api/definitions")
async def get_all(request: web.Request) -> web.Response:
    require_admin(current(request))
    return _download(request, export_definitions(broker(request)))


@routes.get("/api/definitions/{vhost}")
async def get_vhost(request: web.Request) -> web.Response:
    require_admin(current(request))
    b = broker(request)
    name = param(request, "vhost")
    if name not in b.vhosts:
        raise not_found()
    return _download(request, export_definitions(b, name))


def _download(request: web.Request, data: dict) -> web.Response:
    resp = reply(data)
    if request.query.get("download"):
        resp.headers["Content-Disposition"] = (
            f'attachment; filename="{request.query["download"]}"')
    return resp


@routes.post("/api/definitions")
async def post_all(request: web.Request) -> web.Response:
    require_admin(current(request))
    return _imported(import_definitions(broker(request), await body(request)))


@routes.post("/api/definitions/{vhost}")
async def post_vhost(request: web.Request) -> web.Response:
    require_admin(current(request))
    b = broker(request)
    name = param(request, "vhost")
    if name not in b.vhosts:
        raise not_found()
    return _imported(import_definitions(b, await body(request), name))


def _imported(failures: list[str]) -> web.Response:
    if failures:
        raise bad_request("; ".join(failures))
    return no_content()
