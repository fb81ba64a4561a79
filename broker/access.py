# Owns: who may do what: users' tags, configure/write/read permissions per user per vhost,
# topic permissions, and the per-channel check cache. Pure: no I/O, no asyncio.
# Talks to: users.py (fills AccessControl from the definitions), the reader (vhost access at
# connection.open), channel handlers (ChannelAccess.check on every operation).
# Must never: read the definitions database or decide anything but "allowed or 403".
"""RabbitMQ's permission model (rabbitmq.com/access-control.html, rabbit_access_control.erl,
rabbit_auth_backend_internal.erl).

Every user has, per vhost, three regular expressions: `configure` (declare and delete queues
and exchanges), `write` (publish to an exchange; bind *to* a queue or exchange) and `read`
(consume, get, purge a queue; bind *from* an exchange). A user without a permission row in a
vhost cannot open it (530 NOT_ALLOWED at connection.open). An empty pattern matches nothing
("" is read as "^$", as RabbitMQ does). The default exchange is checked as `amq.default`.
Server-named queues are checked under their generated `amq.gen-…` name.

Topic permissions (RabbitMQ 3.7+, access-control.html#topic-authorisation) narrow publishes to
and bindings from *topic* exchanges by routing key: `write` for basic.publish, `read` for
queue.bind/exchange.bind; `{username}` and `{vhost}` in a pattern are replaced by the user's
name and the vhost. A user with no topic permission on an exchange is not restricted.

Refusals are 403 ACCESS_REFUSED with RabbitMQ's texts: "access to queue 'q' in vhost '/'
refused for user 'u'", "access to topic 'a.b' in exchange 'amq.topic' in vhost '/' refused
for user 'u'".

Changes take effect at once, also on open channels: `AccessControl.generation` moves on each
change and a channel's cache (`ChannelAccess`) is dropped when it sees a new generation.
RabbitMQ instead keeps up to 12 successful checks per channel (rabbit_channel
permission_cache), so a revoked permission may keep working on an open channel there; here it
never does.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from broker import errors

# user tags RabbitMQ knows (rabbitmq.com/management.html#permissions, validated-user-id.html)
TAGS = ("administrator", "monitoring", "management", "policymaker", "impersonator")
CONFIGURE, WRITE, READ = "configure", "write", "read"
DEFAULT_EXCHANGE_RESOURCE = "amq.default"  # rabbit_access_control:check_resource_access
CACHE_SIZE = 64  # checks a channel remembers (RabbitMQ: 12)


@dataclass(frozen=True)
class Permission:
    """configure / write / read regexes of one user in one vhost."""

    configure: str
    write: str
    read: str


@dataclass(frozen=True)
class TopicPermission:
    """write / read regexes on routing keys for one topic exchange."""

    write: str
    read: str


@dataclass(frozen=True)
class User:
    """A user of the internal auth backend. `password_hash` is None for users who may only
    log in with a certificate (EXTERNAL); tags decide management access and impersonation."""

    name: str
    password_hash: bytes | None
    hashing_algorithm: str
    tags: tuple[str, ...] = ()

    def has_tag(self, tag: str) -> bool:
        """True if the user carries `tag` (e.g. "impersonator")."""
        return tag in self.tags


@functools.lru_cache(maxsize=4096)
def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern or "^$")


def check_regex(pattern: str) -> None:
    """Raise ValueError if `pattern` is not a valid regular expression (RabbitMQ refuses such
    permissions when they are set)."""
    try:
        _compile(pattern)
    except re.error as err:
        raise ValueError(f"invalid regular expression '{pattern}': {err}") from err


def matches(pattern: str, name: str) -> bool:
    """RabbitMQ's re:run(Name, Pattern): a search, not a full match; "" matches only ""."""
    return _compile(pattern).search(name) is not None


