# Owns: the direct exchange's routing table, {routing_key: {destination: binding count}}.
# Talked to by: the vhost (bindings) and broker/exchange/router.py (route, per publish).
# Must never: do I/O, await, or copy on the route path (route is one dict lookup).
"""Direct exchange: a message goes to the destinations bound with exactly its routing key.

Source: https://www.rabbitmq.com/tutorials/amqp-concepts.html#exchange-direct,
rabbit_exchange_type_direct.erl.
"""

from __future__ import annotations

from collections.abc import Hashable

from broker.exchange.base import BindingTable, count_down, count_up

_EMPTY: dict = {}


class DirectRouting(BindingTable):
    """Routing table of a direct exchange.

    `route(routing_key, headers)` returns a read-only `{destination: count}` dict (iterate it
    for the destinations); headers are ignored. Cost: one dict lookup.
    """

    __slots__ = ("_table",)

    def __init__(self) -> None:
        super().__init__()
        # routing_key -> {destination: number of bindings (differing in arguments)}.
        self._table: dict[str, dict[Hashable, int]] = {}

    def route(self, routing_key: str, headers: dict | None = None,
              message: object = None) -> dict[Hashable, int]:
        """Destinations bound with `routing_key` (a read-only view; do not mutate)."""
        return self._table.get(routing_key, _EMPTY)

    def _index_add(
        self, destination: Hashable, routing_key: str, frozen: Hashable, arguments: dict
    ) -> None:
        count_up(self._table.setdefault(routing_key, {}), destination)

    def _index_remove(self, destination: Hashable, routing_key: str, frozen: Hashable) -> None:
        dests = self._table[routing_key]
        count_down(dests, destination)
        if not dests:
            del self._table[routing_key]
