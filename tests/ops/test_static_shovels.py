"""Static shovels from the configuration file (issue 21; rabbitmq.com/shovel-static.html,
RabbitMQ's advanced.config `rabbitmq_shovel` `shovels`, here `[shovels.NAME]` TOML tables
with the same keys): a broker process started with two of them moves messages from a queue
it declares and from an exchange through a server-named queue, shows them in /api/shovels
as `static`, refuses to delete them as parameters, and a bad definition stops the broker
from starting with a message that names it."""

from __future__ import annotations

import socket
import subprocess
import sys

import pika
import pytest
import requests

from tests.ops.amqp_messages import get_all
from tests.ops.conftest import EXTERNAL
from tests.polling import wait_for
from tests.recovery.brokerproc import ROOT, BrokerProcess

pytestmark = pytest.mark.skipif(EXTERNAL, reason="this broker's configuration file")

CONFIG = """
[shovels.from_queue]
ack_mode = "on_confirm"
reconnect_delay = 1
[shovels.from_queue.source]
uris = ["amqp://"]
declarations = [["queue.declare", {queue = "st-src", durable = true}]]
queue = "st-src"
prefetch_count = 50
[shovels.from_queue.destination]
uris = ["amqp://"]
declarations = [["queue.declare", {queue = "st-dest", durable = true}]]
publish_fields = {exchange = "", routing_key = "st-dest"}
add_forward_headers = true

[shovels.from_exchange.source]
uris = ["amqp://"]
declarations = [["exchange.declare", {exchange = "st-fanout", type = "fanout"}],
                "queue.declare",
                ["queue.bind", {exchange = "st-fanout", queue = ""}]]
queue = ""
[shovels.from_exchange.destination]
uris = ["amqp://"]
declarations = [["queue.declare", {queue = "st-dest2"}]]
publish_fields = {exchange = "", routing_key = "st-dest2"}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, queue: str, n: int) -> list:
    """Up to n messages from `queue`: [(properties, body)]."""
    return [(props, body) for _m, props, body in get_all(url, queue, n)]


def _shovels(api: str) -> dict:
    """/api/shovels by name."""
    items = requests.get(f"{api}/api/shovels", auth=("guest", "guest"), timeout=10)
    return {s["name"]: s for s in items.json()}


def _refused(tmp_path, config_text: str) -> str:
    """Start a broker with `config_text` as its configuration file; it must refuse to
    start. Returns what it printed."""
    config = tmp_path / "broker.toml"
    config.write_text(config_text)
    proc = subprocess.run([sys.executable, "-m", "broker", "--config", str(config),
                           "--port", "0", "--data-dir", str(tmp_path / "d")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    return proc.stderr + proc.stdout


def _started(tmp_path, config_text: str) -> tuple[BrokerProcess, str, dict]:
    """A broker process with `config_text` as its configuration file, once all its static
    shovels run: (process, API base URL, /api/shovels by name)."""
    config = tmp_path / "broker.toml"
    config.write_text(config_text)
    api_port = _free_port()
    b = BrokerProcess(tmp_path / "data", "--config", str(config), "--set",
                      f"management.tcp.port={api_port}").start()
    api = f"http://127.0.0.1:{api_port}"
    try:
        wait_for(lambda: {s["state"] for s in _shovels(api).values()} == {"running"},
                 timeout=20)
    except BaseException:
        b.stop()
        raise
    return b, api, _shovels(api)


def test_static_shovels_run_from_the_configuration_file(tmp_path):
    b, api, status = _started(tmp_path, CONFIG)
    try:
        assert set(status) == {"from_queue", "from_exchange"}
        assert {s["type"] for s in status.values()} == {"static"}
        with pika.BlockingConnection(pika.URLParameters(b.url)) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            for i in range(20):
                ch.basic_publish("", "st-src", b"q%d" % i)
                ch.basic_publish("st-fanout", "", b"x%d" % i)
        got = _get(b.url, "st-dest", 20)
        assert [body for _p, body in got] == [b"q%d" % i for i in range(20)]
        forward = got[0][0].headers["x-shovelled"][0]
        assert forward["shovel-type"] == "static" and forward["shovel-name"] == "from_queue"
        assert [body for _p, body in _get(b.url, "st-dest2", 20)] == \
            [b"x%d" % i for i in range(20)]
        r = requests.delete(f"{api}/api/parameters/shovel/%2F/from_queue",
                            auth=("guest", "guest"), timeout=10)
        assert r.status_code == 404  # not a parameter: only the configuration removes it
        assert "from_queue" in _shovels(api)
    finally:
        b.stop()


def test_a_bad_static_shovel_stops_the_broker_with_a_clear_error(tmp_path):
    out = _refused(tmp_path, '[shovels.broken.source]\nuris = ["http://x"]\nqueue = "a"\n'
                             '[shovels.broken.destination]\nuris = ["amqp://"]\n')
    assert "shovels.broken.source.uris" in out


def test_static_shovels_with_amqp10_ends(tmp_path):
    """`protocol = "amqp10"` ends in the configuration file (rabbit_amqp10_shovel:parse's
    keys): a local queue to an AMQP 1.0 peer's address with `target_address` and the
    destination tables, and the peer's address back to a local queue."""
    proton = pytest.importorskip("proton")
    from tests.ops.amqp10_peer import Amqp10Peer

    peer = Amqp10Peer().start()
    peer.put("inbox", [proton.Message(body=b"in%d" % i, inferred=True) for i in range(10)])
    b, api, status = _started(tmp_path, f"""
[shovels.to_peer]
reconnect_delay = 1
[shovels.to_peer.source]
uris = ["amqp://"]
declarations = [["queue.declare", {{queue = "st10-src", durable = true}}]]
queue = "st10-src"
[shovels.to_peer.destination]
protocol = "amqp10"
uris = ["{peer.uri}"]
target_address = "outbox"
application_properties = {{origin = "static"}}
message_annotations = {{note = "from-config"}}
properties = {{subject = "subj"}}
add_forward_headers = true

[shovels.from_peer]
reconnect_delay = 1
[shovels.from_peer.source]
protocol = "amqp10"
uris = ["{peer.uri}"]
source_address = "inbox"
prefetch_count = 5
[shovels.from_peer.destination]
uris = ["amqp://"]
declarations = [["queue.declare", {{queue = "st10-dest"}}]]
publish_fields = {{exchange = "", routing_key = "st10-dest"}}
""")
    try:
        assert (status["to_peer"]["dest_protocol"], status["to_peer"]["dest_address"]) == (
            "amqp10", "outbox")
        assert (status["from_peer"]["src_protocol"], status["from_peer"]["src_address"]) == (
            "amqp10", "inbox")
        with pika.BlockingConnection(pika.URLParameters(b.url)) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            for i in range(10):
                ch.basic_publish("", "st10-src", b"out%d" % i)
        wait_for(lambda: len(peer.messages("outbox")) >= 10, timeout=15)
        sent = peer.messages("outbox")
        assert [bytes(m.body) for m in sent] == [b"out%d" % i for i in range(10)]
        assert sent[0].properties["origin"] == "static" and sent[0].subject == "subj"
        assert sent[0].annotations == {"note": "from-config"}
        assert sent[0].properties["shovel-type"] == "static"
        assert [body for _p, body in _get(b.url, "st10-dest", 10)] == [
            b"in%d" % i for i in range(10)]
    finally:
        b.stop()
        peer.stop()


def test_a_static_amqp10_end_without_its_address_is_refused(tmp_path):
    out = _refused(tmp_path, '[shovels.broken.source]\nprotocol = "amqp10"\n'
                             'uris = ["amqp://h"]\nqueue = "a"\n'
                             '[shovels.broken.destination]\nuris = ["amqp://"]\n')
    assert "shovels.broken.source: unknown key(s) ['queue'] for amqp10" in out
