"""Run `python -m broker` as a subprocess for crash tests: start on an ephemeral port (read
from the "ready to accept connections on HOST:PORT" log line), SIGTERM, or kill -9."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

READY = re.compile(rb"ready to accept connections on ([\d.]+):(\d+)")
ROOT = Path(__file__).resolve().parents[2]


class BrokerProcess:
    """A broker subprocess on 127.0.0.1:<ephemeral> with `data_dir`; `start()` waits for
    the ready line (bounded), `kill()` sends SIGKILL, `stop()` SIGTERM and waits."""

    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.data_dir = data_dir
        self.extra = extra
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.log: list[bytes] = []

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def start(self, timeout: float = 60.0) -> BrokerProcess:
        # no management or Prometheus listener unless asked for: 15672 / 15692 may be a
        # RabbitMQ's on a machine that compares the two (README "Comparing")
        cmd = [sys.executable, "-m", "broker", "--port", "0", "--data-dir", str(self.data_dir),
               "--set", "management.tcp.port=0", "--set", "prometheus.tcp.port=0", *self.extra]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        ready = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.log.append(line)
                m = READY.search(line)
                if m:
                    self.port = int(m.group(2))
                    ready.set()

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("broker did not start:\n" + b"".join(self.log).decode())
        return self

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._close_pipe()

    def stop(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._close_pipe()
        return code

    def _close_pipe(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        self._pump.join(10)  # EOF after the process exits
        self.proc.stdout.close()

    def output(self) -> str:
        return b"".join(self.log).decode(errors="replace")
