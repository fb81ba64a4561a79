# Owns: the x-modulus-hash exchange's routing table (rabbitmq_sharding's exchange type).
# Talked to by: the vhost (bindings) and broker/exchange/router.py (route).
# Must never: do I/O, await, or route one message to more than one destination.
"""The `x-modulus-hash` exchange type (rabbitmq_sharding plugin, shipped with RabbitMQ;
rabbit_sharding_exchange_type_modulus_hash.erl is the reference).

A message goes to the destination of one of the exchange's bindings (any binding key):
number `hash(routing key) mod N` of them, N the number of bindings, so a queue bound twice
(with two keys) has two buckets, as the plugin's `route` picks from
`rabbit_router:match_routing_key(Name, ['_'])`, one entry per binding. The buckets are in a
stable order (sorted by destination). The same routing key reaches the same destination while
the bindings stay the same. Route cost: one BLAKE2b of the key, O(1).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from broker.exchange.base import BindingTable, count_down, count_up
from broker.exchange.hashing import hash64


class ModulusHashRouting(BindingTable):
    """Routing table of an x-modulus-hash exchange: `route` returns a tuple of at most one
    destination."""

    __slots__ = ("_counts", "_order")

    def __init__(self, arguments: dict | None = None) -> None:
        super().__init__()
        self._counts: dict[Hashable, int] = {}  # destination -> number of bindings to it
        self._order: list[Hashable] = []  # one bucket per binding, sorted by destination

    def route(self, routing_key: str, headers: dict | None = None,
              message: Any = None) -> tuple[Hashable, ...]:
        order = self._order
        if not order:
            return ()
        return (order[hash64(routing_key) % len(order)],)

    def _index_add(self, destination: Hashable, routing_key: str, frozen: Hashable,
                   arguments: dict) -> None:
        count_up(self._counts, destination)
        self._order = self._buckets()

    def _index_remove(self, destination: Hashable, routing_key: str, frozen: Hashable) -> None:
        count_down(self._counts, destination)
        self._order = self._buckets()

    def _buckets(self) -> list[Hashable]:
        return [d for d in sorted(self._counts, key=repr) for _ in range(self._counts[d])]
