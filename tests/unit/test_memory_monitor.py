"""broker/memory_monitor.py: rabbit_memory_monitor's desired durations, the watermark, the
cgroup lookup (over a directory tree laid out as /sys/fs/cgroup), and memory figures."""

import os
import subprocess
import sys

import pytest

from broker.memory_monitor import (
    SUM_INC_AMOUNT,
    MemorySource,
    RamDurations,
    find_cgroup,
    memory_limit,
    physical_memory,
    release_free_memory,
    rss,
    tree_rss,
)


def test_desired_duration_follows_rabbit_memory_monitor():
    r = RamDurations()
    r.register("a")
    r.register("b")
    assert r.desired_duration(0.9, 0.5) is None  # no finite report yet: infinity
    assert r.report("a", 10.0) is None
    assert r.report("b", 20.0) is None
    assert r.desired_duration(0.4, 0.5) is None  # below the paging ratio: infinity
    # between the paging ratio and 0.95: (mean + 1 s) / ratio
    assert r.desired_duration(0.6, 0.5) == pytest.approx((15.0 + SUM_INC_AMOUNT / 2) / 0.6)
    assert r.desired_duration(1.2, 0.5) == pytest.approx(15.0 / 1.2)  # above: mean / ratio
    assert r.desired_duration(float("inf"), 0.5) == 0.0  # watermark 0
    r.report("b", None)  # an idle queue (infinite duration) leaves the mean
    assert r.desired_duration(1.0, 0.5) == pytest.approx(10.0)
    r.deregister("a")
    assert r.count == 0 and r.sum == 0.0


def test_decreases_are_pushed_at_once_increases_wait_for_reports():
    r = RamDurations()
    for q, d in (("a", 10.0), ("b", 1.0), ("idle", None)):
        r.register(q)
        r.report(q, d)
    pushed = dict(r.update(1.1, 0.5))  # desired 5.0: only "a" (10 s) holds more than that
    assert list(pushed) == ["a", "idle"] and pushed["a"] == pytest.approx(5.5 / 1.1)
    assert r.update(1.1, 0.5) == []  # unchanged: nothing new
    assert r.update(0.3, 0.5) == []  # back below the paging ratio: infinity waits for reports
    assert r.report("a", 2.0) is None  # ...and is the answer to the next one


def test_a_disk_alarm_stops_paging():
    r = RamDurations()
    r.register("a")
    r.report("a", 4.0)
    assert r.update(2.0, 0.5) == [("a", 2.0)]  # a queue holding more than desired is told
    r.disk_alarm = True
    assert r.update(2.0, 0.5) == [("a", None)]  # increases pushed at once under a disk alarm
    assert r.desired is None


def test_memory_limit():
    assert memory_limit(1000, 0.4, 0) == 400
    assert memory_limit(1000, 0.4, 512) == 512
    assert memory_limit(1000, 0.4, 5000) == 5000  # kept, with a warning


def _cgroup_tree(tmp_path, v2: bool, limit: str, usage: str, inactive: int):
    root = tmp_path / "cgroup"
    if v2:
        d = root / "kubepods" / "pod1"
        d.mkdir(parents=True)
        (d / "memory.max").write_text(limit + "\n")
        (d / "memory.current").write_text(usage + "\n")
        (d / "memory.stat").write_text(f"anon 1\ninactive_file {inactive}\nactive_file 3\n")
        proc = "0::/kubepods/pod1\n"
    else:
        d = root / "memory" / "docker" / "abc"
        d.mkdir(parents=True)
        (d / "memory.limit_in_bytes").write_text(limit + "\n")
        (d / "memory.usage_in_bytes").write_text(usage + "\n")
        (d / "memory.stat").write_text(f"cache 5\ntotal_inactive_file {inactive}\n")
        proc = "12:pids:/docker/abc\n4:memory:/docker/abc\n0::/\n"
    (tmp_path / "cgroup.proc").write_text(proc)
    return str(root), str(tmp_path / "cgroup.proc")


