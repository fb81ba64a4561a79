# Owns: the x-consistent-hash exchange's routing table: bindings weighted into buckets.
# Talked to by: the vhost (declare, bindings) and broker/exchange/router.py (route).
# Must never: do I/O, await, or route one message to more than one destination.
"""The `x-consistent-hash` exchange type (rabbitmq_consistent_hash_exchange, shipped with
RabbitMQ; its README and rabbit_exchange_type_consistent_hash.erl are the reference).

- The binding key is the binding's weight: an integer ≥ 1 (as a string), the number of
  buckets its destination gets. Anything else is refused with 406 PRECONDITION_FAILED,
  "The binding key must be an integer: <<\"k\">>" or "The binding key must be greater than 0".
- A message goes to exactly one destination: the bucket `jump_consistent_hash(hash(value),
  total buckets)`, where value is the routing key, or with the exchange argument
  `hash-header` = H that header's value, or with `hash-property` = P one of the properties
  `message_id`, `correlation_id`, `timestamp`. The same value always reaches the same
  destination while the bindings stay the same; binding one more destination moves only the
  values that now land in its buckets. A missing header/property hashes as an empty value.
- Declaring with both `hash-header` and `hash-property` is 406 "hash-header and
  hash-property are mutually exclusive"; another property is 406 "Unsupported property: P".
- Buckets are numbered in binding order; removing a binding renumbers the later ones, as in
  the plugin. Route cost: one BLAKE2b of the value plus O(ln buckets).
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from typing import Any

from broker.errors import PreconditionFailed, amqp_error
from broker.exchange.base import BindingTable
from broker.exchange.hashing import hash64, jump_consistent_hash

PROPERTIES = ("correlation_id", "message_id", "timestamp")  # what hash-property may name


def hash_source(arguments: dict | None) -> tuple[str, str] | None:
    """("header", name), ("property", name) or None (the routing key) from the exchange's
    arguments; 406 for both or an unsupported property (rabbit_exchange_type_consistent_hash
    validate/1). Only string values count, as the plugin only reads longstr ones."""
    args = arguments or {}
    header = args.get("hash-header")
    prop = args.get("hash-property")
    header = header if isinstance(header, str) else None
    prop = prop if isinstance(prop, str) else None
    if header is not None and prop is not None:
        raise amqp_error(PreconditionFailed,
                         "hash-header and hash-property are mutually exclusive")
    if prop is not None:
        if prop not in PROPERTIES:
            raise amqp_error(PreconditionFailed, f"Unsupported property: {prop}")
        return ("property", prop)
    return ("header", header) if header is not None else None


_INTEGER = re.compile(r"[+-]?[0-9]+")


def _weight(routing_key: str) -> int:
    """The binding's weight; 406 as the plugin's validate_binding (Erlang list_to_integer
    syntax: optional sign, decimal digits, nothing else)."""
    if _INTEGER.fullmatch(routing_key) is None:
        raise amqp_error(PreconditionFailed,
                         f'The binding key must be an integer: <<"{routing_key}">>')
    weight = int(routing_key)
    if weight < 1:
        raise amqp_error(PreconditionFailed, "The binding key must be greater than 0")
    return weight


class ConsistentHashRouting(BindingTable):
    """Routing table of an x-consistent-hash exchange (module docstring).

    `route(routing_key, headers, message)` returns a tuple of at most one destination.
    """

    __slots__ = ("_source", "_weights", "_buckets", "key_only", "reads_headers")

    def __init__(self, arguments: dict | None = None) -> None:
        super().__init__()
        self._source = hash_source(arguments)  # what is hashed; 406 on bad arguments
        # hash-property reads the message's properties: its routes cannot be cached
        self.key_only = self._source is None or self._source[0] == "header"
        self.reads_headers = self._source is not None and self._source[0] == "header"
        # (destination, routing_key, frozen args) -> weight, in binding order
        self._weights: dict[tuple[Hashable, str, Hashable], int] = {}
        self._buckets: list[Hashable] = []  # bucket number -> destination

    def validate_binding(self, routing_key: str, arguments: dict) -> None:
        """406 unless the binding key is an integer ≥ 1 (the plugin's validate_binding)."""
        _weight(routing_key)

    def route(self, routing_key: str, headers: dict | None = None,
              message: Any = None) -> tuple[Hashable, ...]:
        buckets = self._buckets
        if not buckets:
            return ()
        source = self._source
        if source is None:
            value: Any = routing_key
        elif source[0] == "header":
            value = headers.get(source[1]) if headers else None
        else:
            props = message.properties if message is not None else None  # type: ignore[attr-defined]
            value = getattr(props, source[1], None)
            if source[1] == "timestamp" and value is not None:  # hashed as decimal text
                value = str(int(value.timestamp()) if hasattr(value, "timestamp") else int(value))
        return (buckets[jump_consistent_hash(hash64(value), len(buckets))],)

    def _rebuild(self) -> None:
        self._buckets = [key[0] for key, w in self._weights.items() for _ in range(w)]

    def _index_add(self, destination: Hashable, routing_key: str, frozen: Hashable,
                   arguments: dict) -> None:
        # validate_binding ran first for a client's binding; anything else that reaches the
        # table unvalidated (tests of the generic table) simply gets no buckets
        weight = int(routing_key) if _INTEGER.fullmatch(routing_key) else 0
        self._weights[(destination, routing_key, frozen)] = max(weight, 0)
        self._rebuild()

    def _index_remove(self, destination: Hashable, routing_key: str, frozen: Hashable) -> None:
        del self._weights[(destination, routing_key, frozen)]
        self._rebuild()
