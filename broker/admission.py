"""Admission of connections and channels (RabbitMQ rabbit_reader / rabbit_access_control).

Owns: the checks a connection passes at login and connection.open, and a channel at
channel.open: credentials (PLAIN/AMQPLAIN passwords, EXTERNAL certificates, loopback_users),
the broker-wide `connection_max`, the vhost's and the user's `max-connections`, the user's
permission row in the vhost, the negotiated `channel_max` and the user's `max-channels`.
Refusals are 530 NOT_ALLOWED with RabbitMQ's texts (broker/limits.py), or False where the
handshake turns it into its own error. Talks to the broker's users and connection registry;
never to sockets.
"""

from __future__ import annotations

import logging
from collections.abc import Sized
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from broker import errors, limits

if TYPE_CHECKING:
    from broker.serving import ServingBroker


class OpeningConnection(Protocol):
    """A connection as these checks read it (broker/reader.py's Reader satisfies it)."""

    @property
    def username(self) -> str: ...  # authenticated user ("" before connection.open)

    @property
    def channel_max(self) -> int: ...  # negotiated

    @property
    def channels(self) -> Sized: ...  # its open channels

    @property
    def vhost(self) -> NamedVHost | None: ...  # set by connection.open


class NamedVHost(Protocol):
    @property
    def name(self) -> str: ...


Conn = TypeVar("Conn", bound=OpeningConnection)  # the broker's connection type (the reader)

log = logging.getLogger("broker.connection")


def authenticate(broker: ServingBroker[Any], peer: Any, mechanism: str, username: str,
                 password: str, protocol: str = "amqp091") -> bool:
    """PLAIN/AMQPLAIN: the password; EXTERNAL: the certificate's user exists (RabbitMQ
    check_user_login(Username, [])). loopback_users applies to both. A refusal is logged;
    the attempt is counted under `protocol` ("amqp091", "stream")."""
    if mechanism == "EXTERNAL":
        ok = (broker.users.user(username) is not None
              and broker.loopback_allowed(username, peer))
    else:
        ok = broker.check_user(username, password, peer)
    attempts = getattr(broker, "auth_attempts", None)
    if attempts is not None:
        attempts.record(protocol, ok)
    if not ok:
        log.warning("login refused for user %r from %s (%s)", username, peer, mechanism)
    return ok


def vhost_allowed(broker: ServingBroker[Conn], conn: Conn, username: str, vhost: str) -> bool:
    """connection.open checks in rabbit_reader's order for connection `conn`: the broker-wide
    `connection_max`, the vhost's and the user's `max-connections` (530 with RabbitMQ's
    texts, raised here), then the user's permission row in the vhost (False → 530 access
    refused)."""
    cap = broker.config.connection_max
    vhost_limit = broker.users.limits_of_vhost(vhost).get("max-connections")
    user_limit = broker.users.user_limits.get(username, {}).get("max-connections")
    if cap >= 0 or vhost_limit is not None or user_limit is not None:  # count only then
        opened = [c for c in broker.connections if c.vhost is not None and c is not conn]
        # a multi-worker broker: the other workers' open connections count too
        total, in_vhost, of_user = broker.connections_elsewhere(vhost, username)
        if limits.over(cap, len(opened) + total):
            raise errors.amqp_error(errors.NotAllowed, limits.node_connections_text(cap))
        if limits.over(vhost_limit, in_vhost + sum(
                1 for c in opened if c.vhost is not None and c.vhost.name == vhost)):
            raise errors.amqp_error(errors.NotAllowed, limits.vhost_connections_text(
                vhost, username, vhost_limit))  # type: ignore[arg-type]
        if limits.over(user_limit, of_user + sum(1 for c in opened
                                                 if c.username == username)):
            raise errors.amqp_error(errors.NotAllowed, limits.user_connections_text(
                username, user_limit))  # type: ignore[arg-type]
    return broker.users.control.vhost_allowed(username, vhost)


def check_channel_open(broker: ServingBroker[Conn], conn: Conn, frame: Any) -> None:
    """channel.open on connection `conn`: 530 when its open channels reach the negotiated
    channel_max (RabbitMQ limits the number of open channels, not the channel number) or the
    user's channels on all connections reach their `max-channels`."""
    if conn.channel_max and len(conn.channels) >= conn.channel_max:
        raise errors.amqp_error(
            errors.NotAllowed,
            f"number of channels opened ({len(conn.channels)}) has reached the "
            f"negotiated channel_max ({conn.channel_max})", frame)
    user_limit = broker.users.user_limits.get(conn.username, {}).get("max-channels")
    if user_limit is not None and user_limit >= 0:
        used = sum(len(c.channels) for c in broker.connections if c.username == conn.username)
        used += broker.channels_elsewhere(conn.username)
        if limits.over(user_limit, used):
            raise errors.amqp_error(
                errors.NotAllowed, limits.user_channels_text(conn.username, user_limit))
