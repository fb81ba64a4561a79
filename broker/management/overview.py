"""GET /api/overview, /api/nodes, /api/whoami, /api/aliveness-test/{vhost},
/api/extensions (rabbitmq.com/management.html, RabbitMQ 3.10's /api/index.html). The cluster
name is in global_parameters.py, the health checks in health.py.

A node's Erlang figures and this broker's equivalents: `proc_used` = the asyncio tasks of the
broker's event loop (where RabbitMQ has Erlang processes: connections, channels, queues,
links), `proc_total` = 1048576 (Erlang's default process limit; tasks have none);
`sockets_used` = open client connections, `sockets_total` = file_handle_cache's socket limit
from the file-descriptor limit, trunc((fd_total - 103) * 0.9 - 2)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING

from aiohttp import web

from broker import __version__, replication_hook, tls
from broker.management import samples, shapes
from broker.management.auth import (
    current,
    require_admin,
    require_monitor,
    require_vhost,
    visible_vhosts,
)
from broker.management.context import broker, queue_worker_call, sampler
from broker.management.http import conflict, no_content, not_found, param, reply
from broker.management.rates import RateSampler, summed_details, with_details
from broker.stats import MessageStats

if TYPE_CHECKING:
    from broker.started import StartedBroker

routes = web.RouteTableDef()

EXCHANGE_TYPES = [
    ("direct", "AMQP direct exchange, as per the AMQP specification"),
    ("fanout", "AMQP fanout exchange, as per the AMQP specification"),
    ("headers", "AMQP headers exchange, as per the AMQP specification"),
    ("topic", "AMQP topic exchange, as per the AMQP specification"),
    ("x-consistent-hash", "Consistent Hashing Exchange"),
    ("x-modulus-hash", "Modulus Hashing Exchange"),
]
STARTED = time.monotonic()
PROC_TOTAL = 1048576  # RabbitMQ's Erlang process limit (+P); asyncio tasks have none


def alarms(b: StartedBroker) -> list[dict]:
    """Active resource alarms as [{"node", "resource": "memory"|"disk"}] (empty when the
    broker has no alarm source yet)."""
    active = getattr(b, "active_alarms", None)
    names = active() if callable(active) else []
    return [{"node": shapes.node_name(b), "resource": r} for r in names]


def totals(b: StartedBroker, vhosts: list[str],
           every_vhost: bool = False) -> tuple[dict, dict, MessageStats]:
    """(queue_totals, object_totals, message stats) over `vhosts`; with `every_vhost` (a
    monitoring user's view) the message stats include deleted vhosts' counts, as RabbitMQ's
    overview totals do, so they never fall."""
    lengths = {"messages": 0, "messages_ready": 0, "messages_unacknowledged": 0}
    stats = MessageStats()
    if every_vhost:
        stats.add(b.deleted_vhosts_stats)
    objects = {"connections": 0, "channels": 0, "consumers": 0, "exchanges": 0, "queues": 0}
    for name in vhosts:
        v = b.vhosts[name]
        objects["exchanges"] += len(v.exchanges)
        objects["queues"] += len(v.queues)
        for q in v.queues.values():
            objects["consumers"] += len(q.consumers)
            for k, n in shapes.queue_lengths(q).items():
                lengths[k] += n
        stats.add(shapes.vhost_stats(b, v))
    for conn in b.connections:
        if conn.vhost is not None and conn.vhost.name in vhosts:
            objects["connections"] += 1
            objects["channels"] += len(conn.channels)
    for rc in b.remote_connections() if b.remote_connections is not None else ():
        if rc.json["vhost"] in vhosts:  # another worker's, told at open and close
            objects["connections"] += 1
            objects["channels"] += len(rc.channels)
    return lengths, objects, stats


def listeners(b: StartedBroker) -> list[dict]:
    """This node's active listeners: {protocol, ip_address, port, certfile, cacertfile}."""
    cfg = b.config
    out = []
    if cfg.listeners_tcp.strip().lower() != "none":
        out.append({"protocol": "amqp", "ip_address": cfg.host, "port": b.port})
    if b.ssl_port:
        host, _port = tls.parse_listener(cfg.listeners_ssl_default, cfg.host)
        out.append({"protocol": "amqp/ssl", "ip_address": host, "port": b.ssl_port,
                    "certfile": cfg.ssl_options_certfile,
                    "cacertfile": cfg.ssl_options_cacertfile})
    for port, protocol, spec in ((b.stream_port, "stream", cfg.stream_listeners_tcp_default),
                                 (b.stream_ssl_port, "stream/ssl",
                                  cfg.stream_listeners_ssl_default)):
        if port:  # rabbitmq_stream's listeners, under its protocol names
            host, _port = tls.parse_listener(spec, cfg.host)
            out.append({"protocol": protocol, "ip_address": host, "port": port})
    mgmt = getattr(b, "management", None)
    if mgmt is not None and mgmt.port:
        out.append({"protocol": "http", "ip_address": cfg.management_tcp_ip,
                    "port": mgmt.port})
    if mgmt is not None and mgmt.prometheus_port:
        out.append({"protocol": "http/prometheus", "ip_address": cfg.prometheus_tcp_ip,
                    "port": mgmt.prometheus_port})
    return out


@routes.get("/api/overview")
async def overview(request: web.Request) -> web.Response:
    b, s = broker(request), sampler(request)
    user = current(request)
    ranges, now_ms = samples.from_request(request, ceil_lengths=False)  # range/1 there
    vhosts = visible_vhosts(b, user)
    lengths, objects, stats = totals(b, vhosts, every_vhost=user.is_monitor)
    node = shapes.node_name(b)
    cfg = b.config
    bound = [{"node": node, **row, "socket_opts": {}} for row in listeners(b)]
    mgmt = getattr(b, "management", None)
    out = {
        "management_version": __version__,
        "rates_mode": "basic",
        "sample_retention_policies": {"global": [600, 3600, 28800, 86400],
                                      "basic": [600, 3600], "detailed": [600]},
        "exchange_types": [{"name": n, "description": d, "enabled": True}
                           for n, d in EXCHANGE_TYPES],
        "product_version": __version__,
        "product_name": cfg.product,
        "rabbitmq_version": "3.10.8",
        "cluster_name": b.cluster_name(),
        "erlang_version": "n/a",
        "erlang_full_version": "n/a",
        "disable_stats": False,
        "enable_queue_totals": False,
        "message_stats": (with_details(s, ("overview",), stats.as_dict()) if user.is_monitor
                          else summed_details(s, [("vhost", v) for v in vhosts],
                                              stats.as_dict())),
        "churn_rates": with_details(s, ("churn",), shapes.churn_counts(b)),
        "release_series_support_status": "supported",
        "queue_totals": with_details(s, ("overview",), lengths),
        "object_totals": objects,
        "statistics_db_event_queue": 0,
        "node": node,
        "listeners": bound,
        "contexts": [{"node": node, "description": "RabbitMQ Management", "path": "/",
                      "port": str(mgmt.port if mgmt else cfg.management_tcp_port)}],
    }
    if ranges.any():
        samples.overview(out, s, [("vhost", v) for v in vhosts], ranges, now_ms)
    return reply(out)


def node_json(b: StartedBroker, rates: RateSampler | None = None) -> dict:
    """The one node, as GET /api/nodes/{name} shows it (rabbit_mgmt_wm_node.erl; the
    Erlang figures as the module docstring says)."""
    views = b.worker_views() if b.worker_views is not None else None
    # several worker processes: the memory monitor's figure, their whole process tree's
    rss = b.resources.used if views is not None else _rss()
    limit = getattr(b, "memory_limit", None)
    limit = limit() if callable(limit) else int(os.sysconf("SC_PAGE_SIZE")
                                                * os.sysconf("SC_PHYS_PAGES")
                                                * b.config.vm_memory_high_watermark)
    st = os.statvfs(b.config.data_dir)
    active = {a["resource"] for a in alarms(b)}
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0
    try:
        import resource

        fd_total = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, ValueError):  # pragma: no cover
        fd_total = 0
    return {
        "name": shapes.node_name(b), "type": "disc", "running": True, "os_pid": str(os.getpid()),
        "mem_used": rss, "mem_limit": limit, "mem_alarm": "memory" in active,
        "disk_free": st.f_bavail * st.f_frsize,
        "disk_free_limit": b.resources.disk_free_limit if getattr(b, "resources", None)
        else b.config.disk_free_limit,
        "disk_free_alarm": "disk" in active,
        "fd_used": fds, "fd_total": fd_total,
        "sockets_used": len(b.connections),
        "sockets_total": max(2, int((fd_total - 103) * 0.9 - 2)) if fd_total else 0,
        "proc_used": len(asyncio.all_tasks(b.loop)) if b.loop else 0,
        "proc_total": PROC_TOTAL,
        "uptime": int((time.monotonic() - STARTED) * 1000),
        "processors": os.cpu_count() or 1, "run_queue": 0, "rates_mode": "basic",
        **({"workers": views} if views is not None else {}),
        "partitions": [], "applications": [], "exchange_types": [
            {"name": n, "description": d, "enabled": True} for n, d in EXCHANGE_TYPES],
        # the node's churn counters, as the overview's churn_rates (rabbit_mgmt_format)
        **(with_details(rates, ("churn",), shapes.churn_counts(b)) if rates is not None
           else shapes.churn_counts(b)),
    }


