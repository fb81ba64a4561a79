"""`brokerctl` (also `python -m broker.ctl`): rabbitmqctl's commands, over the management
HTTP API.

Commands and column names are rabbitmqctl's (rabbitmq.com/rabbitmqctl.8.html, 3.10):
`list_queues [-p VHOST] [name messages messages_ready messages_unacknowledged consumers
memory ...]`, `list_exchanges`, `list_bindings`, `list_connections`, `list_channels`,
`list_consumers`, `list_users`, `list_vhosts`, `list_permissions`, `list_policies`,
`add_user`, `delete_user`, `change_password`, `set_user_tags`, `add_vhost`, `delete_vhost`,
`set_permissions`, `clear_permissions`, `set_policy`, `clear_policy`, `purge_queue`,
`delete_queue`, `close_connection`, `status`, `export_definitions`, `import_definitions`,
`trace_on`, `trace_off` (the firehose, broker/trace.py).
Output: rabbitmqctl's informational line ("Listing queues for vhost / ...", left out with
`-q`), a header row (left out with `--no-table-headers`) and tab-separated rows; or
`--formatter json`. Where: `--api URL` (default $BROKERCTL_API or http://127.0.0.1:15672),
`-u/--username`, `--password` (default guest/guest).

Exit codes (rabbitmqctl's sysexits): 0 ok, 64 usage error, 69 broker unreachable, 70 the
API refused (its reason on stderr).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

from broker import ctl_parameters, ctl_streams

EX_USAGE, EX_UNAVAILABLE, EX_SOFTWARE = 64, 69, 70


class CtlError(Exception):
    """A command failed: `code` is the exit status, the message goes to stderr."""

    def __init__(self, message: str, code: int = EX_SOFTWARE) -> None:
        super().__init__(message)
        self.code = code


class Client:
    """The management API at `base` with basic auth; JSON in and out."""

    def __init__(self, base: str, username: str, password: str) -> None:
        self.base = base.rstrip("/")
        token = base64.b64encode(f"{username}:{password}".encode()).decode()
        self.headers = {"Authorization": f"Basic {token}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: Any = None,
             headers: dict[str, str] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={**self.headers, **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            try:
                reason = json.loads(exc.read()).get("reason", exc.reason)
            except ValueError:
                reason = exc.reason
            raise CtlError(f"Error: {reason} (HTTP {exc.code} on {method} {path})") from None
        except (urllib.error.URLError, OSError) as exc:
            raise CtlError(f"Error: unable to reach the management API at {self.base}: "
                           f"{getattr(exc, 'reason', exc)}", EX_UNAVAILABLE) from None
        return json.loads(raw) if raw.strip() else None


def q(segment: str) -> str:
    return quote(segment, safe="")


# command -> (API path template, default columns, info line, JSON field per column)
LISTS: dict[str, tuple[str, list[str], str]] = {
    "list_queues": ("/api/queues/{vhost}", ["name", "messages"],
                    "Listing queues for vhost {vhost} ..."),
    "list_exchanges": ("/api/exchanges/{vhost}", ["name", "type"],
                       "Listing exchanges for vhost {vhost} ..."),
    "list_bindings": ("/api/bindings/{vhost}",
                      ["source_name", "source_kind", "destination_name", "destination_kind",
                       "routing_key", "arguments"], "Listing bindings for vhost {vhost}..."),
    "list_connections": ("/api/connections", ["user", "peer_host", "peer_port", "state"],
                         "Listing connections ..."),
    "list_channels": ("/api/channels", ["pid", "user", "consumer_count",
                                        "messages_unacknowledged"], "Listing channels ..."),
    "list_consumers": ("/api/consumers/{vhost}",
                       ["queue_name", "channel_pid", "consumer_tag", "ack_required",
                        "prefetch_count", "active", "arguments"],
                       "Listing consumers in vhost {vhost} ..."),
    "list_users": ("/api/users", ["user", "tags"], "Listing users ..."),
    "list_vhosts": ("/api/vhosts", ["name"], "Listing vhosts ..."),
    "list_permissions": ("/api/vhosts/{vhost}/permissions",
                         ["user", "configure", "write", "read"],
                         "Listing permissions for vhost \"{vhost}\" ..."),
    "list_policies": ("/api/policies/{vhost}",
                      ["vhost", "name", "pattern", "apply-to", "definition", "priority"],
                      "Listing policies for vhost \"{vhost}\" ..."),
}

# rabbitmqctl column names that differ from the API's JSON fields
ALIASES = {
    "source_name": lambda i: i.get("source"),
    "source_kind": lambda i: "exchange",
    "destination_name": lambda i: i.get("destination"),
    "destination_kind": lambda i: i.get("destination_type"),
    "pid": lambda i: i.get("name"),
    "channel_pid": lambda i: (i.get("channel_details") or {}).get("name"),
    "queue_name": lambda i: (i.get("queue") or {}).get("name"),
    "user": lambda i: i.get("user", i.get("name")),
    "tags": lambda i: i.get("tags"),
}


def column(item: dict, name: str) -> Any:
    """The value of rabbitmqctl column `name` in an API object."""
    if name in ALIASES:
        return ALIASES[name](item)
    return item.get(name)


def cell(value: Any) -> str:
    """A value as rabbitmqctl prints it in a table."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "[" + ", ".join(value) + "]"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def cmd_list(client: Client, args: argparse.Namespace) -> Any:
    path, default_columns, info = LISTS[args.command]
    columns = args.columns or default_columns
    rows = client.call("GET", path.format(vhost=q(args.vhost)))
    if args.command in ("list_connections", "list_channels") and args.vhost_given:
        rows = [r for r in rows if r.get("vhost") == args.vhost]
    table = [{c: column(r, c) for c in columns} for r in rows]
    return info.format(vhost=args.vhost), columns, table


