"""Routing a publish within one vhost to its queue processes, and the route cache.

Owns: the (exchange, routing key) → queues cache of one vhost, the count of its exchanges
that route by a message property (x-consistent-hash's `hash-property`), and whether some
exchange with bindings routes by headers (so a publish's headers table must be decoded).
Talks to: the vhost's exchange and queue tables (the same dicts `broker/vhost.py`'s VHost
holds; it changes them, then calls `topology_changed()`), `broker/exchange/router.py` for
the exchange graph. Called through the VHost (`route_message`, `route`, `route_keys`,
`routes_by_key_only`) by channels, dead-lettering and federation.
Must never: change a table (declares, binds and deletes belong to the VHost), or keep a
route across a topology change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from broker.exchange.dedup import TYPE as DEDUP
from broker.exchange.delayed import TYPE as DELAYED
from broker.exchange.router import route as route_exchanges

if TYPE_CHECKING:
    from broker.exchange import Exchange
    from broker.queue_process import QueueProcess

ROUTE_CACHE_SIZE = 10000  # cached (exchange, routing key) routes per vhost


class Routes:
    """Where publishes to one vhost go. `exchanges` and `queues` are the vhost's own tables
    (read, never changed here); the vhost calls `topology_changed()` after every change to
    them, its bindings or its policies, and keeps `property_routed` up to date."""

    def __init__(self, exchanges: dict[str, Exchange], queues: dict[str, QueueProcess]) -> None:
        self._exchanges = exchanges  # the vhost's name -> exchange table
        self._queues = queues  # the vhost's name -> queue process table
        # (exchange, routing key) -> queues, for publishes without headers; emptied on every
        # topology change; unused while an exchange routes by a message property
        self._cache: dict[tuple[str, str], tuple[QueueProcess, ...]] = {}
        self.property_routed = 0  # exchanges whose routing reads message properties
        # whether an exchange with bindings reads headers; None: not known since the last
        # topology change (computed on the next publish with headers)
        self._headers_routed: bool | None = None
        # whether the vhost has a delayed exchange (None: not known since the last change)
        self._delaying: bool | None = None
        # whether a binding routes by headers, a delayed exchange's x-delay aside (None: not
        # known since the last change)
        self._bound_headers: bool | None = None
        # whether the vhost has a deduplicating exchange (None: not known since the last
        # change)
        self._dedup: bool | None = None

    def topology_changed(self) -> None:
        """Exchanges, bindings, queues or policies changed: cached routes are stale."""
        self._headers_routed = None
        self._bound_headers = None
        self._delaying = None
        self._dedup = None
        if self._cache:
            self._cache.clear()

    def route_message(self, exchange_name: str, routing_key: str,
                      message: Any) -> Sequence[QueueProcess]:
        """`route` for a broker.message.Message: its headers table is passed (and so
        decoded) only while some exchange of this vhost that routes by headers has bindings;
        otherwise headers cannot change the result and stay encoded (issue 26)."""
        headers = None
        if message.has_headers and self.reads_headers():
            headers = message.headers
        return self.route(exchange_name, routing_key, headers, message)

    def count_publish(self, exchange_name: str, n_in: int, n_out: int) -> None:
        """`n_in` messages were published to `exchange_name` and `n_out` copies of them
        routed to queues: the exchange's publish_in / publish_out (RabbitMQ's exchange
        message_stats, from its channels' per-exchange counts)."""
        x = self._exchanges.get(exchange_name)
        if x is not None:
            x.publish_in += n_in
            x.publish_out += n_out

    def reads_headers(self) -> bool:
        """Some exchange of this vhost with bindings routes by headers (recomputed once
        per topology change)."""
        reads = self._headers_routed
        if reads is None:
            # a delayed or deduplicating exchange reads its header even without bindings
            reads = any(x.routing.reads_headers and (
                len(x.routing) or getattr(x.routing, "always_reads_headers", False))
                for x in self._exchanges.values())
            self._headers_routed = reads
        return reads

    def route_due(self, exchange_name: str, routing_key: str,
                  message: Any) -> Sequence[QueueProcess]:
        """`route_message` for a delayed exchange's due message (its `x-delay` already
        negated, broker/delayed/holder.py): the headers are decoded only while some binding
        of this vhost routes by them, so a due message routed by key keeps its properties
        encoded and takes the route cache."""
        headers = None
        if message.has_headers and self._bindings_read_headers():
            headers = message.headers
        return self.route(exchange_name, routing_key, headers, message)

    def _bindings_read_headers(self) -> bool:
        reads = self._bound_headers
        if reads is None:
            reads = self._bound_headers = any(
                getattr(x.routing, "inner", x.routing).reads_headers and len(x.routing)
                for x in self._exchanges.values())
        return reads

    def deduplicating(self) -> bool:
        """Some exchange of this vhost is an x-message-deduplication one (recomputed once
        per topology change): each publish is then routed on its own, since routing decides
        whether it is a duplicate (runs of alike publishes are not routed once)."""
        dedup = self._dedup
        if dedup is None:
            dedup = self._dedup = any(x.type == DEDUP for x in self._exchanges.values())
        return dedup

    def delaying(self) -> bool:
        """Some exchange of this vhost is an x-delayed-message one (recomputed once per
        topology change): a mandatory publish may then need `held_unroutable`'s check."""
        delaying = self._delaying
        if delaying is None:
            delaying = self._delaying = any(x.type == DELAYED for x in self._exchanges.values())
        return delaying

    def routes_by_key_only(self) -> bool:
        """Where a publish goes depends on its exchange and routing key alone: no exchange
        here routes by a message property, none with bindings by headers. Publishes that
        differ only in their properties then share one route."""
        return not self.property_routed and not self.reads_headers()

    def route(self, exchange_name: str, routing_key: str, headers: dict | None,
              message: Any = None) -> Sequence[QueueProcess]:
        """Queue processes a publish to `exchange_name` reaches (may be empty; do not mutate
        it); `message` (the Message) matters only to x-consistent-hash's `hash-property`.
        Without headers the result is cached per (exchange, routing key) until the next
        topology change (issue 15: routing a run of alike publishes costs one dict lookup)."""
        queues = self._queues
        if exchange_name == "":
            q = queues.get(routing_key)
            return (q,) if q is not None else ()
        cacheable = headers is None and not self.property_routed
        if cacheable:
            hit = self._cache.get((exchange_name, routing_key))
            if hit is not None:
                return hit
        names = route_exchanges(self._exchanges, exchange_name, routing_key, headers,
                                message=message)
        # a destination that is no name is a delayed exchange's holder (broker/delayed/)
        found = tuple([queues[n] if n.__class__ is str else cast(Any, n) for n in names
                       if n in queues or n.__class__ is not str])
        if cacheable:
            cache = self._cache
            if len(cache) >= ROUTE_CACHE_SIZE:  # many distinct keys: start afresh
                cache.clear()
            cache[(exchange_name, routing_key)] = found
        return found

    def route_keys(self, exchange_name: str, keys: list[str], headers: dict | None,
                   message: Any = None) -> list[QueueProcess]:
        """Queue processes a message sent to `exchange_name` with several routing keys
        reaches (dead-lettering: the published key and its CC keys); each queue once. A
        missing exchange reaches nothing (a missing DLX drops silently, rabbitmq.com/dlx.html)."""
        queues = self._queues
        if exchange_name == "":
            return [queues[k] for k in dict.fromkeys(keys) if k in queues]
        if exchange_name not in self._exchanges:
            return []
        names = route_exchanges(self._exchanges, exchange_name, keys[0], headers,
                                extra_keys=keys[1:], message=message)
        return [queues[n] if n.__class__ is str else cast(Any, n) for n in names
                if n in queues or n.__class__ is not str]
