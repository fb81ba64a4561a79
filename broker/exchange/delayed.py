# Owns: the routing table of an `x-delayed-message` exchange: the plugin's declare checks,
# the reading of a message's `x-delay` header, and the choice between the holder (delay it)
# and the underlying type's bindings (route it now).
# Talked to by: broker/exchange/types.py (new_routing), the vhost (sets `holder`, bindings),
# broker/exchange/router.py (route, per publish).
# Must never: do I/O, hold messages (broker/delayed/ does), or import the vhost.
"""The `x-delayed-message` exchange type (rabbitmq-delayed-message-exchange's wire contract).

Source: rabbit_exchange_type_delayed_message.erl and rabbit_delayed_message_utils.erl
(github.com/rabbitmq/rabbitmq-delayed-message-exchange):
- `exchange.declare` needs the argument `x-delayed-type`, the name of another exchange type
  (a string): missing or not a string gives 406 "Invalid argument, 'x-delayed-type' must be
  an existing exchange type"; `x-delayed-message` itself gives 406 "Invalid argument,
  'x-delayed-message' can't be used for 'x-delayed-type'"; an unknown name gives what
  declaring that type gives (503 "unknown exchange type 'x'").
- Bindings are those of the underlying type, evaluated when the message is routed.
- A message whose `x-delay` header is an integer in 1 .. 2^32 - 1 ms is held (route returns
  the holder); any other value, no header, 0, a negative delay, or one past 2^32 - 1 is
  routed at once by the underlying type. A string is read as a decimal integer, a float is
  truncated; other field types (booleans, decimals, timestamps, tables) mean no delay. A
  string that is no integer (the plugin's binary_to_integer fails there) also means no delay.
- At due time the message goes through the exchange again with `x-delay` set to minus the
  delay (`swap_delay_header`), so it is not delayed twice and its consumers see it was.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

from broker import errors
from broker.exchange.base import Routing

TYPE = "x-delayed-message"
MAX_DELAY_MS = 4294967295  # 2^32 - 1: the plugin's ?ERL_MAX_T (Erlang's largest timer)


def delay_of(headers: dict | None) -> int | None:
    """The delay in ms that `headers`' `x-delay` asks for, or None when the message is to be
    routed at once (no header, a value out of 1 .. MAX_DELAY_MS, or an unusable type)."""
    if not headers:
        return None
    return delay_from(headers.get("x-delay"))


def delay_from(value: object) -> int | None:
    """`delay_of` for the value of an `x-delay` header (None: no such header)."""
    if value is None or value.__class__ is bool:
        return None
    if isinstance(value, int):
        delay = value
    elif isinstance(value, float):
        delay = int(value)  # trunc/1
    elif isinstance(value, str | bytes):
        try:
            delay = int(value)
        except ValueError:
            return None
    else:  # decimal.Decimal, datetime, tables, arrays: not among the plugin's types
        return None
    return delay if 0 < delay <= MAX_DELAY_MS else None


def swapped_delay(delay: int) -> int:
    """The `x-delay` a message carries once it was delayed `delay` ms (the plugin's
    swap_delay_header)."""
    return -delay


class DelayedRouting:
    """Routing table of an `x-delayed-message` exchange: the underlying type's table
    (`inner`) plus `holder`, the destination a delayed message goes to (the vhost sets it to
    the exchange's broker/delayed/holder.py process; None: nothing is held, every message is
    routed at once).

    Satisfies the `Routing` protocol by delegating bindings to `inner`. `reads_headers` is
    always True (the `x-delay` header decides), even without bindings: a message held now
    meets the bindings that exist at its due time.
    """

    __slots__ = ("inner", "holder", "delayed_type")
    reads_headers = True
    always_reads_headers = True  # x-delay decides even before there is a binding

    def __init__(self, arguments: dict | None,
                 make_inner: Callable[[str, dict | None], Routing]) -> None:
        arguments = arguments or {}
        delayed_type = arguments.get("x-delayed-type")
        if isinstance(delayed_type, bytes):
            delayed_type = delayed_type.decode("utf-8", "replace")
        if delayed_type == TYPE:
            raise errors.amqp_error(
                errors.PreconditionFailed,
                "Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'")
        if not isinstance(delayed_type, str):
            raise errors.amqp_error(
                errors.PreconditionFailed,
                "Invalid argument, 'x-delayed-type' must be an existing exchange type")
        self.delayed_type = delayed_type  # the underlying type's name
        self.inner: Routing = make_inner(delayed_type, arguments)  # 503 for an unknown type
        self.holder: Hashable | None = None  # set by the vhost once the exchange exists

    # -- the Routing protocol, by delegation -------------------------------------------------
    @property
    def exchange_destinations(self) -> int:
        return self.inner.exchange_destinations

    @property
    def key_only(self) -> bool:
        return self.inner.key_only

    def validate_binding(self, routing_key: str, arguments: dict) -> None:
        self.inner.validate_binding(routing_key, arguments)

    def add_binding(self, destination: Hashable, routing_key: str, arguments: dict) -> bool:
        return self.inner.add_binding(destination, routing_key, arguments)

    def remove_binding(self, destination: Hashable, routing_key: str, arguments: dict) -> bool:
        return self.inner.remove_binding(destination, routing_key, arguments)

    def remove_destination(self, destination: Hashable) -> None:
        self.inner.remove_destination(destination)

    def bindings(self) -> list[tuple[Hashable, str, dict]]:
        return self.inner.bindings()

    def has_exchange_destinations(self) -> bool:
        return self.inner.has_exchange_destinations()

    def __len__(self) -> int:
        return len(self.inner)

    def route(self, routing_key: str, headers: dict | None,
              message: object = None) -> Iterable[Hashable]:
        """(holder,) for a message to delay, else what the underlying type routes it to."""
        holder = self.holder
        if holder is not None and headers and delay_of(headers) is not None:
            return (holder,)
        return self.inner.route(routing_key, headers, message)

    def route_now(self, routing_key: str, headers: dict | None,
                  message: object = None) -> Iterable[Hashable]:
        """What the underlying type routes to, whatever `x-delay` says (mandatory's check)."""
        return self.inner.route(routing_key, headers, message)

