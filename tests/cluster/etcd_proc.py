"""Real etcd members for the cluster tests: Debian's `etcd` binary on free ports, each with
its own data directory. Tests that need etcd skip with one line when it is not installed
(`.ci/run` installs etcd-server, so CI always runs them)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

ETCD = shutil.which("etcd")


def need_etcd() -> None:
    """Skip (fail with BROKER_ETCD_TEST_REQUIRED set, as in CI) unless both `etcd` and
    `etcdctl` are on PATH, naming the one that is missing."""
    missing = [name for name in ("etcd", "etcdctl") if shutil.which(name) is None]
    if missing:
        why = (f"{' and '.join(missing)} not found (apt-get install etcd-server "
               "etcd-client)")
        if os.environ.get("BROKER_ETCD_TEST_REQUIRED"):
            pytest.fail(why)
        pytest.skip(why)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EtcdCluster:
    """`size` etcd members on 127.0.0.1 under `root`; `endpoints` is "h:p,h:p,..."."""

    def __init__(self, root: Path, size: int = 1) -> None:
        need_etcd()
        self.root = root
        self.members = [(f"e{i}", free_port(), free_port()) for i in range(size)]
        self.procs: dict[str, subprocess.Popen] = {}
        self.initial = ",".join(f"{n}=http://127.0.0.1:{peer}" for n, _c, peer in self.members)

    @property
    def endpoints(self) -> str:
        return ",".join(f"127.0.0.1:{client}" for _n, client, _p in self.members)

    def start(self, name: str | None = None) -> EtcdCluster:
        for n, client, peer in self.members:
            if name is not None and n != name:
                continue
            log = open(self.root / f"{n}.log", "ab")  # noqa: SIM115 - the child keeps it
            with log:
                self.procs[n] = subprocess.Popen(
                    [ETCD, "--name", n, "--data-dir", str(self.root / n),
                     "--listen-client-urls", f"http://127.0.0.1:{client}",
                     "--advertise-client-urls", f"http://127.0.0.1:{client}",
                     "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                     "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                     "--initial-cluster", self.initial, "--initial-cluster-state", "new",
                     "--heartbeat-interval", "50", "--election-timeout", "500"],
                    stdout=subprocess.DEVNULL, stderr=log)
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = subprocess.run(["etcdctl", "--endpoints", self.endpoints, "endpoint",
                                  "health"], capture_output=True, text=True,
                                 env={"ETCDCTL_API": "3", "PATH": "/usr/bin:/bin"})
            if out.returncode == 0:
                return
            time.sleep(0.2)
        raise TimeoutError("etcd did not become healthy")

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.kill()
            proc.wait(10)
        self.procs.clear()
