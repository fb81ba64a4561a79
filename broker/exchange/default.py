# Owns: the default exchange "" (routing key -> the queue of that name) as a Routing.
# Talked to by: the vhost (builds it with its queue lookup) and broker/exchange/router.py.
# Must never: hold bindings (RabbitMQ refuses them with 403) or do I/O.
"""The default exchange: a nameless direct exchange implicitly bound to every queue by name.

Source: https://www.rabbitmq.com/tutorials/amqp-concepts.html#exchange-default. Verified on
RabbitMQ 3.10: queue.bind, queue.unbind, exchange.bind with "" as source or destination all
close the channel with 403 "ACCESS_REFUSED - operation not permitted on the default exchange".
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from broker.errors import AccessRefused, amqp_error

DEFAULT_EXCHANGE_REFUSED = "operation not permitted on the default exchange"


class DefaultRouting:
    """Routing of the default exchange: `route(rk, _)` is `(rk,)` when `queue_exists(rk)`.

    `queue_exists: Callable[[str], bool]` is the vhost's queue lookup (e.g. `queues.__contains__`).
    Binding changes raise 403 ACCESS_REFUSED; the vhost should also refuse exchange.bind /
    exchange.unbind naming "" as destination, with the same error (`refuse()`).
    """

    __slots__ = ("_queue_exists",)
    exchange_destinations = 0  # only queues are reached (Routing protocol attribute)
    key_only = True  # routes by the routing key alone (Routing protocol attribute)
    reads_headers = False

    def __init__(self, queue_exists: Callable[[str], bool]) -> None:
        self._queue_exists = queue_exists  # the vhost's "is there a queue of this name"

    @staticmethod
    def refuse() -> Exception:
        """The 403 ACCESS_REFUSED error RabbitMQ raises for any binding on ""."""
        return amqp_error(AccessRefused, DEFAULT_EXCHANGE_REFUSED)

    def validate_binding(self, routing_key: str, arguments: dict) -> None:
        """Always raises 403 ACCESS_REFUSED (no bindings on the default exchange)."""
        raise self.refuse()

    def add_binding(self, destination: Hashable, routing_key: str, arguments: dict) -> bool:
        """Always raises 403 ACCESS_REFUSED."""
        raise self.refuse()

    def remove_binding(self, destination: Hashable, routing_key: str, arguments: dict) -> bool:
        """Always raises 403 ACCESS_REFUSED."""
        raise self.refuse()

    def remove_destination(self, destination: Hashable) -> None:
        """Nothing to drop: the implicit binding goes with the queue itself."""

    def route(self, routing_key: str, headers: dict | None = None,
              message: object = None) -> tuple[str, ...]:
        """`(routing_key,)` if a queue of that name exists, else `()`."""
        return (routing_key,) if self._queue_exists(routing_key) else ()

    def bindings(self) -> list[tuple[Hashable, str, dict]]:
        """No explicit bindings (the implicit ones are not listed)."""
        return []

    def has_exchange_destinations(self) -> bool:
        """Never: only queues are reached."""
        return False

    def __len__(self) -> int:
        return 0
