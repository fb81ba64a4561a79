"""The management server: RabbitMQ's HTTP API and the web UI on `management.tcp.port`
(15672) and the Prometheus endpoint on `prometheus.tcp.port` (15692), both aiohttp apps
run by `web.AppRunner` inside the broker's event loop (no thread, no second loop).

Owns: building the apps (routes of every API module, the basic-auth middleware, JSON
errors, the UI's static files), starting and stopping their sites, and the 5 s rate
sampler. Port 0 turns a server off; -1 binds a free port (tests); a port that cannot be
bound raises `broker.listeners.ListenerError`. Errors: 401 without valid
credentials or a management tag, 404 unknown path or object, 400 bad input, 500 (logged
with its traceback) for a bug, never a dropped broker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.listeners import MANAGEMENT, PROMETHEUS, ListenerError
from broker.management import (
    bindings,
    connections,
    definitions,
    exchanges,
    feature_flags,
    federation,
    global_parameters,
    health,
    limits,
    login,
    metrics,
    node_memory,
    operations,
    operator_policies,
    overview,
    parameters,
    policies,
    queues,
    streams,
    users,
)
from broker.management.auth import API_USER, authenticate
from broker.management.context import BROKER, SAMPLER
from broker.management.http import reply
from broker.management.rates import RateSampler
from broker.management.sampling import sample

if TYPE_CHECKING:
    from broker.started import StartedBroker

log = logging.getLogger("broker.management")
UI_DIR = Path(__file__).resolve().parent / "ui"


@web.middleware
async def api_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """Basic auth for /api/* (but /api/login, which checks its form), and JSON for every
    error (RabbitMQ's shapes)."""
    if request.path.startswith("/api/") and request.path.rstrip("/") != login.PATH:
        request[API_USER] = authenticate(request.app[BROKER],
                                           request.headers.get("Authorization"))
    try:
        response = await handler(request)
        if request.method not in ("GET", "HEAD", "OPTIONS") and response.status < 400:
            hook = getattr(request.app[BROKER], "on_api_change", None)
            if hook is not None:  # several worker processes: the others apply it first
                await hook()
        return response
    except web.HTTPException as exc:
        if exc.content_type == "application/json" or not request.path.startswith("/api/"):
            raise
        if exc.status == 404:
            return reply({"error": "Object Not Found", "reason": "Not Found"}, status=404)
        if exc.status == 405:
            return reply({"error": "bad_request", "reason": "method not allowed"}, status=405)
        raise
    except Exception as exc:  # a bug: log it, answer 500, keep the broker serving
        log.exception("management API %s %s failed", request.method, request.path)
        return reply({"error": "internal_server_error", "reason": repr(exc)}, status=500)


def with_trailing_slash(routes: web.RouteTableDef) -> list[web.RouteDef]:
    """The same API routes with a trailing slash: RabbitMQ's router (cowboy_router) matches
    a path with or without one, so `GET /api/queues/` and `PUT /api/queues/%2F/q/` work
    there, and AMQPStorm asks for `/api/healthchecks/node/` (checked on 3.10.8)."""
    return [web.RouteDef(r.method, r.path + "/", r.handler, r.kwargs) for r in routes
            if isinstance(r, web.RouteDef) and r.path.startswith("/api/")
            and not r.path.endswith("/")]


def make_app(broker: StartedBroker, sampler: RateSampler) -> web.Application:
    """The HTTP API + UI application."""
    app = web.Application(middlewares=[api_middleware], client_max_size=64 * 1024 * 1024)
    app[BROKER] = broker
    app[SAMPLER] = sampler
    for module in (overview, queues, exchanges, bindings, connections, users, policies,
                   definitions, parameters, federation, health, global_parameters, limits,
                   feature_flags, operator_policies, operations, node_memory, login, streams):
        app.router.add_routes(module.routes)
        app.router.add_routes(with_trailing_slash(module.routes))
    if UI_DIR.is_dir():
        async def index(_request: web.Request) -> web.FileResponse:
            return web.FileResponse(UI_DIR / "index.html")

        app.router.add_get("/", index)
        app.router.add_static("/ui/", UI_DIR)
    return app


class ManagementServer:
    """Starts and stops the API/UI site and the Prometheus site for `broker`.

    `port` / `prometheus_port` are the bound ports after `start()` (None when off)."""

    def __init__(self, broker: StartedBroker) -> None:
        self.broker = broker
        self.sampler = RateSampler()
        self.port: int | None = None
        self.prometheus_port: int | None = None
        self._runners: list[web.AppRunner] = []
        self._by_service: dict[str, web.AppRunner] = {}  # "http", "prometheus"

    async def _serve(self, listener: str, app: web.Application, host: str, port: int) -> int:
        """Serve `app` on host:port (-1: a free port); the bound port. ListenerError (which
        listener, where, the setting that moves it) when it cannot bind."""
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host, 0 if port < 0 else port, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise ListenerError(listener, host, port, exc) from exc
        self._runners.append(runner)
        server = site._server  # the asyncio server: the bound port when asked for 0
        # aiohttp types its private _server as AbstractServer; it is an asyncio.Server
        return server.sockets[0].getsockname()[1] if server is not None else port  # type: ignore[attr-defined]

    async def start(self) -> None:
        """Bind the sites the configuration turns on and start sampling rates."""
        cfg = self.broker.config
        if cfg.management_tcp_port:
            self.port = await self._serve(MANAGEMENT, make_app(self.broker, self.sampler),
                                          cfg.management_tcp_ip, cfg.management_tcp_port)
            self._by_service["http"] = self._runners[-1]
            log.info("management API and UI on http://%s:%d/", cfg.management_tcp_ip,
                     self.port)
            self.sampler.start(lambda s: sample(self.broker, s),
                               max(cfg.collect_statistics_interval, 100) / 1000)
        if cfg.prometheus_tcp_port:
            self.prometheus_port = await self._serve(
                PROMETHEUS, metrics.make_app(self.broker), cfg.prometheus_tcp_ip, cfg.prometheus_tcp_port)
            self._by_service["prometheus"] = self._runners[-1]
            log.info("Prometheus metrics on http://%s:%d/metrics", cfg.prometheus_tcp_ip,
                     self.prometheus_port)

    def protocol_factory(self, service: str) -> Callable[[], asyncio.Protocol] | None:
        """The HTTP server protocol factory of `service` ("http": the management API and
        UI, "prometheus"), for connections that arrive another way than its TCP site (a
        cluster leader's proxied clients, broker/cluster/node.py); None when it is off."""
        runner = self._by_service.get(service)
        return None if runner is None else runner.server

    async def stop(self) -> None:
        self.sampler.stop()
        for runner in self._runners:
            await runner.cleanup()
        self._runners = []
        self._by_service = {}
