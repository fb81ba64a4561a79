"""Priority queues: one backing queue per priority, as RabbitMQ's `rabbit_priority_queue.erl`.

Owns: the mapping of a queue with `x-max-priority` = P onto P + 1 inner backing queues (one per
priority 0..P), message priority -> inner queue, and combined ack tags. The inner queues are
ordinary `base.BackingQueue`s (variable queues in the broker), so paging, persistence,
recovery and confirms work per priority exactly as for a plain queue; nothing here touches
disk itself. Its only caller is the queue process.

Rules (rabbitmq.com/priority.html, RabbitMQ 3.10):
- a message's priority is its `priority` property; none counts as 0, above P counts as P;
- `fetch` takes from the highest non-empty priority, FIFO within a priority; requeued
  messages go back into their own priority at their original position;
- `dropwhile` (TTL expiry) works from the highest priority down and stops at the first
  priority whose head stays (rabbit_priority_queue `dropwhile` / `find2`), so expiry is
  enforced at the head of delivery order as for a plain queue;
- a drop-head length limit drops from the head of delivery order, i.e. the highest priority
  first, as RabbitMQ does (`drop`).
Each inner queue of a durable queue keeps its own index directory, named after
`inner_queue_name(queue, priority)` (RabbitMQ mutates the queue name the same way), so the
server must keep those directories at boot: `index_queue_names`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from broker.backing_queue.base import AckTag, BackingQueue, Fetched, MessageProps
from broker.message import Message

MAX_SUPPORTED_PRIORITY = 255  # rabbit_priority_queue ?MAX_SUPPORTED_PRIORITY
_SHIFT = 8  # combined ack tag = inner tag << 8 | priority (priority <= 255 fits 8 bits)
_MASK = (1 << _SHIFT) - 1


def max_priority(arguments: dict) -> int | None:
    """The queue's `x-max-priority` if it makes a priority queue (an integer 1..255), else None.
    (0 gives a single priority, which behaves as a plain queue; out-of-range values are
    refused with 406 at declare by the vhost.)"""
    value = arguments.get("x-max-priority")
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 255:
        return value
    return None


def inner_queue_name(queue: str, priority: int) -> str:
    """Name under which the inner queue of `priority` keeps its index: the queue name, a NUL
    and the priority (RabbitMQ's `mutate_name`: `<<Name/binary, 0, P:8>>`). A NUL cannot
    occur in an AMQP queue name the vhost accepts, so it never clashes with a real queue."""
    return f"{queue}\x00{priority}"


def index_queue_names(queue: str, arguments: dict) -> list[str]:
    """Names whose index directories a durable queue with these arguments owns: its own name
    for a plain queue, one inner name per priority for a priority queue."""
    top = max_priority(arguments)
    if top is None:
        return [queue]
    return [inner_queue_name(queue, p) for p in range(top + 1)]


class PriorityBackingQueue:
    """`base.BackingQueue` over one inner backing queue per priority 0..max_priority.

    Args: name = (vhost, queue); durable; notify (passed to every inner queue); max_priority
    (1..255); make_inner(name, durable, notify) builds one inner queue for the mutated name.
    Ack tags are `inner_tag << 8 | priority` (ints, as `base.AckTag`).
    Source: rabbit_priority_queue.erl (RabbitMQ 3.10).
    """

    def __init__(
        self,
        name: tuple[str, str],
        durable: bool,
        notify: Callable[[], None] | None,
        *,
        max_priority: int,
        make_inner: Callable[[tuple[str, str], bool, Callable[[], None] | None], BackingQueue],
    ) -> None:
        if not 1 <= max_priority <= MAX_SUPPORTED_PRIORITY:
            raise ValueError(f"max_priority {max_priority} not in 1..255")
        self.name = name  # (vhost, queue)
        self.durable = durable
        self.max_priority = max_priority  # highest priority; higher ones count as this
        # index p holds priority p's messages
        self.inner: list[BackingQueue] = [
            make_inner((name[0], inner_queue_name(name[1], p)), durable, notify)
            for p in range(max_priority + 1)
        ]
        self.confirms_on_disk = getattr(self.inner[0], "confirms_on_disk", False)
        # no priority above this has a ready message (a bound the scans start from, lowered
        # as they find empty priorities, raised by publish/requeue): fetch and is_empty
        # cost O(1) while the priorities in use stay the same
        self._top = max_priority

    def _priority(self, message: Message) -> int:
        p = message.priority
        if not p:
            return 0
        return p if p < self.max_priority else self.max_priority

    def _split(self, ack_tags: Iterable[AckTag]) -> dict[int, list[AckTag]]:
        """Combined tags grouped by priority, highest first."""
        tags = list(ack_tags)
        if not tags:
            return {}
        first = tags[0] & _MASK
        if all(tag & _MASK == first for tag in tags):  # the usual case: one priority
            return {first: [tag >> _SHIFT for tag in tags]}
        groups: dict[int, list[AckTag]] = {}
        for tag in tags:
            groups.setdefault(tag & _MASK, []).append(tag >> _SHIFT)
        return dict(sorted(groups.items(), reverse=True))

    def _head(self) -> int | None:
        """Highest priority with a ready message, or None."""
        inner = self.inner
        p = self._top
        while p >= 0:
            if not inner[p].is_empty():
                self._top = p
                return p
            p -= 1
        self._top = 0
        return None

    # -- publishing ------------------------------------------------------------------------
    def publish(self, message: Message, props: MessageProps, delivered: bool = False) -> None:
        """Append to the tail of the message's priority."""
        p = self._priority(message)
        self.inner[p].publish(message, props, delivered)
        if p > self._top:
            self._top = p

    def publish_delivered(self, message: Message, props: MessageProps) -> AckTag:
        """Straight to a consumer: a pending ack in the message's priority."""
        p = self._priority(message)
        return self.inner[p].publish_delivered(message, props) << _SHIFT | p

    # -- consuming -------------------------------------------------------------------------
    def fetch(self, need_ack: bool) -> Fetched | None:
        """Head of the highest non-empty priority."""
        p = self._head()
        if p is None:
            return None
        got = self.inner[p].fetch(need_ack)
        if got is not None:
            got.seq_id = got.seq_id << _SHIFT | p
            if got.ack_tag is not None:
                got.ack_tag = got.ack_tag << _SHIFT | p
        return got

    def ack(self, ack_tags: Iterable[AckTag]) -> list[bytes]:
        """Forget acked messages in each priority; their msg_ids."""
        out: list[bytes] = []
        for p, tags in self._split(ack_tags).items():
            out += self.inner[p].ack(tags)
        return out

    def requeue(self, ack_tags: Iterable[AckTag]) -> None:
        """Back into each message's own priority, at its original position."""
        for p, tags in self._split(ack_tags).items():
            self.inner[p].requeue(tags)
            if p > self._top:
                self._top = p

    def discard_pending(self, ack_tags: Iterable[AckTag]) -> list[tuple[Message, MessageProps]]:
        """Drop pending acks; (message, props) highest priority first, publish order within."""
        out: list[tuple[Message, MessageProps]] = []
        for p, tags in self._split(ack_tags).items():
            out += self.inner[p].discard_pending(tags)
        return out

    def dropwhile(
        self, pred: Callable[[MessageProps], bool]
    ) -> list[tuple[Message, MessageProps]]:
        """From the highest priority down, drop heads while `pred` holds; stop at the first
        priority whose head stays (rabbit_priority_queue `dropwhile`)."""
        out: list[tuple[Message, MessageProps]] = []
        for p in range(self._top, -1, -1):  # nothing is ready above _top
            bq = self.inner[p]
            out += bq.dropwhile(pred)
            if not bq.is_empty():
                break
        return out

    def peek_props(self) -> MessageProps | None:
        """Props of the next message `fetch` would return."""
        p = self._head()
        return None if p is None else self.inner[p].peek_props()

    def peek(self, offset: int, count: int) -> list[tuple[Message, bool]]:
        """Ready messages in delivery order: the highest priority's first."""
        out: list[tuple[Message, bool]] = []
        for p in range(self.max_priority, -1, -1):
            bq = self.inner[p]
            n = bq.len()
            if offset >= n:
                offset -= n
                continue
            out += bq.peek(offset, count - len(out))
            offset = 0
            if len(out) >= count:
                break
        return out

    # -- whole queue -----------------------------------------------------------------------
    def purge(self) -> int:
        return sum(bq.purge() for bq in self.inner)

    def purge_acks(self) -> None:
        for bq in self.inner:
            bq.purge_acks()

    def len(self) -> int:
        return sum(bq.len() for bq in self.inner)

    def is_empty(self) -> bool:
        return self._head() is None

    def depth(self) -> int:
        return sum(bq.depth() for bq in self.inner)

    def ready_bytes(self) -> int:
        return sum(bq.ready_bytes() for bq in self.inner)

    def drain_confirmed(self) -> list[bytes]:
        out: list[bytes] = []
        for bq in self.inner:
            out += bq.drain_confirmed()
        return out

    def needs_sync(self) -> bool:
        return any(bq.needs_sync() for bq in self.inner)

    def sync(self) -> None:
        for bq in self.inner:
            bq.sync()

    def set_queue_mode(self, mode: str) -> None:
        for bq in self.inner:
            set_mode = getattr(bq, "set_queue_mode", None)
            if set_mode is not None:
                set_mode(mode)

    def set_ram_duration_target(self, duration: float | None) -> None:
        for bq in self.inner:
            bq.set_ram_duration_target(duration)

    def ram_duration(self) -> float | None:
        """The shortest of the inner queues' durations (None = infinity), as
        rabbit_priority_queue's `ram_duration` takes the minimum."""
        durations = [d for d in (bq.ram_duration() for bq in self.inner) if d is not None]
        return min(durations) if durations else None

    def needs_resume(self) -> bool:
        return any(bq.needs_resume() for bq in self.inner)

    def resume(self) -> None:
        for bq in self.inner:
            if bq.needs_resume():
                bq.resume()

    def flow_blocked(self) -> bool:
        return any(bq.flow_blocked() for bq in self.inner)

    def stats(self) -> dict[str, int]:
        """The inner queues' counters summed (target_ram_count: the first queue's), plus
        `max_priority`."""
        total: dict[str, int] = {}
        for bq in self.inner:
            for key, value in bq.stats().items():
                total[key] = total.get(key, 0) + value
        first: dict[str, Any] = self.inner[0].stats()
        if "target_ram_count" in first:
            total["target_ram_count"] = first["target_ram_count"]
        total["max_priority"] = self.max_priority
        return total

    def terminate(self) -> None:
        for bq in self.inner:
            bq.terminate()

    def delete_and_terminate(self) -> None:
        for bq in self.inner:
            bq.delete_and_terminate()
