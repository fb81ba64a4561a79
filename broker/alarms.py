"""Resource alarms: memory and disk (RabbitMQ `rabbit_alarm.erl`, the alarm half of
`vm_memory_monitor.erl`, `rabbit_disk_monitor.erl`; rabbitmq.com/alarms.html, memory.html,
disk-alarms.html).

Owns: the set of resource alarms in effect (`Alarms`) and who is told when it changes (the
broker, which tells every connection: connection.blocked / unblocked, see `reader.py`), and
`ResourceMonitor`: the one timer (`memory_monitor_interval`, 1000 ms) that samples the
broker's memory and the data dir's free disk space, sets and clears the alarms with a log line
giving the figures, and pushes desired RAM durations to queues (`memory_monitor.RamDurations`).
The thresholds change at run time through `set_vm_memory_high_watermark` and
`set_disk_free_limit` (rabbitmqctl's commands of the same names). It never reads a socket or
touches a message; it reaches queues only through the callback each registered.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Hashable

from broker.config import BrokerConfig, parse_information_unit
from broker.memory_monitor import (
    Duration,
    MemorySource,
    RamDurations,
    memory_limit,
    release_free_memory,
)

log = logging.getLogger("broker.alarms")

MEMORY, DISK = "memory", "disk"  # alarm resources, as RabbitMQ names them
MiB = 1024 * 1024
# above this fraction of the watermark (or the paging ratio, if lower) each check first hands
# free heap pages back to the OS (malloc_trim: ~0.01 ms with nothing to give back, 15 ms for
# 300 MB of 1 KB bodies freed in a fragmented heap, measured on the bench machine)
TRIM_ABOVE = 0.5


NEAR_WATERMARK = 0.8  # above this fraction of the watermark, memory checks run 4× as often


class Alarms:
    """The resource alarms in effect (rabbit_alarm). `active` is a frozenset of "memory" /
    "disk"; `subscribe(fn)` makes `fn(active)` run after every change (set or clear)."""

    def __init__(self) -> None:
        self.active: frozenset[str] = frozenset()  # resources whose alarm is set
        self._listeners: list[Callable[[frozenset[str]], None]] = []  # told on changes

    def subscribe(self, fn: Callable[[frozenset[str]], None]) -> None:
        self._listeners.append(fn)

    def set(self, resource: str) -> bool:
        """Set the alarm of `resource`; True if it was not set before."""
        if resource in self.active:
            return False
        self.active = self.active | {resource}
        log.warning("%s resource limit alarm set. *** Publishers will be blocked until this "
                    "alarm clears ***", resource)
        self._tell()
        return True

    def clear(self, resource: str) -> bool:
        """Clear the alarm of `resource`; True if it was set."""
        if resource not in self.active:
            return False
        self.active = self.active - {resource}
        log.warning("%s resource limit alarm cleared", resource)
        self._tell()
        return True

    def _tell(self) -> None:
        for fn in list(self._listeners):
            fn(self.active)


def disk_free(path: str) -> int:
    """Bytes available to unprivileged users on the filesystem holding `path` (statvfs
    f_bavail x f_frsize, as `df` shows). Raises OSError if `path` cannot be examined."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