@dataclass
class AccessControl:
    """The in-memory permission tables (filled and changed by `broker.users.Users`)."""

    users: dict[str, User] = field(default_factory=dict)  # name -> user
    permissions: dict[tuple[str, str], Permission] = field(default_factory=dict)  # (user, vhost)
    # (user, vhost) -> exchange -> topic permission
    topic_permissions: dict[tuple[str, str], dict[str, TopicPermission]] = field(
        default_factory=dict)
    generation: int = 0  # bumped on every change; channel caches compare it

    def changed(self) -> None:
        """Record a change: every channel's cache is dropped on its next check."""
        self.generation += 1

    def vhost_allowed(self, user: str, vhost: str) -> bool:
        """The user exists and has a permission row in `vhost` (any regexes)."""
        return user in self.users and (user, vhost) in self.permissions

    def resource_allowed(self, user: str, vhost: str, name: str, permission: str) -> bool:
        """`permission` (configure/write/read) on resource `name` in `vhost`."""
        perm = self.permissions.get((user, vhost))
        if perm is None or user not in self.users:
            return False
        return matches(getattr(perm, permission), name)

    def topic_allowed(self, user: str, vhost: str, exchange: str, routing_key: str,
                      permission: str) -> bool:
        """Topic `permission` (write/read) for `routing_key` on topic exchange `exchange`;
        True when the user has no topic permission for that exchange."""
        perm = self.topic_permissions.get((user, vhost), {}).get(exchange)
        if perm is None:
            return True
        pattern = getattr(perm, permission).replace("{username}", user).replace("{vhost}", vhost)
        return matches(pattern, routing_key)


def refused(kind: str, name: str, vhost: str, user: str, method: Any = None) -> Exception:
    """403 "access to <kind> '<name>' in vhost '<vhost>' refused for user '<user>'"."""
    return errors.amqp_error(
        errors.AccessRefused,
        f"access to {kind} '{name}' in vhost '{vhost}' refused for user '{user}'", method)


class ChannelAccess:
    """The checks of one channel: `user` in `vhost` against `control`, with a cache of the
    checks that passed, valid while `control.generation` does not move."""

    def __init__(self, control: AccessControl, user: str, vhost: str) -> None:
        self.control = control  # the broker's permission tables
        self.user = user  # authenticated user name
        self.vhost = vhost  # the connection's vhost
        self._allowed: set[tuple[str, str, str]] = set()  # (kind, name, permission) passed
        self._generation = control.generation  # generation the cache belongs to

    def _fresh(self) -> None:
        if self._generation != self.control.generation:
            self._allowed.clear()
            self._generation = self.control.generation

    def check(self, kind: str, name: str, permission: str, method: Any = None) -> None:
        """Raise 403 unless the user has `permission` on `kind` ("queue"/"exchange") `name`.
        The default exchange "" is checked as "amq.default"."""
        if kind == "exchange" and name == "":
            name = DEFAULT_EXCHANGE_RESOURCE
        key = (kind, name, permission)
        self._fresh()
        if key in self._allowed:
            return
        if not self.control.resource_allowed(self.user, self.vhost, name, permission):
            raise refused(kind, name, self.vhost, self.user, method)
        if len(self._allowed) >= CACHE_SIZE:  # a channel touching many names stays bounded
            self._allowed.clear()
        self._allowed.add(key)

    def check_topic(self, exchange: str, exchange_type: str, routing_key: str,
                    permission: str, method: Any = None) -> None:
        """Raise 403 if `exchange` is a topic exchange and the routing key is outside the
        user's topic permission (write for publish, read for bind)."""
        if exchange_type != "topic":
            return
        if not self.control.topic_allowed(self.user, self.vhost, exchange, routing_key,
                                          permission):
            raise errors.amqp_error(
                errors.AccessRefused,
                f"access to topic '{routing_key}' in exchange '{exchange}' in vhost "
                f"'{self.vhost}' refused for user '{self.user}'", method)

    def has_tag(self, tag: str) -> bool:
        """The user currently carries `tag`."""
        user = self.control.users.get(self.user)
        return user is not None and user.has_tag(tag)
