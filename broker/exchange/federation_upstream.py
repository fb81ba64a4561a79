# Owns: the `x-federation-upstream` exchange type (rabbitmq_federation's helper exchange on
# the upstream side of a federated exchange).
# Talked to by: the vhost (declare, bindings) and broker/exchange/router.py (route).
# Must never: do I/O, await, or forward a message past its hop limit.
"""`x-federation-upstream` (rabbit_federation_upstream_exchange.erl, RabbitMQ 3.10.8): the
exchange a downstream broker declares on its upstream (`federation: X -> NODE A`) and binds
its queue to. It routes as fanout, except that a message whose `x-received-from` array
already has `x-max-hops` entries, or names the downstream itself (`cluster-name` equal to
the `x-downstream-name` argument and `vhost` to `x-downstream-vhost`), goes nowhere
(rabbit_federation_util:should_forward): this stops federation loops.

Declare arguments: `x-max-hops` (a long) is required: without it 406 "Argument x-max-hops
missing", of another type 406 "Argument x-max-hops must be of type long" (RabbitMQ 3.10.8,
checked).
"""

from __future__ import annotations

from collections.abc import Hashable

from broker.errors import PreconditionFailed, amqp_error
from broker.exchange.fanout import FanoutRouting

ROUTING_HEADER = "x-received-from"  # rabbit_federation.hrl ?ROUTING_HEADER


class FederationUpstreamRouting(FanoutRouting):
    """Fanout with the federation hop rule; reads the headers of every message."""

    __slots__ = ("_max_hops", "_downstream")
    reads_headers = True  # Routing protocol attribute: the hop rule reads x-received-from

    def __init__(self, arguments: dict | None = None) -> None:
        super().__init__()
        args = arguments or {}
        if "x-max-hops" not in args:
            raise amqp_error(PreconditionFailed, "Argument x-max-hops missing")
        hops = args["x-max-hops"]
        if isinstance(hops, bool) or not isinstance(hops, int):
            raise amqp_error(PreconditionFailed,
                             "Argument x-max-hops must be of type long")
        self._max_hops = hops
        name, vhost = args.get("x-downstream-name"), args.get("x-downstream-vhost")
        self._downstream = (name if isinstance(name, str) else None,
                            vhost if isinstance(vhost, str) else None)

    def route(self, routing_key: str, headers: dict | None = None,
              message: object = None) -> dict[Hashable, int]:
        seen = headers.get(ROUTING_HEADER) if headers else None
        if isinstance(seen, list):
            if len(seen) >= self._max_hops:
                return {}
            name, vhost = self._downstream
            for hop in seen:
                if (isinstance(hop, dict) and hop.get("cluster-name") == name
                        and hop.get("vhost") == vhost):
                    return {}
        return self._dests
