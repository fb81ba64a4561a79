"""At-least-once dead-lettering for a quorum queue (`x-dead-letter-strategy: at-least-once`
with `x-overflow: reject-publish`), after rabbit_fifo_dlx and rabbit_fifo_dlx_worker in
RabbitMQ 3.10.8.

A message the queue dead-letters (rejected, expired, past its delivery limit) leaves the
queue's ready list but not the queue: it is held here, counted against the queue's length
limits, and published to the targets its dead-letter exchange routes it to, as a publisher
with confirms would. It is forgotten only once every target queue confirmed it. A target
that rejects it (full, with reject-publish), a publish no queue confirms within
`dead_letter_worker_publisher_confirm_timeout` ms (RabbitMQ's default 180 000), and a
message with no route at all (no exchange, no binding, only a cycle) are published again
every that many ms, to the targets that have not confirmed yet, for as long as it takes.
A deleted target releases what it owed (as it does for any publisher), so it counts as
confirmed.

Owns: the held messages and their file `dead_letters` in the queue's directory (records:
ADD with the original message, the reason and the time of death; DONE when every target
confirmed), read back at start so a killed broker loses none of them; the publisher
identity the targets confirm to (`TargetPublisher`); the retry timer.
Talks to: the source queue (its current dead-letter exchange and routing key, its vhost's
routing, its mailbox for confirms and timer ticks) and target queues (PUBLISH casts).
Must never: forget a message before all its targets confirmed it, or block the loop.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import struct
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from broker import storage_codec
from broker.dead_letter import dead_letter_message
from broker.message import Message
from broker.queue_process import PUBLISH, dead_letter_targets
from broker.quorum.record_log import RecordLog

if TYPE_CHECKING:
    from broker.facades import QueueFacade, QueueVHost

log = logging.getLogger("broker.queue")

FILE = "dead_letters"
REASONS = ("rejected", "expired", "maxlen", "delivery_limit")
_ADD = struct.Struct(">BQBd16s")  # ADD, id, reason index, time of death (s), msg_id
_DONE = struct.Struct(">BQ")
ADD, DONE = 1, 2


class DeadLetterSource(Protocol):
    """The quorum queue as its dead-letter worker sees it."""

    name: str
    vhost: QueueVHost
    dlx: str | None
    dlrk: str | None

    def cast(self, msg: tuple) -> None: ...


class TargetPublisher:
    """What a target queue takes for the publishing channel of a dead-lettered copy: its
    confirms and rejects come back to the source queue's mailbox as (DLX_EVENT, kind,
    queue, seqs); it never consumes and needs no credit. `lazy_confirms`: its confirms may
    wait for a classic target's periodic index sync (200 ms) or the message's ack, rather
    than an fsync per loop turn (MessageProps.lazy_confirm); a delayed exchange's holder
    asks for that, since it only needs to know when it may forget a due message."""

    number = 0

    def __init__(self, post: Callable[[tuple], None], event: int, *,
                 lazy_confirms: bool = False) -> None:
        self._post = post
        self._event = event
        self.lazy_confirms = lazy_confirms

    @property
    def conn(self) -> Any:  # a queue names a channel's connection only for its consumers
        return None

    def cast(self, msg: tuple) -> None:
        if msg[0] in ("confirm", "reject"):
            self._post((self._event, msg[0], msg[1], msg[2]))

    def can_deliver(self, no_ack: bool) -> bool:
        return False

    def deliver(self, queue: QueueFacade, consumer_tag: str, message: Message,
                redelivered: bool, ack_tag: object) -> None:  # pragma: no cover
        raise RuntimeError("the dead-letter publisher does not consume")

    def grant_credit(self, queue: QueueFacade, n: int) -> None:
        """Targets hand back credit as to any publisher; this one does not wait for it."""

    def hold_publishes(self, queue: QueueFacade) -> bool:
        """Dead-lettered copies owe nobody a socket to pause: never held."""
        return False

    def release_publishes(self, queue: QueueFacade) -> None:
        """Never held."""

    def consumer_cancelled(self, queue: QueueFacade, tag: str) -> None:  # pragma: no cover
        """Never a consumer."""


@dataclass(slots=True, eq=False)
class Held:
    """One dead-lettered message not yet confirmed by all its targets."""

    id: int  # its number in the file
    message: Message  # as it left the queue (the dead-lettered copy is made per publish)
    reason: str  # rejected | expired | maxlen | delivery_limit
    died_at: float  # s since the epoch: x-death's time
    seq: int | None = None  # the publish in flight (None: never routed yet)
    published_at: float = 0.0  # monotonic s of that publish
    unsettled: set[Hashable] = field(default_factory=set)  # targets yet to confirm it
    rejected: set[Hashable] = field(default_factory=set)  # targets that rejected it
    settled: set[Hashable] = field(default_factory=set)  # targets that confirmed it


class AtLeastOnce:
    """The held dead letters of `source`, kept in `directory` (None: memory only), retried
    every `settle_timeout` ms. `event` is the source's mailbox kind for confirms, `retry`
    its kind for the timer."""

    def __init__(self, loop: asyncio.AbstractEventLoop, source: DeadLetterSource,
                 directory: str | None, settle_timeout: int, event: int, retry: int) -> None:
        self._loop = loop
        self._source = source
        self.settle_timeout = settle_timeout / 1000.0  # s
        self._retry_msg = (retry,)
        self.publisher = TargetPublisher(source.cast, event)
        self._held: dict[int, Held] = {}  # id -> held, in dead-lettering order
        self._by_seq: dict[int, Held] = {}  # publish seq -> held
        self._next_id = 0
        self._next_seq = 0
        self.bytes = 0  # body bytes held
        self._timer: asyncio.TimerHandle | None = None
        self._log = RecordLog(directory, FILE) if directory is not None else None
        if self._log is not None:
            self._load(self._log)

    def _load(self, records: RecordLog) -> None:
        for payload in records.load():
            if payload[0] == DONE:
                _kind, ident = _DONE.unpack(payload)
                held = self._held.pop(ident, None)
                if held is not None:
                    self.bytes -= len(held.message.body)
                continue
            _kind, ident, reason, died_at, msg_id = _ADD.unpack_from(payload)
            message = storage_codec.decode(msg_id, payload[_ADD.size:])
            self._held[ident] = Held(ident, message, REASONS[reason], died_at)
            self.bytes += len(message.body)
            self._next_id = max(self._next_id, ident + 1)
        records.rewrite(self._add_record(h) for h in self._held.values())
        if self._held:
            log.info("queue '%s' in vhost '%s': %d dead-lettered messages not yet confirmed "
                     "by their targets, published again", self._source.name,
                     self._source.vhost.name, len(self._held))
            # after the boot has recovered every queue and binding they may route to
            self._loop.call_soon(self._source.cast, self._retry_msg)

    def __len__(self) -> int:
        return len(self._held)

    # -- taking and publishing ------------------------------------------------------------
    def add(self, items: list[tuple[Message, Any]], reason: str) -> None:
        """Hold `items` [(message, props)] dead-lettered for `reason` and publish each."""
        now = time.time()
        for message, _props in items:
            held = Held(self._next_id, message, reason, now)
            self._next_id += 1
            if self._log is not None:
                self._log.append(self._add_record(held))
            self._held[held.id] = held
            self.bytes += len(message.body)
            self._publish(held)
        self._arm()

    def _add_record(self, held: Held) -> bytes:
        message = held.message
        return (_ADD.pack(ADD, held.id, REASONS.index(held.reason), held.died_at,
                          message.msg_id) + storage_codec.encode(message))

    def _publish(self, held: Held) -> None:
        """Route the dead-lettered copy with the queue's current dead-letter exchange and
        key, and publish it to every target that has not confirmed it yet."""
        source = self._source
        if held.seq is not None:
            self._by_seq.pop(held.seq, None)
            held.seq = None
        held.unsettled.clear()
        held.rejected.clear()
        dlx = source.dlx
        if dlx is None:
            return
        died = datetime.datetime.fromtimestamp(held.died_at, datetime.UTC)
        dead, keys = dead_letter_message(held.message, held.reason, source.name, dlx,
                                         source.dlrk, died)
        targets = [queue for queue in dead_letter_targets(source.vhost, dead, keys, held.reason)
                   if queue not in held.settled]
        if not targets:
            if not held.settled:
                return  # no route: tried again at the next tick
            self._done(held)  # every target confirmed an earlier publish
            return
        seq = self._next_seq
        self._next_seq += 1
        held.seq = seq
        held.published_at = time.monotonic()
        held.unsettled.update(targets)
        self._by_seq[seq] = held
        publisher = self.publisher
        for queue in targets:
            queue.cast((PUBLISH, publisher, dead, seq))

    # -- what targets say ------------------------------------------------------------------
    def on_event(self, kind: str, queue: Hashable, seqs: list[int]) -> None:
        """A target's confirm ("confirm") or reject ("reject") of publishes `seqs`."""
        by_seq = self._by_seq
        for seq in seqs:
            held = by_seq.get(seq)
            if held is None:
                continue  # a confirm of a publish made again since
            held.unsettled.discard(queue)
            if kind == "confirm":
                held.rejected.discard(queue)
                held.settled.add(queue)
            else:
                held.rejected.add(queue)
            if not held.unsettled and not held.rejected:
                self._done(held)

    def _done(self, held: Held) -> None:
        if held.seq is not None:
            self._by_seq.pop(held.seq, None)
        if self._held.pop(held.id, None) is None:
            return
        self.bytes -= len(held.message.body)
        if self._log is not None:
            self._log.append(_DONE.pack(DONE, held.id))
            if self._log.records > 2 * len(self._held) + 1024:
                self._log.rewrite(self._add_record(h) for h in self._held.values())

    # -- the retry timer -------------------------------------------------------------------
    def _arm(self) -> None:
        if self._held and self._timer is None:
            self._timer = self._loop.call_later(self.settle_timeout, self._source.cast,
                                                self._retry_msg)

    def retry(self) -> None:
        """The timer: publish again what has no route, was rejected, or waited for a
        confirm longer than the timeout (rabbit_fifo_dlx_worker redeliver_messages)."""
        self._timer = None
        cutoff = time.monotonic() - self.settle_timeout
        for held in list(self._held.values()):
            if held.seq is None or held.rejected or held.published_at <= cutoff:
                self._publish(held)
        self._arm()

    def release_all(self) -> list[tuple[Message, str]]:
        """The strategy is no longer at-least-once: hand back every held message with its
        reason (the queue dead-letters them at most once) and forget them."""
        out = [(h.message, h.reason) for h in self._held.values()]
        for held in list(self._held.values()):
            self._done(held)
        return out

    # -- files -----------------------------------------------------------------------------
    def sync(self) -> None:
        """fsync the records appended since the last sync."""
        if self._log is not None:
            self._log.sync()

    def close(self, compact: bool) -> None:
        """Stop the timer and close the file (`compact`: only the held messages stay)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._log is not None:
            if compact:
                self._log.rewrite(self._add_record(h) for h in self._held.values())
            self._log.close()
