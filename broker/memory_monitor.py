"""Memory: what the broker uses, what it may use, and how long queues may keep messages in RAM
(RabbitMQ `vm_memory_monitor.erl` for the figures, `rabbit_memory_monitor.erl` for the
durations).

Owns: reading the process's memory (RSS from /proc/self/statm, or the cgroup's usage when the
cgroup's limit is below physical RAM), the total memory a relative watermark is a fraction of,
the watermark in bytes, giving freed heap memory back to the OS, and `RamDurations`: the RAM
durations queues report and the desired duration the broker answers. Plain functions and one
pure class: the timer that drives them, the alarms and the casts to queue processes live in
`alarms.py` (`ResourceMonitor`). Must never block (a few small file reads) or touch messages.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from collections.abc import Hashable
from dataclasses import dataclass

log = logging.getLogger("broker.memory")

# rabbit_memory_monitor: when every queue is paged out (reported duration 0) and memory use is
# below this fraction of the watermark, each average gets SUM_INC_AMOUNT seconds added so that
# queues can grow again
SUM_INC_THRESHOLD = 0.95
SUM_INC_AMOUNT = 1.0
EPSILON = 0.000001  # durations below this are clamped to 0 (zero_clamp)
UNLIMITED = 1 << 60  # a cgroup "limit" at least this large means no limit (v1: 2**63 - 4096)

Duration = float | None  # seconds of traffic to keep in RAM; None = infinity


def physical_memory() -> int:
    """Bytes of RAM of the machine (sysconf; /proc/meminfo MemTotal as RabbitMQ reads it)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def rss() -> int:
    """Resident set size of this process in bytes (/proc/self/statm, second field)."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def tree_pids(root: int) -> list[int]:
    """Process `root` and its children: a multi-worker broker's node process and its
    worker processes (/proc/ROOT/task/ROOT/children). Raises OSError if `root` is
    unreadable."""
    with open(f"/proc/{root}/task/{root}/children", "rb") as f:
        return [root, *(int(p) for p in f.read().split())]


def _proc_fields(pid: int, name: str) -> list[bytes] | None:
    """The fields of /proc/PID/NAME, None once the process is gone."""
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read().split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def tree_rss(root: int) -> int:
    """Resident set size in bytes of process `root` and its children, counted as one broker
    as RabbitMQ counts its one VM (each one's statm; a process that exits meanwhile counts
    0). Raises OSError if `root` is unreadable."""
    page = os.sysconf("SC_PAGE_SIZE")
    return sum(int(fields[1]) * page for pid in tree_pids(root)
               if (fields := _proc_fields(pid, "statm")) is not None)


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds (user + system) of process `root` and its children so far (each one's
    /proc/PID/stat utime and stime; the process name, in parentheses, may hold spaces)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in tree_pids(root):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                after_name = f.read().rsplit(b")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(after_name[11]) + int(after_name[12])  # fields 14 and 15
    return total / tick


@dataclass(frozen=True, slots=True)
class Cgroup:
    """The memory cgroup of this process: `limit` in bytes, `usage_file` (memory.current or
    memory.usage_in_bytes), `stat_file` (memory.stat) and the name of its inactive-file
    counter (`inactive_file` in v2, `total_inactive_file` in v1)."""

    limit: int
    usage_file: str
    stat_file: str
    inactive_key: str

    def usage(self) -> int:
        """Bytes charged to the cgroup minus inactive page cache (what `docker stats` and the
        kubelet count: the page cache of our own message-store writes is reclaimable and
        would otherwise raise the alarm)."""
        with open(self.usage_file, "rb") as f:
            used = int(f.read())
        try:
            with open(self.stat_file, "rb") as f:
                for line in f:
                    key, _, value = line.partition(b" ")
                    if key.decode() == self.inactive_key:
                        return max(0, used - int(value))
        except OSError:
            pass
        return used


def find_cgroup(root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> Cgroup | None:
    """The memory cgroup of this process if it sets a limit, else None. cgroup v2
    (`0::/path`, `memory.max`) and v1 (`N:memory:/path`, `memory.limit_in_bytes`); the path
    is looked up under `root`, then `root` itself is tried (a container that sees its own
    cgroup at the mount point)."""
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    candidates = []
    for line in lines:
        _id, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        path = path.lstrip("/")
        if controllers == "":
            candidates.append((os.path.join(root, path), root, "memory.max", "memory.current",
                               "inactive_file"))
        elif "memory" in controllers.split(","):
            base = os.path.join(root, "memory")
            candidates.append((os.path.join(base, path), base, "memory.limit_in_bytes",
                               "memory.usage_in_bytes", "total_inactive_file"))
    for where, fallback, limit_name, usage_name, inactive in candidates:
        for d in (where, fallback):
            try:
                with open(os.path.join(d, limit_name)) as f:
                    text = f.read().strip()
            except OSError:
                continue
            if text == "max" or not text.isdigit() or int(text) >= UNLIMITED:
                break  # this hierarchy sets no limit
            return Cgroup(int(text), os.path.join(d, usage_name), os.path.join(d, "memory.stat"),
                          inactive)
    return None


class MemorySource:
    """Where the broker's memory figures come from, decided once at boot.

    `total`: bytes the relative watermark is a fraction of: `override` if given
    (total_memory_available_override_value), else physical RAM, or the cgroup's limit when
    that is lower. `used()`: bytes in use now: the cgroup's usage when its limit is below
    RAM (the OOM killer counts that), else this process's RSS, or with `tree` (a worker of
    a multi-worker broker: the node process's pid) the RSS of that process and all its
    children, so that every worker judges the one broker's memory against the one
    watermark and raises the alarm with the others (issue 47 item 4). Source: vm_memory_monitor
    `get_total_memory` / `get_process_memory` (rss strategy)."""

    def __init__(self, override: int = 0, cgroup: Cgroup | None | bool = True,
                 tree: int | None = None) -> None:
        self.tree = tree  # a worker process: the node process whose tree is the broker
        ram = physical_memory()
        group = find_cgroup() if cgroup is True else (cgroup or None)
        self.cgroup = group if group is not None and group.limit < ram else None  # in force
        self.total = override or (self.cgroup.limit if self.cgroup is not None else ram)
        self.kind = "cgroup" if self.cgroup is not None else "rss"  # for log lines

    def used(self) -> int:
        """Bytes in use now (see class docstring). Raises OSError if /proc is unreadable."""
        if self.cgroup is not None:
            return self.cgroup.usage()
        return tree_rss(self.tree) if self.tree is not None else rss()


def memory_limit(total: int, relative: float, absolute: int) -> int:
    """The memory high watermark in bytes: `absolute` when set (> 0), else `relative` x
    `total` (vm_memory_monitor `get_vm_memory_high_watermark`). An absolute limit above the
    total is kept, with a warning, as RabbitMQ does."""
    if absolute > 0:
        if absolute > total:
            log.warning("vm_memory_high_watermark.absolute %d is above the total memory %d",
                        absolute, total)
        return absolute
    return int(total * relative)


_malloc_trim = None
_trim_checked = False


def release_free_memory() -> bool:
    """Give free heap pages back to the OS (glibc `malloc_trim(0)`), so that RSS falls once
    paging has freed message bodies: CPython allocates bodies above 512 bytes with malloc,
    and glibc keeps freed chunks below the top of the heap resident. Returns False where
    there is no glibc (musl, macOS): RSS then only falls as arenas empty."""
    global _malloc_trim, _trim_checked
    if not _trim_checked:
        _trim_checked = True
        name = ctypes.util.find_library("c")
        try:
            _malloc_trim = ctypes.CDLL(name).malloc_trim if name else None
        except (OSError, AttributeError):
            _malloc_trim = None
    if _malloc_trim is None:
        return False
    _malloc_trim(0)
    return True


def _greater(d1: Duration, d2: Duration) -> bool:
    """rabbit_memory_monitor `greater_than` with None as infinity."""
    if d1 is None:
        return d2 is not None
    if d2 is None:
        return False
    return d1 > d2


class RamDurations:
    """rabbit_memory_monitor's bookkeeping: the RAM duration each queue last reported (seconds
    of its traffic its RAM messages represent, `BackingQueue.ram_duration`) and the desired
    duration the broker answers. Pure: `update` gets the memory ratio (used / watermark).

    `register(q)` / `deregister(q)`; `report(q, d)` returns the desired duration (the queue
    then calls `set_ram_duration_target` with it); `update(ratio, paging_ratio)` recomputes
    the desired duration and returns the queues to tell at once: only those whose reported
    and last sent durations are above a lower desired one (decreases are pushed, increases
    wait for the queue's next report), or, under a disk alarm, below a higher one.
    Infinity is None throughout.
    """

    def __init__(self) -> None:
        self.reported: dict[Hashable, Duration] = {}  # queue -> last reported duration
        self.sent: dict[Hashable, Duration] = {}  # queue -> last desired duration it was told
        self.sum = 0.0  # sum of the finite reported durations
        self.count = 0  # how many reported durations are finite
        self.desired: Duration = None  # the desired duration now
        self.disk_alarm = False  # paging writes to disk: stop paging while disk is low

    def register(self, queue: Hashable) -> None:
        self.reported[queue] = None
        self.sent[queue] = None

    def deregister(self, queue: Hashable) -> None:
        prev = self.reported.pop(queue, None)
        self.sent.pop(queue, None)
        if prev is not None:
            self.sum = _zero_clamp(self.sum - prev)
            self.count -= 1

    def report(self, queue: Hashable, duration: Duration) -> Duration:
        """Queue `queue` has `duration` seconds in RAM; returns the desired duration."""
        if queue not in self.reported:
            self.register(queue)
        prev = self.reported[queue]
        if prev is None and duration is not None:
            self.sum += duration
            self.count += 1
        elif prev is not None and duration is None:
            self.sum -= prev
            self.count -= 1
        elif prev is not None and duration is not None:
            self.sum += duration - prev
        self.sum = _zero_clamp(self.sum)
        self.reported[queue] = duration
        self.sent[queue] = self.desired
        return self.desired

    def desired_duration(self, ratio: float, paging_ratio: float) -> Duration:
        """rabbit_memory_monitor `desired_duration_average`: infinity under a disk alarm, below
        `paging_ratio` of the watermark or with no finite report; else the mean reported
        duration (plus SUM_INC_AMOUNT below SUM_INC_THRESHOLD) divided by `ratio`. A
        watermark of 0 (ratio infinite) wants 0."""
        if self.disk_alarm:
            return None
        if ratio == float("inf"):
            return 0.0
        if ratio < paging_ratio or self.count == 0:
            return None
        if ratio < SUM_INC_THRESHOLD:
            return ((self.sum + SUM_INC_AMOUNT) / self.count) / ratio
        return (self.sum / self.count) / ratio

    def refresh(self, ratio: float, paging_ratio: float) -> Duration:
        """Recompute the desired duration without telling anyone (the next `report` answers
        with it); returns it."""
        self.desired = self.desired_duration(ratio, paging_ratio)
        return self.desired

    def update(self, ratio: float, paging_ratio: float) -> list[tuple[Hashable, Duration]]:
        """Recompute the desired duration; returns [(queue, desired)] to push now
        (rabbit_memory_monitor `internal_update` / `inform_queues`)."""
        new = self.desired_duration(ratio, paging_ratio)
        old, self.desired = self.desired, new
        inform = (lambda a, b: _greater(b, a)) if self.disk_alarm else _greater
        if not inform(old, new):
            return []
        out = []
        for queue, reported in self.reported.items():
            if inform(self.sent[queue], new) and inform(reported, new):
                self.sent[queue] = new
                out.append((queue, new))
        return out


def _zero_clamp(x: float) -> float:
    return 0.0 if x < EPSILON else x