def rss_bytes() -> int:
    """The process's resident set in bytes (/proc/self/statm; 0 off Linux)."""
    return _rss()


def _rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # pragma: no cover - not Linux
        return 0


@routes.get("/api/nodes")
async def nodes(request: web.Request) -> web.Response:
    """The node; in a cluster (docs/high-availability.md) every member, the leader (this
    node) first, each with `cluster_role`, `insync`, and for followers their replication
    `lag` (stream positions not yet acked) and `last_ack_s` (seconds since their last ack).
    Every member that joined and was not forgotten is listed by its node name; one whose
    process is gone (killed, stopped) shows `running: false`."""
    require_monitor(current(request))
    samples.from_request(request)  # checked as RabbitMQ; no node figure is sampled
    own = node_json(broker(request), sampler(request))
    state = replication_hook.cluster_state
    if state is None:
        return reply([own])
    out: list[dict] = []
    for member in state["members"]:
        extra = {"cluster_member_id": member["id"], "cluster_role": member["role"],
                 "insync": member["insync"], "term": state["term"],
                 "replication_lag": member["lag"], "last_ack_s": member["last_ack_s"]}
        if member["role"] == "leader":
            out.insert(0, {**own, **extra})
        else:
            out.append({"name": member["node"], "type": "disc", "running": member["running"],
                        **extra})
    return reply(out)


