"""/api/exchanges: list, declare (PUT), delete, publish (POST .../publish), and an
exchange's bindings as source or destination. The default exchange is `amq.default` in
paths and "" in JSON, as in RabbitMQ. Sources: rabbitmq.com/management.html, RabbitMQ 3.10
/api/index.html."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.management import samples, shapes
from broker.management.auth import current, require_vhost, visible_vhosts
from broker.management.body_fields import amqp_arguments, parse_bool
from broker.management.context import broker, sampler
from broker.management.http import (
    amqp_errors,
    bad_request,
    body,
    created,
    list_reply,
    no_content,
    not_found,
    param,
    reply,
)
from broker.management.messages import message_from_json, message_json
from broker.queue_process import PUBLISH

if TYPE_CHECKING:
    from broker.exchange import Exchange
    from broker.vhost import VHost

routes = web.RouteTableDef()
DEFAULT = "amq.default"


def exchange_name(request: web.Request) -> str:
    name = param(request, "name")
    return "" if name == DEFAULT else name


def find_exchange(request: web.Request) -> tuple[Any, Any]:
    """(vhost, exchange) named in the path; 404 if missing, 401 without vhost access."""
    b = broker(request)
    vhost = param(request, "vhost")
    require_vhost(b, current(request), vhost)
    v = b.vhosts[vhost]
    x = v.exchanges.get(exchange_name(request))
    if x is None:
        raise not_found()
    return v, x


def _json(request: web.Request, v: VHost, x: Exchange) -> dict:
    return shapes.exchange(x, v.name, current(request).name, sampler(request))


@routes.get("/api/exchanges")
async def list_all(request: web.Request) -> web.Response:
    """Every visible exchange. Sample ranges are checked (400 as RabbitMQ) but add nothing:
    exchanges here keep no message_stats."""
    b = broker(request)
    samples.from_request(request, "invalid_range_parameters")
    items = [_json(request, b.vhosts[v], x) for v in visible_vhosts(b, current(request))
             for x in b.vhosts[v].exchanges.values()]
    return list_reply(request, sorted(items, key=lambda i: (i["vhost"], i["name"])))


@routes.get("/api/exchanges/{vhost}")
async def list_vhost(request: web.Request) -> web.Response:
    b = broker(request)
    vhost = param(request, "vhost")
    require_vhost(b, current(request), vhost)
    samples.from_request(request, "invalid_range_parameters")
    v = b.vhosts[vhost]
    items = [_json(request, v, x) for x in v.exchanges.values()]
    return list_reply(request, sorted(items, key=lambda i: i["name"]))


@routes.get("/api/exchanges/{vhost}/{name}")
async def get_exchange(request: web.Request) -> web.Response:
    v, x = find_exchange(request)
    samples.from_request(request)
    # the per-channel and per-queue rate lists RabbitMQ fills only with rates_mode detailed
    return reply({**_json(request, v, x), "incoming": [], "outgoing": []})


@routes.put("/api/exchanges/{vhost}/{name}")
async def put_exchange(request: web.Request) -> web.Response:
    """Declare: {"type": "direct", "durable": true, "auto_delete": false, "internal": false,
    "arguments": {}}, every key optional (type "direct", flags false: the exchange.declare
    record's defaults in RabbitMQ 3.10.8; booleans may be "true"/"false" strings,
    broker/management/body_fields.py); 201 created, 204 equivalent, 400 otherwise (the
    AMQP text, or the malformed field)."""
    b = broker(request)
    vhost = param(request, "vhost")
    require_vhost(b, current(request), vhost)
    data = await body(request)
    durable = parse_bool(data, "durable", False)
    auto_delete = parse_bool(data, "auto_delete", False)
    internal = parse_bool(data, "internal", False)
    arguments = amqp_arguments(data.get("arguments"))
    v = b.vhosts[vhost]
    name = exchange_name(request)
    existed = name in v.exchanges
    with amqp_errors():
        v.declare_exchange(name, str(data.get("type") or "direct"), durable=durable,
                           auto_delete=auto_delete, internal=internal, arguments=arguments,
                           check_reserved=True)
    return no_content() if existed else created()


@routes.delete("/api/exchanges/{vhost}/{name}")
async def delete_exchange(request: web.Request) -> web.Response:
    v, x = find_exchange(request)
    with amqp_errors():
        v.delete_exchange(x.name, request.query.get("if-unused") == "true")
    return no_content()


@routes.post("/api/exchanges/{vhost}/{name}/publish")
async def publish(request: web.Request) -> web.Response:
    """{"routing_key", "payload", "payload_encoding", "properties"} → {"routed": bool}:
    routed like basic.publish (no confirm, no mandatory return)."""
    v, x = find_exchange(request)
    message = message_from_json(x.name, await body(request))
    with amqp_errors():
        queues = v.route(x.name, message.routing_key, message.headers, message)
    for q in queues:
        q.cast((PUBLISH, None, message, None))
    return reply({"routed": bool(queues)})


@routes.get("/api/exchanges/{vhost}/{name}/delayed")
async def delayed(request: web.Request) -> web.Response:
    """Beyond RabbitMQ: `?count=20` (0..1000) messages an x-delayed-message exchange holds,
    the next due first, without taking them: each as a queue's message browse shows one,
    plus `due` (UTC, ms) and `delay` (the x-delay asked for, ms; the message's headers show
    it negated already, as it will be delivered). 400 for an exchange of another type or a
    bad count."""
    _v, x = find_exchange(request)
    holder = getattr(x.routing, "holder", None)
    if holder is None:
        raise bad_request(f"exchange '{x.name}' is not of type x-delayed-message")
    try:
        count = int(request.query.get("count", "20"))
    except ValueError:
        raise bad_request("count must be an integer") from None
    if not 0 <= count <= 1000:
        raise bad_request("count must be 0..1000")
    items = holder.call(holder.browse, count)
    remote = broker(request).remote_delayed
    if remote is not None:  # --workers N: each worker holds what its connections published
        items = sorted(items + await remote(_v.name, x.name, count),
                       key=lambda item: item[0])[:count]
    out = []
    for position, (due, message) in enumerate(items):
        out.append({"position": position, "due": shapes.due_stamp(due),
                    "delay": -(message.headers or {}).get("x-delay", 0),
                    **message_json(message, False, 0)})
    return reply(out)


@routes.get("/api/exchanges/{vhost}/{name}/bindings/source")
async def as_source(request: web.Request) -> web.Response:
    v, x = find_exchange(request)
    items = [bd for bd in shapes.bindings_of_vhost(v) if bd["source"] == x.name]
    return list_reply(request, items, name_of=lambda i: i["destination"])


@routes.get("/api/exchanges/{vhost}/{name}/bindings/destination")
async def as_destination(request: web.Request) -> web.Response:
    v, x = find_exchange(request)
    items = [bd for bd in shapes.bindings_of_vhost(v)
             if bd["destination_type"] == "exchange" and bd["destination"] == x.name]
    return list_reply(request, items, name_of=lambda i: i["source"])