def _tags(values: list[str]) -> str:
    return ",".join(t for v in values for t in v.replace(",", " ").split())


def run(client: Client, args: argparse.Namespace) -> tuple[str | None, Any]:
    """Run one command; returns (informational line or None, result) where result is a
    (columns, rows) table, a JSON-able object, or None."""
    c, v = args.command, args.vhost
    a = args.args
    need = {"add_user": 2, "delete_user": 1, "change_password": 2, "set_user_tags": 1,
            "add_vhost": 1, "delete_vhost": 1, "set_permissions": 4, "clear_permissions": 1,
            "set_policy": 3, "clear_policy": 1, "purge_queue": 1, "delete_queue": 1,
            "close_connection": 2, "export_definitions": 1, "import_definitions": 1,
            "forget_cluster_node": 1}
    need.update(ctl_parameters.ARGUMENTS)
    need.update(ctl_streams.ARGUMENTS)
    if len(a) < need.get(c, 0):
        raise CtlError(f"Error: {c} needs {need[c]} argument(s)", EX_USAGE)
    if c in ctl_parameters.COMMANDS:
        try:
            return ctl_parameters.run(client, args, q)  # type: ignore[return-value]
        except ValueError as exc:
            raise CtlError(f"Error: {exc}", EX_USAGE) from None
    if c in ctl_streams.COMMANDS:
        try:
            return ctl_streams.run(client, args, q)
        except ValueError as exc:
            raise CtlError(f"Error: {exc}", EX_USAGE) from None
    if c in LISTS:
        info, columns, table = cmd_list(client, args)
        return info, (columns, table)
    if c == "add_user":
        client.call("PUT", f"/api/users/{q(a[0])}", {"password": a[1], "tags": ""})
        return f'Adding user "{a[0]}" ...', None
    if c == "delete_user":
        client.call("DELETE", f"/api/users/{q(a[0])}")
        return f'Deleting user "{a[0]}" ...', None
    if c == "change_password":
        user = client.call("GET", f"/api/users/{q(a[0])}")
        client.call("PUT", f"/api/users/{q(a[0])}", {"password": a[1], "tags": user["tags"]})
        return f'Changing password for user "{a[0]}" ...', None
    if c == "set_user_tags":
        client.call("PUT", f"/api/users/{q(a[0])}", {"tags": _tags(a[1:])})
        return f'Setting tags for user "{a[0]}" to [{", ".join(_tags(a[1:]).split(","))}] ...', None
    if c in ("trace_on", "trace_off"):
        return _trace(client, c == "trace_on", v)
    if c == "add_vhost":
        client.call("PUT", f"/api/vhosts/{q(a[0])}", {})
        return f'Adding vhost "{a[0]}" ...', None
    if c == "delete_vhost":
        client.call("DELETE", f"/api/vhosts/{q(a[0])}")
        return f'Deleting vhost "{a[0]}" ...', None
    if c == "set_permissions":
        client.call("PUT", f"/api/permissions/{q(v)}/{q(a[0])}",
                    {"configure": a[1], "write": a[2], "read": a[3]})
        return f'Setting permissions for user "{a[0]}" in vhost "{v}" ...', None
    if c == "clear_permissions":
        client.call("DELETE", f"/api/permissions/{q(v)}/{q(a[0])}")
        return f'Clearing permissions for user "{a[0]}" in vhost "{v}" ...', None
    if c == "set_policy":
        try:
            definition = json.loads(a[2])
        except ValueError:
            raise CtlError(f"Error: the definition is not valid JSON: {a[2]}",
                           EX_USAGE) from None
        client.call("PUT", f"/api/policies/{q(v)}/{q(a[0])}", {
            "pattern": a[1], "definition": definition, "priority": args.priority,
            "apply-to": args.apply_to})
        return f'Setting policy "{a[0]}" for pattern "{a[1]}" to "{a[2]}" with priority ' \
               f'"{args.priority}" for vhost "{v}" ...', None
    if c == "clear_policy":
        client.call("DELETE", f"/api/policies/{q(v)}/{q(a[0])}")
        return f'Clearing policy "{a[0]}" on vhost "{v}" ...', None
    if c == "purge_queue":
        client.call("DELETE", f"/api/queues/{q(v)}/{q(a[0])}/contents")
        return f"Purging queue '{a[0]}' in vhost '{v}' ...", None
    if c == "delete_queue":
        info = client.call("GET", f"/api/queues/{q(v)}/{q(a[0])}")
        client.call("DELETE", f"/api/queues/{q(v)}/{q(a[0])}")
        return f"Deleting queue '{a[0]}' on vhost '{v}' ...", \
            f"Queue was successfully deleted with {info.get('messages', 0)} ready messages"
    if c == "close_connection":
        client.call("DELETE", f"/api/connections/{q(a[0])}", headers={"X-Reason": a[1]})
        return f'Closing connection {a[0]}, reason: {a[1]}...', None
    if c == "export_definitions":
        data = client.call("GET", "/api/definitions")
        if a[0] == "-":
            return None, data
        with open(a[0], "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
        return f"Exporting definitions in JSON to a file at \"{a[0]}\" ...", None
    if c == "import_definitions":
        if a[0] == "-":
            data = json.load(sys.stdin)
        else:
            with open(a[0], encoding="utf-8") as f:
                data = json.load(f)
        client.call("POST", "/api/definitions", data)
        return f"Importing definitions in JSON from a file at \"{a[0]}\" ...", None
    if c == "cluster_status":
        nodes = client.call("GET", "/api/nodes")
        leader = next((n for n in nodes if n.get("cluster_role") == "leader"), nodes[0])
        return f"Cluster status of node {leader['name']} ...", {
            "leader": leader["name"], "term": leader.get("term"),
            "members": [{"node": n["name"], "id": n.get("cluster_member_id"),
                         "role": n.get("cluster_role", "standalone"),
                         "running": n.get("running", True), "insync": n.get("insync", True),
                         "replication_lag": n.get("replication_lag"),
                         "last_ack_s": n.get("last_ack_s")} for n in nodes],
            "disk_nodes": [n["name"] for n in nodes],  # RabbitMQ's: every member, running or not
            "running_nodes": [n["name"] for n in nodes if n.get("running", True)]}
    if c == "forget_cluster_node":
        client.call("DELETE", f"/api/cluster/members/{quote(a[0], safe='')}")
        return f"Removing node {a[0]} from the cluster", None
    if c == "status":
        node = client.call("GET", "/api/nodes")[0]
        overview = client.call("GET", "/api/overview")
        alarms = [r for r, on in (("memory", node["mem_alarm"]), ("disk", node["disk_free_alarm"]))
                  if on]
        return f"Status of node {node['name']} ...", {
            "node": node["name"], "product_name": overview["product_name"],
            "product_version": overview["product_version"],
            "rabbitmq_version": overview["rabbitmq_version"], "os_pid": node["os_pid"],
            "uptime_ms": node["uptime"], "memory": {"used": node["mem_used"],
                                                    "limit": node["mem_limit"]},
            "disk_free": node["disk_free"], "disk_free_limit": node["disk_free_limit"],
            "alarms": alarms, "listeners": overview["listeners"],
            "totals": overview["object_totals"]}
    raise CtlError(f"Error: unknown command {c!r}", EX_USAGE)  # pragma: no cover - argparse


def _trace(client: Client, on: bool, vhost: str) -> tuple[str, str]:
    """trace_on / trace_off [-p VHOST] (rabbitmqctl; rabbit_trace:start / stop) as PUT
    /api/vhosts/{vhost} {"tracing": ...}, with the vhost's description and tags sent back
    unchanged (a PUT replaces them). rabbitmqctl also accepts a vhost that does not exist
    (tracing is on once it is created); a PUT would create it, so that is an error here."""
    try:
        info = client.call("GET", f"/api/vhosts/{q(vhost)}")
    except CtlError as exc:
        if "HTTP 404" in str(exc):
            raise CtlError(f"Error: no vhost \"{vhost}\"") from None
        raise
    client.call("PUT", f"/api/vhosts/{q(vhost)}", {
        "description": info.get("description", ""), "tags": info.get("tags", []),
        "tracing": on})
    if on:
        return f'Starting tracing for vhost "{vhost}" ...', f"Trace enabled for vhost {vhost}"
    return f'Stopping tracing for vhost "{vhost}" ...', f"Trace disabled for vhost {vhost}"


COMMANDS = sorted([*LISTS, "add_user", "delete_user", "change_password", "set_user_tags",
                   "add_vhost", "delete_vhost", "set_permissions", "clear_permissions",
                   "set_policy", "clear_policy", "purge_queue", "delete_queue",
                   "close_connection", "status", "cluster_status", "forget_cluster_node",
                   "export_definitions", "import_definitions",
                   "trace_on", "trace_off", *ctl_parameters.COMMANDS,
                   *ctl_streams.COMMANDS])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="brokerctl", description=(
        "rabbitmqctl's commands over the broker's management HTTP API"))
    p.add_argument("--api", default=os.environ.get("BROKERCTL_API", "http://127.0.0.1:15672"),
                   help="management API base URL (default $BROKERCTL_API or "
                        "http://127.0.0.1:15672)")
    p.add_argument("-u", "--username", default=os.environ.get("BROKERCTL_USERNAME", "guest"))
    p.add_argument("--password", default=os.environ.get("BROKERCTL_PASSWORD", "guest"))
    p.add_argument("-p", "--vhost", default=None, help="virtual host (default /)")
    p.add_argument("-q", "--quiet", action="store_true", help="no informational messages")
    p.add_argument("-s", "--silent", action="store_true", help="-q and no table headers")
    p.add_argument("--no-table-headers", action="store_true", help="no header row")
    p.add_argument("--formatter", choices=["table", "json"], default="table")
    p.add_argument("--priority", type=int, default=0, help="set_policy: policy priority")
    p.add_argument("--only-down", action="store_true",
                   help="federation_status: only links that are not running or starting")
    p.add_argument("--apply-to", default="all", choices=["all", "queues", "exchanges"],
                   help="set_policy: what the policy applies to")
    ctl_streams.add_arguments(p)
    p.add_argument("command", choices=COMMANDS, metavar="command",
                   help="one of: " + ", ".join(COMMANDS))
    p.add_argument("args", nargs="*", help="the command's arguments or columns")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run brokerctl with `argv`; returns the exit status."""
    try:
        args = parser().parse_intermixed_args(argv)
    except SystemExit as exc:
        return EX_USAGE if exc.code else 0
    args.vhost_given = args.vhost is not None
    args.vhost = args.vhost or "/"
    args.columns = args.args if args.command in LISTS else []
    quiet = args.quiet or args.silent
    try:
        info, result = run(Client(args.api, args.username, args.password), args)
    except CtlError as exc:
        print(exc, file=sys.stderr)
        return exc.code
    if info and not quiet and args.formatter == "table":
        print(info)
    if isinstance(result, tuple):
        columns, rows = result
        if args.formatter == "json":
            print(json.dumps(rows))
        else:
            if not (args.no_table_headers or args.silent):
                print("\t".join(columns))
            for row in rows:
                print("\t".join(cell(row[c]) for c in columns))
    elif isinstance(result, str):
        if args.formatter == "json":
            print(json.dumps({"result": "ok", "message": result}))
        else:
            print(result)
    elif result is not None:
        print(json.dumps(result, indent=None if args.formatter == "json" else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
