"""brokerctl's super stream commands, shaped like `rabbitmq-streams add_super_stream` and
`delete_super_stream` (RabbitMQ 3.13's rabbitmq_stream CLI: AddSuperStreamCommand,
DeleteSuperStreamCommand), over the HTTP API every RabbitMQ node has (issue 37 item 6).

    brokerctl add_super_stream invoices --partitions 3 [--max-length-bytes 1000000000]
        [--max-age 24h] [--stream-max-segment-size-bytes N] [--leader-locator balanced]
        [--initial-cluster-size N] [-p VHOST]
    brokerctl add_super_stream invoices --binding-keys amer,emea,apac
    brokerctl delete_super_stream invoices

A super stream is what rabbit_stream_manager makes of one: a durable direct exchange NAME
with the argument x-super-stream = true, a stream per partition (NAME-0 … NAME-(N-1) with
binding keys "0" … "N-1", or NAME-KEY per given binding key), each bound with its key and
the argument x-stream-partition-order = its index. A failure part way undoes what was made.
`run(client, args, quote)` answers like broker/ctl.py's `run`.
"""

from __future__ import annotations

import argparse
from typing import Any

COMMANDS = ("add_super_stream", "delete_super_stream")
ARGUMENTS = {"add_super_stream": 1, "delete_super_stream": 1}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options add_super_stream takes (rabbitmq-streams' names)."""
    p.add_argument("--partitions", type=int, default=None,
                   help="add_super_stream: number of partitions")
    p.add_argument("--binding-keys", default=None,
                   help="add_super_stream: comma-separated binding keys (one partition each)")
    p.add_argument("--max-length-bytes", default=None, help="add_super_stream: retention")
    p.add_argument("--max-age", default=None, help="add_super_stream: retention (e.g. 24h)")
    p.add_argument("--stream-max-segment-size-bytes", default=None,
                   help="add_super_stream: segment size")
    p.add_argument("--leader-locator", default=None, help="add_super_stream: leader locator")
    p.add_argument("--initial-cluster-size", default=None,
                   help="add_super_stream: initial cluster size")


def partitions_of(name: str, partitions: int | None, binding_keys: str | None
                  ) -> list[tuple[str, str]]:
    """[(partition stream, binding key)] as rabbitmq-streams names them. Raises ValueError
    without exactly one of the two, or for fewer than one partition."""
    if (partitions is None) == (binding_keys is None):
        raise ValueError("specify either --partitions or --binding-keys")
    if binding_keys is not None:
        keys = [k.strip() for k in binding_keys.split(",") if k.strip()]
        if not keys:
            raise ValueError("--binding-keys needs at least one key")
        return [(f"{name}-{k}", k) for k in keys]
    if partitions is None or partitions < 1:
        raise ValueError("--partitions must be a positive number")
    return [(f"{name}-{i}", str(i)) for i in range(partitions)]


def _queue_arguments(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"x-queue-type": "stream",
                           "x-queue-leader-locator": args.leader_locator or "balanced"}
    for opt, key in (("max_length_bytes", "x-max-length-bytes"),
                     ("stream_max_segment_size_bytes", "x-stream-max-segment-size-bytes"),
                     ("initial_cluster_size", "x-initial-cluster-size")):
        value = getattr(args, opt)
        if value is not None:
            out[key] = int(value)
    if args.max_age is not None:
        out["x-max-age"] = args.max_age
    return out


def run(client: Any, args: argparse.Namespace, quote: Any) -> tuple[str | None, Any]:
    """add_super_stream / delete_super_stream NAME [-p VHOST]. Raises ValueError for bad
    options; the client's own error for what the API refuses."""
    name, v = args.args[0], args.vhost
    if args.command == "delete_super_stream":
        bindings = client.call("GET", f"/api/exchanges/{quote(v)}/{quote(name)}/bindings/source")
        client.call("DELETE", f"/api/exchanges/{quote(v)}/{quote(name)}")
        for b in bindings:
            if b.get("destination_type") == "queue":
                client.call("DELETE", f"/api/queues/{quote(v)}/{quote(b['destination'])}")
        return f"Deleting a super stream {name} ...", None
    parts = partitions_of(name, args.partitions, args.binding_keys)
    qargs = _queue_arguments(args)
    made: list[str] = []
    try:
        client.call("PUT", f"/api/exchanges/{quote(v)}/{quote(name)}",
                    {"type": "direct", "durable": True, "auto_delete": False,
                     "internal": False, "arguments": {"x-super-stream": True}})
        for stream, _key in parts:
            client.call("PUT", f"/api/queues/{quote(v)}/{quote(stream)}",
                        {"durable": True, "auto_delete": False, "arguments": qargs})
            made.append(stream)
        for order, (stream, key) in enumerate(parts):
            client.call("POST", f"/api/bindings/{quote(v)}/e/{quote(name)}/q/{quote(stream)}",
                        {"routing_key": key, "arguments": {"x-stream-partition-order": order}})
    except Exception:
        for stream in made:
            client.call("DELETE", f"/api/queues/{quote(v)}/{quote(stream)}")
        client.call("DELETE", f"/api/exchanges/{quote(v)}/{quote(name)}")
        raise
    return f"Adding a super stream {name} ...", None
