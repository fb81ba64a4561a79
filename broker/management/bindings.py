"""/api/bindings in all of RabbitMQ's forms: every binding, per vhost, between an exchange
and a queue (`e/{source}/q/{destination}`) or two exchanges (`e/{source}/e/{destination}`),
POST to create ({"routing_key", "arguments"}; 201 with a Location header
"{destination}/{properties key}", as RabbitMQ), GET or DELETE one by its properties key. Sources:
rabbitmq.com/management.html, RabbitMQ 3.10 /api/index.html."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from aiohttp import web

from broker.management import shapes
from broker.management.auth import current, require_vhost, visible_vhosts
from broker.management.body_fields import amqp_arguments
from broker.management.context import broker
from broker.management.http import (
    amqp_errors,
    bad_request,
    body,
    list_reply,
    no_content,
    not_found,
    param,
    reply,
)

if TYPE_CHECKING:
    from broker.vhost import VHost

routes = web.RouteTableDef()
KINDS = {"q": "queue", "e": "exchange"}


@routes.get("/api/bindings")
async def list_all(request: web.Request) -> web.Response:
    b = broker(request)
    items = [bd for v in visible_vhosts(b, current(request))
             for bd in shapes.bindings_of_vhost(b.vhosts[v])]
    return list_reply(request, items, name_of=lambda i: i["source"])


@routes.get("/api/bindings/{vhost}")
async def list_vhost(request: web.Request) -> web.Response:
    v = _vhost(request)
    return list_reply(request, shapes.bindings_of_vhost(v), name_of=lambda i: i["source"])


def _vhost(request: web.Request) -> VHost:
    b = broker(request)
    name = param(request, "vhost")
    require_vhost(b, current(request), name)
    return b.vhosts[name]


def _ends(request: web.Request) -> tuple[Any, str, str, str]:
    """(vhost, source exchange, destination kind, destination name); 404 when either end
    is missing."""
    v = _vhost(request)
    source = param(request, "source")
    source = "" if source == "amq.default" else source
    kind = KINDS[request.match_info["kind"]]
    dest = param(request, "destination")
    if source not in v.exchanges:
        raise not_found()
    if (kind == "queue" and dest not in v.queues) or (
            kind == "exchange" and dest not in v.exchanges):
        raise not_found()
    return v, source, kind, dest


def _between(v: VHost, source: str, kind: str, dest: str) -> list[dict]:
    return [bd for bd in shapes.bindings_of_vhost(v) if bd["source"] == source
            and bd["destination_type"] == kind and bd["destination"] == dest]


@routes.get("/api/bindings/{vhost}/e/{source}/{kind:[qe]}/{destination}")
async def list_between(request: web.Request) -> web.Response:
    """The bindings between two objects; [] when either does not exist (as RabbitMQ)."""
    v = _vhost(request)
    source = param(request, "source")
    source = "" if source == "amq.default" else source
    kind = KINDS[request.match_info["kind"]]
    return list_reply(request, _between(v, source, kind, param(request, "destination")))


@routes.post("/api/bindings/{vhost}/e/{source}/{kind:[qe]}/{destination}")
async def create(request: web.Request) -> web.Response:
    v, source, kind, dest = _ends(request)
    data = await body(request)
    key = data.get("routing_key", "")
    arguments = amqp_arguments(data.get("arguments"))
    if not isinstance(key, str):
        raise bad_request("routing_key must be a string")
    with amqp_errors():  # an exclusive queue: 400 RESOURCE_LOCKED text, as RabbitMQ
        v.bind(kind, dest, source, key, arguments)
    # RabbitMQ 3.10.8 answers "Location: {destination}/{properties key}", both escaped
    # (e.g. "lq/%2523~F_63iA"): rabbit-hole takes the key from after the slash
    location = (f"{quote(dest, safe='')}/"
                f"{quote(shapes.properties_key(key, arguments), safe='')}")
    return web.Response(status=201, headers={"Location": location})


def _one(request: web.Request) -> tuple[Any, str, str, str, dict]:
    v, source, kind, dest = _ends(request)
    props = request.match_info["props"]
    for bd in _between(v, source, kind, dest):
        if props in (bd["properties_key"], unquote(bd["properties_key"])):
            return v, source, kind, dest, bd
    raise not_found()


@routes.get("/api/bindings/{vhost}/e/{source}/{kind:[qe]}/{destination}/{props}")
async def get_one(request: web.Request) -> web.Response:
    return reply(_one(request)[4])


@routes.delete("/api/bindings/{vhost}/e/{source}/{kind:[qe]}/{destination}/{props}")
async def delete_one(request: web.Request) -> web.Response:
    v, source, kind, dest, bd = _one(request)
    with amqp_errors():
        v.unbind(kind, dest, source, bd["routing_key"], bd["arguments"])
    return no_content()
