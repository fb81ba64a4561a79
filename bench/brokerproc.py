# bench/brokerproc.py — resource use of the broker process, when it runs on this machine.
#
# Owns: finding the process that listens on the URI's TCP port (Linux /proc: net/tcp{,6} LISTEN
# sockets -> socket inode -> /proc/<pid>/fd links) and sampling its RSS and CPU time.
# Talks to: bench.coordinator (samples once per progress tick).
# Must never: signal, trace or otherwise touch the broker process; fail a run when /proc is
# unreadable (then it simply reports nothing).
"""Broker RSS / CPU sampling via /proc (no psutil needed)."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field

_LISTEN = "0A"
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _is_local(host: str) -> bool:
    try:
        addrs = {ai[4][0] for ai in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    local = {"127.0.0.1", "::1", "0.0.0.0", "::"}
    try:
        local |= {ai[4][0] for ai in socket.getaddrinfo(socket.gethostname(), None)}
    except OSError:
        pass
    return any(a in local or a.startswith("127.") for a in addrs)


def _listen_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    local, state, inode = parts[1], parts[3], parts[9]
                    if state == _LISTEN and int(local.rsplit(":", 1)[1], 16) == port:
                        inodes.add(inode)
        except OSError:
            continue
    return inodes


def find_listener(host: str, port: int) -> int | None:
    """PID of the local process listening on ``port`` (None if remote, absent or hidden)."""
    if not _is_local(host):
        return None
    inodes = {f"socket:[{i}]" for i in _listen_inodes(port)}
    if not inodes:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        fd_dir = f"/proc/{pid}/fd"
        try:
            for fd in os.listdir(fd_dir):
                if os.readlink(f"{fd_dir}/{fd}") in inodes:
                    return int(pid)
        except OSError:
            continue
    return None


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _cpu_rss(pid: int) -> tuple[float, int] | None:
    """(utime + stime in s, RSS in bytes) from /proc/<pid>/stat, or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    cpu = (int(fields[11]) + int(fields[12])) / _CLK_TCK
    return cpu, int(fields[21]) * _PAGE


@dataclass
class BrokerSampler:
    """Samples one broker process; ``sample(now)`` once per tick, ``summary()`` at the end.

    Reports RSS peak (bytes), CPU seconds used during the run, mean CPU % (100 = one core) and
    the per-tick CPU % / RSS series.
    """

    pid: int
    name: str = ""
    rss_peak: int = 0
    first: tuple[float, float] | None = None  # (wall s, cpu s) at the first sample
    last: tuple[float, float] | None = None
    series: list[tuple[float, int]] = field(default_factory=list)  # (cpu %, rss bytes) per tick
    gone: bool = False

    @classmethod
    def for_uri(cls, host: str, port: int) -> BrokerSampler | None:
        pid = find_listener(host, port)
        if pid is None:
            return None
        s = cls(pid, _name(pid))
        s.sample_raw(None)
        return s

    def cpu_rss(self) -> tuple[float, int] | None:
        """(CPU seconds used so far, RSS in bytes) now, or None if the process is gone."""
        return _cpu_rss(self.pid)

    def sample_raw(self, now: float | None) -> tuple[float, int] | None:
        got = _cpu_rss(self.pid)
        if got is None:
            self.gone = True
            return None
        cpu, rss = got
        wall = time.monotonic() if now is None else now
        self.rss_peak = max(self.rss_peak, rss)
        pct = 0.0
        if self.last is not None and wall > self.last[0]:
            pct = 100 * (cpu - self.last[1]) / (wall - self.last[0])
        if self.first is None:
            self.first = (wall, cpu)
        self.last = (wall, cpu)
        return pct, rss

    def sample(self, now: float) -> tuple[float, int] | None:
        """(CPU % since the previous sample, RSS bytes); appended to ``series``."""
        got = self.sample_raw(now)
        if got is not None:
            self.series.append((round(got[0], 1), got[1]))
        return got

    def summary(self) -> dict[str, object]:
        cpu_s = wall = 0.0
        if self.first and self.last:
            cpu_s = self.last[1] - self.first[1]
            wall = self.last[0] - self.first[0]
        return {
            "pid": self.pid,
            "name": self.name,
            "same_process_as_bench": self.pid == os.getpid(),
            "rss_peak_bytes": self.rss_peak,
            "cpu_seconds": round(cpu_s, 3),
            "cpu_percent_mean": round(100 * cpu_s / wall, 1) if wall else None,
            "cpu_percent_peak": max((c for c, _ in self.series), default=None),
        }
