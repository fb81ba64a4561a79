# Owns: the routing table of an `x-message-deduplication` exchange: the plugin's declare
# checks, the cache key of a message, and the decision (route to every binding, or to none:
# a duplicate).
# Talked to by: broker/exchange/types.py (new_routing), the vhost (sets `cache`, bindings),
# broker/exchange/router.py (route, once per publish).
# Must never: do I/O itself (the cache the vhost gives it may write its file), or route by
# the routing key (the plugin's exchange acts as a fanout).
"""The `x-message-deduplication` exchange (rabbitmq-message-deduplication's wire contract).

Source: RabbitMQMessageDeduplication.Exchange (rabbit_message_deduplication_exchange.ex,
github.com/noxdafox/rabbitmq-message-deduplication) and its README:
- `exchange.declare` needs `x-cache-size`, an integer (or a string of digits) greater than
  0: else 406 "Missing or invalid argument, 'x-cache-size' must be an integer greater than
  0"; `x-cache-ttl` (ms) likewise when given ("Invalid argument, 'x-cache-ttl' must be an
  integer greater than 0"); `x-cache-persistence` "memory" (the default) or "disk" ("Invalid
  argument, 'x-cache-persistence' must be either 'disk' or 'memory'").
- A message with an `x-deduplication-header` header whose value the cache holds is routed
  nowhere (unroutable: confirmed, and returned when mandatory); otherwise the value goes
  into the cache, for the message's `x-cache-ttl` header (ms) or the exchange's, and the
  message goes to every binding whatever its routing key (the plugin routes as a fanout).
  A message without the header is never a duplicate. When the cache is full the oldest key
  makes room.
- Beyond the plugin: `x-deduplication-hash` (an array, or a comma-separated string, of
  property names and/or `body`) keys a message by a hash of those parts when it carries no
  `x-deduplication-header` (content-based deduplication).
- With `--workers N` every worker routes with its own copy of the exchange and its cache: a
  key one worker takes goes to the others' caches (`peer_sink`, set by
  broker/workers/dedup_sharing.py), as the plugin's Mnesia table is replicated to every
  node, so a publisher that retries through another connection, on another worker, is
  still deduplicated.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable
from typing import Any, Protocol

from broker import errors
from broker.exchange.fanout import FanoutRouting

TYPE = "x-message-deduplication"
# (vhost, exchange, key, expiry ms since the epoch or -1) of every key a cache takes from a
# publish: with `--workers N`, how the other workers' caches learn it (None: one process)
PeerSink = Callable[[str, str, bytes, int], None]
peer_sink: PeerSink | None = None
HEADER = "x-deduplication-header"
# the properties a content-based key may name (AMQP 0-9-1 basic properties), and the body
HASHABLE = ("body", "content_type", "content_encoding", "headers", "delivery_mode", "priority",
            "correlation_id", "reply_to", "expiration", "message_id", "timestamp",
            "message_type", "user_id", "app_id")


class Cache(Protocol):
    """What the routing table needs of broker/dedup/cache.py's DedupCache."""

    def insert(self, key: bytes, ttl_ms: int | None = None) -> bool: ...

    def expiry(self, key: bytes) -> int: ...


def key_of(value: object) -> bytes | None:
    """A header value as a cache key, None for what the plugin does not deduplicate on
    (no header, arrays and tables: its message_header/2 returns nil for lists and tuples).
    Strings, byte arrays, integers, floats, booleans, decimals and timestamps are keys,
    each tagged with its type (the string "1" and the integer 1 differ, as they are
    different Erlang terms to the plugin)."""
    if value is None or isinstance(value, list | tuple | dict):
        return None
    if isinstance(value, str):
        return b"S" + value.encode()
    if isinstance(value, bytes | bytearray):
        return b"x" + bytes(value)
    if isinstance(value, bool):
        return b"t1" if value else b"t0"
    if isinstance(value, int):
        return b"i" + str(value).encode()
    return b"o" + repr(value).encode()  # floats, decimals, timestamps


def positive_int(arguments: dict, name: str) -> int | None:
    """An argument that must be an integer > 0 (or a string of digits): its value, None
    when absent; ValueError otherwise."""
    value = arguments.get(name)
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(name)
    return value


