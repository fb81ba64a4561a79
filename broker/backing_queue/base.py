"""The backing-queue interface every queue process talks to.

Owns: the contract between a queue process (`broker/queue_process.py`) and the structure that
holds its messages, after RabbitMQ's `rabbit_backing_queue` behaviour. Implementations:
`memory.MemoryBackingQueue` (reference and test oracle) and, with storage,
`variable_queue.VariableQueue` (q1, q2, delta, q3, q4; alpha..delta).

Rules every implementation keeps:
- All methods are synchronous and run on the queue process's task; none may block the event loop
  for long (fsync and GC go to worker threads) and none may call back into the queue process
  except through `notify`, which only wakes the queue process's mailbox.
- Sequence ids (`seq_id`) are per queue, strictly increasing from 0 in publish order; they are
  the ack tags (`AckTag = int`), as in RabbitMQ's variable queue.
- Order: `fetch` returns messages in publish order; `requeue` puts messages back at the position
  their seq_id gives (so requeued messages come out in their original order, ahead of newer
  ones), with `redelivered` set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from broker.message import Message

AckTag = int  # the seq_id of a delivered, not yet acked message


@dataclass(slots=True)
class MessageProps:
    """Per-enqueue facts the queue process gives with a message.

    expiry: absolute expiry time in ms since the epoch (per-message or queue TTL), None = never.
    needs_confirming: the publisher waits for a confirm that depends on this queue (persistent
      message, durable queue, `persist` mode): the backing queue reports the msg_id through
      `drain_confirmed` once it is safely written (fsynced).
    lazy_confirm: with needs_confirming, the confirm may wait for the queue's periodic
      index sync (SYNC_INTERVAL) or the message's ack, whichever comes first, instead of
      an fsync at the end of this loop turn: for a publisher that only needs to know when
      it may forget (a delayed exchange's holder), not a client waiting on the wire.
    skip_persist: treat a persistent message as transient (confirm modes `ack`, `ack-lite`:
      the publisher resends what was never confirmed, so nothing is written before delivery;
      under memory pressure it pages to the transient store).
    enqueued_at: when the queue took the message, s since the epoch (RAM only).
    """

    expiry: int | None = None
    needs_confirming: bool = False
    lazy_confirm: bool = False
    # confirm modes `ack`/`ack-lite` (docs/architecture.md §6): a persistent message whose confirm
    # waits for a consumer is kept like a transient one (never written before delivery)
    skip_persist: bool = False
    # when the queue took the message (s since the epoch) for the management API's oldest
    # message age; None for a message read back from disk (the index does not keep it)
    enqueued_at: float | None = None


@dataclass(slots=True)
class Fetched:
    """What `fetch` returns: the message, whether it was delivered before, its ack tag
    (None when fetched with need_ack=False, in which case the message is already gone) and
    its seq_id whichever way it was fetched (a quorum queue keys delivery counts by it)."""

    message: Message
    redelivered: bool
    ack_tag: AckTag | None
    props: MessageProps
    seq_id: int = -1


class BackingQueue(Protocol):
    """The per-queue message container (RabbitMQ `rabbit_backing_queue`).

    Constructed by the queue process as `Impl(name, durable, notify, **options)` where `name` is
    a `(vhost, queue_name)` pair and `notify()` wakes the queue process so it calls
    `drain_confirmed` (used for confirms released from a worker thread's fsync).
    """

    def publish(self, message: Message, props: MessageProps, delivered: bool = False) -> None:
        """Append `message` at the tail. Persistent messages in a durable queue are written now
        (index always; message store only when larger than `queue_index_embed_msgs_below`)."""

    def publish_delivered(self, message: Message, props: MessageProps) -> AckTag:
        """Record `message` as delivered straight to a consumer (the queue was empty and a
        consumer had capacity) and return its ack tag; it is never in the ready list."""

    def fetch(self, need_ack: bool) -> Fetched | None:
        """Remove the head message; with need_ack it moves to the pending-ack set under its
        ack tag. None when the queue holds no ready message."""

    def ack(self, ack_tags: Iterable[AckTag]) -> list[bytes]:
        """Forget acknowledged messages (index ack entries, store reference drops); returns
        their msg_ids. Unknown tags are ignored (the channel validates tags)."""

    def requeue(self, ack_tags: Iterable[AckTag]) -> None:
        """Return pending-ack messages to the ready list in seq_id order, marked redelivered."""

    def discard_pending(self, ack_tags: Iterable[AckTag]) -> list[tuple[Message, MessageProps]]:
        """Drop pending-ack messages as if acked and hand them back (for dead-lettering a
        rejected message); returns (message, props) pairs in seq_id order."""

    def dropwhile(
        self, pred: Callable[[MessageProps], bool]
    ) -> list[tuple[Message, MessageProps]]:
        """Remove ready messages from the head while `pred(props)` is true (TTL expiry);
        returns what was removed, in order."""

    def peek_props(self) -> MessageProps | None:
        """Props of the head ready message, or None if there is none (TTL checks)."""

    def peek(self, offset: int, count: int) -> list[tuple[Message, bool]]:
        """Up to `count` ready messages from position `offset` (0 = the head) in delivery
        order, as (message, redelivered), leaving the queue unchanged (the management API's
        browse). Costs O(offset + count) plus the index segments they sit in."""

    def purge(self) -> int:
        """Drop every ready message (not pending acks); returns how many."""

    def purge_acks(self) -> None:
        """Forget every pending-ack message (queue deletion)."""

    def len(self) -> int:
        """Number of ready messages."""

    def is_empty(self) -> bool:
        """True when no message is ready."""

    def depth(self) -> int:
        """Ready messages plus pending acks."""

    def ready_bytes(self) -> int:
        """Body bytes of the ready messages (not pending acks): what `x-max-length-bytes`
        limits (RabbitMQ's `message_bytes_ready`)."""

    def drain_confirmed(self) -> list[bytes]:
        """msg_ids published with needs_confirming that are now safely on disk; each id is
        returned once."""

    def needs_sync(self) -> bool:
        """True when `sync` has work (unsynced writes owed to publishers)."""

    def sync(self) -> None:
        """Start making written data durable (the 200 ms / mailbox-empty journal sync); may
        finish on a worker thread and then call `notify`."""

    def set_ram_duration_target(self, duration: float | None) -> None:
        """Desired seconds of messages to keep in RAM (None = infinity) as the memory monitor
        asks; the queue pages messages to disk to meet it."""

    def ram_duration(self) -> float | None:
        """Seconds of traffic currently held in RAM (None = infinity, e.g. no traffic)."""

    def needs_resume(self) -> bool:
        """Paging stopped short (its per-pass limit) or message-store credit came back: the
        queue process calls `resume` on its next mailbox turn (woken through `notify`)."""

    def resume(self) -> None:
        """Run the next paging pass (RabbitMQ's `resume` after a credit bump)."""

    def flow_blocked(self) -> bool:
        """Out of credit towards the message store: the queue process must hold back the
        credit it owes publishing channels until this is False (credit_flow deferral)."""

    def stats(self) -> dict[str, int]:
        """Counters for management/tests: at least `len`, `pending_acks`, `ram_msgs`,
        `persistent`, `bytes`; a variable queue adds `q1`..`q4` and `delta`."""

    def terminate(self) -> None:
        """Clean shutdown: make everything durable that should survive, write recovery terms."""

    def delete_and_terminate(self) -> None:
        """The queue is deleted: remove all its messages and on-disk state."""
