"""`python -m broker` when a port it needs is taken (issue 33 item 3.1): one line on stderr
naming the listener, the address and the setting that moves it, a non-zero exit, no
traceback. One real process per listener kind the broker has (AMQP, AMQPS, management API,
Prometheus; there is no clustering listener). Own processes, so skipped under
BROKER_TEST_URI."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from certs import TestCA

pytestmark = pytest.mark.usefixtures("embedded_only")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def held() -> Iterator[int]:
    """A port on 127.0.0.1 that another process (this one) is listening on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def run_broker(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m broker` with every listener on a free port or off, then `args`."""
    cmd = [sys.executable, "-m", "broker", "--port", "0", "--data-dir", str(tmp_path / "data"),
           "--set", "management.tcp.port=0", "--set", "prometheus.tcp.port=0", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def assert_one_line(proc: subprocess.CompletedProcess[str], expected: str) -> None:
    assert proc.returncode == 69, proc.stderr  # EX_UNAVAILABLE, not a crash's 1
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[-1] == expected


def test_amqp_port_in_use(tmp_path, held):
    proc = run_broker(tmp_path, "--port", str(held))
    assert_one_line(proc, f"python -m broker: cannot start the AMQP listener on "
                          f"127.0.0.1:{held}: address already in use; give it another port "
                          f"with --port N (listeners.tcp.default in a rabbitmq.conf)")


def test_amqps_port_in_use(tmp_path, held):
    ca = TestCA(str(tmp_path))
    server = ca.issue("broker-under-test", server=True)
    proc = run_broker(tmp_path, "--set", f"listeners.ssl.default={held}",
                      "--set", f"ssl_options.certfile={server.cert}",
                      "--set", f"ssl_options.keyfile={server.key}")
    assert_one_line(proc, f"python -m broker: cannot start the AMQPS (TLS) listener on "
                          f"127.0.0.1:{held}: address already in use; give it another port "
                          f"with --set listeners.ssl.default=N")


def test_management_port_in_use(tmp_path, held):
    proc = run_broker(tmp_path, "--set", f"management.tcp.port={held}")
    assert_one_line(proc, f"python -m broker: cannot start the management API and UI listener "
                          f"on 127.0.0.1:{held}: address already in use; give it another port "
                          f"with --set management.tcp.port=N (0 turns it off)")


def test_prometheus_port_in_use(tmp_path, held):
    proc = run_broker(tmp_path, "--set", f"prometheus.tcp.port={held}")
    assert_one_line(proc, f"python -m broker: cannot start the Prometheus listener on "
                          f"127.0.0.1:{held}: address already in use; give it another port "
                          f"with --set prometheus.tcp.port=N (0 turns it off)")


def test_an_address_the_machine_lacks_names_the_address_setting(tmp_path):
    proc = run_broker(tmp_path, "--host", "192.0.2.1")  # TEST-NET-1: never a local address
    assert_one_line(proc, "python -m broker: cannot start the AMQP listener on 192.0.2.1:0: "
                          "cannot assign requested address; give it another address with "
                          "--host ADDRESS")
