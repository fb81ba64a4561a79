# Owns: the fanout exchange's routing set, {destination: binding count}.
# Talked to by: the vhost (bindings) and broker/exchange/router.py (route, per publish).
# Must never: do I/O, await, or look at the routing key or headers.
"""Fanout exchange: a message goes to every bound destination, routing key ignored.

Source: https://www.rabbitmq.com/tutorials/amqp-concepts.html#exchange-fanout,
rabbit_exchange_type_fanout.erl.
"""

from __future__ import annotations

from collections.abc import Hashable

from broker.exchange.base import BindingTable, count_down, count_up


class FanoutRouting(BindingTable):
    """Routing table of a fanout exchange.

    `route(routing_key, headers)` returns the read-only `{destination: count}` dict of every
    bound destination (iterate it; do not mutate).
    """

    __slots__ = ("_dests",)

    def __init__(self) -> None:
        super().__init__()
        # destination -> number of bindings to it (keys and arguments are irrelevant).
        self._dests: dict[Hashable, int] = {}

    def route(self, routing_key: str, headers: dict | None = None,
              message: object = None) -> dict[Hashable, int]:
        """Every bound destination (a read-only view; do not mutate)."""
        return self._dests

    def _index_add(
        self, destination: Hashable, routing_key: str, frozen: Hashable, arguments: dict
    ) -> None:
        count_up(self._dests, destination)

    def _index_remove(self, destination: Hashable, routing_key: str, frozen: Hashable) -> None:
        count_down(self._dests, destination)
