"""Durable metadata: vhosts, users, permissions, exchanges, queues, bindings, policies.

Owns: one SQLite database (standard-library `sqlite3`), RabbitMQ's Mnesia tables `rabbit_vhost`,
`rabbit_user`, `rabbit_user_permission`, `rabbit_durable_exchange`, `rabbit_durable_queue`,
`rabbit_durable_route`, policies and the other runtime parameters (`rabbit_runtime_parameters`). `server.py`/`vhost.py` call it on
declare/delete of durable entities and read it at boot; it never touches queue contents (those
are in the queue indexes and message stores) and never decides AMQP semantics (equivalence
checks, auto-delete) itself.

Guarantees: every `add_*`/`remove_*`/`set_*`/`clear_*` is one transaction, committed before
the call returns, in WAL mode with `synchronous=FULL` (the commit is fsynced). Calls are
synchronous and short; use the object from one thread (the event loop).

Schema: table `schema_version(version)` holds `SCHEMA_VERSION`; opening an older file runs the
migrations in `_MIGRATIONS`, a newer one raises `DefinitionsError`. AMQP field tables
(arguments) are stored as tagged JSON (`encode_table`): JSON for str/int/float/bool/None/list/
dict, and {"$bytes": base64}, {"$bytearray": base64}, {"$decimal": "1.50"},
{"$timestamp": ISO 8601} for the AMQP types JSON lacks, so every value comes back with its
type. Passwords: RabbitMQ's salted hashes (`broker/passwords.py`: 4 salt bytes + SHA-256 of
salt + password by default) stored as a blob with the user's `hashing_algorithm`.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from broker import replication_hook
from broker.passwords import DEFAULT_ALGORITHM as HASHING_ALGORITHM
from broker.passwords import check_password, hash_password  # noqa: F401 (re-exported)

SCHEMA_VERSION = 4

_SCHEMA_V1 = """
CREATE TABLE vhosts (
    name TEXT PRIMARY KEY, description TEXT NOT NULL DEFAULT '', tags TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE users (
    name TEXT PRIMARY KEY, password_hash BLOB, hashing_algorithm TEXT NOT NULL,
    tags TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE permissions (
    user TEXT NOT NULL REFERENCES users(name) ON DELETE CASCADE,
    vhost TEXT NOT NULL REFERENCES vhosts(name) ON DELETE CASCADE,
    configure TEXT NOT NULL, write TEXT NOT NULL, read TEXT NOT NULL,
    PRIMARY KEY (user, vhost)
);
CREATE TABLE exchanges (
    vhost TEXT NOT NULL REFERENCES vhosts(name) ON DELETE CASCADE, name TEXT NOT NULL,
    type TEXT NOT NULL, durable INTEGER NOT NULL, auto_delete INTEGER NOT NULL,
    internal INTEGER NOT NULL, arguments TEXT NOT NULL, PRIMARY KEY (vhost, name)
);
CREATE TABLE queues (
    vhost TEXT NOT NULL REFERENCES vhosts(name) ON DELETE CASCADE, name TEXT NOT NULL,
    durable INTEGER NOT NULL, auto_delete INTEGER NOT NULL, arguments TEXT NOT NULL,
    PRIMARY KEY (vhost, name)
);
CREATE TABLE bindings (
    vhost TEXT NOT NULL REFERENCES vhosts(name) ON DELETE CASCADE, source TEXT NOT NULL,
    destination TEXT NOT NULL, destination_kind TEXT NOT NULL
        CHECK (destination_kind IN ('queue', 'exchange')),
    routing_key TEXT NOT NULL, arguments TEXT NOT NULL,
    PRIMARY KEY (vhost, source, destination_kind, destination, routing_key, arguments)
);
CREATE TABLE policies (
    vhost TEXT NOT NULL REFERENCES vhosts(name) ON DELETE CASCADE, name TEXT NOT NULL,
    pattern TEXT NOT NULL, apply_to TEXT NOT NULL, definition TEXT NOT NULL,
    priority INTEGER NOT NULL, PRIMARY KEY (vhost, name)
);
"""

# v2: topic permissions (rabbit_topic_permission) and user / vhost limits (RabbitMQ's
# `user-limits` and `vhost-limits` runtime parameters), issue 13
_SCHEMA_V2 = """
CREATE TABLE topic_permissions (
    user TEXT NOT NULL REFERENCES users(name) ON DELETE CASCADE,
    vhost TEXT NOT NULL REFERENCES vhosts(name) ON DELETE CASCADE,
    exchange TEXT NOT NULL, write TEXT NOT NULL, read TEXT NOT NULL,
    PRIMARY KEY (user, vhost, exchange)
);
CREATE TABLE user_limits (
    user TEXT NOT NULL REFERENCES users(name) ON DELETE CASCADE, name TEXT NOT NULL,
    value INTEGER NOT NULL, PRIMARY KEY (user, name)
);
CREATE TABLE vhost_limits (
    vhost TEXT NOT NULL REFERENCES vhosts(name) ON DELETE CASCADE, name TEXT NOT NULL,
    value INTEGER NOT NULL, PRIMARY KEY (vhost, name)
);
"""

# v3: vhost-scoped runtime parameters (rabbit_runtime_parameters: component, vhost, name,
# a JSON value), e.g. `shovel` (issue 21)
_SCHEMA_V3 = """
CREATE TABLE parameters (
    vhost TEXT NOT NULL REFERENCES vhosts(name) ON DELETE CASCADE, component TEXT NOT NULL,
    name TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (vhost, component, name)
);
"""

# v4: global runtime parameters (rabbit_runtime_parameters' `none` vhost scope:
# `cluster_name`, `internal_cluster_id`, anything PUT to /api/global-parameters), issue 24
_SCHEMA_V4 = """
CREATE TABLE global_parameters (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

# version reached -> SQL that brings a file from the previous version to it
_MIGRATIONS: dict[int, str] = {1: _SCHEMA_V1, 2: _SCHEMA_V2, 3: _SCHEMA_V3, 4: _SCHEMA_V4}


class DefinitionsError(Exception):
    """The database cannot be used (written by a newer schema, unknown version)."""


# -- AMQP tables as tagged JSON ----------------------------------------------------------------
def _to_json(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, (int, float, str)):
        return value
    if isinstance(value, bytearray):
        return {"$bytearray": base64.b64encode(value).decode()}
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode()}
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, datetime.datetime):
        return {"$timestamp": value.isoformat()}
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            key = str(k)
            out["$" + key if key.startswith("$") else key] = _to_json(v)
        return out
    raise TypeError(f"cannot store a {type(value).__name__} in an AMQP table")


_TAGS: dict[str, Callable[[Any], Any]] = {
    "$bytes": lambda v: base64.b64decode(v),
    "$bytearray": lambda v: bytearray(base64.b64decode(v)),
    "$decimal": decimal.Decimal,
    "$timestamp": datetime.datetime.fromisoformat,
}


def _from_json(value: Any) -> Any:
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1:
            (tag, inner), = value.items()
            if tag in _TAGS:
                return _TAGS[tag](inner)
        return {(k[1:] if k.startswith("$") else k): _from_json(v) for k, v in value.items()}
    return value


def encode_table(table: dict[str, Any] | None) -> str:
    """AMQP field table -> canonical tagged JSON text (sorted keys; see module docstring)."""
    return json.dumps(_to_json(table or {}), sort_keys=True, separators=(",", ":"))


def decode_table(text: str) -> dict[str, Any]:
    """Inverse of `encode_table`: every value comes back with its Python/AMQP type."""
    return _from_json(json.loads(text))


# -- records -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class VhostDef:
    """A vhost: name, description, tags."""

    name: str
    description: str = ""
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class UserDef:
    """A user: name, password_hash (salt + digest, see broker/passwords.py; None = no
    password login, e.g. certificate users), tags, hashing_algorithm."""

    name: str
    password_hash: bytes | None
    tags: tuple[str, ...] = ()
    hashing_algorithm: str = HASHING_ALGORITHM


@dataclass(frozen=True)
class PermissionDef:
    """configure/write/read regexes of a user in a vhost."""

    user: str
    vhost: str
    configure: str
    write: str
    read: str


@dataclass(frozen=True)
class TopicPermissionDef:
    """write/read regexes on routing keys of a user in a vhost for one topic exchange."""

    user: str
    vhost: str
    exchange: str
    write: str
    read: str


_LIMIT_TABLES = {"user": ("user_limits", "user"), "vhost": ("vhost_limits", "vhost")}


@dataclass(frozen=True)
class ExchangeDef:
    """A durable exchange (RabbitMQ `#exchange{}`)."""

    vhost: str
    name: str
    type: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class QueueDef:
    """A durable queue (RabbitMQ `#amqqueue{}`): arguments keep their AMQP types."""

    vhost: str
    name: str
    durable: bool = True
    auto_delete: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BindingDef:
    """A binding source -> destination (kind "queue" or "exchange") with key and arguments."""

    vhost: str
    source: str
    destination: str
    destination_kind: str
    routing_key: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyDef:
    """A policy: queues/exchanges whose name matches `pattern` get `definition`."""

    vhost: str
    name: str
    pattern: str
    definition: dict[str, Any]
    priority: int = 0
    apply_to: str = "all"


@dataclass(frozen=True)
class ParameterDef:
    """A vhost-scoped runtime parameter: `component` (e.g. "shovel"), `name`, and its JSON
    `value` (rabbit_runtime_parameters)."""

    vhost: str
    component: str
    name: str
    value: Any


# -- replication (issue 35): each change as an operation record -------------------------------
_RECORDS: dict[str, type] = {}  # record class name -> class (filled below the records)


def _op_value(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return {"$def": type(value).__name__,
                "fields": {k: _op_value(getattr(value, k)) for k in value.__dataclass_fields__}}
    return _to_json(value)


def encode_op(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """The operation record of `Definitions.<name>(*args, **kwargs)`: JSON with records as
    {"$def": class, "fields": {...}} and AMQP values tagged as in the tables."""
    return json.dumps({"op": name, "args": [_op_value(a) for a in args],
                       "kwargs": {k: _op_value(v) for k, v in kwargs.items()}}).encode()


def decode_value(value: Any) -> Any:
    """The value `_op_value` encoded (records rebuilt, tuples of tags as tuples)."""
    if isinstance(value, dict) and "$def" in value:
        cls = _RECORDS[value["$def"]]
        fields = {k: decode_value(v) for k, v in value["fields"].items()}
        if "tags" in fields and isinstance(fields["tags"], list):
            fields["tags"] = tuple(fields["tags"])
        return cls(**fields)
    return _from_json(value)


def _replicated(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A change to the definitions: once committed, reported to replication as an
    operation record (broker/replication_hook.py; nothing happens without a cluster)."""
    name = fn.__name__
    REPLICATED_OPS.add(name)

    def wrapper(self: Definitions, *args: Any, **kwargs: Any) -> Any:
        result = fn(self, *args, **kwargs)
        if replication_hook.sink is not None:
            replication_hook.definitions(encode_op(name, args, kwargs))
        return result

    wrapper.__name__ = name
    wrapper.__doc__ = fn.__doc__
    return wrapper


REPLICATED_OPS: set[str] = set()  # the Definitions methods an operation record may name


def _rollback_journal(data: bytes) -> bytes:
    """A serialized database as an in-memory one can load it: a WAL database's header
    (file format versions 2 at bytes 18-19) marked a rollback-journal one (versions 1)."""
    if len(data) > 19 and data[18:20] == b"\x02\x02":
        image = bytearray(data)
        image[18:20] = b"\x01\x01"
        return bytes(image)
    return data


class Definitions:
    """The definitions database at `path` (created if missing). See the module docstring."""

    def __init__(self, path: str, check_same_thread: bool = True) -> None:
        self.path = path
        # check_same_thread=False: a follower's copy, used from its replication worker
        # threads one at a time (broker/cluster/files.py)
        self._db = sqlite3.connect(path, isolation_level=None,
                                   check_same_thread=check_same_thread)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        try:
            self._migrate()
        except (DefinitionsError, sqlite3.Error):
            self._db.close()
            raise

    def _migrate(self) -> None:
        db = self._db
        has = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_version'"
        ).fetchone()
        version = 0
        if has:
            row = db.execute("SELECT version FROM schema_version").fetchone()
            version = row[0] if row else 0
        if version > SCHEMA_VERSION:
            raise DefinitionsError(
                f"{self.path}: schema version {version} is newer than {SCHEMA_VERSION}"
            )
        for target in range(version + 1, SCHEMA_VERSION + 1):
            db.execute("BEGIN IMMEDIATE")
            try:
                for statement in _MIGRATIONS[target].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
                db.execute("DELETE FROM schema_version")
                db.execute("INSERT INTO schema_version VALUES (?)", (target,))
            except sqlite3.Error:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def schema_version(self) -> int:
        """The version recorded in the file."""
        return self._db.execute("SELECT version FROM schema_version").fetchone()[0]

    def _write(self, sql: str, args: Iterable[Any] = ()) -> int:
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            return self._db.execute(sql, tuple(args)).rowcount

    def close(self) -> None:
        """Close the database (checkpoints the WAL)."""
        self._db.close()

    def snapshot(self) -> bytes:
        """The whole database as bytes (sqlite3 serialize): what a worker process of a
        multi-worker broker starts from (docs/multicore.md)."""
        return self._db.serialize()

    def replace_with(self, data: bytes) -> None:
        """Make this in-memory replica hold `snapshot()`'s bytes (the owner's database now)."""
        self._db.deserialize(_rollback_journal(data))

    @classmethod
    def from_snapshot(cls, data: bytes) -> Definitions:
        """An in-memory database holding `snapshot()`'s bytes: a worker's replica, which
        the metadata owner's changes keep equal (broker/workers/vhost.py)."""
        defs = cls(":memory:")
        defs._db.deserialize(_rollback_journal(data))
        return defs

    # -- vhosts ----------------------------------------------------------------------------
    @_replicated
    def add_vhost(self, name: str, description: str = "", tags: Iterable[str] = ()) -> None:
        """Create or update a vhost (an UPSERT: updating keeps what the vhost holds; INSERT
        OR REPLACE would delete the row and cascade)."""
        self._write("INSERT INTO vhosts VALUES (?, ?, ?) ON CONFLICT(name) DO UPDATE SET "
                    "description = excluded.description, tags = excluded.tags",
                    (name, description, json.dumps(list(tags))))

    @_replicated
    def remove_vhost(self, name: str) -> bool:
        """Delete a vhost and everything in it (exchanges, queues, bindings, policies,
        permissions); returns False if it did not exist."""
        return self._write("DELETE FROM vhosts WHERE name = ?", (name,)) > 0

    def list_vhosts(self) -> list[VhostDef]:
        """Every vhost, by name."""
        rows = self._db.execute("SELECT name, description, tags FROM vhosts ORDER BY name")
        return [VhostDef(n, d, tuple(json.loads(t))) for n, d, t in rows]

    # -- users and permissions -------------------------------------------------------------
    def add_user(self, name: str, password: str | None = None, *,
                 password_hash: bytes | None = None, tags: Iterable[str] = (),
                 hashing_algorithm: str = HASHING_ALGORITHM) -> None:
        """Create or update a user from a clear password (hashed here) or a ready hash
        (`hashing_algorithm` says how it was made). Updating keeps the user's permissions
        and limits (an UPSERT, not a delete + insert, which would cascade)."""
        if password is not None:
            password_hash = hash_password(password, hashing_algorithm)
        self.put_user(name, password_hash, tuple(tags), hashing_algorithm)

    @_replicated
    def put_user(self, name: str, password_hash: bytes | None, tags: tuple[str, ...],
                 hashing_algorithm: str) -> None:
        """Create or update a user from its hash (what add_user stores, and what a
        follower replays: the same salt on every member)."""
        self._write("INSERT INTO users VALUES (?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET "
                    "password_hash = excluded.password_hash, "
                    "hashing_algorithm = excluded.hashing_algorithm, tags = excluded.tags",
                    (name, password_hash, hashing_algorithm, json.dumps(list(tags))))

    @_replicated
    def remove_user(self, name: str) -> bool:
        """Delete a user and their permissions, topic permissions and limits."""
        return self._write("DELETE FROM users WHERE name = ?", (name,)) > 0

    def list_users(self) -> list[UserDef]:
        """Every user, by name."""
        rows = self._db.execute(
            "SELECT name, password_hash, tags, hashing_algorithm FROM users ORDER BY name")
        return [UserDef(n, h, tuple(json.loads(t)), a) for n, h, t, a in rows]

    def check_user_password(self, name: str, password: str) -> bool:
        """True if `name` exists, has a password, and `password` matches it."""
        row = self._db.execute("SELECT password_hash, hashing_algorithm FROM users WHERE name = ?",
                               (name,)).fetchone()
        return bool(row and row[0] and check_password(password, row[0], row[1]))

    @_replicated
    def set_permissions(self, user: str, vhost: str, configure: str, write: str, read: str) -> None:
        """Grant regex permissions of `user` in `vhost` (both must exist)."""
        self._write("INSERT OR REPLACE INTO permissions VALUES (?, ?, ?, ?, ?)",
                    (user, vhost, configure, write, read))

    @_replicated
    def clear_permissions(self, user: str, vhost: str) -> bool:
        """Remove `user`'s permissions in `vhost`."""
        return self._write("DELETE FROM permissions WHERE user = ? AND vhost = ?", (user, vhost)) > 0

    def list_permissions(self) -> list[PermissionDef]:
        """Every permission row."""
        rows = self._db.execute("SELECT * FROM permissions ORDER BY user, vhost")
        return [PermissionDef(*r) for r in rows]

    @_replicated
    def set_topic_permissions(self, user: str, vhost: str, exchange: str, write: str,
                              read: str) -> None:
        """Topic permissions of `user` in `vhost` on topic exchange `exchange` (RabbitMQ
        rabbit_topic_permission; both must exist)."""
        self._write("INSERT OR REPLACE INTO topic_permissions VALUES (?, ?, ?, ?, ?)",
                    (user, vhost, exchange, write, read))

    @_replicated
    def clear_topic_permissions(self, user: str, vhost: str, exchange: str | None = None) -> bool:
        """Remove `user`'s topic permissions in `vhost` (on one exchange, or all)."""
        if exchange is None:
            return self._write("DELETE FROM topic_permissions WHERE user = ? AND vhost = ?",
                               (user, vhost)) > 0
        return self._write("DELETE FROM topic_permissions WHERE user = ? AND vhost = ? AND "
                           "exchange = ?", (user, vhost, exchange)) > 0

    def list_topic_permissions(self) -> list[TopicPermissionDef]:
        """Every topic permission row, by user, vhost, exchange."""
        rows = self._db.execute("SELECT * FROM topic_permissions ORDER BY user, vhost, exchange")
        return [TopicPermissionDef(*r) for r in rows]

    # -- limits (RabbitMQ runtime parameters `user-limits` / `vhost-limits`) ---------------
    @_replicated
    def set_limits(self, scope: str, owner: str, limits: dict[str, int]) -> None:
        """Replace every limit of user (`scope` "user") or vhost ("vhost") `owner`."""
        table, column = _LIMIT_TABLES[scope]
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(f"DELETE FROM {table} WHERE {column} = ?", (owner,))
            for name, value in limits.items():
                self._db.execute(f"INSERT INTO {table} VALUES (?, ?, ?)", (owner, name, value))

    def list_limits(self, scope: str) -> dict[str, dict[str, int]]:
        """{owner: {limit name: value}} for `scope` "user" or "vhost"."""
        table, column = _LIMIT_TABLES[scope]
        out: dict[str, dict[str, int]] = {}
        for owner, name, value in self._db.execute(f"SELECT {column}, name, value FROM {table}"):
            out.setdefault(owner, {})[name] = value
        return out

    # -- exchanges -------------------------------------------------------------------------
    @_replicated
    def add_exchange(self, x: ExchangeDef) -> None:
        """Record a durable exchange (replacing one of the same name)."""
        self._write("INSERT OR REPLACE INTO exchanges VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (x.vhost, x.name, x.type, x.durable, x.auto_delete, x.internal,
                     encode_table(x.arguments)))

    @_replicated
    def remove_exchange(self, vhost: str, name: str) -> bool:
        """Delete an exchange and every binding from it or to it."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "DELETE FROM bindings WHERE vhost = ? AND (source = ? OR "
                "(destination = ? AND destination_kind = 'exchange'))", (vhost, name, name))
            return self._db.execute(
                "DELETE FROM exchanges WHERE vhost = ? AND name = ?", (vhost, name)).rowcount > 0

    def list_exchanges(self, vhost: str | None = None) -> list[ExchangeDef]:
        """Exchanges of `vhost` (or all), by vhost and name."""
        rows = self._select("exchanges", vhost)
        return [ExchangeDef(v, n, t, bool(d), bool(a), bool(i), decode_table(args))
                for v, n, t, d, a, i, args in rows]

    # -- queues ----------------------------------------------------------------------------
    @_replicated
    def add_queue(self, q: QueueDef) -> None:
        """Record a durable queue (replacing one of the same name)."""
        self._write("INSERT OR REPLACE INTO queues VALUES (?, ?, ?, ?, ?)",
                    (q.vhost, q.name, q.durable, q.auto_delete, encode_table(q.arguments)))

    @_replicated
    def remove_queue(self, vhost: str, name: str) -> bool:
        """Delete a queue and every binding to it."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "DELETE FROM bindings WHERE vhost = ? AND destination = ? AND "
                "destination_kind = 'queue'", (vhost, name))
            return self._db.execute(
                "DELETE FROM queues WHERE vhost = ? AND name = ?", (vhost, name)).rowcount > 0

    def list_queues(self, vhost: str | None = None) -> list[QueueDef]:
        """Queues of `vhost` (or all), by vhost and name."""
        return [QueueDef(v, n, bool(d), bool(a), decode_table(args))
                for v, n, d, a, args in self._select("queues", vhost)]

    # -- bindings --------------------------------------------------------------------------
    @_replicated
    def add_binding(self, b: BindingDef) -> None:
        """Record a binding (idempotent: the same binding twice is one row)."""
        self._write("INSERT OR IGNORE INTO bindings VALUES (?, ?, ?, ?, ?, ?)",
                    (b.vhost, b.source, b.destination, b.destination_kind, b.routing_key,
                     encode_table(b.arguments)))

    @_replicated
    def remove_binding(self, b: BindingDef) -> bool:
        """Delete one binding (matched on every field, arguments included)."""
        return self._write(
            "DELETE FROM bindings WHERE vhost = ? AND source = ? AND destination = ? AND "
            "destination_kind = ? AND routing_key = ? AND arguments = ?",
            (b.vhost, b.source, b.destination, b.destination_kind, b.routing_key,
             encode_table(b.arguments))) > 0

    def list_bindings(self, vhost: str | None = None) -> list[BindingDef]:
        """Bindings of `vhost` (or all)."""
        return [BindingDef(v, s, d, k, rk, decode_table(args))
                for v, s, d, k, rk, args in self._select("bindings", vhost)]

    # -- policies --------------------------------------------------------------------------
    @_replicated
    def set_policy(self, p: PolicyDef) -> None:
        """Create or replace a policy."""
        self._write("INSERT OR REPLACE INTO policies VALUES (?, ?, ?, ?, ?, ?)",
                    (p.vhost, p.name, p.pattern, p.apply_to, encode_table(p.definition),
                     p.priority))

    @_replicated
    def clear_policy(self, vhost: str, name: str) -> bool:
        """Delete a policy."""
        return self._write("DELETE FROM policies WHERE vhost = ? AND name = ?", (vhost, name)) > 0

    def list_policies(self, vhost: str | None = None) -> list[PolicyDef]:
        """Policies of `vhost` (or all)."""
        return [PolicyDef(v, n, pat, decode_table(d), prio, apply_to)
                for v, n, pat, apply_to, d, prio in self._select("policies", vhost)]

    # -- runtime parameters (rabbitmq.com/parameters.html) -----------------------------------
    @_replicated
    def set_parameter(self, p: ParameterDef) -> None:
        """Create or replace a runtime parameter."""
        self._write("INSERT OR REPLACE INTO parameters VALUES (?, ?, ?, ?)",
                    (p.vhost, p.component, p.name, json.dumps(p.value)))

    @_replicated
    def clear_parameter(self, vhost: str, component: str, name: str) -> bool:
        """Delete a runtime parameter; False when there was none."""
        return self._write("DELETE FROM parameters WHERE vhost = ? AND component = ? AND "
                           "name = ?", (vhost, component, name)) > 0

    def list_parameters(self, vhost: str | None = None) -> list[ParameterDef]:
        """Runtime parameters of `vhost` (or all), ordered by vhost, component, name."""
        return [ParameterDef(v, c, n, json.loads(value))
                for v, c, n, value in self._select("parameters", vhost)]

    # -- global runtime parameters (rabbitmq.com/parameters.html#global-parameters) --------
    @_replicated
    def set_global_parameter(self, name: str, value: Any) -> None:
        """Create or replace a global parameter (any JSON value)."""
        self._write("INSERT OR REPLACE INTO global_parameters VALUES (?, ?)",
                    (name, json.dumps(value)))

    @_replicated
    def clear_global_parameter(self, name: str) -> bool:
        """Delete a global parameter; False when there was none."""
        return self._write("DELETE FROM global_parameters WHERE name = ?", (name,)) > 0

    def list_global_parameters(self) -> dict[str, Any]:
        """{name: value} of every global parameter, by name."""
        rows = self._db.execute("SELECT name, value FROM global_parameters ORDER BY name")
        return {n: json.loads(v) for n, v in rows}

    def _select(self, table: str, vhost: str | None) -> list[tuple[Any, ...]]:
        if vhost is None:
            return self._db.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3").fetchall()
        return self._db.execute(
            f"SELECT * FROM {table} WHERE vhost = ? ORDER BY 1, 2, 3", (vhost,)).fetchall()


_RECORDS.update({cls.__name__: cls for cls in (
    VhostDef, UserDef, PermissionDef, TopicPermissionDef, ExchangeDef, QueueDef, BindingDef,
    PolicyDef, ParameterDef)})
