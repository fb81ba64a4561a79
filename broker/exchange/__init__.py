"""Exchanges: the package's public names. Types, the per-exchange record and routing table
construction live in `types.py`; routing a message through exchanges in `router.py`.
Source: https://www.rabbitmq.com/tutorials/amqp-concepts.html, rabbit_exchange.erl.
"""

from broker.exchange.router import route
from broker.exchange.types import (
    EXCHANGE_TYPES,
    DefaultRouting,
    Exchange,
    Routing,
    new_routing,
)

__all__ = ["EXCHANGE_TYPES", "DefaultRouting", "Exchange", "Routing", "new_routing", "route"]