@pytest.mark.parametrize("v2", [True, False])
def test_cgroup_limit_and_usage(tmp_path, v2):
    root, proc = _cgroup_tree(tmp_path, v2, "536870912", "300000000", 100000000)
    group = find_cgroup(root, proc)
    assert group is not None and group.limit == 512 * 1024 * 1024
    assert group.usage() == 200000000  # inactive page cache is not counted
    src = MemorySource(cgroup=group)
    assert src.total == group.limit and src.kind == "cgroup"
    assert src.used() == 200000000


@pytest.mark.parametrize(("v2", "limit"), [(True, "max"), (False, "9223372036854771712")])
def test_no_cgroup_limit_means_rss(tmp_path, v2, limit):
    root, proc = _cgroup_tree(tmp_path, v2, limit, "1", 0)
    assert find_cgroup(root, proc) is None
    src = MemorySource(cgroup=False)
    assert src.total == physical_memory() and src.kind == "rss"
    assert 0 < src.used() < src.total
    assert MemorySource(override=1 << 30, cgroup=False).total == 1 << 30


def test_rss_and_trim():
    assert rss() > 1 << 20
    assert release_free_memory() in (True, False)  # True with glibc


def test_checks_run_four_times_as_often_near_the_watermark(tmp_path):
    """Above NEAR_WATERMARK of the watermark the next check comes after interval / 4."""
    import asyncio

    from broker.alarms import NEAR_WATERMARK, Alarms, ResourceMonitor
    from broker.config import BrokerConfig

    class Fixed:  # a memory source whose figure the test sets
        total = 10_000_000_000
        kind = "rss"

        def __init__(self) -> None:
            self.value = 0

        def used(self) -> int:
            return self.value

    source = Fixed()
    cfg = BrokerConfig(data_dir=str(tmp_path), vm_memory_high_watermark_absolute=1_000_000,
                       disk_free_limit=0)
    mon = ResourceMonitor(cfg, Alarms(), source=source)  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    try:
        mon._loop = loop
        delays = []
        real = loop.call_later
        loop.call_later = lambda d, f, *a: delays.append(d) or real(d, f, *a)  # type: ignore
        source.value = int(0.5 * 1_000_000)
        mon._tick()
        source.value = int((NEAR_WATERMARK + 0.05) * 1_000_000)
        mon._tick()
        assert delays == [mon.interval, mon.interval / 4]
    finally:
        mon.stop()
        loop.close()


def test_a_worker_counts_the_whole_process_tree():
    """tree_rss (issue 47: one broker's memory across its worker processes): the RSS of a
    process and its children; a child holding 64 MiB shows in its parent's tree figure,
    and MemorySource(tree=pid) reports that figure (no cgroup in force)."""
    child = subprocess.Popen([sys.executable, "-c",
                              "import sys, time; b = bytearray(64 << 20); b[::4096] = "
                              "b'x' * len(b[::4096]); print('ready', flush=True); "
                              "time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        with open(f"/proc/{child.pid}/statm", "rb") as f:
            child_rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        assert child_rss > 64 << 20
        tree = tree_rss(os.getpid())
        assert tree >= rss() + child_rss - (8 << 20)  # both measured a moment apart
        assert MemorySource(cgroup=False, tree=os.getpid()).used() > child_rss
    finally:
        child.kill()
        child.communicate()


def test_the_trees_cpu_counts_a_busy_child():
    """tree_cpu_seconds: the CPU of a process and its children (a multi-worker broker's
    rabbitmq_process_cpu_seconds): a child that spins 0.4 s of CPU shows in its parent's
    tree figure while it runs."""
    from broker.memory_monitor import tree_cpu_seconds

    own = sum(os.times()[:2])
    child = subprocess.Popen([sys.executable, "-c",
                              "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 0.4: pass\n"
                              "print('spun', flush=True)\ntime.sleep(30)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "spun"
        assert tree_cpu_seconds(os.getpid()) >= own + 0.35
    finally:
        child.kill()
        child.communicate()
