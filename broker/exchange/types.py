# Owns: the registry of exchange types, the `Exchange` record the vhost keeps per exchange,
# and `new_routing` (type name -> empty routing table). Re-exported by broker/exchange/__init__.
# Talked to by: the vhost (exchange.declare / delete, bindings) and broker/exchange/router.py.
# Must never: do I/O, await, or enforce declare-time equivalence (the vhost's job).
"""Exchanges: types, the per-exchange record, and routing table construction.

Public API (through `broker.exchange`): `EXCHANGE_TYPES`, `new_routing`, `Exchange`,
`DefaultRouting`, `Routing`. Source: https://www.rabbitmq.com/tutorials/amqp-concepts.html,
rabbit_exchange.erl (`check_type`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.errors import CommandInvalid, amqp_error
from broker.exchange.base import Routing
from broker.exchange.consistent_hash import ConsistentHashRouting
from broker.exchange.dedup import TYPE as DEDUP_TYPE
from broker.exchange.dedup import DedupRouting
from broker.exchange.default import DefaultRouting
from broker.exchange.delayed import TYPE as DELAYED_TYPE
from broker.exchange.delayed import DelayedRouting
from broker.exchange.direct import DirectRouting
from broker.exchange.fanout import FanoutRouting
from broker.exchange.federation_upstream import FederationUpstreamRouting
from broker.exchange.headers import HeadersRouting
from broker.exchange.modulus_hash import ModulusHashRouting
from broker.exchange.topic import TopicRouting

if TYPE_CHECKING:
    from broker.definitions import PolicyDef

EXCHANGE_TYPES: dict[str, type] = {
    "direct": DirectRouting,
    "fanout": FanoutRouting,
    "topic": TopicRouting,
    "headers": HeadersRouting,
    # the two plugin types that ship with RabbitMQ (rabbitmq_consistent_hash_exchange,
    # rabbitmq_sharding), always enabled here
    "x-consistent-hash": ConsistentHashRouting,
    "x-modulus-hash": ModulusHashRouting,
    # rabbitmq_federation's upstream helper type, so this broker can be an upstream
    "x-federation-upstream": FederationUpstreamRouting,
    # rabbitmq-delayed-message-exchange's type, built in (broker/exchange/delayed.py)
    DELAYED_TYPE: DelayedRouting,
    # rabbitmq-message-deduplication's type, built in (broker/exchange/dedup.py)
    DEDUP_TYPE: DedupRouting,
}
# types whose routing table reads the exchange's declare arguments
_TAKES_ARGUMENTS = (ConsistentHashRouting, ModulusHashRouting, FederationUpstreamRouting,
                    DedupRouting)


def new_routing(type_name: str, arguments: dict | None = None) -> Routing:
    """Empty routing table of exchange type `type_name` ("direct", "fanout", "topic",
    "headers", "x-consistent-hash", "x-modulus-hash", "x-delayed-message",
    "x-message-deduplication"); `arguments` (the declare table) are
    validated by the types that read them (406 from x-consistent-hash, x-delayed-message and x-message-deduplication).

    Raises 503 COMMAND_INVALID "unknown exchange type 'x'" (a connection error) for any other
    name, as RabbitMQ 3.10 does for exchange.declare (verified: type "bogus-zz-type",
    "x-consistent-hash" without the plugin, "Direct" and "topic " all get that reply). The
    empty type gets "invalid exchange type ''" (verified): RabbitMQ says "invalid" when the
    name is an existing Erlang atom that is no registered type, and '' is always one.
    """
    cls = EXCHANGE_TYPES.get(type_name)
    if cls is None:
        word = "invalid" if type_name == "" else "unknown"
        raise amqp_error(CommandInvalid, f"{word} exchange type '{type_name}'")
    if cls is DelayedRouting:  # wraps the routing table of its x-delayed-type
        return DelayedRouting(arguments, new_routing)
    return cls(arguments) if cls in _TAKES_ARGUMENTS else cls()


@dataclass(slots=True, eq=False)
class Exchange:
    """One declared exchange, as the vhost keeps it.

    `arguments` is the exchange.declare table; `routing` its routing table (from
    `new_routing(type)`, or `DefaultRouting` for ""). Identity equality: two records are the
    same exchange only if they are the same object.
    """

    name: str  # exchange name; "" is the default exchange
    type: str  # "direct", "fanout", "topic" or "headers"
    durable: bool = False  # survives a broker restart (definitions store)
    auto_delete: bool = False  # deleted when its last binding as source goes
    internal: bool = False  # basic.publish to it is refused (403); only e2e reaches it
    arguments: dict[str, Any] = field(default_factory=dict)  # declare arguments, as sent
    # the bindings; built from `type` by __post_init__ when not given, so never None after
    # construction (a dataclass cannot say "optional argument, always-set attribute")
    routing: Routing = None  # type: ignore[assignment]
    policy: PolicyDef | None = None  # the policy that applies (its alternate-exchange)
    # messages published to it, and copies it routed to queues (message_stats publish_in /
    # publish_out in the management API; counted by the channel, per publish or run)
    publish_in: int = 0
    publish_out: int = 0

    def __post_init__(self) -> None:
        if self.routing is None:  # not given
            self.routing = new_routing(self.type, self.arguments)

    @property
    def alternate_exchange(self) -> str | None:
        """Name in the `alternate-exchange` argument (a string), else None.

        Source: https://www.rabbitmq.com/ae.html (policies setting it are the vhost's job).
        """
        ae = self.arguments.get("alternate-exchange") if self.arguments else None
        if ae is None and self.policy is not None:  # the argument wins over a policy
            ae = self.policy.definition.get("alternate-exchange")
        return ae if isinstance(ae, str) else None


__all__ = [
    "EXCHANGE_TYPES",
    "DefaultRouting",
    "Exchange",
    "Routing",
    "new_routing",
]
