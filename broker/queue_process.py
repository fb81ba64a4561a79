"""The queue process: one per queue (RabbitMQ `rabbit_amqqueue_process.erl`).

Owns: a queue's consumers, its backing queue, per-channel credit, the confirms it owes
publishers, and enforcing its arguments (parsed by `queue_arguments.py`; the x-expires lease
in `queue_expiry.py`). Channels talk to it by `cast` (publish, ack, requeue, discard, run) or
through `call` on its façade methods (add_consumer, basic_get, purge, check_delete, ...).
This module keeps the loop, the publishing side (enqueue, limits, TTL, dead-lettering,
confirms and credit) and the queue's lifecycle; the consumer side (delivering, settling,
basic.consume/cancel/get) is `queue_delivery.py`'s `QueueDeliveries`, which it inherits. It
tells channels about deliveries through the channel façade (`deliver`, `can_deliver`,
`grant_credit`, `consumer_cancelled`). It reports its RAM duration to the memory monitor and
takes the RAM targets it casts (`alarms.py`, docs/architecture.md §7); out of message-store credit it
holds back the credit it owes channels (docs/architecture.md §1). It never writes to sockets.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker import errors
from broker.backing_queue.base import BackingQueue, Fetched, MessageProps
from broker.confirms import queue_confirms
from broker.consumer_bias import ConsumerBias
from broker.consumers import ConsumerSet
from broker.credit_flow import CreditFlow
from broker.dead_letter import dead_letter_message, is_cycle
from broker.definitions import PolicyDef
from broker.mailbox import Process
from broker.message import Message
from broker.policies import effective_queue_arguments
from broker.queue_arguments import parse_arguments
from broker.queue_delivery import QueueDeliveries, channel_ok
from broker.queue_expiry import UnusedLease
from broker.queue_memory import RamReports
from broker.stats import MessageStats
from broker.ttl import expiry_ms, parse_expiration

if TYPE_CHECKING:
    from broker.alarms import ResourceMonitor
    from broker.facades import ChannelFacade, ConnectionFacade, LiteRef, QueueFacade, QueueVHost

    # the connection that declared an exclusive queue (vhost and queue compare it by
    # identity; the management API reads its details)
    ExclusiveOwner = ConnectionFacade

log = logging.getLogger("broker.queue")

# mailbox message kinds (first tuple element)
PUBLISH = 0  # (PUBLISH, channel, message, msg_seq_no | None)
PUBLISHES = 11  # (PUBLISHES, channel, [message], [msg_seq_no] | None): alike publishes
ACK = 1  # (ACK, channel, [(ack_tag, consumer_tag | None)])
REQUEUE = 2  # (REQUEUE, channel, [(ack_tag, consumer_tag | None)])
DISCARD = 3  # (DISCARD, channel, [(ack_tag, consumer_tag | None)]) reject without requeue
# RUN = 4: (RUN,) a consumer's channel may have capacity again (defined in queue_delivery.py)
BQ_CONFIRMED = 5  # (BQ_CONFIRMED,) the backing queue has confirms to drain
EXPIRE = 6  # (EXPIRE,) the expiry timer fired: drop expired messages at the head
UNUSED = 7  # (UNUSED,) the x-expires timer fired: delete the queue if it stayed unused
RAM_DURATION = 8  # (RAM_DURATION,) report the RAM duration, take the desired one
RAM_TARGET = 9  # (RAM_TARGET, seconds | None) the memory monitor lowered the desired duration
RAM_REPORT = 10  # (RAM_REPORT,) the memory monitor asks for a report now (memory is high)

SYNC_INTERVAL = 0.2  # seconds: latest index sync while confirms are owed (docs/architecture.md §7)


class QueueProcess(QueueDeliveries, Process):
    """One queue. `name`/`vhost_name` identify it; flags are those of queue.declare
    (AMQP 0-9-1 §1.7.2.1); `exclusive_owner` is the owning connection (or None)."""

    # its type as RabbitMQ names it (x-queue-type; the management API's "type"): "classic"
    # here, "quorum" in broker/quorum/queue.py's subclass
    queue_type = "classic"
    # a subclass's look at each fetched message before it is delivered or got: may change
    # its message and redelivered flag, or take it (returns False: not delivered); None here
    _on_fetch: Callable[[Fetched, bool], bool] | None = None

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        vhost: QueueVHost,
        name: str,
        *,
        durable: bool,
        auto_delete: bool,
        exclusive_owner: ExclusiveOwner | None,
        arguments: dict,
        bq_factory: Callable[..., BackingQueue],
        credit_initial: int = 400,
        credit_more_after: int = 200,
        confirm_on: str = "persist",
        policy: PolicyDef | None = None,
        memory_monitor: ResourceMonitor | None = None,
        loop_busy: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__(loop)
        self.vhost = vhost  # VHost that holds this queue (for auto-delete)
        self.name = name  # queue name
        self.durable = durable  # survives restart (with storage)
        self.auto_delete = auto_delete  # delete when the last consumer goes
        self.exclusive_owner = exclusive_owner  # owning connection, or None
        self.arguments = arguments  # queue.declare arguments as given
        self.policy = policy  # the policy that applies (rabbitmq.com/parameters.html#policies)
        self.operator_policy: PolicyDef | None = None  # the operator policy that applies
        # the arguments in force: declared ones with the policy folded in (broker/policies.py)
        effective = effective_queue_arguments(arguments, policy, None, self.queue_type)
        self.bq: BackingQueue = bq_factory(
            (vhost.name, name), durable, self._bq_notify, effective
        )  # where messages live
        # basic.consume subscriptions; x-single-active-consumer: one receives at a time
        self.consumers = ConsumerSet(arguments.get("x-single-active-consumer") is True)
        # a federated queue's link: told after each batch and consumer change, so it can
        # consume upstream only while this queue wants messages (rabbit_queue_decorator
        # consumer_state_changed); None unless the queue is federated
        self.federation_watch: Callable[[QueueProcess], None] | None = None
        self.credit = CreditFlow(credit_initial, credit_more_after)  # receiver side, per channel
        self._confirm_out: dict[ChannelFacade, list[int]] = {}  # channel -> seq nos released this batch
        self._nack_out: dict[ChannelFacade, list[int]] = {}  # channel -> seq nos rejected this batch
        self._persists = durable and getattr(self.bq, "confirms_on_disk", False)
        # x-message-deduplication's check before a message is enqueued (None: not asked)
        self._is_duplicate: Callable[[Message], bool] | None = getattr(
            self.bq, "is_duplicate", None)
        # when this queue releases confirms: x-confirm-on, else the broker's confirm_on (§6);
        # a quorum queue keeps and confirms every message as persistent, in persist mode
        # whatever confirm_on says (rabbit_fifo: every enqueue is in the log before it is
        # settled)
        quorum = self.queue_type == "quorum"
        self.confirm_mode = "persist" if quorum else (
            effective.get("x-confirm-on") or confirm_on)
        self.confirms = queue_confirms(self.confirm_mode, self.bq, self._owe_confirm,
                                       self._owe_nack, self._persists, persist_all=quorum)
        self._tracks = self.confirms.tracks_deliveries  # the mode follows every delivery
        self._had_consumers = False  # auto-delete only after a first consumer came and went
        # some message may carry an expiry: check the head before each delivery (a queue
        # that never saw a TTL pays nothing); recovered messages may carry one too
        self._expiring = not self.bq.is_empty()
        self._expiry_timer: asyncio.TimerHandle | None = None  # fires at the head's expiry
        self._expiry_at: int | None = None  # ms since the epoch the timer is set for
        # the x-expires lease (broker/queue_expiry.py)
        self.lease = UnusedLease(loop, lambda: self.cast((UNUSED,)))
        self._apply(effective)
        if self._expiring:  # recovered messages: expire what is due, arm the timer
            loop.call_soon(self.cast, (EXPIRE,))
        self._sync_timer: asyncio.TimerHandle | None = None  # the 200 ms journal sync
        self.deleted = False  # set once deleted; later casts are ignored
        self.message_stats = MessageStats()  # publish/deliver/get/ack counts (management)
        # credit owed to channels, held back while the backing queue is out of store credit
        self._deferred: dict[ChannelFacade, int] = {}
        # our RAM duration to the memory monitor, its targets to us (None: no monitor)
        self.ram: RamReports | None = (
            RamReports(self, memory_monitor, (RAM_DURATION,), (RAM_REPORT,), RAM_TARGET)
            if memory_monitor is not None else None)
        # a busy loop serves this queue's consumers before its publishers (None: never)
        self.bias: ConsumerBias | None = (
            ConsumerBias(loop, self, loop_busy, self._bias_state)
            if loop_busy is not None else None)

    def _apply(self, args: dict) -> None:
        """Take TTL, length limits, overflow, dead-lettering, expiry and mode from the
        effective arguments `args` (at declare, and again whenever the queue's policy
        changes; broker/queue_arguments.py parses them). A new message TTL applies to
        messages enqueued from now on; the x-expires lease restarts when it changes."""
        a = self.settings = parse_arguments(args)
        self.message_ttl: int | None = a.message_ttl  # rabbitmq.com/ttl.html
        if a.message_ttl is not None:
            self._expiring = True
        self._limited = a.limited  # rabbitmq.com/maxlength.html
        self._rejects = a.rejects
        # drop-head is the only overflow that ever drops what is already enqueued; under
        # reject-publish(-dlx) a requeue or a lower policy limit may leave the queue past its
        # limit (rabbit_amqqueue_process maybe_drop_head: a no-op for the rejecting modes)
        self._drops_head = a.limited and not a.rejects
        self.dlx: str | None = a.dlx  # rabbitmq.com/dlx.html
        self.dlrk: str | None = a.dlrk
        # queue expiry (rabbitmq.com/ttl.html#queue-ttl): unused = no consumers, no
        # basic.get, no (re)declare; after a restart the lease starts again from the boot
        self.lease.set(a.expires)
        set_mode = getattr(self.bq, "set_queue_mode", None)
        if set_mode is not None:
            set_mode("lazy" if a.lazy else "default")

    def apply_policy(self, policy: PolicyDef | None,
                     operator_policy: PolicyDef | None = None) -> None:
        """The queue's policy or operator policy changed (set, cleared or another one
        matches now): the new TTL, limits, overflow, dead-lettering, expiry and mode apply
        at once; a lower length limit drops from the head now, as RabbitMQ. The confirm
        mode stays what it was at declare (owed confirms follow the rule they were made
        under)."""
        self.policy = policy
        self.operator_policy = operator_policy
        self._apply(effective_queue_arguments(self.arguments, policy, operator_policy,
                                              self.queue_type))
        if self._drops_head and self.settings.over_limit(self.bq):
            self._drop_head()
        self._flush_confirms()

    # -- mailbox ----------------------------------------------------------------------------
    def handle(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == PUBLISH:
            self._publish(msg[1], msg[2], msg[3])
        elif kind == PUBLISHES:
            # each as its own PUBLISH would be, down to the error boundary
            channel, messages, seqs = msg[1], msg[2], msg[3]
            publish_one = self._publish
            for i, message in enumerate(messages):
                try:
                    publish_one(channel, message, None if seqs is None else seqs[i])
                except Exception as exc:  # noqa: BLE001 - the process boundary (STYLE §6)
                    self.crashed(exc)
        elif kind == ACK:
            tags = self._settle(msg[1], msg[2])
            self.message_stats.ack += len(msg[2])
            if self._tracks:
                self.confirms.on_ack(tags)
            self.bq.ack(tags)
        elif kind == REQUEUE:
            self._requeue(self._settle(msg[1], msg[2]))
        elif kind == DISCARD:  # reject/nack without requeue: dead-lettered as "rejected"
            tags = self._settle(msg[1], msg[2])
            if self._tracks:
                self.confirms.on_discard(tags)
            self._dead_letter(self.bq.discard_pending(tags), "rejected")
        elif kind == UNUSED:
            self._unused_check()
        elif kind == EXPIRE:
            self._expiry_timer = None
            self._expiry_at = None
            self._drop_expired()
        elif kind == BQ_CONFIRMED:  # confirms are drained by after_batch
            if self.bq.needs_resume():  # the next paging pass, or store credit came back
                self.bq.resume()
        elif kind == RAM_DURATION:
            if self.ram is not None and not self.deleted:
                self.ram.tick(self.bq)
        elif kind == RAM_REPORT:
            if self.ram is not None and not self.deleted:
                self.ram.report(self.bq)
        elif kind == RAM_TARGET:
            self.bq.set_ram_duration_target(msg[1])

    def _requeue(self, tags: list[int]) -> None:
        """Pending acks `tags` back to the ready list (reject or nack with requeue, a
        channel closing with them unacked), in their original order, redelivered."""
        if self._tracks:
            self.confirms.on_requeue(tags)
        self.bq.requeue(tags)
        self._expiring = True  # a requeued message may carry an expiry: look again
        # drop-head enforces the limit after a requeue too (3.10.8, checked)
        if self._drops_head and self.settings.over_limit(self.bq):
            self._drop_head()

    def _overflows(self, channel: ChannelFacade | None, size: int) -> bool:
        """reject-publish: would one more message of `size` body bytes from `channel` pass
        a limit?"""
        return self.settings.would_overflow(self.bq, size)

    def after_batch(self) -> None:
        if not self.deleted:
            self._run_deliveries()
            if self._expiring:
                self._drop_expired()
        self.confirms.poll()
        self._flush_confirms()
        if self._deferred and not self.bq.flow_blocked():
            deferred, self._deferred = self._deferred, {}
            for channel, n in deferred.items():
                channel.grant_credit(self, n)
        bias = self.bias
        if bias is not None and not self.deleted:
            bias.check(self.bq.len(), len(self.consumers), self.credit.senders())
        if self.ram is not None and not self.ram.ticking and not self.deleted:
            self.ram.busy()
        if self.federation_watch is not None:
            self.federation_watch(self)

    def _bias_state(self) -> tuple[int, int, int]:
        """(ready messages, consumers, messages delivered so far): what the consumer bias
        checks while it holds."""
        stats = self.message_stats
        return self.bq.len(), len(self.consumers), stats.deliver + stats.deliver_no_ack

    def wants_messages(self) -> bool:
        """Nothing ready and a consumer of priority >= 0 with spare capacity: a federated
        queue takes messages from its upstream only then (rabbit_federation_queue
        consumer_state_changed, active_unfederated)."""
        if not self.bq.is_empty() or self.deleted:
            return False
        top = self.consumers.max_active_priority(channel_ok)
        return top is not None and top >= 0


    def flow_state(self) -> str:
        """"flow" while the backing queue is out of message-store credit, else "running"."""
        return "flow" if self.bq.flow_blocked() else "running"

    # -- queue expiry (x-expires) ------------------------------------------------------------
    def touch(self) -> None:
        """The queue was used (consume, basic.get, declare): x-expires counts from now."""
        self.lease.touch()

    def _unused_check(self) -> None:
        if not self.deleted and self.lease.expired(bool(len(self.consumers))):
            log.info("queue '%s' in vhost '%s' expired after %d ms unused", self.name,
                     self.vhost.name, self.lease.expires)
            # outside this mailbox drain: terminate drains the mailbox itself
            self._loop.call_soon(self.vhost.delete_queue_now, self)

    # -- message TTL (rabbitmq.com/ttl.html) -------------------------------------------------
    def _drop_expired(self) -> None:
        """Drop expired messages from the head (only the head is looked at: a message
        behind an unexpired one waits until it reaches the head, and is dropped then, never
        delivered, as in RabbitMQ), then set the one timer for the new head's expiry."""
        now = int(_wall() * 1000)  # ms since the epoch
        dropped = self.bq.dropwhile(lambda p: p.expiry is not None and p.expiry <= now)
        if dropped:
            self.confirms.on_drop([m.msg_id for m, _p in dropped])
            self._dead_letter(dropped, "expired")
        head = self.bq.peek_props()
        if head is None and self.message_ttl is None:
            self._expiring = False  # empty: only a new message with an expiration re-arms
            return
        expiry = head.expiry if head is not None else None
        if expiry is None:
            return
        if self._expiry_timer is not None:
            if self._expiry_at is not None and self._expiry_at <= expiry:
                return  # an earlier (or the same) check is already due
            self._expiry_timer.cancel()
        self._expiry_at = expiry
        self._expiry_timer = self._loop.call_later(
            max(0.0, (expiry - now) / 1000.0), self.cast, (EXPIRE,))

    def _flush_confirms(self) -> None:
        """Cast the confirms and nacks owed so far, one message per publisher channel."""
        if self._confirm_out:
            out, self._confirm_out = self._confirm_out, {}
            for channel, seqs in out.items():
                channel.cast(("confirm", self, seqs))
        if self._nack_out:
            out, self._nack_out = self._nack_out, {}
            for channel, seqs in out.items():
                channel.cast(("reject", self, seqs))

    def on_mailbox_empty(self) -> None:
        """RabbitMQ syncs the index when the queue's mailbox empties while confirms are
        owed, and at the latest SYNC_INTERVAL later (rabbit_amqqueue_process)."""
        if self.deleted:
            return
        if self.bq.needs_sync():
            self.bq.sync()
        if self._sync_timer is None and self._persists:
            self._sync_timer = self._loop.call_later(SYNC_INTERVAL, self._sync_tick)

    def _sync_tick(self) -> None:
        self._sync_timer = None
        if self.deleted:
            return
        self.bq.sync()  # also makes idle writes durable that no confirm waits for
        if self.bq.needs_sync():
            self._sync_timer = self._loop.call_later(SYNC_INTERVAL, self._sync_tick)

    def _bq_notify(self) -> None:
        """Called by the backing queue, possibly from its fsync worker thread."""
        self._loop.call_soon_threadsafe(self.cast, (BQ_CONFIRMED,))

    def _owe_nack(self, channel: ChannelFacade, seq: int) -> None:
        """Nack `seq` to `channel` at the end of this batch (confirm modes ack, ack-lite)."""
        _add_seq(self._nack_out, channel, seq)

    def _owe_confirm(self, channel: ChannelFacade, seq: int) -> None:
        """Release `seq` to `channel` at the end of this batch (one cast per channel)."""
        _add_seq(self._confirm_out, channel, seq)

    # -- publishing -------------------------------------------------------------------------
    def _publish(self, channel: ChannelFacade | None, message: Message, seq: int | None) -> None:
        if self._is_duplicate is not None and self._is_duplicate(message):
            # x-message-deduplication (broker/dedup/queue.py): not enqueued; its publisher
            # is confirmed, so a retry of a publish that got in succeeds
            if seq is not None:
                self._owe_confirm(channel, seq)  # type: ignore[arg-type]  # seq comes with its channel
            self._credit_back(channel)
            return
        # the MessageProps are made only when needed: not for a message without TTL or
        # confirm that a no-ack consumer takes at once (s1's path)
        expiration = message.expiration
        props: MessageProps | None = None
        if self.message_ttl is not None or expiration is not None:
            now = _wall()
            props = MessageProps(enqueued_at=now)
            try:
                msg_ttl = parse_expiration(expiration)
            except ValueError:  # the channel refused it; a recovered oddity never expires
                msg_ttl = None
            props.expiry = expiry_ms(int(now * 1000), self.message_ttl, msg_ttl)
            self._expiring = True
        bq = self.bq
        if self._rejects and self._limited and self._overflows(channel, len(message.body)):
            # reject-publish: the queue is full; a publisher with confirms gets basic.nack,
            # others lose the message silently (rabbitmq.com/maxlength.html)
            if seq is not None:
                # a seq no comes with its channel: only dead-lettered copies have neither
                self._owe_nack(channel, seq)  # type: ignore[arg-type]
            if self.settings.overflow == "reject-publish-dlx":
                self._dead_letter([(message, props)], "maxlen")
            self._credit_back(channel)
            return
        self.message_stats.publish += 1
        if seq is not None:
            if props is None:
                props = MessageProps(enqueued_at=_wall())
            # a seq no comes with its channel: only dead-lettered copies have neither
            self.confirms.on_publish(channel, message, seq, props)  # type: ignore[arg-type]
        if bq.is_empty() and len(self.consumers):
            consumer = self.consumers.next_ready(channel_ok)
            if consumer is not None:
                tag: int | LiteRef | None  # a LiteRef once an ack-lite mode hands it out
                if consumer.no_ack:
                    tag = None
                    self.message_stats.deliver_no_ack += 1
                    if self._tracks:
                        tag = self.confirms.on_deliver(self, message.msg_id, None,
                                                       consumer.channel)
                    elif seq is not None:  # persist mode: never written
                        self.confirms.on_consumed(message.msg_id)
                else:
                    # ack-lite: a message owing a confirm needs no backing-queue record
                    tag = (self.confirms.deliver_lite(self, message.msg_id, consumer.channel)
                           if self._tracks else None)
                    if tag is None:
                        tag = bq.publish_delivered(message, props if props is not None
                                                   else MessageProps())
                        if self._tracks:
                            tag = self.confirms.on_deliver(self, message.msg_id, tag,
                                                           consumer.channel)
                    consumer.unacked += 1
                    self.message_stats.deliver += 1
                consumer.channel.deliver(self, consumer.tag, message, False, tag)
                self._credit_back(channel)
                return
        if self.message_ttl == 0:
            # x-message-ttl = 0 and no consumer could take it now: expired at once, never
            # enqueued (rabbit_amqqueue_process deliver_or_enqueue, #q{ttl = 0})
            if seq is not None:
                self.confirms.on_drop([message.msg_id])
            self._dead_letter([(message, props)], "expired")
            self._credit_back(channel)
            return
        if props is None:
            props = MessageProps(enqueued_at=_wall())
        bq.publish(message, props)
        if self._drops_head and self.settings.over_limit(self.bq):
            self._drop_head()
        if props.expiry is not None and self._expiry_timer is None:
            self._drop_expired()  # arms the timer for the head
        self._credit_back(channel)

    def _drop_head(self) -> None:
        """drop-head: drop messages from the head (the next to deliver) until no limit is
        passed (their publishers are confirmed in persist mode, nacked in the ack modes)."""
        bq = self.bq
        dropped = []
        while self.settings.over_limit(self.bq):
            fetched = bq.fetch(False)
            if fetched is None:  # pragma: no cover - len said otherwise
                break
            dropped.append((fetched.message, None))
        self.confirms.on_drop([m.msg_id for m, _p in dropped])
        self._dead_letter(dropped, "maxlen")

    def _dead_letter(self, items: list, reason: str) -> None:
        """Republish (message, props) items to the dead letter exchange, if this queue has
        one (a missing exchange drops them, and so does a cycle with no rejection in it:
        broker/dead_letter.py). The copies are new publishes that owe nobody a confirm."""
        dlx = self.dlx
        if dlx is None or not items:
            return
        now = datetime.datetime.now(datetime.UTC)
        vhost = self.vhost
        for message, _props in items:
            dead, keys = dead_letter_message(message, reason, self.name, dlx, self.dlrk, now)
            for queue in dead_letter_targets(vhost, dead, keys, reason):
                queue.cast((PUBLISH, None, dead, None))

    def _credit_back(self, channel: ChannelFacade | None) -> None:
        """One publish of `channel` handled: grant credit every more_after, or hold it back
        while the store's credit is exhausted (credit_flow grant/defer: a slow disk ends by
        pausing the publisher's socket)."""
        if channel is None:  # a dead-lettered copy: no channel waits for credit
            return
        grant = self.credit.ack(channel)
        if grant:
            if self.bq.flow_blocked():
                self._deferred[channel] = self._deferred.get(channel, 0) + grant
            else:
                channel.grant_credit(self, grant)

    # -- synchronous façade operations (called through QueueProcess.call) --------------------
    def purge(self) -> int:
        """queue.purge: drop ready messages (not unacked ones); returns the count. In the
        ack modes their publishers get basic.nack."""
        count = self.bq.purge()
        self.confirms.on_purge()
        self._flush_confirms()
        return count

    def message_count(self) -> int:
        return self.bq.len()

    def consumer_count(self) -> int:
        return len(self.consumers)

    def check_delete(self, if_unused: bool, if_empty: bool) -> None:
        """Raise 406 as RabbitMQ does when queue.delete's conditions fail."""
        where = f"queue '{self.name}' in vhost '{self.vhost.name}'"
        if if_unused and len(self.consumers):
            raise errors.amqp_error(errors.PreconditionFailed, f"{where} in use")
        if if_empty and not self.bq.is_empty():
            raise errors.amqp_error(errors.PreconditionFailed, f"{where} not empty")

    def terminate(self, delete: bool) -> int:
        """Stop the process: cancel consumers (basic.cancel to those that asked), then delete
        or close the backing queue. Returns the ready message count it had."""
        self.deleted = True
        self._drain_all()  # publishes already cast here still owe their confirms
        # a deleted queue releases (persist: rabbit_confirms:remove_queue) or nacks (ack
        # modes) what it still owed
        self.confirms.on_delete()
        self.after_batch()
        count = self.bq.len()
        for consumer in self.consumers:
            consumer.channel.consumer_cancelled(self, consumer.tag)
        if self._sync_timer is not None:
            self._sync_timer.cancel()
            self._sync_timer = None
        self.lease.cancel()
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None
        if self.ram is not None:
            self.ram.stop()
        self._deferred.clear()
        if self.bias is not None:
            self.bias.release()
        if delete:
            self.bq.delete_and_terminate()
        else:
            self.bq.terminate()
        self.stop_process()
        return count

    def _maybe_auto_delete(self) -> bool:
        if self.auto_delete and self._had_consumers and not len(self.consumers) and not self.deleted:
            self.vhost.delete_queue_now(self)
            return True
        return False

    def stats(self) -> dict[str, int]:
        return {**self.bq.stats(), "consumers": len(self.consumers)}


def dead_letter_targets(vhost: QueueVHost, dead: Message, keys: list[str],
                        reason: str) -> list[QueueFacade]:
    """The queues the dead-lettered copy `dead` goes to: those its exchange routes `keys`
    to, less any a cycle with no rejection in it would reach (rabbit_dead_letter
    detect_cycles: dropped; broker/dead_letter.py is_cycle)."""
    headers = dead.headers
    return [queue for queue in vhost.route_keys(dead.exchange, keys, headers, dead)
            if reason == "rejected" or not is_cycle(queue.name, headers)]


def _add_seq(out: dict[ChannelFacade, list[int]], channel: ChannelFacade, seq: int) -> None:
    """out[channel].append(seq), without setdefault's list per call (runs per confirm)."""
    seqs = out.get(channel)
    if seqs is None:
        out[channel] = [seq]
    else:
        seqs.append(seq)


_wall = time.time  # s since the epoch, one call per enqueue
