"""A deduplication cache: the keys seen recently, each until its TTL, at most `size` of them
(rabbitmq-message-deduplication's `RabbitMQMessageDeduplication.Cache`).

Owns: the keys of one deduplicating exchange or queue and, with persistence `disk`, their
file `cache` (broker/quorum/record_log.py frames: INSERT key expiry, DELETE key; rewritten
with the live keys when it grew past twice their number), read back at start.
Talked to by: broker/exchange/dedup.py (an x-message-deduplication exchange, when it
routes) and broker/dedup/queue.py (a queue with x-message-deduplication, when it enqueues
and when a message leaves).
Must never: hold more than `size` keys (the oldest inserted goes first), or say a key is
present after its expiry.

Keys are bytes: an `x-deduplication-header` value tagged by its type, or a content hash
(broker/exchange/dedup.py `key_of`, `content_key`). Expiry is in ms since the epoch (wall clock, so that a
persisted cache means the same after a restart).
"""

from __future__ import annotations

import struct
import time
from collections import OrderedDict

from broker.quorum.record_log import RecordLog

FILE = "cache"
_INSERT, _DELETE = 1, 2
_HEAD = struct.Struct(">Bq")  # kind, expiry ms (-1: never); then the key
NEVER = -1


class DedupCache:
    """The keys seen, in insertion order. `size`: at most that many (None: unbounded, a
    queue's cache); `ttl_ms`: the default lifetime of a key (None: until evicted or
    deleted); `directory`: persistence `disk` (None: memory)."""

    def __init__(self, size: int | None, ttl_ms: int | None = None,
                 directory: str | None = None) -> None:
        self.size = size
        self.ttl_ms = ttl_ms
        self._keys: OrderedDict[bytes, int] = OrderedDict()  # key -> expiry ms (NEVER)
        self._log = RecordLog(directory, FILE) if directory is not None else None
        self.duplicates = 0  # lookups that found a live key (the API's and Prometheus' count)
        if self._log is not None:
            self._load(self._log)

    def _load(self, records: RecordLog) -> None:
        now = _now_ms()
        for payload in records.load():
            kind, expiry = _HEAD.unpack_from(payload)
            key = payload[_HEAD.size:]
            if kind == _INSERT:
                self._keys[key] = expiry
                self._keys.move_to_end(key)
            else:
                self._keys.pop(key, None)
        for key in [k for k, e in self._keys.items() if e != NEVER and e <= now]:
            del self._keys[key]
        self._evict()
        records.rewrite(self._records())

    def _records(self) -> list[bytes]:
        return [_HEAD.pack(_INSERT, e) + k for k, e in self._keys.items()]

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: bytes) -> bool:
        expiry = self._keys.get(key)
        if expiry is None:
            return False
        if expiry != NEVER and expiry <= _now_ms():
            self.delete(key)
            return False
        return True

    def insert(self, key: bytes, ttl_ms: int | None = None) -> bool:
        """Add `key` for `ttl_ms` (else the cache's TTL); False, and nothing changes, when it
        is present already (a duplicate, counted)."""
        if key in self:
            self.duplicates += 1
            return False
        ttl = ttl_ms if ttl_ms is not None else self.ttl_ms
        expiry = _now_ms() + ttl if ttl is not None and ttl > 0 else NEVER
        self._keys[key] = expiry
        if self._log is not None:
            self._log.append(_HEAD.pack(_INSERT, expiry) + key)
        self._evict()
        return True

    def expiry(self, key: bytes) -> int:
        """When `key` expires (ms since the epoch; NEVER: it does not); KeyError if absent."""
        return self._keys[key]

    def add(self, key: bytes, expiry: int) -> None:
        """Hold `key` until `expiry` (ms since the epoch, or NEVER) without counting a
        duplicate: another worker's cache of the same exchange took it (with `--workers N`,
        broker/workers/dedup_sharing.py). An expired key is ignored."""
        if expiry != NEVER and expiry <= _now_ms():
            return
        self._keys[key] = expiry
        self._keys.move_to_end(key)
        if self._log is not None:
            self._log.append(_HEAD.pack(_INSERT, expiry) + key)
        self._evict()

    def seen(self, key: bytes) -> bool:
        """Whether `key` is present (a queue's check before it enqueues), counting a hit as
        a duplicate."""
        if key in self:
            self.duplicates += 1
            return True
        return False

    def delete(self, key: bytes) -> None:
        """Forget `key` (its message left the queue)."""
        if self._keys.pop(key, None) is not None and self._log is not None:
            self._log.append(_HEAD.pack(_DELETE, 0) + key)
            self._maybe_compact()

    def flush(self) -> None:
        """Forget every key (queue.purge)."""
        self._keys.clear()
        if self._log is not None:
            self._log.rewrite([])

    def _evict(self) -> None:
        size = self.size
        if size is None:
            return
        evicted = False
        while len(self._keys) > size:
            self._keys.popitem(last=False)
            evicted = True
        if evicted:
            self._maybe_compact()

    def _maybe_compact(self) -> None:
        log = self._log
        if log is not None and log.records > 2 * len(self._keys) + 1024:
            log.rewrite(self._records())

    def sync(self) -> None:
        """fsync the records appended since the last sync (persistence `disk`)."""
        if self._log is not None:
            self._log.sync()

    def close(self) -> None:
        if self._log is not None:
            self._log.sync()
            self._log.close()


def _now_ms() -> int:
    return int(time.time() * 1000)
