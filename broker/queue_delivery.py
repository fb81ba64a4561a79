"""The consumer side of a queue process: delivering ready messages to consumers in
bounded turns, settling what they ack, and the calls a consuming channel makes
(basic.consume, basic.cancel, its channel going down, basic.get, the management's browse).
RabbitMQ keeps these in `rabbit_amqqueue_process` beside the publishing side; they part
here because the consumer side reads the consumer set and the backing queue's head, and the
publishing side its tail, limits and confirms.

Owns: `QueueDeliveries`, the part of `QueueProcess` (broker/queue_process.py, which
inherits it) that delivers; the state it reads is the queue process's, declared below for
type checkers. Talks to: channels through `ChannelFacade` (`deliver`, `can_deliver`), the
consumer set (broker/consumers.py), the backing queue, the confirm mode.
Must never: publish, or run outside the queue process's mailbox turn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker import errors

if TYPE_CHECKING:
    from collections.abc import Callable

    from broker.backing_queue.base import BackingQueue, Fetched
    from broker.confirms import QueueConfirms
    from broker.consumers import Consumer, ConsumerSet
    from broker.credit_flow import CreditFlow
    from broker.facades import ChannelFacade, LiteRef, QueueVHost
    from broker.message import Message
    from broker.queue_arguments import QueueArguments
    from broker.queue_expiry import UnusedLease
    from broker.stats import MessageStats

RUN = 4  # (RUN,) a consumer's channel may have capacity again (a queue mailbox kind)
DELIVERIES_PER_TURN = 256  # deliveries one mailbox turn makes before yielding the loop


class QueueDeliveries:
    """Delivering and the consumer façade of a queue process (mixed into `QueueProcess`)."""

    if TYPE_CHECKING:  # the queue process's state and calls this side uses
        name: str
        vhost: QueueVHost
        bq: BackingQueue
        consumers: ConsumerSet
        confirms: QueueConfirms
        credit: CreditFlow
        lease: UnusedLease
        settings: QueueArguments
        message_stats: MessageStats
        federation_watch: Callable[[Any], None] | None
        deleted: bool
        _tracks: bool
        _expiring: bool
        _had_consumers: bool
        _drops_head: bool
        _confirm_out: dict[ChannelFacade, list[int]]
        _deferred: dict[ChannelFacade, int]

        def cast(self, msg: Any) -> None: ...
        def call(self, fn: Callable[..., Any], *args: Any) -> Any: ...
        def _drain_all(self) -> None: ...
        def _drop_expired(self) -> None: ...
        def _drop_head(self) -> None: ...
        def _flush_confirms(self) -> None: ...
        def _maybe_auto_delete(self) -> bool: ...
        def _requeue(self, tags: list[int]) -> None: ...
        _on_fetch: Callable[[Fetched, bool], bool] | None

    # -- delivering -------------------------------------------------------------------------
    def _run_deliveries(self) -> None:
        """Deliver ready messages to consumers with capacity, at most DELIVERIES_PER_TURN
        per mailbox turn: a consumer that reads as fast as the socket takes it (a no-ack
        drain of a backlog) would otherwise hold the one event loop for the whole backlog
        (10 000 deliveries, 100+ ms, issue 26 item 4). Past the bound a (RUN,) to itself
        continues on a later turn, after the other processes' callbacks. RabbitMQ's queue
        process needs no bound: the Erlang scheduler preempts it by reductions."""
        bq = self.bq
        consumers = self.consumers
        if not len(consumers):
            return
        expiring = self._expiring
        on_fetch = self._on_fetch
        budget = DELIVERIES_PER_TURN
        while not bq.is_empty():
            if budget == 0:
                self.cast((RUN,))
                return
            budget -= 1
            consumer = consumers.next_ready(channel_ok)
            if consumer is None:
                return
            if expiring:
                self._drop_expired()  # never deliver an expired message
                if bq.is_empty():
                    return
            fetched = bq.fetch(not consumer.no_ack)
            if fetched is None:  # pragma: no cover - is_empty said otherwise
                return
            if on_fetch is not None and not on_fetch(fetched, False):
                continue  # taken (a quorum queue dead-letters one past its delivery limit)
            tag: int | LiteRef | None  # a LiteRef once an ack-lite mode hands it out
            tag = fetched.ack_tag
            stats = self.message_stats
            if not consumer.no_ack:
                consumer.unacked += 1
                stats.deliver += 1
            else:
                stats.deliver_no_ack += 1
            if fetched.redelivered:
                stats.redeliver += 1
            if self._tracks:
                tag = self.confirms.on_deliver(self, fetched.message.msg_id, tag,
                                               consumer.channel)
            consumer.channel.deliver(self, consumer.tag, fetched.message, fetched.redelivered, tag)

    def _settle(self, channel: ChannelFacade, entries: list[tuple[int, str | None]]) -> list[int]:
        """Ack tags of `entries` [(ack_tag, consumer_tag or None for basic.get)], giving each
        consumer back the prefetch capacity its deliveries used."""
        tags = []
        consumers = self.consumers
        for tag, ctag in entries:
            if tag is not None:  # None: an ack-lite delivery the channel settled itself
                tags.append(tag)
            if ctag is not None:
                consumer = consumers.get(channel, ctag)
                if consumer is not None and consumer.unacked > 0:
                    consumer.unacked -= 1
        return tags

    # -- the consumer façade (called through QueueProcess.call) ------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        """basic.consume. Raises 403 ACCESS_REFUSED when an exclusive consumer is involved."""
        if self.consumers.has_exclusive() or (consumer.exclusive and len(self.consumers)):
            raise errors.amqp_error(
                errors.AccessRefused,
                f"queue '{self.name}' in vhost '{self.vhost.name}' in exclusive use")
        self.consumers.add(consumer)
        self._had_consumers = True
        self.lease.touch()
        self.cast((RUN,))

    def remove_consumer(self, channel: ChannelFacade, tag: str) -> bool:
        """basic.cancel; may auto-delete the queue. Returns whether the consumer existed."""
        consumer = self.consumers.remove(channel, tag)
        self.lease.touch()
        self._maybe_auto_delete()
        if self.federation_watch is not None:
            self.federation_watch(self)
        return consumer is not None

    def channel_down(self, channel: ChannelFacade, unacked: list[int]) -> None:
        """The channel closed: requeue what it held unacked (in seq order) and drop its
        consumers (AMQP 0-9-1 §1.8.3.x: unacked messages are requeued on channel close)."""
        self._drain_all()
        self.consumers.remove_channel(channel)
        self.lease.touch()
        self.credit.peer_down(channel)
        self._confirm_out.pop(channel, None)
        self._deferred.pop(channel, None)
        if unacked:
            self._requeue(unacked)
        if not self._maybe_auto_delete():
            self.cast((RUN,))

    def basic_get(self, channel: ChannelFacade, no_ack: bool) -> tuple[Fetched, int] | None:
        """basic.get from `channel`: (Fetched, messages left) or None when empty. Expired
        messages at the head are dropped first (never returned)."""
        self.lease.touch()
        if self._expiring:
            self._drop_expired()
        on_fetch = self._on_fetch
        while True:
            fetched = self.bq.fetch(not no_ack)
            if fetched is None:
                self.message_stats.get_empty += 1
                return None
            if on_fetch is None or on_fetch(fetched, True):
                break
        stats = self.message_stats
        if no_ack:
            stats.get_no_ack += 1
        else:
            stats.get += 1
        if fetched.redelivered:
            stats.redeliver += 1
        if self._tracks:
            # ack-lite: the channel takes the LiteRef in place of the backing queue's tag
            # (this Fetched is basic_get's answer; the backing queue never sees it again)
            fetched.ack_tag = self.confirms.on_deliver(  # type: ignore[assignment]
                self, fetched.message.msg_id, fetched.ack_tag, channel)
            self._flush_confirms()  # auto-ack: released now, not at the next batch
        return fetched, self.bq.len()

    def browse(self, offset: int, count: int) -> list[tuple[Message, bool]]:
        """Management: ready messages from `offset`, unconsumed (expired ones dropped
        first, as a consumer would never see them)."""
        if self._expiring:
            self._drop_expired()
        return self.bq.peek(offset, count)


def channel_ok(consumer: Consumer) -> bool:
    """May `consumer`'s channel take one more delivery now (the consumer set's predicate)?"""
    return consumer.channel.can_deliver(consumer.no_ack)