@routes.delete("/api/cluster/members/{member}")
async def forget_member(request: web.Request) -> web.Response:
    """Beyond RabbitMQ's API (its forget_cluster_node is a CLI operation): remove a dead
    member, named by its id or node name, from the cluster's etcd records (brokerctl
    forget_cluster_node). 404 outside a cluster or for an unknown member, 409 for a running
    member or the leader; administrators only."""
    require_admin(current(request))
    state, forget = replication_hook.cluster_state, replication_hook.forget_member
    if state is None or forget is None:
        raise not_found()
    name = param(request, "member")
    member = next((m for m in state["members"] if name in (m["id"], m["node"])), None)
    if member is None:
        raise not_found()
    if not await forget(member["id"]):
        raise conflict(f"{name} is running or leads: stop it first")
    return no_content()


@routes.get("/api/nodes/{name}")
async def node(request: web.Request) -> web.Response:
    require_monitor(current(request))
    b = broker(request)
    if param(request, "name") != shapes.node_name(b):
        raise not_found()
    samples.from_request(request)  # RabbitMQ 3.10.8 answers a bad range here with a 500
    return reply(node_json(b, sampler(request)))


@routes.get("/api/whoami")
async def whoami(request: web.Request) -> web.Response:
    user = current(request)
    return reply({"name": user.name, "tags": list(user.tags)})


@routes.get("/api/extensions")
async def extensions(request: web.Request) -> web.Response:
    """The management UI extensions RabbitMQ lists with the plugins this broker implements
    (rabbit_mgmt_wm_extensions.erl): management, federation and shovel management."""
    return reply([{"javascript": js} for js in ("dispatcher.js", "federation.js",
                                                "shovel.js")])


@routes.get("/api/aliveness-test/{vhost}")
async def aliveness(request: web.Request) -> web.Response:
    """Declares `aliveness-test` in the vhost, publishes to it and gets the message back
    (RabbitMQ's aliveness check). {"status": "ok"}."""
    b = broker(request)
    name = param(request, "vhost")
    require_vhost(b, current(request), name)
    v = b.vhosts[name]
    q = v.declare_queue("aliveness-test", durable=False)
    from broker.message import Message, Properties
    from broker.queue_process import PUBLISH

    q.cast((PUBLISH, None, Message("", "aliveness-test", Properties(), b"test_message"), None))
    remote = queue_worker_call(request, name, q)
    if remote is not None:  # placed in another worker process: that worker gets it
        rows = await remote("get_n", (q.name, 1, "ack_requeue_false"))
        body = rows[0][0].body if rows else None
    else:
        got = q.call(q.basic_get, None, True)
        body = got[0].message.body if got is not None else None
    if body != b"test_message":
        return reply({"status": "failed", "reason": "message not received"}, status=503)
    return reply({"status": "ok"})
