"""A broker of several worker processes for tests: `python -m broker --workers N` as a real
process tree (the node process and its workers), on free ports, with its own data
directory; `workers_broker(n)` starts one, stopped (SIGTERM) after the test."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

READY = "ready to accept connections"
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WorkersBroker:
    """`python -m broker --workers N` with its data in `data_dir`; `url`, `api` (requests
    session on the management API, served by worker 0), `stop()`, `start()` again."""

    def __init__(self, root: Path, workers: int, **settings: object) -> None:
        self.workers = workers
        self.data_dir = root / "data"
        self.port = free_port()
        self.api_port = free_port()
        self.log_path = root / "broker.log"
        sets = {"management.tcp.port": self.api_port, "prometheus.tcp.port": 0,
                "collect_statistics_interval": 200, **settings}
        self.cmd = [sys.executable, "-m", "broker", "--workers", str(workers), "--port",
                    str(self.port), "--data-dir", str(self.data_dir)]
        for key, value in sets.items():
            self.cmd += ["--set", f"{key}={value}"]
        self.proc: subprocess.Popen | None = None
        self.api = requests.Session()
        self.api.auth = ("guest", "guest")

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def api_get(self, path: str) -> object:
        reply = self.api.get(f"http://127.0.0.1:{self.api_port}{path}", timeout=10)
        reply.raise_for_status()
        return reply.json()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def start(self, timeout: float = 60.0) -> WorkersBroker:
        start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + timeout
        while READY not in self.log()[start:]:
            if self.proc.poll() is not None:
                raise AssertionError(f"exited {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"not ready in {timeout} s:\n{self.log()}")
            time.sleep(0.05)
        return self

    def stop(self) -> int:
        """SIGTERM and wait; the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def worker_pids(self) -> list[int]:
        """The worker processes' pids (children of the node process)."""
        assert self.proc is not None
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True,
                             text=True)
        return [int(pid) for pid in out.stdout.split()]


@pytest.fixture
def workers_broker(tmp_path: Path) -> Iterator[Callable[..., WorkersBroker]]:
    started: list[WorkersBroker] = []

    def start(workers: int = 2, **settings: object) -> WorkersBroker:
        broker = WorkersBroker(tmp_path / f"b{len(started)}", workers, **settings)
        (tmp_path / f"b{len(started)}").mkdir()
        started.append(broker)
        return broker.start()

    yield start
    for broker in started:
        if broker.proc is not None:
            broker.stop()
            assert "Traceback" not in broker.log(), broker.log()


def run_suite_against(broker: WorkersBroker, path: str, timeout: int = 60,
                      **env: str) -> None:
    """Run the test directory `path` (tests/integration, tests/ops) in its own pytest
    against `broker` (BROKER_TEST_URI / BROKER_TEST_API and the `env` given); fail with the
    tail of its output unless every test that ran passed."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("BROKER_", "PYTEST_"))}
    clean.update(BROKER_TEST_URI=broker.url,
                 BROKER_TEST_API=f"http://127.0.0.1:{broker.api_port}", **env)
    out = subprocess.run([sys.executable, "-m", "pytest", path, "-q", "-p", "no:cacheprovider",
                          "-p", "no:randomly", "--timeout", str(timeout)],
                         cwd=ROOT, env=clean, capture_output=True, text=True, timeout=880)
    tail = "\n".join(out.stdout.splitlines()[-40:])
    assert out.returncode == 0, tail
    assert " passed" in tail and " failed" not in tail, tail
