"""/api/queues: list, declare (PUT), delete, purge (DELETE .../contents), get messages
(POST .../get), the queue's bindings, mirror sync actions (POST .../actions, no-ops), and
beyond RabbitMQ: browse without consuming
(GET .../messages), the unacked deliveries (GET .../unacked) and moving messages to another
queue (POST .../move). Sources: rabbitmq.com/management.html, RabbitMQ 3.10 /api/index.html."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.management import samples, shapes
from broker.management.auth import current, require_admin, require_vhost, visible_vhosts
from broker.management.body_fields import amqp_arguments, parse_bool, parse_int
from broker.management.context import broker, queue_worker_call, sampler
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
from broker.management.messages import message_json
from broker.management.ranges import NO_RANGES, Ranges
from broker.policies import merged_definition
from broker.queue_move import move_ready
from broker.queue_process import ACK, DISCARD, REQUEUE

if TYPE_CHECKING:
    from broker.queue_process import QueueProcess
    from broker.vhost import VHost

routes = web.RouteTableDef()
ACK_MODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true",
             "reject_requeue_false")


def find_queue(request: web.Request) -> QueueProcess:
    """The queue named in the path; 404 if it or its vhost does not exist, 401 without
    access to the vhost."""
    b = broker(request)
    vhost = param(request, "vhost")
    require_vhost(b, current(request), vhost)
    q = b.vhosts[vhost].queues.get(param(request, "name"))
    if q is None:
        raise not_found()
    return q


def queue_vhost(request: web.Request) -> VHost:
    """The vhost named in the path, as a `VHost` (a queue's own `vhost` is only its
    `QueueVHost` view); call after `find_queue`, which checked it exists."""
    return broker(request).vhosts[param(request, "vhost")]


def unlocked(request: web.Request, code_prefix: bool = False) -> QueueProcess:
    """The queue named in the path (`find_queue`) unless it is exclusive to a connection:
    then 400 with the AMQP 405 RESOURCE_LOCKED text, as RabbitMQ's API answers get, purge
    and delete on an exclusive queue (3.10.8, checked; get's reason starts with "405 ")."""
    q = find_queue(request)
    if q.exclusive_owner is not None:
        text = str(queue_vhost(request).locked_error(q.name))
        raise bad_request(f"405 RESOURCE_LOCKED - {text}" if code_prefix else text)
    return q


def queue_json(request: web.Request, q: QueueProcess, ranges: Ranges = NO_RANGES,
               now_ms: int = 0) -> dict:
    """A queue's JSON; with `ranges` its lengths / message_stats details carry samples
    (broker/management/samples.py)."""
    p = q.policy
    policy = {"name": p.name, "definition": p.definition} if p is not None else None
    out = shapes.queue(broker(request), sampler(request), q, policy)
    op = getattr(q, "operator_policy", None)
    if op is not None:  # rabbit_policy effective_definition: the two merged
        out["operator_policy"] = op.name
        out["effective_policy_definition"] = merged_definition(p, op)
    if ranges.any():
        samples.queue(out, sampler(request), shapes.queue_key(q.vhost.name, q.name), ranges,
                      now_ms)
    return out


@routes.get("/api/queues")
async def list_all(request: web.Request) -> web.Response:
    b = broker(request)
    ranges, now_ms = samples.from_request(request, "invalid_range_parameters")
    items = [queue_json(request, q, ranges, now_ms) for v in visible_vhosts(b, current(request))
             for q in b.vhosts[v].queues.values()]
    return list_reply(request, sorted(items, key=lambda i: (i["vhost"], i["name"])))


@routes.get("/api/queues/{vhost}")
async def list_vhost(request: web.Request) -> web.Response:
    b = broker(request)
    vhost = param(request, "vhost")
    require_vhost(b, current(request), vhost)
    ranges, now_ms = samples.from_request(request, "invalid_range_parameters")
    items = [queue_json(request, q, ranges, now_ms) for q in b.vhosts[vhost].queues.values()]
    return list_reply(request, sorted(items, key=lambda i: i["name"]))


@routes.get("/api/queues/{vhost}/{name}")
async def get_queue(request: web.Request) -> web.Response:
    """One queue, with `consumer_details` (its consumers as /api/consumers shows them) and
    the per-channel rate lists `deliveries` and `incoming`, empty as RabbitMQ 3.10.8 shows
    them with rates_mode basic."""
    q = find_queue(request)
    b = broker(request)
    ranges, now_ms = samples.from_request(request)
    return reply({**queue_json(request, q, ranges, now_ms),
                  "consumer_details": [shapes.consumer(b, q, c) for c in q.consumers],
                  "deliveries": [], "incoming": []})


@routes.put("/api/queues/{vhost}/{name}")
async def put_queue(request: web.Request) -> web.Response:
    """Declare: {"durable": true, "auto_delete": false, "arguments": {}}, every key optional
    (absent flags are false, as the queue.declare record's defaults in RabbitMQ 3.10.8;
    booleans may be the strings "true"/"false": broker/management/body_fields.py); 201
    when created, 204 when an equivalent queue exists, 400 (the AMQP 406 text) when it is
    not equivalent or a field is malformed."""
    b = broker(request)
    vhost = param(request, "vhost")
    require_vhost(b, current(request), vhost)
    name = param(request, "name")
    data = await body(request)
    durable = parse_bool(data, "durable", False)
    auto_delete = parse_bool(data, "auto_delete", False)
    arguments = amqp_arguments(data.get("arguments"))
    v = b.vhosts[vhost]
    existed = name in v.queues
    with amqp_errors():
        v.declare_queue(name, durable=durable, auto_delete=auto_delete, arguments=arguments)
    return no_content() if existed else created()


@routes.delete("/api/queues/{vhost}/{name}")
async def delete_queue(request: web.Request) -> web.Response:
    """Delete; `?if-unused=true` / `?if-empty=true` as queue.delete (400 when not)."""
    q = unlocked(request)
    flags = request.query
    remote = _remote(request, q)
    with amqp_errors():
        if remote is not None:  # another worker process's queue: its worker checks it
            await remote("delete", (q.name, flags.get("if-unused") == "true",
                                    flags.get("if-empty") == "true"))
        else:
            queue_vhost(request).delete_queue(q.name, flags.get("if-unused") == "true",
                                              flags.get("if-empty") == "true",
                                              owner=q.exclusive_owner)
    return no_content()


def _remote(request: web.Request, q: Any) -> Any:
    return queue_worker_call(request, param(request, "vhost"), q)


@routes.post("/api/queues/{vhost}/{name}/actions")
async def actions(request: web.Request) -> web.Response:
    """{"action": "sync" | "cancel_sync"} (rabbit_mgmt_wm_queue_actions.erl; administrator):
    mirror synchronisation; a queue here has no mirrors, so both are no-ops, 204. Another
    action: 400 ["unknown", action]. A missing queue: 404 (RabbitMQ 3.10.8: 500)."""
    require_admin(current(request))
    find_queue(request)
    data = await body(request)
    if "action" not in data:
        raise bad_request("[{key_missing,action}]")
    if data["action"] not in ("sync", "cancel_sync"):
        return reply({"error": "bad_request", "reason": ["unknown", data["action"]]},
                     status=400)
    return no_content()


@routes.delete("/api/queues/{vhost}/{name}/contents")
async def purge(request: web.Request) -> web.Response:
    q = unlocked(request)
    remote = _remote(request, q)
    if remote is not None:
        await remote("purge", (q.name,))
    else:
        q.call(q.purge)
    return no_content()


@routes.get("/api/queues/{vhost}/{name}/bindings")
async def queue_bindings(request: web.Request) -> web.Response:
    q = find_queue(request)
    items = [bd for bd in shapes.bindings_of_vhost(queue_vhost(request))
             if bd["destination_type"] == "queue" and bd["destination"] == q.name]
    return list_reply(request, items, name_of=lambda i: i["source"])


def _fetch(q: QueueProcess, count: int) -> list[tuple[Any, int]]:
    """Up to `count` (Fetched, messages left) taken with acks pending."""
    out = []
    for _ in range(count):
        got = q.call(q.basic_get, None, False)
        if got is None:
            break
        out.append(got)
    return out


@routes.post("/api/queues/{vhost}/{name}/get")
async def get_messages(request: web.Request) -> web.Response:
    """{"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto", "truncate": 50000}:
    the messages at the head, then acked, requeued (redelivered) or rejected (dead-lettered)
    as `ackmode` says, as RabbitMQ's get-messages."""
    q = unlocked(request, code_prefix=True)
    data = await body(request)
    ackmode = data.get("ackmode", "ack_requeue_true")
    if ackmode not in ACK_MODES:
        raise bad_request(f"ackmode must be one of {', '.join(ACK_MODES)}")
    count = parse_int(data.get("count", 1))
    encoding = data.get("encoding", "auto")
    if encoding not in ("auto", "base64"):
        raise bad_request("encoding must be auto or base64")
    truncate = data.get("truncate")
    truncate = parse_int(truncate) if truncate is not None else None
    remote = _remote(request, q)
    if remote is not None:  # the queue's worker fetches and settles them
        rows = await remote("get_n", (q.name, max(0, count), ackmode))
        return reply([message_json(m, redelivered, left, encoding, truncate)
                      for m, redelivered, left in rows])
    got = _fetch(q, max(0, count))
    out = [message_json(f.message, f.redelivered, left, encoding,
                        truncate) for f, left in got]
    entries = [(f.ack_tag, None) for f, _left in got if f.ack_tag is not None]
    if entries:
        kind = {"ack_requeue_true": REQUEUE, "reject_requeue_true": REQUEUE,
                "ack_requeue_false": ACK, "reject_requeue_false": DISCARD}[ackmode]
        q.call(q.handle, (kind, None, entries))
    return reply(out)


@routes.get("/api/queues/{vhost}/{name}/messages")
async def browse(request: web.Request) -> web.Response:
    """Beyond RabbitMQ: `?offset=0&count=20` ready messages from the head, without
    consuming them or setting `redelivered` (they stay where they are)."""
    q = find_queue(request)
    try:
        offset = int(request.query.get("offset", "0"))
        count = int(request.query.get("count", "20"))
    except ValueError:
        raise bad_request("offset and count must be integers") from None
    if offset < 0 or not 0 <= count <= 1000:
        raise bad_request("offset must be >= 0 and count 0..1000")
    remote = _remote(request, q)
    items = (await remote("browse", (q.name, offset, count)) if remote is not None
             else q.call(q.browse, offset, count))
    return reply([{"position": offset + i, "redelivered": redelivered,
                   **message_json(m, redelivered, 0)} for i, (m, redelivered) in
                  enumerate(items)])


@routes.get("/api/queues/{vhost}/{name}/unacked")
async def unacked(request: web.Request) -> web.Response:
    """Beyond RabbitMQ: the queue's deliveries waiting for an ack, with the consumer tag,
    channel and age in ms (oldest first)."""
    q = find_queue(request)
    b = broker(request)
    out = unacked_rows(b.connections, lambda queue: queue is q)
    if b.remote_unacked is not None:  # held by channels of the other worker processes
        out += await b.remote_unacked(param(request, "vhost"), q.name)
    out.sort(key=lambda i: -i["age_ms"])
    return reply(out)


def unacked_rows(connections: Iterable[Any], of_queue: Callable[[Any], bool]
                 ) -> list[dict[str, Any]]:
    """The deliveries waiting for an ack on `connections`' channels from the queue that
    `of_queue(queue)` names, as GET /api/queues/{vhost}/{name}/unacked lists them (a worker
    process answers with its own: broker/workers/runtime.py)."""
    now = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the machine
    out: list[dict[str, Any]] = []
    for conn in connections:
        for ch in conn.channels.values():
            for tag, (queue, _ack, ctag) in ch.unacked.items():
                if of_queue(queue):
                    out.append({"delivery_tag": tag, "consumer_tag": ctag,
                                "channel_details": {"name": shapes.channel_name(ch),
                                                    "number": ch.number,
                                                    "connection_name":
                                                        shapes.connection_name(conn)},
                                "age_ms": int((now - ch.delivered_at(tag)) * 1000)})
    return out


@routes.post("/api/queues/{vhost}/{name}/move")
async def move(request: web.Request) -> web.Response:
    """Beyond RabbitMQ (a shovel's most common use): {"destination": "other-queue",
    "count": N (default: all ready)} moves ready messages, in order, to another queue of
    the same vhost; each is enqueued there before it is acked here, so a failure leaves a
    copy, never a loss. {"moved": n}."""
    q = unlocked(request)
    v = queue_vhost(request)  # looked up before the await, as q.vhost was
    data = await body(request)
    dest_name = data.get("destination")
    if not isinstance(dest_name, str) or not dest_name:
        raise bad_request("destination (a queue name) is required")
    dest = v.queues.get(dest_name)
    if dest is None or dest is q:
        raise bad_request(f"no other queue '{dest_name}' in vhost '{q.vhost.name}'")
    count = data.get("count")
    limit = None if count is None else int(count)
    remote = _remote(request, q)
    if remote is not None:  # the source's worker moves them
        moved = await remote("move", (q.name, dest_name, limit))
    else:
        moved = move_ready(q, dest, limit)
    return reply({"moved": moved})
