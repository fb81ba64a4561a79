# Owns: the limit rules: which user and vhost limits exist, how a value is read, and the
# refusal texts of connection.open, channel.open and queue.declare. Pure: counts come in.
# Talks to: users.py (validates limits when they are set), the reader (connection and channel
# limits), vhost.py (max-queues).
# Must never: count anything itself or touch sockets.
"""User and vhost limits as RabbitMQ 3.10 (rabbitmq.com/vhosts.html#limits,
rabbitmq.com/user-limits.html, rabbit_reader.erl, rabbit_channel.erl).

- vhost `max-connections`: connection.open → 530 NOT_ALLOWED "access to vhost '/' refused
  for user 'u': connection limit (N) is reached".
- vhost `max-queues`: queue.declare of a new queue → 406 PRECONDITION_FAILED "cannot declare
  queue 'q': queue limit in vhost '/' (N) is reached".
- user `max-connections`: connection.open → 530 "connection refused for user 'u': user
  connection limit (N) is reached".
- user `max-channels`: channel.open → 530 "number of channels opened for user 'u' has reached
  the maximum allowed user limit of (N)".
- broker-wide `connection_max` (rabbitmq.conf; RabbitMQ ≥ 3.12 refuses at connection.open):
  530 "connection refused: node connection limit (N) is reached".

A negative value means no limit; 0 allows none (RabbitMQ's semantics).
"""

from __future__ import annotations

from collections.abc import Mapping

USER_LIMITS = ("max-connections", "max-channels")
VHOST_LIMITS = ("max-connections", "max-queues")


def validate(scope: str, limits: Mapping[str, object]) -> dict[str, int]:
    """Check `limits` for a "user" or "vhost": known names, integer values. Returns them as
    a plain dict; raises ValueError (the HTTP API answers 400) otherwise."""
    known = USER_LIMITS if scope == "user" else VHOST_LIMITS
    out: dict[str, int] = {}
    for name, value in limits.items():
        if name not in known:
            raise ValueError(f"unknown {scope} limit '{name}' (known: {', '.join(known)})")
        if isinstance(value, bool) or not isinstance(value, int):
            try:
                value = int(str(value))
            except ValueError as err:
                raise ValueError(f"{scope} limit '{name}' must be an integer") from err
        out[name] = value
    return out


def over(limit: int | None, count: int) -> bool:
    """True when `count` existing things leave no room for one more under `limit`."""
    return limit is not None and limit >= 0 and count >= limit


def node_connections_text(limit: int) -> str:
    return f"connection refused: node connection limit ({limit}) is reached"


def vhost_connections_text(vhost: str, user: str, limit: int) -> str:
    return (f"access to vhost '{vhost}' refused for user '{user}': connection limit ({limit}) "
            "is reached")


def user_connections_text(user: str, limit: int) -> str:
    return f"connection refused for user '{user}': user connection limit ({limit}) is reached"


def user_channels_text(user: str, limit: int) -> str:
    return (f"number of channels opened for user '{user}' has reached the maximum allowed "
            f"user limit of ({limit})")


def vhost_queues_text(queue: str, vhost: str, limit: int) -> str:
    return f"cannot declare queue '{queue}': queue limit in vhost '{vhost}' ({limit}) is reached"
