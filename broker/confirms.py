"""Publisher-confirm bookkeeping for one channel (RabbitMQ `rabbit_confirms.erl`).

Owns: which `msg_seq_no`s still wait for which queues, and turning released/rejected seq nos
into basic.ack/basic.nack frames batched with `multiple` (docs/architecture.md §6). Pure: the channel
calls it when it routes a publish and when queues release or reject messages; time is not
involved; this tracker only counts releases. Source: rabbitmq.com/confirms.html
("Publisher Confirms").

The confirm *modes* are strategies the queue process holds, one per queue (`queue_confirms`):
`PersistConfirms` (RabbitMQ), `AckConfirms` (the paper §3.1), `AckLiteConfirms` (§3.2). The
queue calls them at publish, delivery, ack, requeue, discard, purge and deletion and never
tests a mode's name; they release or nack through two callbacks the queue batches per channel.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from broker.facades import LiteRef

if TYPE_CHECKING:
    from broker.backing_queue.base import BackingQueue, MessageProps
    from broker.facades import ChannelFacade
    from broker.message import Message

CONFIRM_MODES = ("persist", "ack", "ack-lite")


class ConfirmTracker:
    """msg_seq_no → the queue still to release it, or the set of queues when several.

    `next_seq_no()` numbers publishes from 1 after confirm.select. `track(seq, queues)` records
    a routed publish (an empty set confirms at once: unroutable messages are acked).
    `release(queue, seqs)` / `reject(queue, seqs)` come from queues; a seq is acked once every
    queue released it and nacked as soon as one queue rejects it. `take()` returns the frames
    owed as `[(is_ack, delivery_tag, multiple)]`, nacks first, acks batched: one
    multiple=true ack up to the lowest still-pending seq no, the rest singly.
    """

    def __init__(self) -> None:
        self._seq = 0  # last msg_seq_no handed out
        # seq -> the queue yet to release it (one queue: most publishes, no set to build)
        # or the set of queues (several); in seq order
        self._pending: dict[int, Any] = {}
        self._acks: list[int] = []  # seqs confirmed, not yet sent
        self.acked_total = 0  # seqs confirmed with basic.ack so far (management stats)
        self._nacks: list[int] = []  # seqs rejected, not yet sent

    def next_seq_no(self) -> int:
        self._seq += 1
        return self._seq

    def skip_seq_nos(self, n: int) -> None:
        """Hand out the next `n` seq nos at once (a run of publishes: next_seq_no() + 1 ..)."""
        self._seq += n

    def track(self, seq: int, queues: Iterable[Hashable]) -> None:
        qs = set(queues)
        if len(qs) == 1:
            self._pending[seq] = next(iter(qs))
        elif qs:
            self._pending[seq] = qs
        else:
            self._acks.append(seq)

    def track_run(self, first: int, n: int, queues: Sequence[Hashable]) -> None:
        """`track` for seqs first .. first + n - 1, all routed to `queues`."""
        if len(queues) == 1:
            self._pending.update(dict.fromkeys(range(first, first + n), queues[0]))
        else:
            for seq in range(first, first + n):
                self.track(seq, queues)

    def release(self, queue: Hashable, seqs: Iterable[int]) -> None:
        pending = self._pending
        acks = self._acks
        for seq in seqs:
            qs = pending.get(seq)
            if qs is queue:
                del pending[seq]
                acks.append(seq)
            elif qs.__class__ is set:
                qs.discard(queue)
                if not qs:
                    del pending[seq]
                    acks.append(seq)

    def reject(self, queue: Hashable, seqs: Iterable[int]) -> None:
        for seq in seqs:
            if self._pending.pop(seq, None) is not None:
                self._nacks.append(seq)

    def queue_down(self, queue: Hashable) -> None:
        """The queue is gone (deleted): it will never release; treat as released, as
        RabbitMQ does for a deleted queue in `persist` mode."""
        self.release(queue, [s for s, qs in self._pending.items()
                             if qs is queue or (qs.__class__ is set and queue in qs)])

    def queue_crashed(self, queue: Hashable) -> None:
        """The queue's process died (its worker process, broker/workers/): what it had not
        confirmed is nacked, as rabbit_channel does for a queue that exits abnormally."""
        self.reject(queue, [s for s, qs in self._pending.items()
                            if qs is queue or (qs.__class__ is set and queue in qs)])

    def has_output(self) -> bool:
        return bool(self._acks or self._nacks)

    def take(self) -> list[tuple[bool, int, bool]]:
        out: list[tuple[bool, int, bool]] = [(False, s, False) for s in sorted(self._nacks)]
        self._nacks.clear()
        if self._acks:
            acks = sorted(self._acks)
            self._acks.clear()
            self.acked_total += len(acks)
            lowest_pending = next(iter(self._pending), None)
            if lowest_pending is None:
                below, rest = acks, []
            else:
                i = 0
                while i < len(acks) and acks[i] < lowest_pending:
                    i += 1
                below, rest = acks[:i], acks[i:]
            if len(below) == 1:
                out.append((True, below[0], False))
            elif below:
                out.append((True, below[-1], True))
            out.extend((True, s, False) for s in rest)
        return out

    @property
    def unconfirmed(self) -> int:
        return len(self._pending)


# --- confirm modes: when a queue releases a publisher's confirm (docs/architecture.md §6) ----------

QUEUE_GONE = "queue_gone"  # channel mailbox: (QUEUE_GONE, queue) nack its ack-lite refs
Owe = Callable[["ChannelFacade", int], None]  # (publisher channel, msg_seq_no): ack / nack it this batch


class QueueConfirms(Protocol):
    """What the queue process calls on its confirm mode (one per queue). The queue calls
    on_deliver, on_ack, on_discard and on_requeue only when `tracks_deliveries`, and
    on_consumed only when it does not (the persist mode)."""

    tracks_deliveries: bool

    def on_publish(self, channel: ChannelFacade, message: Message, seq: int,
                   props: MessageProps) -> None: ...

    def on_deliver(self, queue: Hashable, msg_id: bytes, ack_tag: int | None,
                   channel: ChannelFacade) -> int | LiteRef | None: ...

    def deliver_lite(self, queue: Hashable, msg_id: bytes,
                     channel: ChannelFacade) -> LiteRef | None: ...

    def on_ack(self, ack_tags: list[int]) -> None: ...

    def on_discard(self, ack_tags: list[int]) -> None: ...

    def on_requeue(self, ack_tags: list[int]) -> None: ...

    def on_consumed(self, msg_id: bytes) -> None: ...

    def on_drop(self, msg_ids: list[bytes]) -> None: ...

    def on_purge(self) -> None: ...

    def on_delete(self) -> None: ...

    def poll(self) -> None: ...


class PersistConfirms:
    """`persist` (RabbitMQ's rule): a transient message, or any message in a queue that does
    not persist, is released on enqueue; a persistent message in a durable queue once the
    backing queue has written and fsynced it, or once consumers acked it if that comes first
    (the backing queue reports both through `drain_confirmed`). A deleted queue releases what
    it still owed (rabbit_confirms:remove_queue). rabbitmq.com/confirms.html."""

    tracks_deliveries = False  # the queue need not call on_deliver/on_ack/on_requeue/...

    def __init__(self, bq: BackingQueue, owe: Owe, nack: Owe, persists: bool,
                 persist_all: bool = False) -> None:
        self._bq = bq  # the queue's backing queue (drain_confirmed)
        self._owe = owe  # release (channel, seq) at the end of the queue's batch
        self._persists = persists  # durable queue on a backing queue that confirms on disk
        # every message counts as persistent (a quorum queue): confirmed once on disk
        self._persist_all = persist_all
        # msg_id -> [(channel, msg_seq_no)] waiting for the backing queue's fsync
        self._unconfirmed: dict[bytes, list[tuple[ChannelFacade, int]]] = {}

    def on_publish(self, channel: ChannelFacade, message: Message, seq: int,
                   props: MessageProps) -> None:
        """A publish that owes `channel` a confirm for `seq` was enqueued here."""
        if self._persists and (message.persistent or self._persist_all):
            props.needs_confirming = True
            # a publisher that only forgets on confirm (a delayed exchange's holder) lets the
            # confirm ride the queue's periodic sync, or the ack, not a per-turn fsync
            props.lazy_confirm = getattr(channel, "lazy_confirms", False)
            self._unconfirmed.setdefault(message.msg_id, []).append((channel, seq))
        else:
            self._owe(channel, seq)

    # the delivery callbacks: nothing to do in this mode (the queue skips them, as
    # tracks_deliveries says; they exist so every mode has the QueueConfirms shape)
    def on_deliver(self, queue: Hashable, msg_id: bytes, ack_tag: int | None,
                   channel: ChannelFacade) -> int | LiteRef | None:
        return ack_tag

    def deliver_lite(self, queue: Hashable, msg_id: bytes,
                     channel: ChannelFacade) -> LiteRef | None:
        return None

    def on_ack(self, ack_tags: list[int]) -> None:
        pass

    def on_discard(self, ack_tags: list[int]) -> None:
        pass

    def on_requeue(self, ack_tags: list[int]) -> None:
        pass

    def poll(self) -> None:
        """After each batch: release what the backing queue made safe."""
        if self._unconfirmed:
            unconfirmed = self._unconfirmed
            for msg_id in self._bq.drain_confirmed():
                for channel, seq in unconfirmed.pop(msg_id, ()):
                    self._owe(channel, seq)

    def on_purge(self) -> None:
        """Purged messages keep the rule above (RabbitMQ confirms them once written)."""

    def on_consumed(self, msg_id: bytes) -> None:
        """The message went straight to a consumer without acks and was never enqueued:
        nothing will be written, so it is released now (RabbitMQ confirms such a message
        at once, rabbit_amqqueue_process deliver_or_enqueue)."""
        for channel, seq in self._unconfirmed.pop(msg_id, ()):
            self._owe(channel, seq)

    def on_drop(self, msg_ids: list[bytes]) -> None:
        """Messages dropped by TTL or by a length limit's drop-head: released as if handled
        (RabbitMQ confirms a message that expired or was dropped; one never enqueued,
        x-message-ttl 0, is released here too)."""
        for msg_id in msg_ids:
            for channel, seq in self._unconfirmed.pop(msg_id, ()):
                self._owe(channel, seq)

    def on_delete(self) -> None:
        for refs in self._unconfirmed.values():
            for channel, seq in refs:
                self._owe(channel, seq)
        self._unconfirmed.clear()


class AckConfirms:
    """`ack` (the paper §3.1): released when a consumer acked the message (auto-ack: when it
    is delivered); nacked when it leaves the queue any other way (reject/nack without requeue,
    purge, deletion; later TTL expiry and max-length drop); a requeue keeps it pending. The
    message is not written before delivery (`MessageProps.skip_persist`). Full pending-ack
    bookkeeping stays, so reject, nack, requeue and recover work as usual."""

    tracks_deliveries = True

    def __init__(self, bq: BackingQueue, owe: Owe, nack: Owe, persists: bool) -> None:
        self._bq = bq
        self._owe = owe
        self._nack = nack
        self._ready: dict[bytes, tuple[ChannelFacade, int]] = {}  # msg_id -> (channel, seq), queued
        self._pending: dict[int, tuple[bytes, ChannelFacade, int]] = {}  # ack_tag -> (msg_id, ch, seq)

    def on_publish(self, channel: ChannelFacade, message: Message, seq: int,
                   props: MessageProps) -> None:
        props.skip_persist = True
        self._ready[message.msg_id] = (channel, seq)

    def on_deliver(self, queue: Hashable, msg_id: bytes, ack_tag: int | None,
                   channel: ChannelFacade) -> int | LiteRef | None:
        """A message was handed to the consumer on `channel` under `ack_tag` (None:
        auto-ack). Returns the ack tag the consumer's channel keeps."""
        ref = self._ready.pop(msg_id, None)
        if ref is not None:
            if ack_tag is None:
                self._owe(*ref)
            else:
                self._pending[ack_tag] = (msg_id, *ref)
        return ack_tag

    def deliver_lite(self, queue: Hashable, msg_id: bytes,
                     channel: ChannelFacade) -> LiteRef | None:
        """None: in `ack` mode a delivery that needs an ack always gets a backing-queue
        record (`ack-lite` overrides this)."""
        return None

    def _take_pending(self, ack_tags: list[int]) -> list[tuple[bytes, ChannelFacade, int]]:
        """Remove and return the (msg_id, channel, seq) owed for these ack tags."""
        pending = self._pending
        if not pending:
            return []
        taken = (pending.pop(tag, None) for tag in ack_tags)
        return [entry for entry in taken if entry is not None]

    def on_consumed(self, msg_id: bytes) -> None:
        """Only the persist mode needs this (the queue calls it there alone): here the
        delivery itself released the confirm (on_deliver with no ack tag)."""

    def on_ack(self, ack_tags: list[int]) -> None:
        for _msg_id, channel, seq in self._take_pending(ack_tags):
            self._owe(channel, seq)

    def on_discard(self, ack_tags: list[int]) -> None:
        for _msg_id, channel, seq in self._take_pending(ack_tags):
            self._nack(channel, seq)

    def on_requeue(self, ack_tags: list[int]) -> None:
        for msg_id, channel, seq in self._take_pending(ack_tags):
            self._ready[msg_id] = (channel, seq)

    def poll(self) -> None:
        """Nothing waits for the disk in this mode."""

    def on_purge(self) -> None:
        for channel, seq in self._ready.values():
            self._nack(channel, seq)
        self._ready.clear()

    def on_drop(self, msg_ids: list[bytes]) -> None:
        """Messages dropped by TTL or drop-head never reached a consumer: their publishers
        get nacks."""
        ready = self._ready
        for msg_id in msg_ids:
            ref = ready.pop(msg_id, None)
            if ref is not None:
                self._nack(*ref)

    def on_delete(self) -> None:
        self.on_purge()
        for _msg_id, channel, seq in self._pending.values():
            self._nack(channel, seq)
        self._pending.clear()


class AckLiteConfirms(AckConfirms):
    """`ack-lite` (the paper §3.2): as `ack`, but the queue keeps no pending-ack record for a
    message that owes a confirm: the consumer's channel holds a `LiteRef` and its ack releases
    the confirm straight to the publisher's channel. So such a message cannot be requeued: a
    consumer's reject/nack without requeue or its channel's loss nacks the publisher, and
    requeue=true is refused with 540 NOT_IMPLEMENTED (docs/architecture.md §6)."""

    def __init__(self, bq: BackingQueue, owe: Owe, nack: Owe, persists: bool) -> None:
        super().__init__(bq, owe, nack, persists)
        # consumer channels that hold LiteRefs of this queue (per channel, not per delivery):
        # told when the queue is deleted so they nack them (CONSUMER_QUEUE_GONE)
        self._lite_channels: set[ChannelFacade] = set()
        self._queue: Hashable | None = None  # the queue process (the LiteRefs' key), set at delivery

    def on_deliver(self, queue: Hashable, msg_id: bytes, ack_tag: int | None,
                   channel: ChannelFacade) -> int | LiteRef | None:
        ref = self._ready.pop(msg_id, None)
        if ref is None:
            return ack_tag
        if ack_tag is None:
            self._owe(*ref)
            return None
        self._bq.ack([ack_tag])  # forget the backing queue's pending record at once
        self._lite_channels.add(channel)
        self._queue = queue
        return LiteRef(ref[0], ref[1], queue)

    def deliver_lite(self, queue: Hashable, msg_id: bytes,
                     channel: ChannelFacade) -> LiteRef | None:
        """A message that owes a confirm goes from its publish straight to a consumer that
        acks: the consumer's channel gets its LiteRef and the backing queue never records
        it (on_deliver's record-then-forget, without the record). None when the message owes
        no confirm: the queue records the delivery as usual."""
        ref = self._ready.pop(msg_id, None)
        if ref is None:
            return None
        self._lite_channels.add(channel)
        self._queue = queue
        return LiteRef(ref[0], ref[1], queue)

    def on_delete(self) -> None:
        """Ready messages are nacked here; unacked deliveries by their consumers' channels,
        which the queue tells it is gone (a later ack of theirs is then harmless)."""
        super().on_delete()
        for channel in self._lite_channels:
            channel.cast((QUEUE_GONE, self._queue))
        self._lite_channels.clear()


QUEUE_MODES: dict[str, type[PersistConfirms] | type[AckConfirms]] = {
    "persist": PersistConfirms, "ack": AckConfirms, "ack-lite": AckLiteConfirms,
}


def queue_confirms(mode: str, bq: BackingQueue, owe: Owe, nack: Owe,
                   persists: bool, persist_all: bool = False) -> QueueConfirms:
    """The queue-side strategy for confirm mode `mode` (one of CONFIRM_MODES); with
    `persist_all` (a quorum queue, `persist` mode only) every message is confirmed once it
    is on disk, whatever its delivery_mode."""
    if persist_all:
        return PersistConfirms(bq, owe, nack, persists, persist_all=True)
    return QUEUE_MODES[mode](bq, owe, nack, persists)