class ResourceMonitor:
    """Memory and disk checks every `memory_monitor_interval` ms, and the queues' RAM
    durations.

    Args: config (watermarks, limits, interval, data_dir); alarms (set and cleared here);
    source: where memory figures come from (default `MemorySource` from the config). Queue
    processes `register(q, on_target)` (on_target(duration) casts the queue a new target,
    RabbitMQ's set_ram_duration_target callback), `report(q, duration)` every 5 s and
    `deregister(q)` when they stop. `start(loop)` runs the first check at once.
    Source: vm_memory_monitor.erl (1000 ms checks, alarm above the watermark),
    rabbit_memory_monitor.erl (desired durations), rabbit_disk_monitor.erl. One departure:
    above the paging ratio queues are asked for a report on every check, not only every 5 s.
    """

    def __init__(self, config: BrokerConfig, alarms: Alarms,
                 source: MemorySource | None = None) -> None:
        self.alarms = alarms
        self.data_dir = config.data_dir  # the disk checked is the one holding it
        self.interval = config.memory_monitor_interval / 1000  # seconds between checks
        self.source = source or MemorySource(config.total_memory_available_override_value)
        self.paging_ratio = config.vm_memory_high_watermark_paging_ratio
        self.memory_limit = 0  # bytes: the memory high watermark
        self.watermark_text = ""  # how it was configured, for log lines
        self.disk_free_limit = 0  # bytes
        self.ram = RamDurations()  # the queues' reported durations
        self.callbacks: dict[Hashable, Callable[[Duration], None]] = {}  # queue -> on_target
        self.report_now: dict[Hashable, Callable[[], None]] = {}  # queue -> ask for a report
        self.used = 0  # bytes in use at the last check
        self.free = -1  # bytes free on the data dir's filesystem at the last check (-1 unknown)
        self.trims = 0  # malloc_trim calls so far
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._disk_error_logged = False
        self._set_memory_limit(config.vm_memory_high_watermark,
                               config.vm_memory_high_watermark_absolute)
        self._set_disk_limit(config.disk_free_limit, config.disk_free_limit_relative)

    # -- thresholds (rabbitmqctl set_vm_memory_high_watermark / set_disk_free_limit) ---------
    def _set_memory_limit(self, relative: float, absolute: int) -> None:
        total = self.source.total
        self.memory_limit = memory_limit(total, relative, absolute)
        self.watermark_text = (f"absolute {absolute}" if absolute > 0 else f"{relative}")
        log.info("memory high watermark set to %d MiB (%d bytes) of %d MiB (%d bytes) total "
                 "(vm_memory_high_watermark %s, memory measured as %s)",
                 self.memory_limit // MiB, self.memory_limit, total // MiB, total,
                 self.watermark_text, self.source.kind)

    def _set_disk_limit(self, absolute: int, mem_relative: float) -> None:
        if mem_relative > 0:
            self.disk_free_limit = int(mem_relative * self.source.total)
        else:
            self.disk_free_limit = absolute
        log.info("disk free limit set to %d MB (%d bytes)", self.disk_free_limit // 1_000_000,
                 self.disk_free_limit)

    def set_vm_memory_high_watermark(self, fraction: float | None = None, *,
                                     absolute: int | str | None = None) -> int:
        """Change the memory high watermark now: a fraction of the total memory
        (`rabbitmqctl set_vm_memory_high_watermark 0.4`) or an absolute size in bytes or with
        a unit (`rabbitmqctl set_vm_memory_high_watermark absolute 512MB`). The alarm is
        re-evaluated at once. Returns the new watermark in bytes. Raises ValueError for a
        fraction outside [0, 1], a bad size, or neither/both given. Lasts until restart."""
        if (fraction is None) == (absolute is None):
            raise ValueError("give a fraction or absolute=, not both")
        if fraction is not None:
            if not 0 <= fraction <= 1:
                raise ValueError(f"vm_memory_high_watermark must be in [0, 1], not {fraction}")
            self._set_memory_limit(fraction, 0)
        else:
            self._set_memory_limit(0.0, parse_information_unit(absolute))  # type: ignore[arg-type]
        self.check()
        return self.memory_limit

    def set_disk_free_limit(self, limit: int | str | None = None, *,
                            mem_relative: float | None = None) -> int:
        """Change disk_free_limit now: bytes or a size with a unit
        (`rabbitmqctl set_disk_free_limit 2GB`), or a multiple of the total memory
        (`rabbitmqctl set_disk_free_limit mem_relative 1.5`). The disk alarm is re-evaluated at
        once. Returns the new limit in bytes. Raises ValueError for a bad or negative value,
        or neither/both given. Lasts until restart."""
        if (limit is None) == (mem_relative is None):
            raise ValueError("give a limit or mem_relative=, not both")
        if mem_relative is not None:
            if mem_relative < 0:
                raise ValueError("mem_relative must not be negative")
            self._set_disk_limit(0, mem_relative)
        else:
            self._set_disk_limit(parse_information_unit(limit), 0.0)  # type: ignore[arg-type]
        self.check()
        return self.disk_free_limit

    # -- the timer ---------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Check now, then every `interval` seconds on `loop`."""
        self._loop = loop
        self._tick()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._loop = None

    def _tick(self) -> None:
        self._timer = None
        try:
            self.check()
        except OSError as exc:  # /proc unreadable: keep the last state, try again
            log.warning("memory check failed: %s", exc)
        if self._loop is not None:
            # near the watermark (or past it) check four times as often: a producer can add
            # 100 MB a second, and each interval the alarm waits is RSS past the watermark
            near = self.memory_limit and self.used > NEAR_WATERMARK * self.memory_limit
            self._timer = self._loop.call_later(self.interval / 4 if near else self.interval,
                                                self._tick)

    def check(self) -> None:
        """One round: memory (alarm, paging targets) and disk (alarm)."""
        self._check_disk()
        used = self.source.used()
        limit = self.memory_limit
        if limit and used > min(self.paging_ratio, TRIM_ABOVE) * limit:
            # paging (or consumers) freed message bodies: hand the free heap back before
            # judging the figure
            if release_free_memory():
                self.trims += 1
                used = self.source.used()
        self.used = used
        if limit == 0 or used > limit:
            if self.alarms.set(MEMORY):
                log.warning("vm_memory_high_watermark set. Memory used:%d allowed:%d",
                            used, limit)
        elif MEMORY in self.alarms.active:
            log.warning("vm_memory_high_watermark clear. Memory used:%d allowed:%d", used, limit)
            self.alarms.clear(MEMORY)
        ratio = self.ratio()
        self._push(self.ram.update(ratio, self.paging_ratio))
        if ratio >= self.paging_ratio and not self.ram.disk_alarm:
            # above the paging threshold every check asks for fresh reports: a queue filling
            # at 100 MB/s cannot wait for its 5 s report (RabbitMQ overshoots its watermark
            # by that much; ours would pass it before the first report)
            for ask in list(self.report_now.values()):
                ask()

    def ratio(self) -> float:
        """Memory in use over the watermark at the last check (infinite for a 0 watermark)."""
        return self.used / self.memory_limit if self.memory_limit else float("inf")

    def _check_disk(self) -> None:
        try:
            free = disk_free(self.data_dir)
        except OSError as exc:
            if not self._disk_error_logged:
                self._disk_error_logged = True
                log.warning("cannot read free disk space of %s: %s", self.data_dir, exc)
            return
        self.free = free
        limit = self.disk_free_limit
        if free < limit:
            if self.alarms.set(DISK):
                log.warning("Free disk space is insufficient. Free bytes: %d. Limit: %d",
                            free, limit)
                self._disk_alarm(True)
        elif DISK in self.alarms.active:
            log.warning("Free disk space is sufficient again. Free bytes: %d. Limit: %d",
                        free, limit)
            self.alarms.clear(DISK)
            self._disk_alarm(False)

    def _disk_alarm(self, on: bool) -> None:
        """Paging writes to disk: under a disk alarm queues are told to stop paging
        (rabbit_memory_monitor's disk_alarm: desired duration infinity)."""
        self.ram.disk_alarm = on
        self._push(self.ram.update(self.ratio(), self.paging_ratio))

    # -- queues ------------------------------------------------------------------------------
    def register(self, queue: Hashable, on_target: Callable[[Duration], None],
                 report_now: Callable[[], None] | None = None) -> None:
        """A queue process starts: `on_target(duration)` will cast it a new RAM target;
        `report_now()` asks it to report its RAM duration at once (used on every check while
        memory is above the paging ratio)."""
        self.callbacks[queue] = on_target
        if report_now is not None:
            self.report_now[queue] = report_now
        self.ram.register(queue)

    def deregister(self, queue: Hashable) -> None:
        self.callbacks.pop(queue, None)
        self.report_now.pop(queue, None)
        self.ram.deregister(queue)

    def report(self, queue: Hashable, duration: Duration) -> Duration:
        """A queue's RAM duration (seconds, None = infinity); returns its desired duration.
        Above the paging ratio the answer takes this report into account at once (the first
        finite report turns an infinite desired duration into a finite one now, not at the
        next check)."""
        desired = self.ram.report(queue, duration)
        if self.ratio() >= self.paging_ratio and not self.ram.disk_alarm:
            desired = self.ram.refresh(self.ratio(), self.paging_ratio)
            self.ram.sent[queue] = desired
        return desired

    def _push(self, targets: list[tuple[Hashable, Duration]]) -> None:
        for queue, duration in targets:
            cb = self.callbacks.get(queue)
            if cb is not None:
                cb(duration)
