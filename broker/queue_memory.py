"""A queue's side of the memory monitor (docs/architecture.md §7; RabbitMQ rabbit_amqqueue_process
update_ram_duration and rabbit_memory_monitor).

Owns: the queue's RAM-duration report: every RAM_DURATION_INTERVAL while the queue is busy it
tells the monitor how many seconds of traffic it holds in RAM and applies the desired duration
the monitor answers. After an interval without activity it reports once more and stops
ticking, as RabbitMQ's queue stops its rate timer when it hibernates, so idle queues cost no
CPU; the next activity starts the timer again. The monitor still reaches an idle queue: it
casts it lower targets and asks for reports when memory runs high.
Talks to: the queue process (casts it the tick, report and target messages, reads its backing
queue's ram_duration) and the ResourceMonitor (register / report / deregister).
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from broker.alarms import ResourceMonitor
    from broker.backing_queue.base import BackingQueue
    from broker.stats import MessageStats


class ReportingQueue(Hashable, Protocol):
    """A queue process as its RAM reports see it (QueueProcess satisfies it): its loop for
    the timer, its mailbox, and its message counters (activity)."""

    _loop: asyncio.AbstractEventLoop
    message_stats: MessageStats

    def cast(self, msg: Any) -> None: ...

RAM_DURATION_INTERVAL = 5.0  # seconds (rabbit_amqqueue_process RAM_DURATION_UPDATE_INTERVAL)


class RamReports:
    """The RAM-duration reports of `queue` (a Process) to `monitor`. `tick_msg` and
    `report_msg` are the mailbox messages the timer and the monitor cast; the monitor's
    lowered targets arrive as (target_kind, seconds | None)."""

    __slots__ = ("_queue", "_monitor", "_tick_msg", "_timer", "_seen")

    def __init__(self, queue: ReportingQueue, monitor: ResourceMonitor, tick_msg: tuple, report_msg: tuple,
                 target_kind: int) -> None:
        self._queue = queue
        self._monitor = monitor
        self._tick_msg = tick_msg
        self._seen = 0  # the queue's activity count at the last tick; unchanged = idle
        monitor.register(queue, lambda duration: queue.cast((target_kind, duration)),
                         lambda: queue.cast(report_msg))
        self._timer: asyncio.TimerHandle | None = None
        self._arm()

    @property
    def ticking(self) -> bool:
        """The timer is armed."""
        return self._timer is not None

    def _arm(self) -> None:
        self._timer = self._queue._loop.call_later(RAM_DURATION_INTERVAL, self._queue.cast,
                                                   self._tick_msg)

    def report(self, bq: BackingQueue) -> None:
        """Report the backing queue's RAM duration (s, None = infinite) and apply the
        desired duration the monitor answers."""
        bq.set_ram_duration_target(self._monitor.report(self._queue, bq.ram_duration()))

    def _activity(self) -> int:
        """A count that moves with every publish, delivery, get and ack of the queue."""
        stats = self._queue.message_stats
        return (stats.publish + stats.deliver + stats.deliver_no_ack + stats.get
                + stats.get_no_ack + stats.ack + stats.redeliver)

    def tick(self, bq: BackingQueue) -> None:
        """The timer fired: report, and tick again only if the queue's activity moved since
        the last tick."""
        self._timer = None
        self.report(bq)
        activity = self._activity()
        if activity != self._seen:
            self._seen = activity
            self._arm()

    def busy(self) -> None:
        """After a batch of the queue's work: start ticking again if it was idle and its
        activity moved."""
        if self._timer is None and self._activity() != self._seen:
            self._arm()

    def stop(self) -> None:
        """The queue is gone: no more ticks, the monitor forgets it."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._monitor.deregister(self._queue)