def hash_parts(arguments: dict, name: str) -> tuple[str, ...]:
    """The parts an `x-deduplication-hash` argument names (406 for an unknown one)."""
    value = arguments.get(name)
    if value is None:
        return ()
    if isinstance(value, bytes):
        value = value.decode()
    parts = [p.strip() for p in value.split(",")] if isinstance(value, str) else value
    if not isinstance(parts, list) or not parts or not all(
            isinstance(p, str) and p in HASHABLE for p in parts):
        raise errors.amqp_error(
            errors.PreconditionFailed,
            f"Invalid argument, '{name}' must name some of: {', '.join(HASHABLE)}")
    return tuple(parts)


def content_key(parts: tuple[str, ...], message: Any) -> bytes:
    """A key from a hash (BLAKE2b, 16 bytes) of the named properties and/or the body."""
    h = hashlib.blake2b(digest_size=16)
    props = message.properties if any(p != "body" for p in parts) else None
    for part in parts:
        h.update(part.encode() + b"=")
        if part == "body":
            h.update(message.body)
        else:
            value = getattr(props, part, None)
            if isinstance(value, dict):  # the same table in another key order: the same
                value = sorted(value.items())
            h.update(repr(value).encode())
        h.update(b"\x00")
    return b"h" + h.digest()


_NOWHERE: dict[Hashable, int] = {}  # a duplicate's destinations (read-only)


class DedupRouting(FanoutRouting):
    """Routing table of an `x-message-deduplication` exchange: a fanout whose `route` drops
    duplicates. `cache` is set by the vhost once the exchange exists (None: nothing is
    deduplicated yet). `ttl_ms`, `size`, `persistence`: the declare arguments."""

    __slots__ = ("cache", "size", "ttl_ms", "persistence", "hash_parts", "key_only",
                 "remote_duplicates", "names")
    reads_headers = True
    always_reads_headers = True  # the header decides even before there is a binding

    def __init__(self, arguments: dict | None) -> None:
        super().__init__()
        arguments = arguments or {}
        try:
            self.size = positive_int(arguments, "x-cache-size")
        except ValueError:
            self.size = None
        if self.size is None:
            raise errors.amqp_error(
                errors.PreconditionFailed,
                "Missing or invalid argument, 'x-cache-size' must be an integer greater than 0")
        try:
            self.ttl_ms = positive_int(arguments, "x-cache-ttl")
        except ValueError:
            raise errors.amqp_error(
                errors.PreconditionFailed,
                "Invalid argument, 'x-cache-ttl' must be an integer greater than 0") from None
        persistence = arguments.get("x-cache-persistence", "memory")
        if isinstance(persistence, bytes):
            persistence = persistence.decode("utf-8", "replace")
        if persistence not in ("memory", "disk"):
            raise errors.amqp_error(
                errors.PreconditionFailed,
                "Invalid argument, 'x-cache-persistence' must be either 'disk' or 'memory'")
        self.persistence = persistence
        self.hash_parts = hash_parts(arguments, "x-deduplication-hash")
        # a content key reads the message's properties or body: no route cache then
        self.key_only = not self.hash_parts
        self.cache: Cache | None = None
        # with --workers N, the duplicates the other workers' caches of this exchange caught,
        # as last reported (worker -> count; broker/workers/api_bridge.py, on worker 0)
        self.remote_duplicates: dict[int, int] = {}
        # (vhost, exchange) once the vhost gave the exchange its cache: the names a new key
        # is told to the other workers under (peer_sink)
        self.names: tuple[str, str] | None = None

    def duplicates(self) -> int:
        """Publishes dropped as duplicates, by this worker's cache and the others'."""
        own = getattr(self.cache, "duplicates", 0)
        return own + sum(self.remote_duplicates.values())

    def route(self, routing_key: str, headers: dict | None = None,
              message: object = None) -> dict[Hashable, int]:
        """Every bound destination, or none for a duplicate (whose key the cache holds)."""
        cache = self.cache
        if cache is not None:
            key = key_of(headers.get(HEADER)) if headers else None
            if key is None and self.hash_parts and message is not None:
                key = content_key(self.hash_parts, message)
            if key is not None:
                ttl = None
                if headers:
                    try:
                        ttl = positive_int(headers, "x-cache-ttl")
                    except ValueError:
                        ttl = None
                if not cache.insert(key, ttl):
                    return _NOWHERE
                sink = peer_sink
                if sink is not None and self.names is not None:
                    sink(self.names[0], self.names[1], key, cache.expiry(key))
        return self._dests
