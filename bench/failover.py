# bench/failover.py — `python -m bench.failover`: failover time after kill -9 of the leader.
#
# Owns: the two clusters' handles (this broker's members on etcd, RabbitMQ's nodes), the
# reconnecting publisher, the kill-and-measure loop and its JSON.
# Talks to: `python -m broker` and etcd (this broker), rabbitmqctl and rabbitmq-server
# (RabbitMQ), pika.
# Must never: count a publish as confirmed before its confirm arrived.
"""Failover time after kill -9 of the leader (issue 35 item 9), median of ``--kills``; with
``--fault stop``, after a SIGSTOP of the leader for ``--pause`` s (issue 48).

A publisher thread sends 64 B persistent messages to one quorum queue, one at a time with a
publisher confirm each (pika, ``confirm_delivery``), and records when each confirm arrived.
It is connected to a member that is not the leader; when its connection drops it reconnects to
the next member in turn (``connection_attempts=1``). Each round kills the leader with SIGKILL
and measures the time from the kill to the confirm of the first message *sent* after it: what
an application publishing with confirms sees as the outage. The killed member is then started again and the next round waits
until it is back in sync (this broker: three members in the ISR; RabbitMQ: the queue's three
members online), the publisher having confirmed again since.

- ``--target pybroker``: three members of this broker (``python -m broker`` with
  ``clustering.enabled``) on an etcd this command starts, under ``--root``; AMQP ports
  ``--base-port``+1..3. The leader is the member named in ``<prefix>/leader``.
- ``--target rabbitmq``: the three RabbitMQ nodes ``r1..r3@localhost`` of
  ``bench/results/issue35-cluster/rabbit_cluster.sh`` (AMQP 5681–5683), already running. The
  leader is the queue's ``leader`` column in ``rabbitmqctl list_queues``; a node is killed by
  its Erlang VM's OS pid and started again with ``rabbitmq-server -detached``.

Output: each round's gap (s) and the median, min and max, with the load average before each
kill; ``--json FILE`` writes them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pika

QUEUE_ARGS = {"x-queue-type": "quorum"}


class Publisher(threading.Thread):
    """Publishes to `queue` with a confirm per message over `urls`, starting at `first`;
    `confirms` holds (sent, confirmed) time.monotonic() pairs, one per confirmed publish."""

    def __init__(self, urls: list[str], queue: str, first: int = 0) -> None:
        super().__init__(daemon=True)
        self.urls = urls
        self.queue = queue
        self.next = first
        self.confirms: list[tuple[float, float]] = []
        self.errors = 0
        self._halt = threading.Event()
        self._move: int | None = None  # move_to: the member to reconnect to
        self.connected_to: int | None = None  # the member index it is connected to

    def run(self) -> None:
        body = b"x" * 64
        props = pika.BasicProperties(delivery_mode=2)
        while not self._halt.is_set():
            if self._move is not None:
                self.next, self._move = self._move, None
            index = self.next % len(self.urls)
            url = self.urls[index]
            self.next += 1
            conn = None
            try:
                # stack_timeout: a member whose process is stopped accepts the TCP
                # connection (the kernel does) and never answers: give up on it quickly
                conn = pika.BlockingConnection(pika.URLParameters(
                    url + "?connection_attempts=1&socket_timeout=1&stack_timeout=0.5"
                    "&blocked_connection_timeout=5"))
                ch = conn.channel()
                ch.queue_declare(self.queue, durable=True, arguments=QUEUE_ARGS)
                ch.confirm_delivery()
                self.connected_to = index
                while not self._halt.is_set() and self._move is None:
                    sent = time.monotonic()
                    ch.basic_publish("", self.queue, body, props)
                    self.confirms.append((sent, time.monotonic()))
                    if len(self.confirms) % 5000 == 0:  # keep the queue short
                        ch.queue_purge(self.queue)
                    time.sleep(0.002)
            except Exception:  # noqa: BLE001 - the leader died: the next member
                self.connected_to = None
                self.errors += 1
                time.sleep(0.05)
            finally:
                if conn is not None and conn.is_open:
                    try:
                        conn.close()
                    except Exception:  # noqa: BLE001
                        pass

    def move_to(self, index: int) -> None:
        """Reconnect to member `index` (before a round of --fault stop: a client of a
        follower is closed by it when the leader changes, while one connected straight to
        a hung leader waits for its own heartbeat timeout, pika's being its heartbeat
        plus 5 s: that measures the client, not the failover)."""
        self._move = index
        _wait(lambda: self.connected_to == index and self._move is None, 30,
              f"the publisher never moved to member {index}")

    def stop(self) -> None:
        self._halt.set()
        self.join(10)

    def first_confirm_after(self, t: float, timeout: float = 60) -> float | None:
        """When the first publish sent after `t` was confirmed (one in flight at `t` may be
        confirmed by the dying leader a moment later: it does not show the new one works)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            later = [c for s, c in self.confirms[-2000:] if s > t]
            if later:
                return later[0]
            time.sleep(0.01)
        return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception:  # noqa: BLE001 - not up yet
            value = None
        if value:
            return value
        time.sleep(0.1)
    raise TimeoutError(what)


