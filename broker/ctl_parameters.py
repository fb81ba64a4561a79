"""brokerctl's runtime-parameter, shovel and federation commands, with rabbitmqctl's names,
arguments, banners and columns (rabbitmqctl set_parameter / clear_parameter /
list_parameters, rabbitmq_shovel's shovel_status / delete_shovel / restart_shovel and
rabbitmq_federation's federation_status [--only-down] / restart_federation_link), over the
HTTP API (/api/parameters, /api/shovels, /api/federation-links). `run(client, args)` answers like broker/ctl.py's `run`,
or returns None for a command that is not one of these."""

from __future__ import annotations

import argparse
import json
from typing import Any

# rabbitmqctl shovel_status's columns -> the /api/shovels field they show
SHOVEL_COLUMNS = {
    "destination": "dest_uri", "destination_protocol": "dest_protocol",
    "last_changed": "timestamp", "name": "name", "source": "src_uri",
    "source_protocol": "src_protocol", "state": "state", "termination_reason": "reason",
    "type": "type", "vhost": "vhost",
}
# the endpoint columns it adds for the shovels that have them (ShovelStatusCommand's
# details_to_map in RabbitMQ 3.10.8: an AMQP 1.0 end shows its address)
SHOVEL_DETAIL_COLUMNS = {
    "source_address": "src_address", "source_queue": "src_queue",
    "source_exchange": "src_exchange", "source_exchange_key": "src_exchange_key",
    "destination_address": "dest_address", "destination_queue": "dest_queue",
    "destination_exchange": "dest_exchange",
    "destination_exchange_key": "dest_exchange_key",
}
COMMANDS = ("set_parameter", "clear_parameter", "list_parameters", "shovel_status",
            "delete_shovel", "restart_shovel", "federation_status", "restart_federation_link")
ARGUMENTS = {"set_parameter": 3, "clear_parameter": 2, "delete_shovel": 1,
             "restart_shovel": 1, "restart_federation_link": 1}
# rabbitmqctl federation_status's fields (rabbit_federation_status), last_changed for timestamp
FEDERATION_COLUMNS = ("exchange", "upstream_exchange", "queue", "upstream_queue", "type",
                      "vhost", "upstream", "id", "status", "local_connection", "uri",
                      "error", "last_changed")


def run(client: Any, args: argparse.Namespace, quote: Any) -> tuple[str | None, Any] | None:
    """One of COMMANDS (`client.call(method, path, body)` as broker/ctl.py's Client,
    `quote` its path-segment quoting), or None. ValueError for a malformed argument."""
    c, v, a = args.command, args.vhost, args.args
    if c == "set_parameter":
        try:
            value = json.loads(a[2])
        except ValueError:
            raise ValueError(f"the value is not valid JSON: {a[2]}") from None
        client.call("PUT", f"/api/parameters/{quote(a[0])}/{quote(v)}/{quote(a[1])}",
                    {"component": a[0], "vhost": v, "name": a[1], "value": value})
        return (f'Setting runtime parameter "{a[1]}" for component "{a[0]}" to "{a[2]}" in '
                f'vhost "{v}" ...'), None
    if c == "clear_parameter":
        client.call("DELETE", f"/api/parameters/{quote(a[0])}/{quote(v)}/{quote(a[1])}")
        return (f'Clearing runtime parameter "{a[1]}" for component "{a[0]}" on vhost '
                f'"{v}" ...'), None
    if c == "list_parameters":
        rows = client.call("GET", "/api/parameters")
        table = [{"component": r["component"], "name": r["name"], "value": r["value"]}
                 for r in rows if r["vhost"] == v]
        return f'Listing runtime parameters for vhost "{v}" ...', (
            ["component", "name", "value"], table)
    if c == "shovel_status":
        rows = client.call("GET", "/api/shovels")
        node = rows[0]["node"] if rows else client.call("GET", "/api/nodes")[0]["name"]
        fields = dict(SHOVEL_COLUMNS)
        fields.update({col: f for col, f in SHOVEL_DETAIL_COLUMNS.items()
                       if any(r.get(f) is not None for r in rows)})
        columns = sorted(fields)
        table = [{col: r.get(fields[col]) for col in columns} for r in rows]
        return f"Shovel status on node {node}", (columns, table)
    if c == "delete_shovel":
        client.call("DELETE", f"/api/parameters/shovel/{quote(v)}/{quote(a[0])}")
        return f"Deleting shovel {a[0]} in vhost {v}", None
    if c == "federation_status":
        only_down = getattr(args, "only_down", False)
        rows = client.call("GET", "/api/federation-links/state/down" if only_down
                           else "/api/federation-links")
        node = rows[0]["node"] if rows else client.call("GET", "/api/nodes")[0]["name"]
        table = [{col: _padded(r.get("timestamp", "")) if col == "last_changed"
                  else r.get(col, "") for col in FEDERATION_COLUMNS} for r in rows]
        which = "which are down " if only_down else ""
        return f"Listing federation links {which}on node {node}...", (
            list(FEDERATION_COLUMNS), table)
    if c == "restart_federation_link":
        rows = client.call("GET", "/api/federation-links")
        link = next((r for r in rows if r["id"] == a[0]), None)
        if link is None:
            raise ValueError("Link with the given ID was not found")
        client.call("DELETE", f"/api/federation-links/vhost/{quote(link['vhost'])}/"
                              f"{quote(a[0])}/{quote(link['node'])}/restart")
        return f"Restarting federation link {a[0]} on node {link['node']}", None
    if c == "restart_shovel":
        client.call("DELETE", f"/api/shovels/vhost/{quote(v)}/{quote(a[0])}/restart")
        return f"Restarting dynamic Shovel {a[0]} in virtual host {v}", None
    return None


def _padded(ts: str) -> str:
    """rabbitmqctl's last_changed: the status timestamp with the hour zero-padded."""
    day, _, clock = ts.partition(" ")
    parts = clock.split(":")
    return f"{day} {int(parts[0]):02d}:{parts[1]}:{parts[2]}" if len(parts) == 3 else ts
