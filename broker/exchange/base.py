# Owns: the `Routing` protocol every exchange type implements, and `BindingTable`, the shared
# bookkeeping of bindings (identity, idempotence, per-destination index) the types build on.
# Talked to by: broker/exchange/{direct,fanout,topic,headers}.py (subclass BindingTable),
# broker/exchange/router.py and the vhost (call the protocol methods).
# Must never: do I/O, await, log on the hot path, or know what a destination is beyond
# "hashable; a tuple means an exchange" (the vhost's ("exchange", name) convention).
"""Routing tables: the `Routing` protocol and the binding bookkeeping shared by all types.

A binding is identified, as in RabbitMQ (`#binding{source, key, destination, args}` in
rabbit_binding.erl), by `(destination, routing_key, arguments)`: the same queue bound twice
with the same key but different arguments holds two bindings, and is still routed to once.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Hashable, Iterable
from typing import Any, Protocol, runtime_checkable

FrozenArgs = Hashable


def freeze(value: Any) -> Hashable:
    """Hashable, type-faithful image of an AMQP field value (tables and arrays nested).

    `True` and `1` stay distinct (AMQP bool vs integer), dicts become sorted item tuples,
    lists tuples, so `freeze(a) == freeze(b)` iff the two field values are the same.
    """
    if isinstance(value, dict):
        return ("T", tuple(sorted((k, freeze(v)) for k, v in value.items())))
    if isinstance(value, list | tuple):
        return ("A", tuple(freeze(v) for v in value))
    if isinstance(value, bool):
        return ("B", value)
    if isinstance(value, decimal.Decimal):
        return ("D", value.as_tuple())
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, datetime.datetime):
        return ("TS", value)
    return value


@runtime_checkable
class Routing(Protocol):
    """The routing table of one exchange: bindings in, destinations out.

    Destinations are opaque hashables chosen by the caller (the vhost uses queue names and
    `("exchange", name)` tuples for exchange-to-exchange bindings). Pure and single-threaded.
    Source: https://www.rabbitmq.com/tutorials/amqp-concepts.html (exchanges and bindings),
    rabbit_exchange_type.erl (the callbacks each type implements).
    """

    @property
    def exchange_destinations(self) -> int:
        """Number of distinct destinations that are exchanges (tuples). The router reads
        this attribute rather than calling has_exchange_destinations(): 20% of a direct
        route."""

    @property
    def key_only(self) -> bool:
        """True when `route` reads only the routing key and headers, never the message's
        other properties (all but x-consistent-hash with hash-property): the vhost caches
        such routes."""
    # True when `route` reads the headers table (a headers exchange, x-consistent-hash with
    # hash-header): while no such exchange of a vhost has bindings, a message's headers stay
    # encoded through routing (issue 26)
    reads_headers: bool

    def validate_binding(self, routing_key: str, arguments: dict) -> None:
        """Raise what RabbitMQ raises for a binding this type refuses (e.g. 406
        PRECONDITION_FAILED for a bad headers `x-match`); return None when it is acceptable.
        Called by the vhost before `add_binding`."""

    def add_binding(self, destination: Hashable, routing_key: str, arguments: dict) -> bool:
        """Add the binding; False if that exact (destination, routing_key, arguments) existed."""

    def remove_binding(self, destination: Hashable, routing_key: str, arguments: dict) -> bool:
        """Remove the binding; False if it did not exist."""

    def remove_destination(self, destination: Hashable) -> None:
        """Drop every binding to `destination` (queue or exchange deleted)."""

    def route(self, routing_key: str, headers: dict | None,
              message: object = None) -> Iterable[Hashable]:
        """Destinations a message with this routing key and headers reaches, each once;
        `message` (the broker.message.Message) is read only by x-consistent-hash's
        hash-property.

        The result may be a read-only view into the table: iterate it before the next
        binding change, never mutate it."""

    def bindings(self) -> list[tuple[Hashable, str, dict]]:
        """Every binding as (destination, routing_key, arguments), in insertion order."""

    def has_exchange_destinations(self) -> bool:
        """True if some binding's destination is an exchange (a tuple): the router's fast
        path skips e2e handling otherwise."""

    def __len__(self) -> int:
        """Number of bindings."""


class BindingTable:
    """Binding bookkeeping shared by the exchange types (not a Routing by itself).

    Keeps `_bindings: {(destination, routing_key, frozen args): arguments}` (identity and
    `bindings()`), `_by_destination: {destination: {binding key, ...}}` (for
    `remove_destination`) and a count of exchange destinations. Subclasses implement
    `_index_add(destination, routing_key, frozen, arguments)` and
    `_index_remove(destination, routing_key, frozen)`, called once per binding that
    actually appears or disappears, and `route`.
    """

    __slots__ = ("_bindings", "_by_destination", "exchange_destinations")
    key_only = True  # Routing protocol attribute; x-consistent-hash may say otherwise
    reads_headers = False  # Routing protocol attribute; headers and hash-header say otherwise

    def __init__(self) -> None:
        # (destination, routing_key, frozen args) -> the arguments dict as bound.
        self._bindings: dict[tuple[Hashable, str, Hashable], dict] = {}
        # destination -> its binding keys, so a queue deletion costs its own bindings only.
        self._by_destination: dict[Hashable, set[tuple[Hashable, str, Hashable]]] = {}
        # how many distinct destinations are exchanges (tuples): the router's fast path.
        self.exchange_destinations = 0

    def validate_binding(self, routing_key: str, arguments: dict) -> None:
        """Direct, fanout and topic accept any binding (rabbit_exchange_type_*:validate_binding
        returns ok); subclasses that refuse some override this."""

    def add_binding(self, destination: Hashable, routing_key: str, arguments: dict) -> bool:
        """See `Routing.add_binding`. `arguments` may be None (treated as {})."""
        arguments = dict(arguments or {})
        frozen = freeze(arguments)
        key = (destination, routing_key, frozen)
        if key in self._bindings:
            return False
        self._bindings[key] = arguments
        keys = self._by_destination.get(destination)
        if keys is None:
            keys = self._by_destination[destination] = set()
            if isinstance(destination, tuple):
                self.exchange_destinations += 1
        keys.add(key)
        self._index_add(destination, routing_key, frozen, arguments)
        return True

    def remove_binding(self, destination: Hashable, routing_key: str, arguments: dict) -> bool:
        """See `Routing.remove_binding`."""
        frozen = freeze(dict(arguments or {}))
        key = (destination, routing_key, frozen)
        if self._bindings.pop(key, None) is None:
            return False
        keys = self._by_destination[destination]
        keys.discard(key)
        if not keys:
            del self._by_destination[destination]
            if isinstance(destination, tuple):
                self.exchange_destinations -= 1
        self._index_remove(destination, routing_key, frozen)
        return True

    def remove_destination(self, destination: Hashable) -> None:
        """See `Routing.remove_destination`."""
        for key in list(self._by_destination.get(destination, ())):
            self.remove_binding(key[0], key[1], self._bindings[key])

    def bindings(self) -> list[tuple[Hashable, str, dict]]:
        """See `Routing.bindings`."""
        return [(d, rk, dict(args)) for (d, rk, _), args in self._bindings.items()]

    def has_exchange_destinations(self) -> bool:
        """See `Routing.has_exchange_destinations`."""
        return self.exchange_destinations > 0

    def __len__(self) -> int:
        return len(self._bindings)

    def _index_add(
        self, destination: Hashable, routing_key: str, frozen: Hashable, arguments: dict
    ) -> None:
        raise NotImplementedError

    def _index_remove(self, destination: Hashable, routing_key: str, frozen: Hashable) -> None:
        raise NotImplementedError


def count_up(table: dict[Hashable, int], destination: Hashable) -> None:
    """Add one binding's reference to `destination` in a {destination: count} routing set."""
    table[destination] = table.get(destination, 0) + 1


def count_down(table: dict[Hashable, int], destination: Hashable) -> None:
    """Drop one binding's reference; the destination leaves the set at 0."""
    n = table[destination] - 1
    if n:
        table[destination] = n
    else:
        del table[destination]
