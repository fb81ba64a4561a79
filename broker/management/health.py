"""Health checks (rabbitmq.com/monitoring.html#health-checks), RabbitMQ 3.10.8's paths and
bodies: 200 `{"status": "ok", ...}` or 503 `{"status": "failed", "reason": ..., ...}`; any
management user may call them (rabbit_mgmt_util:is_authorized).

- `/api/health/checks/alarms`, `/local-alarms`: failed with `alarms` [{node, resource}]
  (rabbit_mgmt_wm_health_check_alarms.erl, _local_alarms.erl; one node, so both agree).
- `/api/health/checks/certificate-expiration/{within}/{unit}` (days, weeks, months, years):
  failed with `expired`, the listeners whose certfile or cacertfile expires within that
  time (_certificate_expiration.erl); 400 for a bad number or unit.
- `/api/health/checks/port-listener/{port}`, `/protocol-listener/{protocol}`: failed with
  `missing` and the `ports` / `protocols` there are (_port_listener.erl,
  _protocol_listener.erl, including its protocol aliases). This broker's listeners: amqp,
  amqp/ssl, http (the API) and http/prometheus; no `clustering` (one node, no Erlang
  distribution).
- `/api/health/checks/virtual-hosts`: failed with `virtual-hosts` when a vhost of the
  definitions is not running (_virtual_hosts.erl).
- `/api/health/checks/node-is-mirror-sync-critical`, `/node-is-quorum-critical`: a single
  node is never critical: ok with reason "single node cluster".
- `/api/healthchecks/node`, `/api/healthchecks/node/{node}` (deprecated in RabbitMQ):
  ok, or failed with the alarms in effect; 404 for another node (rabbit_mgmt_wm_healthchecks
  .erl, rabbit_health_check.erl).
"""

from __future__ import annotations

import datetime
from typing import Any

from aiohttp import web

from broker import tls
from broker.management import shapes
from broker.management.context import broker
from broker.management.http import bad_request, not_found, param, reply
from broker.management.overview import alarms, listeners

routes = web.RouteTableDef()

# the seconds of each unit (rabbit_mgmt_wm_health_check_certificate_expiration's macros)
UNITS = {"days": 86400, "weeks": 7 * 86400, "months": 86400 * 365 / 12, "years": 365 * 86400}

# rabbit_mgmt_wm_health_check_protocol_listener:normalize_protocol/1, for the protocols a
# client may name here
ALIASES = {
    **dict.fromkeys(("amqp091", "amqp0.9.1", "amqp0-9-1", "amqp0_9_1", "amqp10", "amqp1.0",
                     "amqp1-0", "amqp1_0"), "amqp"),
    "amqps": "amqp/ssl",
    **dict.fromkeys(("http1", "http1.1", "http_api", "management", "management_ui", "ui"),
                    "http"),
    **dict.fromkeys(("cli", "distribution"), "clustering"),
}


def failed(reason: str, **extra: Any) -> web.Response:
    return reply({"status": "failed", "reason": reason, **extra}, status=503)


@routes.get("/api/health/checks/alarms")
async def alarm_check(request: web.Request) -> web.Response:
    active = alarms(broker(request))
    if active:
        return failed("There are alarms in effect in the cluster", alarms=active)
    return reply({"status": "ok"})


@routes.get("/api/health/checks/local-alarms")
async def local_alarm_check(request: web.Request) -> web.Response:
    active = alarms(broker(request))
    if active:
        return failed("There are alarms in effect on the node", alarms=active)
    return reply({"status": "ok"})


def _expiring(path: str, deadline: datetime.datetime) -> list[str] | dict:
    """The expiry dates before `deadline` of the certificates in `path` ("YYYY-MM-DD
    H:MM:SS", RabbitMQ's format), or {"error": why} when the file cannot be read."""
    if not path:
        return []
    try:
        dates = tls.certificates_not_after(path)
    except (OSError, ValueError) as exc:
        return {"error": str(exc)}
    return [f"{d.year}-{d.month:02}-{d.day:02} {d.hour}:{d.minute:02}:{d.second:02}"
            for d in dates if d < deadline]


@routes.get("/api/health/checks/certificate-expiration/{within}/{unit}")
async def certificate_expiration(request: web.Request) -> web.Response:
    try:
        within = int(param(request, "within"))
    except ValueError:
        raise bad_request("Invalid expiration value.") from None
    unit = param(request, "unit").lower()
    if unit not in UNITS:
        raise bad_request("Time unit not recognised. Supported units: days, weeks, months, "
                          "years.")
    b = broker(request)
    deadline = (datetime.datetime.now(datetime.UTC)
                + datetime.timedelta(seconds=within * UNITS[unit]))
    expired = []
    for lst in listeners(b):
        if "certfile" not in lst:
            continue
        cert = _expiring(lst["certfile"], deadline)
        cacert = _expiring(lst["cacertfile"], deadline)
        if cert or cacert:
            expired.append({"node": shapes.node_name(b), "protocol": lst["protocol"],
                            "interface": lst["ip_address"], "port": lst["port"],
                            "certfile": lst["certfile"], "cacertfile": lst["cacertfile"],
                            "certfile_expires_on": cert, "cacertfile_expires_on": cacert})
    if expired:
        return failed("Certificates expiring", expired=expired)
    return reply({"status": "ok"})


@routes.get("/api/health/checks/port-listener/{port}")
async def port_listener(request: web.Request) -> web.Response:
    try:
        port = int(param(request, "port"))
    except ValueError:
        raise bad_request("Invalid port") from None
    ports = [lst["port"] for lst in listeners(broker(request))]
    if port not in ports:
        return failed("No active listener", missing=port, ports=ports)
    return reply({"status": "ok", "port": port})


@routes.get("/api/health/checks/protocol-listener/{protocol}")
async def protocol_listener(request: web.Request) -> web.Response:
    asked = param(request, "protocol").lower()
    protocol = ALIASES.get(asked, asked)
    protocols = [lst["protocol"] for lst in listeners(broker(request))]
    if protocol not in protocols:
        return failed("No active listener", missing=protocol, protocols=protocols)
    return reply({"status": "ok", "protocol": protocol})


@routes.get("/api/health/checks/virtual-hosts")
async def virtual_hosts(request: web.Request) -> web.Response:
    b = broker(request)
    down = [d.name for d in b.definitions.list_vhosts() if d.name not in b.vhosts]
    if down:
        return failed("Some virtual hosts are down", **{"virtual-hosts": down})
    return reply({"status": "ok"})


@routes.get("/api/health/checks/node-is-mirror-sync-critical")
@routes.get("/api/health/checks/node-is-quorum-critical")
async def single_node(request: web.Request) -> web.Response:
    return reply({"status": "ok", "reason": "single node cluster"})


@routes.get("/api/healthchecks/node")
@routes.get("/api/healthchecks/node/{node}")
async def node_health(request: web.Request) -> web.Response:
    b = broker(request)
    node = shapes.node_name(b)
    if "node" in request.match_info and param(request, "node") != node:
        raise not_found()
    active = alarms(b)
    if active:
        terms = ",".join(f"{{{{resource_limit,{a['resource']},'{node}'}},[]}}" for a in active)
        return failed(f"resource alarm(s) in effect:[{terms}]")
    return reply({"status": "ok"})
