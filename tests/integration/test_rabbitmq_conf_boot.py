"""`python -m broker --config rabbitmq.conf` (issue 23 item 5): the real broker boots from an
operator's rabbitmq.conf, a client logs in with its default_user, the RabbitMQ keys it does
not act on are logged as warnings with their line, and an unknown key stops it at start
with the key and line named. Runs its own broker process (not against BROKER_TEST_URI)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pika
import pytest


@pytest.fixture(autouse=True)
def _own_broker(embedded_only_module):
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_broker_boots_from_rabbitmq_conf(tmp_path):
    port = _free_port()
    conf = tmp_path / "rabbitmq.conf"
    conf.write_text(f"listeners.tcp.default = 127.0.0.1:{port}\n"
                    "default_user = ops\ndefault_pass = s3cret\n"
                    "management.tcp.port = 0\nprometheus.tcp.port = 0\n"
                    "cluster_formation.peer_discovery_backend = classic_config\n")
    proc = subprocess.Popen([sys.executable, "-m", "broker", "--config", str(conf),
                             "--data-dir", str(tmp_path / "data")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = pika.BlockingConnection(pika.ConnectionParameters(
                    "127.0.0.1", port, credentials=pika.PlainCredentials("ops", "s3cret")))
                break
            except pika.exceptions.AMQPConnectionError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
        ch = conn.channel()
        ch.queue_declare("conf-q")
        ch.basic_publish("", "conf-q", b"hi")
        assert ch.basic_get("conf-q", auto_ack=True)[2] == b"hi"
        conn.close()
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0]
    assert f"{conf}:6: cluster_formation.peer_discovery_backend is a RabbitMQ setting" in out


def test_an_unknown_key_stops_the_broker_at_start(tmp_path):
    conf = tmp_path / "rabbitmq.conf"
    conf.write_text("# ok\nlisteners.tcp.default = 5672\nno_such.setting = 1\n")
    out = subprocess.run([sys.executable, "-m", "broker", "--config", str(conf),
                          "--data-dir", str(tmp_path / "data")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert f"{conf}:3: Conf file attempted to set unknown variable: no_such.setting" in (
        out.stderr)
