# Owns: the internal auth backend (RabbitMQ rabbit_auth_backend_internal): users, their
# passwords, tags, permissions, topic permissions and user/vhost limits, kept in memory
# (`AccessControl`, limit dicts) and written through to the definitions database.
# Talks to: the broker (creates it at boot), the reader (authenticate, vhost access, limits),
# vhost.py (reads its live limits dict), and the management API / brokerctl (this façade).
# Must never: do network I/O, or be called from another thread than the broker's loop.
"""Users, permissions and limits: the typed façade the management API and CLI call.

Every mutating call is one definitions transaction (committed and fsynced before it returns)
followed by the in-memory change, and takes effect at once for new connections and for open
channels (see `broker.access`). Errors: `NoSuchUser` / `NoSuchVhost` (LookupError; HTTP 404)
and ValueError for bad input (invalid regex, unknown tag-free limit name, bad hash; HTTP 400).
Sources: rabbitmq.com/access-control.html, rabbitmq.com/passwords.html,
rabbitmq.com/user-limits.html, rabbitmq.com/vhosts.html#limits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from broker import limits as limits_mod
from broker.access import AccessControl, Permission, TopicPermission, User, check_regex
from broker.definitions import Definitions, PermissionDef, TopicPermissionDef
from broker.passwords import DEFAULT_ALGORITHM, check_password, hash_password, hashing_module


class NoSuchUser(LookupError):
    """The named user does not exist."""


class NoSuchVhost(LookupError):
    """The named vhost does not exist."""


class Users:
    """The broker's users. `vhost_exists(name)` tells whether a vhost is known."""

    def __init__(self, definitions: Definitions, vhost_exists: Callable[[str], bool]) -> None:
        self._defs = definitions  # durable copy of everything below
        self._vhost_exists = vhost_exists  # the broker's vhost table
        self.control = AccessControl()  # users, permissions, topic permissions (live)
        self.user_limits: dict[str, dict[str, int]] = {}  # user -> {limit: value}
        self.vhost_limits: dict[str, dict[str, int]] = {}  # vhost -> live dict (VHost holds it)
        self.load()

    # -- boot ------------------------------------------------------------------------------
    def load(self) -> None:
        """(Re)read every user, permission and limit from the definitions."""
        c = self.control
        c.users = {u.name: User(u.name, u.password_hash, u.hashing_algorithm, u.tags)
                   for u in self._defs.list_users()}
        c.permissions = {(p.user, p.vhost): Permission(p.configure, p.write, p.read)
                         for p in self._defs.list_permissions()}
        c.topic_permissions = {}
        for t in self._defs.list_topic_permissions():
            c.topic_permissions.setdefault((t.user, t.vhost), {})[t.exchange] = (
                TopicPermission(t.write, t.read))
        self.user_limits = self._defs.list_limits("user")
        for vhost, values in self._defs.list_limits("vhost").items():
            self._live_vhost_limits(vhost).update(values)
        c.changed()

    # -- authentication --------------------------------------------------------------------
    def authenticate(self, username: str, password: str) -> User | None:
        """The user if `password` matches its hash. A blank password never logs in (RabbitMQ
        rabbit_auth_backend_internal refuses it; certificate users use EXTERNAL). Cost: one
        salted hash, microseconds."""
        user = self.control.users.get(username)
        if user is None or not password:
            return None
        if not check_password(password, user.password_hash, user.hashing_algorithm):
            return None
        return user

    def user(self, name: str) -> User | None:
        """The user `name`, or None."""
        return self.control.users.get(name)

    # -- users -----------------------------------------------------------------------------
    def list_users(self) -> list[User]:
        """Every user, by name."""
        return sorted(self.control.users.values(), key=lambda u: u.name)

    def add_user(self, name: str, password: str | None = None, *,
                 password_hash: bytes | None = None,
                 hashing_algorithm: str = DEFAULT_ALGORITHM,
                 tags: Iterable[str] = ()) -> User:
        """Create or replace user `name` from a clear `password` (hashed with
        `hashing_algorithm`) or a ready `password_hash` (RabbitMQ definitions, base64-decoded);
        neither = a user that can log in only with EXTERNAL. Keeps existing permissions.
        Raises ValueError for an empty name or an unknown hashing algorithm."""
        if not name:
            raise ValueError("user name must not be empty")
        algorithm = hashing_module(hashing_algorithm)
        if password is not None:
            password_hash = hash_password(password, algorithm)
        tag_list = _tags(tags)
        self._defs.add_user(name, password_hash=password_hash, tags=tag_list,
                            hashing_algorithm=algorithm)
        user = User(name, password_hash, algorithm, tag_list)
        self.control.users[name] = user
        self.control.changed()
        return user

    def change_password(self, name: str, password: str | None) -> None:
        """New clear password (None clears it: EXTERNAL only). Raises NoSuchUser."""
        user = self._need_user(name)
        self.add_user(name, password, tags=user.tags)

    def set_user_tags(self, name: str, tags: Iterable[str]) -> None:
        """Replace the user's tags (administrator, monitoring, management, policymaker,
        impersonator, or any other word). Raises NoSuchUser."""
        user = self._need_user(name)
        self.add_user(name, password_hash=user.password_hash,
                      hashing_algorithm=user.hashing_algorithm, tags=tags)

    def delete_user(self, name: str) -> bool:
        """Delete the user with its permissions and limits; False if unknown. Closing its
        open connections is the broker's part (`Broker.delete_user`)."""
        if name not in self.control.users:
            return False
        self._defs.remove_user(name)
        c = self.control
        del c.users[name]
        for key in [k for k in c.permissions if k[0] == name]:
            del c.permissions[key]
        for key in [k for k in c.topic_permissions if k[0] == name]:
            del c.topic_permissions[key]
        self.user_limits.pop(name, None)
        c.changed()
        return True

    # -- permissions -----------------------------------------------------------------------
    def set_permissions(self, user: str, vhost: str, configure: str, write: str,
                        read: str) -> None:
        """Grant `user` the three regexes in `vhost`. Raises NoSuchUser, NoSuchVhost,
        ValueError (invalid regex)."""
        self._need_user(user)
        self._need_vhost(vhost)
        for pattern in (configure, write, read):
            check_regex(pattern)
        self._defs.set_permissions(user, vhost, configure, write, read)
        self.control.permissions[(user, vhost)] = Permission(configure, write, read)
        self.control.changed()

    def clear_permissions(self, user: str, vhost: str) -> bool:
        """Revoke `user`'s access to `vhost`; False if there was none."""
        if self.control.permissions.pop((user, vhost), None) is None:
            return False
        self._defs.clear_permissions(user, vhost)
        self.control.changed()
        return True

    def list_permissions(self) -> list[PermissionDef]:
        """Every (user, vhost, configure, write, read), by user and vhost."""
        return [PermissionDef(u, v, p.configure, p.write, p.read)
                for (u, v), p in sorted(self.control.permissions.items())]

    def set_topic_permissions(self, user: str, vhost: str, exchange: str, write: str,
                              read: str) -> None:
        """Restrict `user`'s routing keys on topic exchange `exchange` in `vhost`. Raises
        NoSuchUser, NoSuchVhost, ValueError."""
        self._need_user(user)
        self._need_vhost(vhost)
        for pattern in (write, read):
            check_regex(pattern.replace("{username}", "u").replace("{vhost}", "v"))
        self._defs.set_topic_permissions(user, vhost, exchange, write, read)
        self.control.topic_permissions.setdefault((user, vhost), {})[exchange] = (
            TopicPermission(write, read))
        self.control.changed()

    def clear_topic_permissions(self, user: str, vhost: str, exchange: str | None = None) -> bool:
        """Drop `user`'s topic permissions in `vhost` (one exchange, or all)."""
        per_vhost = self.control.topic_permissions.get((user, vhost))
        if not per_vhost or (exchange is not None and exchange not in per_vhost):
            return False
        if exchange is None:
            del self.control.topic_permissions[(user, vhost)]
        else:
            del per_vhost[exchange]
        self._defs.clear_topic_permissions(user, vhost, exchange)
        self.control.changed()
        return True

    def list_topic_permissions(self) -> list[TopicPermissionDef]:
        """Every topic permission, by user, vhost, exchange."""
        return [TopicPermissionDef(u, v, x, p.write, p.read)
                for (u, v), per in sorted(self.control.topic_permissions.items())
                for x, p in sorted(per.items())]

    # -- limits ----------------------------------------------------------------------------
    def set_user_limits(self, user: str, values: Mapping[str, object]) -> None:
        """Set some of `max-connections` / `max-channels` for `user` (others are kept).
        Raises NoSuchUser, ValueError."""
        self._need_user(user)
        merged = {**self.user_limits.get(user, {}), **limits_mod.validate("user", values)}
        self._defs.set_limits("user", user, merged)
        self.user_limits[user] = merged

    def clear_user_limit(self, user: str, name: str | None = None) -> None:
        """Remove one user limit (or all)."""
        current = dict(self.user_limits.get(user, {}))
        if name is None:
            current.clear()
        else:
            current.pop(name, None)
        if user in self.control.users:
            self._defs.set_limits("user", user, current)
        self.user_limits[user] = current

    def set_vhost_limits(self, vhost: str, values: Mapping[str, object]) -> None:
        """Set some of `max-connections` / `max-queues` for `vhost` (others are kept).
        Raises NoSuchVhost, ValueError."""
        self._need_vhost(vhost)
        live = self._live_vhost_limits(vhost)
        merged = {**live, **limits_mod.validate("vhost", values)}
        self._defs.set_limits("vhost", vhost, merged)
        live.update(merged)

    def clear_vhost_limit(self, vhost: str, name: str | None = None) -> None:
        """Remove one vhost limit (or all)."""
        live = self._live_vhost_limits(vhost)
        if name is None:
            live.clear()
        else:
            live.pop(name, None)
        if self._vhost_exists(vhost):
            self._defs.set_limits("vhost", vhost, live)

    def limits_of_vhost(self, vhost: str) -> dict[str, int]:
        """The live limits dict of `vhost` (the VHost object keeps this very dict)."""
        return self._live_vhost_limits(vhost)

    def forget_vhost(self, vhost: str) -> None:
        """The vhost was deleted: drop its permissions and limits from memory (the
        definitions cascade by themselves)."""
        c = self.control
        for key in [k for k in c.permissions if k[1] == vhost]:
            del c.permissions[key]
        for key in [k for k in c.topic_permissions if k[1] == vhost]:
            del c.topic_permissions[key]
        self.vhost_limits.pop(vhost, None)
        c.changed()

    # -- helpers ---------------------------------------------------------------------------
    def _live_vhost_limits(self, vhost: str) -> dict[str, int]:
        return self.vhost_limits.setdefault(vhost, {})

    def _need_user(self, name: str) -> User:
        user = self.control.users.get(name)
        if user is None:
            raise NoSuchUser(f"no user '{name}'")
        return user

    def _need_vhost(self, name: str) -> None:
        if not self._vhost_exists(name):
            raise NoSuchVhost(f"no vhost '{name}'")


def _tags(tags: Iterable[str] | str) -> tuple[str, ...]:
    """Tags as a tuple; a comma-separated string (rabbitmqctl set_user_tags) is split."""
    if isinstance(tags, str):
        tags = tags.split(",")
    return tuple(t.strip() for t in tags if t and t.strip())
