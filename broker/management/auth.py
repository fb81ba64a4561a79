"""HTTP basic auth against the broker's users, and what each user tag may see and do.

RabbitMQ's management tags (rabbitmq.com/management.html#permissions):
- `management`: the API for the vhosts the user has permissions in, own connections/channels;
- `policymaker`: management + policies (and parameters) in those vhosts;
- `monitoring`: management + every connection, channel and node, in every vhost (read);
- `administrator`: everything (users, vhosts, permissions, definitions).
A user with none of these cannot log in to the API: 401 "Not management user".
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from broker.management.http import not_authorised, not_found

if TYPE_CHECKING:
    from broker.started import StartedBroker

MANAGEMENT_TAGS = frozenset({"management", "policymaker", "monitoring", "administrator"})


@dataclass(frozen=True)
class ApiUser:
    """The logged-in user of one request: name and tags."""

    name: str
    tags: tuple[str, ...]

    @property
    def is_admin(self) -> bool:
        return "administrator" in self.tags

    @property
    def is_monitor(self) -> bool:
        """monitoring or administrator: may read everything."""
        return self.is_admin or "monitoring" in self.tags

    @property
    def is_policymaker(self) -> bool:
        return self.is_admin or "policymaker" in self.tags


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """(user, password) from an `Authorization: Basic ...` header, or None."""
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        raw = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = raw.partition(":")
    return (user, password) if sep else None


def authenticate(broker: StartedBroker, header: str | None) -> ApiUser:
    """The user named by the Basic credentials. 401 "Login failed" when they are missing or
    wrong, 401 "Not management user" without a management tag."""
    creds = parse_basic(header)
    user = broker.users.authenticate(*creds) if creds is not None else None
    ok = user is not None
    attempts = getattr(broker, "auth_attempts", None)
    if attempts is not None:
        attempts.record("http", ok)
    if not ok:
        raise not_authorised("Login failed", challenge=True)
    assert user is not None  # ok says so
    tags = tuple(user.tags)
    if not MANAGEMENT_TAGS.intersection(tags):
        raise not_authorised("Not management user", challenge=True)
    return ApiUser(user.name, tags)


def require_admin(user: ApiUser) -> None:
    """401 unless the user is an administrator."""
    if not user.is_admin:
        raise not_authorised("Not administrator user")


def require_monitor(user: ApiUser) -> None:
    """401 unless the user is tagged monitoring or administrator."""
    if not user.is_monitor:
        raise not_authorised("Not monitor user")


def visible_vhosts(broker: StartedBroker, user: ApiUser) -> list[str]:
    """Vhosts whose objects the user may see: all for monitoring/administrator, else those
    the user has permissions in."""
    names = sorted(broker.vhosts)
    if user.is_monitor:
        return names
    mine = {p.vhost for p in broker.users.list_permissions() if p.user == user.name}
    return [n for n in names if n in mine]


def require_vhost(broker: StartedBroker, user: ApiUser, vhost: str) -> None:
    """404 for an unknown vhost; 401 "User not authorised to access virtual host" when
    the user has no permissions there (administrators always may)."""
    if vhost not in broker.vhosts:
        raise not_found()
    if user.is_admin:
        return
    mine = {p.vhost for p in broker.users.list_permissions() if p.user == user.name}
    if vhost not in mine:
        raise not_authorised("User not authorised to access virtual host")


API_USER = web.RequestKey("api_user", ApiUser)  # set by the app's middleware


def current(request: web.Request) -> ApiUser:
    """The request's authenticated user (set by the app's middleware)."""
    return request[API_USER]
