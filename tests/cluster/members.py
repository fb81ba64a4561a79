"""Broker cluster members as real processes for the failover tests: `python -m broker` with
clustering on, each with its own data directory, AMQP port and replication port, all on one
etcd."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pika

from tests.cluster.etcd_proc import free_port


def ctl(http_port: int, *args: str) -> tuple[int, str, str]:
    """`brokerctl --formatter json ARGS` against the management API on `http_port`:
    (exit status, stdout, stderr)."""
    out = subprocess.run([sys.executable, "-m", "broker.ctl", "--api",
                          f"http://127.0.0.1:{http_port}", "--formatter", "json", *args],
                         capture_output=True, text=True, timeout=30)
    return out.returncode, out.stdout, out.stderr


class Member:
    """One member `name` under `root` (its data in `data_dir`, by default root/name);
    `start()` runs it, `kill()` sends SIGKILL."""

    def __init__(self, root: Path, name: str, etcd_endpoints: str, prefix: str,
                 lease_ttl: int = 2, repl_port: int | None = None,
                 data_dir: Path | None = None, **settings: object) -> None:
        self.name = name
        self.data_dir = data_dir or root / name
        self.amqp_port = free_port()
        self.repl_port = repl_port or free_port()
        self.log_path = root / f"{name}.log"
        sets = {"management.tcp.port": 0, "prometheus.tcp.port": 0,
                "clustering.enabled": "true", "clustering.etcd_endpoints": etcd_endpoints,
                "clustering.etcd_prefix": prefix, "clustering.port": self.repl_port,
                "clustering.lease_ttl": lease_ttl, **settings}
        self.cmd = [sys.executable, "-m", "broker", "--port", str(self.amqp_port),
                    "--data-dir", str(self.data_dir)]
        for key, value in sets.items():
            self.cmd += ["--set", f"{key}={value}"]
        self.proc: subprocess.Popen | None = None

    @property
    def node_id(self) -> str:
        """The id the member made for itself (broker/cluster/node.py), once it started."""
        return (self.data_dir / "cluster" / "id").read_text().strip()

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.amqp_port}/%2F"

    def start(self) -> Member:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps its descriptor
        with log:
            self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=log)
        return self

    def serving(self) -> bool:
        """Does an AMQP handshake on its port succeed? A follower's port is open too (it
        carries clients to the leader), so an open port alone does not say a leader serves."""
        try:
            socket.create_connection(("127.0.0.1", self.amqp_port), timeout=0.5).close()
        except OSError:
            return False
        params = pika.URLParameters(self.url + "?connection_attempts=1&socket_timeout=2")
        try:
            pika.BlockingConnection(params).close()
            return True
        except pika.exceptions.AMQPError:
            return False

    def wait_serving(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.serving():
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: "
                                   f"{self.log_tail()}")
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} did not serve within {timeout} s: {self.log_tail()}")

    def log_tail(self, n: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def kill_tree(self) -> None:
        """SIGKILL the member's worker processes (with `workers` > 1) and then the member:
        the machine's crash, where `kill` alone leaves the workers to notice and stop."""
        if self.proc is None or self.proc.poll() is not None:
            return
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True,
                             text=True)
        for pid in out.stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        self.kill()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
