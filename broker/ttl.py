"""Message TTL: parsing the `expiration` property and computing a message's expiry.

Owns: `parse_expiration` (RabbitMQ's rabbit_basic:parse_expiration rules and texts) and
`expiry_ms` (the absolute expiry of a message entering a queue). Pure: no I/O, no clock of
its own (callers pass `now_ms`). Source: rabbitmq.com/ttl.html: the queue's `x-message-ttl`
and the message's `expiration` (a string of a non-negative integer, ms) both apply, the lower
wins; 0 means "deliver now or never".
"""

from __future__ import annotations

import re

_LEADING_INT = re.compile(r"[+-]?[0-9]+")
# the longest TTL or queue expiry RabbitMQ accepts: ten years in ms (rabbit_misc:check_expiry,
# applied to x-message-ttl, x-expires and the expiration property)
MAX_EXPIRY = 315_360_000_000


def parse_expiration(expiration: str | None) -> int | None:
    """The `expiration` property as ms, None if absent. Raises ValueError with RabbitMQ's
    reason text for the 406 PRECONDITION_FAILED "invalid expiration '<e>': <reason>"
    (rabbit_channel check_expiration_header): `no_integer`, `{leftover_string,"x"}`,
    `{value_negative,-1}` (Erlang string:to_integer semantics), `{value_too_large,N}` above
    ten years (MAX_EXPIRY; rabbit_basic:parse_expiration → rabbit_misc:check_expiry)."""
    if expiration is None:
        return None
    m = _LEADING_INT.match(expiration)
    if m is None:
        raise ValueError("no_integer")
    if m.end() != len(expiration):
        rest = expiration[m.end():]
        raise ValueError(f'{{leftover_string,"{rest}"}}')
    value = int(m.group())
    if value < 0:
        raise ValueError(f"{{value_negative,{value}}}")
    if value > MAX_EXPIRY:
        raise ValueError(f"{{value_too_large,{value}}}")
    return value


def expiry_ms(now_ms: int, queue_ttl: int | None, message_ttl: int | None) -> int | None:
    """Absolute expiry (ms since the epoch) of a message entering a queue now: the lower of
    the queue's `x-message-ttl` and the message's expiration; None when neither is set."""
    if queue_ttl is None:
        ttl = message_ttl
    elif message_ttl is None:
        ttl = queue_ttl
    else:
        ttl = min(queue_ttl, message_ttl)
    return None if ttl is None else now_ms + ttl
