"""Queue-level deduplication: a backing queue that remembers the `x-deduplication-header`
of every message it holds (rabbitmq-message-deduplication's
`RabbitMQMessageDeduplication.Queue`, a backing-queue wrapper there too).

Owns: the queue's DedupCache (broker/dedup/cache.py) and the keys of its pending acks.
Talked to by: the queue process, as its backing queue (`is_duplicate` before it enqueues;
every other call passes through), built by the server's backing-queue factory for a queue
declared with `x-message-deduplication: true`.
Must never: keep a key after its message left the queue (acked, delivered without ack,
rejected, expired, dropped), or drop one while the message is still there.

Semantics, as the plugin's: a message whose header value is held by a message in the queue
(ready or delivered and not yet acked) is a duplicate: not enqueued, its publisher confirmed
(the queue process does that). A key lives as long as its message, and no longer than the
message's `expiration` or the queue's `x-message-ttl` when those are set. `queue.purge`
forgets every key (the plugin flushes the cache), pending acks' included. Beyond the plugin:
quorum queues deduplicate too, and after a restart the keys of the recovered messages are
read back, so a message still in the queue keeps its duplicates out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from broker.backing_queue.base import AckTag, BackingQueue, Fetched, MessageProps
from broker.dedup.cache import DedupCache
from broker.exchange.dedup import key_of
from broker.message import Message
from broker.protocol.header_edit import find_header, header_value

HEADER = "x-deduplication-header"


_NAME = HEADER.encode()


def dedup_key(message: Message) -> bytes | None:
    """The message's deduplication key (its `x-deduplication-header`), None without one.
    Read from the encoded properties where it can be (about 2 µs against 10 for decoding
    them), as the same typed key `key_of` makes of the decoded value."""
    if not message.has_headers:
        return None
    if message.decoded_headers is None:  # still encoded
        raw = message.wire_properties()
        if _NAME not in raw:
            return None
        where = find_header(raw, HEADER)
        if where is not None:
            value = header_value(raw, where)
            tag = where[0]
            if isinstance(value, bytes):  # a long string (S) or a byte array (x)
                return (b"S" if tag == ord("S") else b"x") + value
            if isinstance(value, int | float):
                return key_of(value)
    headers = message.headers  # another type, or a table the walk does not know
    return key_of(headers.get(HEADER)) if headers else None


class DedupBackingQueue:
    """`inner` (a BackingQueue) with queue-level deduplication; `ttl_ms` is the queue's
    x-message-ttl (None: none)."""

    def __init__(self, inner: BackingQueue, ttl_ms: int | None) -> None:
        self.inner = inner
        self.cache = DedupCache(None, ttl_ms)
        self._pending: dict[Any, bytes] = {}  # ack tag -> key of a delivered message
        if not inner.is_empty():  # recovered messages: their keys back
            for message, _redelivered in inner.peek(0, inner.len()):
                key = dedup_key(message)
                if key is not None:
                    self.cache.insert(key, _ttl(message))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # the rest of the BackingQueue protocol

    # -- the check ---------------------------------------------------------------------------
    def is_duplicate(self, message: Message) -> bool:
        """True when a message with the same key is in the queue (counted in `duplicates`)."""
        key = dedup_key(message)
        return key is not None and self.cache.seen(key)

    @property
    def duplicates(self) -> int:
        return self.cache.duplicates

    def stats(self) -> dict[str, int]:
        """The inner queue's counters, with `dedup_entries` (keys held) and
        `dedup_duplicates` (publishes refused as duplicates)."""
        return {**self.inner.stats(), "dedup_entries": len(self.cache),
                "dedup_duplicates": self.cache.duplicates}

    # -- messages in ---------------------------------------------------------------------------
    def publish(self, message: Message, props: MessageProps, delivered: bool = False) -> None:
        self._remember(message)
        self.inner.publish(message, props, delivered)

    def publish_delivered(self, message: Message, props: MessageProps) -> AckTag:
        tag = self.inner.publish_delivered(message, props)
        key = self._remember(message)
        if key is not None:
            self._pending[tag] = key
        return tag

    def _remember(self, message: Message) -> bytes | None:
        key = dedup_key(message)
        if key is not None:
            self.cache.insert(key, _ttl(message))
        return key

    # -- messages out --------------------------------------------------------------------------
    def fetch(self, need_ack: bool) -> Fetched | None:
        fetched = self.inner.fetch(need_ack)
        if fetched is not None:
            key = dedup_key(fetched.message)
            if key is not None:
                if need_ack:
                    self._pending[fetched.ack_tag] = key
                else:
                    self.cache.delete(key)
        return fetched

    def ack(self, ack_tags: Iterable[AckTag]) -> list[bytes]:
        tags = list(ack_tags)
        self._forget(tags)
        return self.inner.ack(tags)

    def requeue(self, ack_tags: Iterable[AckTag]) -> None:
        tags = list(ack_tags)
        for tag in tags:  # back in the queue: the key stays, fetched again later
            self._pending.pop(tag, None)
        self.inner.requeue(tags)

    def discard_pending(self, ack_tags: Iterable[AckTag]) -> list[tuple[Message, MessageProps]]:
        tags = list(ack_tags)
        self._forget(tags)
        return self.inner.discard_pending(tags)

    def dropwhile(self, pred: Callable[[MessageProps], bool]
                  ) -> list[tuple[Message, MessageProps]]:
        dropped = self.inner.dropwhile(pred)
        for message, _props in dropped:
            key = dedup_key(message)
            if key is not None:
                self.cache.delete(key)
        return dropped

    def purge(self) -> int:
        self.cache.flush()
        self._pending.clear()
        return self.inner.purge()

    def purge_acks(self) -> None:
        for key in self._pending.values():
            self.cache.delete(key)
        self._pending.clear()
        self.inner.purge_acks()

    def _forget(self, tags: list) -> None:
        pending = self._pending
        for tag in tags:
            key = pending.pop(tag, None)
            if key is not None:
                self.cache.delete(key)


def _ttl(message: Message) -> int | None:
    expiration = message.expiration
    if expiration is None:
        return None
    try:
        return int(expiration)
    except ValueError:
        return None
