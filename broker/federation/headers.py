# Owns: the headers and binding arguments federation links write and read: x-received-from
# on forwarded messages, x-bound-from on propagated bindings, the hop and loop rules.
# Talked to by: broker/federation/exchange_link.py and queue_link.py.
# Must never: do I/O or change a table it was given (every function returns a new one).
"""Federation's headers (rabbitmq_federation 3.10.8: rabbit_federation_util,
rabbit_federation_exchange_link update_routing_headers / update_binding, and
rabbit_federation_queue_link update_headers are the reference).

Tables are the decoded `headers` dicts of pamqp (str keys; nested tables are dicts, arrays
are lists). RabbitMQ's `prepend_table_header(Name, Info, Headers)` puts `Info` (a table) at
the front of the array `Name`, creating it; a value under `Name` that is not an array is
moved into the `x-invalid-headers` table, under `Name`, in an array (newest first).
"""

from __future__ import annotations

from typing import Any

ROUTING_HEADER = "x-received-from"  # ?ROUTING_HEADER: hops a message went through
BINDING_HEADER = "x-bound-from"  # ?BINDING_HEADER: hops a binding was propagated through
MAX_HOPS_ARG = "x-max-hops"
DOWNSTREAM_NAME_ARG = "x-downstream-name"
DOWNSTREAM_VHOST_ARG = "x-downstream-vhost"
INTERNAL_PURPOSE = ("x-internal-purpose", "federation")
INVALID_HEADERS = "x-invalid-headers"  # ?INVALID_HEADERS_KEY (rabbit_basic)


def prepend(headers: dict[str, Any] | None, name: str, info: dict[str, Any]) -> dict[str, Any]:
    """A copy of `headers` with `info` first in the array `name` (rabbit_basic
    prepend_table_header)."""
    out = dict(headers or {})
    prior = out.get(name)
    if prior is not None and not isinstance(prior, list):
        invalid = out.get(INVALID_HEADERS)
        invalid = dict(invalid) if isinstance(invalid, dict) else (
            {} if invalid is None else {INVALID_HEADERS: [invalid]})
        earlier = invalid.get(name)
        invalid[name] = [prior, *earlier] if isinstance(earlier, list) else [prior]
        out[INVALID_HEADERS] = invalid
    out[name] = [info, *prior] if isinstance(prior, list) else [info]
    return out


def already_seen(cluster_name: str, vhost: str, hops: list[Any]) -> bool:
    """rabbit_federation_util:already_seen: some hop names this cluster and vhost."""
    return any(isinstance(h, dict) and h.get("cluster-name") == cluster_name
               and h.get("vhost") == vhost for h in hops)


def should_forward(headers: dict[str, Any] | None, max_hops: int, cluster_name: str,
                   vhost: str) -> bool:
    """rabbit_federation_util:should_forward: a message that went through `max_hops`
    brokers already, or through this one (cluster name and vhost), stops here."""
    hops = (headers or {}).get(ROUTING_HEADER)
    if not isinstance(hops, list):
        return True
    return len(hops) < max_hops and not already_seen(cluster_name, vhost, hops)


def exchange_hop(headers: dict[str, Any] | None, safe_uri: str, upstream_exchange: str,
                 redelivered: bool, upstream_cluster: str | None,
                 upstream_vhost: str | None) -> dict[str, Any]:
    """The headers of a message a federated exchange republishes: `x-received-from` gets
    {uri, exchange, redelivered, cluster-name, vhost} in front (the last two when the
    upstream announced them). update_routing_headers."""
    info: dict[str, Any] = {"uri": safe_uri, "exchange": upstream_exchange,
                            "redelivered": redelivered}
    if upstream_cluster is not None:
        info["cluster-name"] = upstream_cluster
    if upstream_vhost is not None:
        info["vhost"] = upstream_vhost
    return prepend(headers, ROUTING_HEADER, info)


def queue_hop(headers: dict[str, Any] | None, safe_uri: str, upstream_queue: str,
              redelivered: bool, exchange: str, routing_key: str) -> dict[str, Any]:
    """The headers of a message a federated queue takes from its upstream
    (rabbit_federation_queue_link update_headers): the first time, the original exchange and
    routing key are kept as `x-original-exchange` / `x-original-routing-key`; the entry for
    this upstream (same uri and queue) moves to the front of `x-received-from` with its
    `visit-count` plus one; a `CC` header becomes `x-original-cc`."""
    out = dict(headers or {})
    prior = out.get(ROUTING_HEADER)
    count = 0
    if isinstance(prior, list):
        rest = []
        for hop in prior:
            if (isinstance(hop, dict) and hop.get("uri") == safe_uri
                    and hop.get("queue") == upstream_queue):
                c = hop.get("visit-count")
                count = c if isinstance(c, int) and not isinstance(c, bool) else 0
            else:
                rest.append(hop)
        out[ROUTING_HEADER] = rest
    else:
        out["x-original-exchange"] = exchange
        out["x-original-routing-key"] = routing_key
        out.pop(ROUTING_HEADER, None)
    if "CC" in out:
        out = {("x-original-cc" if k == "CC" else k): v for k, v in out.items()}
    info = {"uri": safe_uri, "queue": upstream_queue, "redelivered": redelivered,
            "visit-count": count + 1}
    return prepend(out, ROUTING_HEADER, info)


def hops_of(table: dict[str, Any]) -> int:
    """The `hops` of an x-bound-from entry (any integer type, as get_hops)."""
    h = table.get("hops")
    return h if isinstance(h, int) and not isinstance(h, bool) and h >= 0 else 0


def binding_arguments(args: dict[str, Any], max_hops: int, upstream_cluster: str | None,
                      upstream_vhost: str, cluster_name: str, vhost: str,
                      exchange: str, suffix: str) -> dict[str, Any] | None:
    """The arguments of the upstream binding that stands for a local binding with `args`
    (update_binding), or None when the binding must not go further: its x-bound-from says
    it came from that upstream already, or it has no hops left. `exchange` and `vhost` are
    the downstream (local) exchange's, `suffix` the internal exchange's A/B."""
    prior = args.get(BINDING_HEADER)
    if isinstance(prior, list) and prior:
        first = prior[0] if isinstance(prior[0], dict) else {}
        if upstream_cluster is not None and already_seen(upstream_cluster, upstream_vhost,
                                                         prior):
            hops = 0
        else:
            hops = min(hops_of(first) - 1, max_hops)
    else:
        hops = max_hops
    if hops <= 0:
        return None
    info = {"cluster-name": cluster_name, "vhost": vhost,
            "exchange": f"{vhost}:{exchange} {suffix}", "hops": hops}
    return prepend(args, BINDING_HEADER, info)