class PyCluster:
    """Three members of this broker and one etcd under `root`."""

    def __init__(self, root: Path, base_port: int, lease_ttl: int | None) -> None:
        self.root = root
        self.base_port = base_port
        self.lease_ttl = lease_ttl
        self.prefix = f"/failover-{uuid.uuid4().hex[:6]}"
        self.etcd_port = _free_port()
        self.etcd: subprocess.Popen | None = None
        self.procs: list[subprocess.Popen | None] = [None, None, None]

    @property
    def urls(self) -> list[str]:
        return [f"amqp://guest:guest@127.0.0.1:{self.base_port + i}/%2F" for i in (1, 2, 3)]

    def _cmd(self, i: int) -> list[str]:
        cmd = [sys.executable, "-m", "broker", "--port", str(self.base_port + i + 1),
               "--data-dir", str(self.root / f"m{i}")]
        sets = {"management.tcp.port": 0, "prometheus.tcp.port": 0,
                "clustering.enabled": "true",
                "clustering.etcd_endpoints": f"127.0.0.1:{self.etcd_port}",
                "clustering.etcd_prefix": self.prefix,
                "clustering.port": self.base_port + 10 + i + 1}
        if self.lease_ttl:
            sets["clustering.lease_ttl"] = self.lease_ttl
        for k, v in sets.items():
            cmd += ["--set", f"{k}={v}"]
        return cmd

    def _spawn(self, i: int) -> None:
        with open(self.root / f"m{i}.log", "ab") as log:
            self.procs[i] = subprocess.Popen(self._cmd(i), stdout=subprocess.DEVNULL, stderr=log)

    def start(self) -> None:
        peer = _free_port()
        self.etcd = subprocess.Popen(
            ["etcd", "--name", "e1", "--data-dir", str(self.root / "etcd"),
             "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"e1=http://127.0.0.1:{peer}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.5)
        self._spawn(0)
        _wait(lambda: self.leader_index() == 0, 30, "the first member never led")
        self._spawn(1)
        self._spawn(2)
        self.wait_healthy()

    def _read(self, what: str):
        from broker.cluster.coordinator import Coordinator
        from broker.cluster.etcd_client import EtcdSettings

        async def read():
            c = Coordinator(EtcdSettings(EtcdSettings.parse_endpoints(
                f"127.0.0.1:{self.etcd_port}")), self.prefix, "bench", 5, {})
            await c.client.connect()
            try:
                if what == "leader":
                    record = await c.leader()
                    return record.id if record else None
                return await c.isr()
            finally:
                await c.client.close()

        return asyncio.run(read())

    def leader_index(self) -> int | None:
        lid = self._read("leader")
        for i in range(3):
            path = self.root / f"m{i}" / "cluster" / "id"
            if path.exists() and path.read_text().strip() == lid:
                return i
        return None

    def wait_healthy(self) -> None:
        _wait(lambda: len(self._read("isr") or ()) == 3 and self.leader_index() is not None,
              60, "the three members never were in sync")

    def kill(self, i: int) -> float:
        """SIGKILL member `i`; the time.monotonic() of the signal."""
        proc = self.procs[i]
        assert proc is not None
        at = time.monotonic()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        return at

    def pause(self, i: int) -> float:
        """SIGSTOP member `i`; the time.monotonic() of the signal."""
        proc = self.procs[i]
        assert proc is not None
        at = time.monotonic()
        proc.send_signal(signal.SIGSTOP)
        return at

    def resume(self, i: int) -> None:
        """SIGCONT member `i`; a deposed leader steps down and exits (75), as under a
        supervisor it is then started again, as a follower."""
        proc = self.procs[i]
        assert proc is not None
        proc.send_signal(signal.SIGCONT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            return  # still running: it never lost its term (the pause was short)
        self._spawn(i)

    def restart(self, i: int) -> None:
        self._spawn(i)

    def stop(self) -> None:
        for proc in [*self.procs, self.etcd]:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)


class RabbitCluster:
    """RabbitMQ nodes r1..r3@localhost of rabbit_cluster.sh, already running under `root`."""

    def __init__(self, root: Path, queue: str) -> None:
        self.root = root
        self.queue = queue

    @property
    def urls(self) -> list[str]:
        return [f"amqp://guest:guest@127.0.0.1:568{i}/%2F" for i in (1, 2, 3)]

    def _env(self, i: int) -> dict[str, str]:
        n = i + 1
        base = str(self.root / f"r{n}")
        return {**os.environ, "RABBITMQ_NODENAME": f"r{n}@localhost",
                "RABBITMQ_NODE_PORT": f"568{n}", "RABBITMQ_DIST_PORT": f"2568{n}",
                "RABBITMQ_MNESIA_BASE": f"{base}/mnesia", "RABBITMQ_LOG_BASE": f"{base}/log",
                "RABBITMQ_ENABLED_PLUGINS_FILE": f"{base}/enabled_plugins",
                "RABBITMQ_CONFIG_FILE": f"{base}/rabbitmq", "RABBITMQ_PID_FILE": f"{base}/pid"}

    def _ctl(self, i: int, *args: str) -> str:
        return subprocess.run(["rabbitmqctl", "-n", f"r{i + 1}@localhost", "-q", *args],
                              capture_output=True, text=True, timeout=60, check=True).stdout

    def start(self) -> None:
        pass

    def _queue_row(self) -> dict | None:
        for i in range(3):
            try:
                rows = json.loads(self._ctl(i, "list_queues", "name", "leader", "online",
                                            "--formatter", "json"))
            except Exception:  # noqa: BLE001 - that node is down: ask another
                continue
            return next((r for r in rows if r["name"] == self.queue), None)
        return None

    def leader_index(self) -> int | None:
        row = self._queue_row()
        if not row:
            return None
        return int(str(row["leader"]).split("@")[0].lstrip("r")) - 1

    def wait_healthy(self) -> None:
        _wait(lambda: (row := self._queue_row()) and len(row["online"]) == 3, 120,
              "the queue's three members never were online")

    def kill(self, i: int) -> float:
        """SIGKILL node `i`'s Erlang VM; the time.monotonic() of the signal."""
        pid = self._vm_pid(i)
        at = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        return at

    def _vm_pid(self, i: int) -> int:
        return int(self._ctl(i, "eval", "os:getpid().").strip().strip('"'))

    def pause(self, i: int) -> float:
        """SIGSTOP node `i`'s Erlang VM; the time.monotonic() of the signal."""
        self._paused = self._vm_pid(i)
        at = time.monotonic()
        os.kill(self._paused, signal.SIGSTOP)
        return at

    def resume(self, i: int) -> None:
        os.kill(self._paused, signal.SIGCONT)

    def restart(self, i: int) -> None:
        env = self._env(i)
        subprocess.run(["rabbitmq-server", "-detached"], env=env, check=True, timeout=60,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait(lambda: subprocess.run(
            ["rabbitmqctl", "-n", f"r{i + 1}@localhost", "await_startup", "--timeout", "5"],
            capture_output=True, timeout=30).returncode == 0, 120, f"r{i + 1} never started")

    def stop(self) -> None:
        pass


def measure(cluster, kills: int, fault: str = "kill", pause_s: float = 3.0) -> dict:
    queue = getattr(cluster, "queue", None) or f"failover-{uuid.uuid4().hex[:6]}"
    first = ((cluster.leader_index() or 0) + 1) % 3  # start on a member that is not leader
    publisher = Publisher(cluster.urls, queue, first)
    publisher.start()
    rounds = []
    try:
        _wait(lambda: len(publisher.confirms) > 50, 60, "nothing confirmed")
        cluster.wait_healthy()
        for _ in range(kills):
            leader = cluster.leader_index()
            load = [round(x, 2) for x in os.getloadavg()]
            seen = len(publisher.confirms)
            _wait(lambda s=seen: len(publisher.confirms) > s + 50, 60, "not publishing")
            resume = None
            if fault == "stop" and publisher.connected_to == leader:
                publisher.move_to((leader + 1) % 3)
                seen = len(publisher.confirms)
                _wait(lambda s=seen: len(publisher.confirms) > s + 20, 60, "not publishing")
            on = publisher.connected_to
            if fault == "kill":
                killed = cluster.kill(leader)
            else:
                killed = cluster.pause(leader)
                resume = threading.Timer(pause_s, cluster.resume, (leader,))
                resume.start()  # SIGCONT after pause_s, whatever the publisher sees
            after = publisher.first_confirm_after(killed)
            gap = None if after is None else round(after - killed, 3)
            rounds.append({"killed": leader, "gap_s": gap, "load": load, "fault": fault,
                           "client_on": on})
            print(f"{fault} of member {leader} (the client on member {on}): next confirm "
                  f"after {gap} s (load {load})", flush=True)
            if resume is None:
                cluster.restart(leader)
            else:
                resume.join()
            cluster.wait_healthy()
    finally:
        publisher.stop()
    gaps = [r["gap_s"] for r in rounds if r["gap_s"] is not None]
    return {"rounds": rounds, "median_s": statistics.median(gaps) if gaps else None,
            "min_s": min(gaps, default=None), "max_s": max(gaps, default=None),
            "confirmed": len(publisher.confirms), "reconnects": publisher.errors}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", choices=("pybroker", "rabbitmq"), required=True)
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--fault", choices=("kill", "stop"), default="kill",
                   help="kill: SIGKILL the leader; stop: SIGSTOP it for --pause s, then "
                        "SIGCONT (issue 48)")
    p.add_argument("--pause", type=float, default=3.0, help="s a stopped leader stays stopped")
    p.add_argument("--root", default=None, help="pybroker: a fresh directory (default: "
                   "a temporary one); rabbitmq: rabbit_cluster.sh's ROOT (/tmp/rabbit-cluster)")
    p.add_argument("--base-port", type=int, default=5740, help="pybroker: AMQP ports +1..3")
    p.add_argument("--lease-ttl", type=int, default=None, help="pybroker: clustering.lease_ttl")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if a.target == "pybroker":
        if shutil.which("etcd") is None:
            p.error("etcd is not installed (apt-get install etcd-server)")
        root = Path(a.root or tempfile.mkdtemp(prefix="failover-"))
        cluster = PyCluster(root, a.base_port, a.lease_ttl)
    else:
        cluster = RabbitCluster(Path(a.root or "/tmp/rabbit-cluster"),
                                f"failover-{uuid.uuid4().hex[:6]}")
    cluster.start()
    try:
        if isinstance(cluster, RabbitCluster):  # declare first, so the queue has a leader
            with pika.BlockingConnection(pika.URLParameters(cluster.urls[0])) as conn:
                conn.channel().queue_declare(cluster.queue, durable=True, arguments=QUEUE_ARGS)
        result = {"target": a.target, "lease_ttl": a.lease_ttl, "fault": a.fault,
                  **measure(cluster, a.kills, a.fault, a.pause)}
    finally:
        cluster.stop()
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}))
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
