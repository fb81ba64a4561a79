"""A quorum queue on one broker (x-queue-type: quorum): a classic queue process whose
messages are all kept as persistent, with rabbit_fifo's delivery counting, delivery limit and
dead-lettering strategies (RabbitMQ 3.10.8: rabbit_fifo.erl, rabbit_fifo_client.erl,
rabbit_quorum_queue.erl). Replication is not here: on one broker a quorum queue keeps its
messages as any durable queue does (docs/high-availability.md).

What it adds to QueueProcess (broker/queue_process.py):
- every return (reject or nack with requeue, a channel going down with the message unacked,
  the management API's requeue) raises the message's delivery count
  (broker/quorum/delivery_counts.py); past `x-delivery-limit` (or the `delivery-limit`
  policy, the lower wins) the message is dead-lettered with reason `delivery_limit`, or
  dropped without a dead-letter exchange (`return_one/7`);
- a delivery after a return carries `x-delivery-count` (a long) and redelivered = true; a
  basic.get carries it from the first get, 0 until a return
  (`rabbit_fifo_client:add_delivery_count_header/2`, `dequeue/3`); the stored message is
  never changed;
- `x-dead-letter-strategy: at-least-once` with `x-overflow: reject-publish` holds each
  dead-lettered message until its targets confirm it (broker/quorum/dead_letters.py); with
  drop-head it falls back to at-most-once and logs why, as `dead_letter_handler/2` does;
- `x-overflow: reject-publish-dlx` is taken as drop-head, with a warning (`overflow/3`);
- policies follow the quorum queue's table (broker/policies.py QUORUM_RULES).

Differences kept: a returned message goes back to its place by age (a classic queue's
requeue), where rabbit_fifo serves returns first in the order they came back.
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING, Any

from broker.message import Message
from broker.protocol.header_edit import with_long_header
from broker.queue_process import ACK, DISCARD, QueueProcess
from broker.quorum.dead_letters import AtLeastOnce
from broker.quorum.delivery_counts import DeliveryCounts

if TYPE_CHECKING:
    from broker.backing_queue.base import Fetched
    from broker.facades import ChannelFacade

log = logging.getLogger("broker.queue")

DLX_EVENT = 200  # (DLX_EVENT, "confirm" | "reject", target queue, [seq]) from a target
DLX_RETRY = 201  # (DLX_RETRY,) the at-least-once retry timer fired
SETTLE_TIMEOUT = 180_000  # ms: dead_letter_worker_publisher_confirm_timeout's default
SOFT_LIMIT = 0.8  # reject-publish lets publishers go at 80 % of a limit (rabbit_fifo ?LOW_LIMIT)


def with_delivery_count(message: Message, count: int) -> Message:
    """A copy of `message` carrying the header `x-delivery-count` = `count` (a long); the
    body and the other properties are shared, not copied."""
    raw = with_long_header(message.wire_properties(), "x-delivery-count", count)
    copy = Message.from_wire(message.exchange, message.routing_key, raw,
                             (2 if message.persistent else None, message.priority,
                              message.expiration), message.body)
    copy.msg_id = message.msg_id
    return copy


class QuorumQueue(QueueProcess):
    """A quorum queue: QueueProcess's arguments, plus `settle_timeout` (ms), how long an
    at-least-once dead letter waits for its targets' confirms before it is published again
    (RabbitMQ's `dead_letter_worker_publisher_confirm_timeout`)."""

    queue_type = "quorum"

    def __init__(self, *args: Any, settle_timeout: int = SETTLE_TIMEOUT, **kwargs: Any) -> None:
        self.delivery_limit: int | None = None
        self._strategy = "at-most-once"
        self._at_least_once: AtLeastOnce | None = None
        self._settle_timeout = settle_timeout
        self._warned: set[str] = set()
        # reject-publish: each publishing channel, blocked or not (rabbit_fifo's enqueuers);
        # weak: a channel that only published is never told to the queue when it closes
        self._blocked: weakref.WeakKeyDictionary[ChannelFacade, bool] = (
            weakref.WeakKeyDictionary())
        super().__init__(*args, **kwargs)
        directory = getattr(self.bq, "queue_dir", None)
        self.counts = DeliveryCounts(directory)  # seq_id -> returns, for returned messages
        self._dead_letters = AtLeastOnce(self._loop, self, directory, settle_timeout,
                                         DLX_EVENT, DLX_RETRY)
        self._on_fetch = self._fetched
        self._apply_strategy()

    # -- settings --------------------------------------------------------------------------
    def _apply(self, args: dict) -> None:
        if args.get("x-overflow") == "reject-publish-dlx":
            self._warn_once("overflow", "Invalid overflow strategy reject-publish-dlx for "
                            "quorum queue: taken as drop-head")
            args = {**args, "x-overflow": "drop-head"}
        super()._apply(args)
        limit = args.get("x-delivery-limit")
        self.delivery_limit = (limit if isinstance(limit, int) and not isinstance(limit, bool)
                               and limit >= 0 else None)
        strategy = args.get("x-dead-letter-strategy")
        if self.dlx is None:
            if strategy is not None or self.dlrk is not None:
                self._warn_once("no-dlx", "Disabling dead-lettering despite configured "
                                "dead-letter-routing-key or dead-letter-strategy because "
                                "dead-letter-exchange is not configured")
            strategy = "at-most-once"
        elif strategy == "at-least-once" and self.settings.overflow != "reject-publish":
            self._warn_once("fallback", "Falling back to dead-letter-strategy at-most-once "
                            "because configured dead-letter-strategy at-least-once is "
                            "incompatible with effective overflow strategy drop-head. To "
                            "enable dead-letter-strategy at-least-once, set overflow "
                            "strategy to reject-publish.")
            strategy = "at-most-once"
        self._strategy = strategy if strategy == "at-least-once" else "at-most-once"
        if getattr(self, "_dead_letters", None) is not None:
            self._apply_strategy()

    def _apply_strategy(self) -> None:
        """Left at-least-once: what was held is dead-lettered at most once now
        (rabbit_fifo_dlx: switching strategies)."""
        if self._strategy != "at-least-once" and len(self._dead_letters):
            for message, reason in self._dead_letters.release_all():
                super()._dead_letter([(message, None)], reason)

    def _warn_once(self, key: str, text: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s for queue '%s' in vhost '%s'", text, self.name, self.vhost.name)

    # -- the mailbox -----------------------------------------------------------------------
    def handle(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == ACK or kind == DISCARD:
            self.counts.settle([tag for tag, _ctag in msg[2] if tag is not None])
        elif kind == DLX_EVENT:
            self._dead_letters.on_event(msg[1], msg[2], msg[3])
            return
        elif kind == DLX_RETRY:
            if not self.deleted:
                self._dead_letters.retry()
            return
        super().handle(msg)

    def _requeue(self, tags: list[int]) -> None:
        """Returns: each message's count goes up; past the delivery limit it is
        dead-lettered (reason delivery_limit) instead of requeued."""
        limit = self.delivery_limit
        counts = self.counts
        back: list[int] = []
        dead: list[int] = []
        for tag in sorted(tags):
            count = counts.returned(tag)
            (dead if limit is not None and count > limit else back).append(tag)
        if dead:
            counts.settle(dead)
            self._dead_letter(self.bq.discard_pending(dead), "delivery_limit")
        if back:
            super()._requeue(back)

    def _fetched(self, fetched: Fetched, get: bool) -> bool:
        """Before a delivery or basic.get: the message's count (one for a message delivered
        before a restart and never settled), dead-lettered if past the limit (a policy
        lowered it, or the restart returned it once too often), else the header and the
        redelivered flag set from the count."""
        seq_id = fetched.seq_id
        counts = self.counts
        count = counts.get(seq_id)
        if count is None:
            count = counts.returned(seq_id) if fetched.redelivered else 0
        limit = self.delivery_limit
        if count and limit is not None and count > limit:
            counts.settle([seq_id])
            items = ([(fetched.message, fetched.props)] if fetched.ack_tag is None
                     else self.bq.discard_pending([fetched.ack_tag]))
            self._dead_letter(items, "delivery_limit")
            return False
        if fetched.ack_tag is None:
            counts.settle([seq_id])  # taken without an ack: gone
        elif count:
            counts.delivered(seq_id)
        if count or get:
            fetched.message = with_delivery_count(fetched.message, count)
        fetched.redelivered = count > 0
        return True

    # -- dead-lettering --------------------------------------------------------------------
    def _dead_letter(self, items: list, reason: str) -> None:
        if self._strategy == "at-least-once" and items:
            self._dead_letters.add(items, reason)
            return
        super()._dead_letter(items, reason)

    def _overflows(self, channel: ChannelFacade | None, size: int) -> bool:
        """reject-publish as rabbit_fifo 3.10.8 has it: a publish is refused only once the
        queue is past its limit, counting the dead letters held for their targets
        (`is_over_limit`): the one that takes it past is accepted, every publisher known
        then is blocked (`evaluate_limit`), a new one only if the queue is past the limit
        when it first publishes (`register_enqueuer`), and all are let go once the queue is
        at or below 80 % of its limits (`is_below_soft_limit`)."""
        blocked = self._blocked
        if self._over_limit(1.0):
            for known in blocked:
                blocked[known] = True
        elif any(blocked.values()) and not self._over_limit(SOFT_LIMIT):
            for known in blocked:
                blocked[known] = False
        if channel is None:  # a dead-lettered copy: no enqueuer to block
            return self._over_limit(1.0)
        state = blocked.get(channel)
        if state is None:
            state = blocked[channel] = self._over_limit(1.0)
        return state

    def _over_limit(self, fraction: float) -> bool:
        """Ready messages plus held dead letters (or their bytes) above `fraction` of the
        limit (1.0: past it; SOFT_LIMIT: not yet back under the soft limit)."""
        settings = self.settings
        bq = self.bq
        held = self._dead_letters
        if settings.max_length is not None:
            if bq.len() + len(held) > int(settings.max_length * fraction):
                return True
        if settings.max_length_bytes is not None:
            if bq.ready_bytes() + held.bytes > int(settings.max_length_bytes * fraction):
                return True
        return False

    def channel_down(self, channel: ChannelFacade, unacked: list[int]) -> None:
        self._blocked.pop(channel, None)
        super().channel_down(channel, unacked)

    # -- durability ------------------------------------------------------------------------
    def on_mailbox_empty(self) -> None:
        self._sync_files()
        super().on_mailbox_empty()

    def _sync_tick(self) -> None:
        self._sync_files()
        super()._sync_tick()

    def _sync_files(self) -> None:
        """fsync the counts and held dead letters before the index's sync makes the acks
        that took those messages out durable."""
        if not self.deleted:
            self.counts.sync()
            self._dead_letters.sync()

    def terminate(self, delete: bool) -> int:
        count = super().terminate(delete)
        self.counts.close(compact=not delete)
        self._dead_letters.close(compact=not delete)
        return count
