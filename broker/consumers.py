"""The consumer set of one queue (RabbitMQ `rabbit_queue_consumers.erl`).

Owns: consumers of a queue, in priority groups with round-robin inside each group, and each
consumer's own prefetch accounting. Pure: the queue process asks `next_ready()` for the consumer
to deliver to and tells it about deliveries and acks. Higher `x-priority` consumers get messages
while they have capacity (rabbitmq.com/consumer-priority.html); equal priorities share
round-robin. Never touches channels beyond calling the predicate it is given.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.facades import ChannelFacade


class Consumer:
    """One basic.consume on a queue.

    `channel` is the consuming channel's façade (it assigns delivery tags); `prefetch` is the
    per-consumer limit (0 = none), `unacked` the ack-required deliveries it holds.
    """

    __slots__ = ("tag", "channel", "no_ack", "exclusive", "priority", "prefetch", "unacked",
                 "arguments")

    def __init__(self, tag: str, channel: ChannelFacade, no_ack: bool, exclusive: bool = False,
                 priority: int = 0, prefetch: int = 0, arguments: dict | None = None) -> None:
        self.tag = tag  # consumer_tag, unique per channel
        self.channel = channel  # the channel that owns the consumer
        self.no_ack = no_ack  # deliveries need no ack
        self.exclusive = exclusive  # basic.consume exclusive=true
        self.priority = priority  # x-priority argument
        self.prefetch = prefetch  # per-consumer prefetch_count (0 = unlimited)
        self.unacked = 0  # ack-required deliveries outstanding
        self.arguments = arguments or {}  # as given, for equivalence/inspection

    def has_capacity(self) -> bool:
        return self.no_ack or self.prefetch == 0 or self.unacked < self.prefetch


class ConsumerSet:
    """Consumers grouped by priority (highest first), round-robin within a group.

    With `single_active` (the queue argument x-single-active-consumer,
    rabbitmq.com/consumers.html#single-active-consumer) only the earliest registered consumer
    still subscribed gets messages; when it goes, the next in registration order takes over.
    Consumer priorities do not change which one is active (verified on RabbitMQ 3.10.8: a
    priority-10 consumer registered second stayed idle until the first was cancelled).
    """

    def __init__(self, single_active: bool = False) -> None:
        self.single_active = single_active  # x-single-active-consumer
        self._groups: dict[int, deque[Consumer]] = {}  # priority -> consumers in rr order
        self._priorities: list[int] = []  # sorted ascending; iterate reversed
        self._by_key: dict[tuple[int, str], Consumer] = {}  # (id(channel), tag) -> consumer
        self._only: Consumer | None = None  # the consumer when there is exactly one

    def __len__(self) -> int:
        return len(self._by_key)

    def __iter__(self) -> Iterator[Consumer]:
        return iter(list(self._by_key.values()))

    def add(self, consumer: Consumer) -> None:
        group = self._groups.get(consumer.priority)
        if group is None:
            group = self._groups[consumer.priority] = deque()
            bisect.insort(self._priorities, consumer.priority)
        group.append(consumer)
        self._by_key[(id(consumer.channel), consumer.tag)] = consumer
        self._only = consumer if len(self._by_key) == 1 else None

    def get(self, channel: ChannelFacade, tag: str) -> Consumer | None:
        return self._by_key.get((id(channel), tag))

    def remove(self, channel: ChannelFacade, tag: str) -> Consumer | None:
        consumer = self._by_key.pop((id(channel), tag), None)
        if consumer is not None:
            group = self._groups[consumer.priority]
            group.remove(consumer)
            if not group:
                del self._groups[consumer.priority]
                self._priorities.remove(consumer.priority)
            by_key = self._by_key
            self._only = next(iter(by_key.values())) if len(by_key) == 1 else None
        return consumer

    def remove_channel(self, channel: ChannelFacade) -> list[Consumer]:
        gone = [c for c in self._by_key.values() if c.channel is channel]
        for c in gone:
            self.remove(channel, c.tag)
        return gone

    def active(self) -> Consumer | None:
        """The single active consumer: the earliest registered one still here (None if
        there are no consumers). Meaningful with `single_active`."""
        return next(iter(self._by_key.values()), None)

    def has_exclusive(self) -> bool:
        return any(c.exclusive for c in self._by_key.values())

    def max_active_priority(self, channel_ok: Callable[[Consumer], bool]) -> int | None:
        """The highest priority of a consumer that could take a message now (capacity and
        `channel_ok`), or None (rabbit_queue_consumers max_active_priority)."""
        for priority in reversed(self._priorities):
            for consumer in self._groups[priority]:
                if consumer.has_capacity() and channel_ok(consumer):
                    return priority
        return None

    def next_ready(self, channel_ok: Callable[[Consumer], bool]) -> Consumer | None:
        """The consumer to deliver the next message to, rotated to the back of its group;
        None if no consumer has capacity. `channel_ok(c)` checks the channel-side limits
        (channel-wide prefetch, flow, socket backpressure)."""
        only = self._only
        if only is not None:  # one consumer: no groups to walk, nothing to rotate
            if ((only.no_ack or only.prefetch == 0 or only.unacked < only.prefetch)
                    and channel_ok(only)):
                return only
            return None
        if self.single_active:
            consumer = self.active()
            if consumer is not None and consumer.has_capacity() and channel_ok(consumer):
                return consumer
            return None
        for priority in reversed(self._priorities):
            group = self._groups[priority]
            for _ in range(len(group)):
                consumer = group[0]
                group.rotate(-1)
                if consumer.has_capacity() and channel_ok(consumer):
                    return consumer
        return None
