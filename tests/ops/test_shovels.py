"""Dynamic shovels (issue 21, rabbitmq.com/shovel-dynamic.html) between two real brokers in
this process: the session broker runs the shovel (runtime parameter `shovel` through the
HTTP API), a second EmbeddedBroker is the remote end. Messages arrive once, in order, with
their properties byte for byte; delete-after, validation, status, restart and a peer that is
down and comes back are covered.

With BROKER_TEST_URI / BROKER_TEST_API set (a RabbitMQ 3.10.8 with rabbitmq_shovel and its
management plugin), RabbitMQ runs the shovels and this broker (an EmbeddedBroker) is the
other end; the same tests pass there, where RabbitMQ shows something else the test says so.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator

import pika
import pytest

from tests.ops.amqp_messages import connect, fill, get_all, put_shovel, shovel_status
from tests.ops.conftest import EXTERNAL, RABBITMQ
from tests.polling import wait_for

# seconds between a shovel's failure and its restart: RabbitMQ 3.10.8 does not come back
# with a fraction of a second (its timer needs whole milliseconds), so 1 s there
DELAY = 1 if EXTERNAL else 0.2


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def peer() -> Iterator[object]:
    from broker.embedded import EmbeddedBroker

    b = EmbeddedBroker().start()
    try:
        yield b
    finally:
        b.stop()


_conn = connect
_put = put_shovel
_fill = fill
_status = shovel_status


def _drain(url: str, queue: str, n: int, timeout: float = 20.0) -> list:
    """n messages from `queue` (acked), waiting up to `timeout` (for the queue, which the
    shovel declares when it starts, too): [(properties, body)]."""
    return [(props, body) for _m, props, body in get_all(url, queue, n, timeout,
                                                            wait_for_queue=True)]


def test_a_queue_is_shovelled_to_another_broker_unchanged_and_in_order(api, broker, peer):
    src, dest, name = uniq("sh-src"), uniq("sh-dest"), uniq("shovel")
    props = [pika.BasicProperties(delivery_mode=2, message_id=f"m{i}", priority=i % 3,
                                  headers={"i": i, "nested": {"k": [i, "x"]}})
             for i in range(300)]
    _fill(broker.url, src, 300, props)
    r = _put(api, name, {"src-uri": "amqp://", "src-queue": src,
                         "dest-uri": [peer.url], "dest-queue": dest,
                         "src-prefetch-count": 50})
    assert r.status_code == 201, r.text
    try:
        got = _drain(peer.url, dest, 300)
        assert [body for _p, body in got] == [b"%d" % i for i in range(300)]
        assert [(p.message_id, p.priority, p.headers, p.delivery_mode) for p, _b in got] == [
            (p.message_id, p.priority, p.headers, 2) for p in props]
        s = _status(api, name)
        assert s["state"] == "running" and s["type"] == "dynamic"
        assert s["src_queue"] == src and s["dest_queue"] == dest
        assert "guest:guest" not in s["dest_uri"]
        assert s.get("messages_moved", 300) == 300  # this broker's addition to the status
        with _conn(broker.url) as conn:
            assert conn.channel().queue_declare(src, passive=True).method.message_count == 0
        got_param = api.get(f"/api/parameters/shovel/%2F/{name}").json()
        assert got_param["value"]["src-queue"] == src and got_param["component"] == "shovel"
    finally:
        assert api.delete(f"/api/parameters/shovel/%2F/{name}").status_code == 204
        with _conn(broker.url) as conn:
            conn.channel().queue_delete(src)
    wait_for(lambda: _status(api, name) is None)
    assert api.get(f"/api/parameters/shovel/%2F/{name}").status_code == 404


def test_delete_after_queue_length_moves_the_depth_then_deletes_itself(api, broker, peer):
    src, dest, name = uniq("sh-src"), uniq("sh-dest"), uniq("shovel")
    _fill(broker.url, src, 40)
    try:
        assert _put(api, name, {"src-uri": "amqp://", "src-queue": src,
                                "dest-uri": peer.url, "dest-queue": dest,
                                "src-delete-after": "queue-length",
                                "ack-mode": "on-publish"}).status_code == 201
        wait_for(lambda: api.get(f"/api/parameters/shovel/%2F/{name}").status_code == 404,
                 timeout=20)
        assert _status(api, name) is None
        assert len(_drain(peer.url, dest, 40)) == 40
    finally:
        with _conn(broker.url) as conn:
            conn.channel().queue_delete(src)


def test_an_exchange_is_shovelled_with_forward_and_timestamp_headers(api, broker, peer):
    name, dest = uniq("shovel"), uniq("sh-dest")
    with _conn(peer.url) as conn:
        conn.channel().queue_declare(dest, durable=True)
    assert _put(api, name, {"src-uri": "amqp://", "src-exchange": "amq.topic",
                            "src-exchange-key": "orders.#", "dest-uri": peer.url,
                            "dest-exchange": "", "dest-exchange-key": dest,
                            "dest-add-forward-headers": True,
                            "dest-add-timestamp-header": True,
                            "dest-publish-properties": {"app_id": "shovelled"}}).status_code == 201
    try:
        wait_for(lambda: (_status(api, name) or {}).get("state") == "running", timeout=20)
        with _conn(broker.url) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_publish("amq.topic", "orders.eu", b"o1")
            ch.basic_publish("amq.topic", "invoices.eu", b"not me")
        (props, body), = _drain(peer.url, dest, 1)
        assert body == b"o1" and props.app_id == "shovelled"
        forwarded = props.headers["x-shovelled"][0]
        assert forwarded["shovel-name"] == name and forwarded["src-exchange"] == "amq.topic"
        assert forwarded["dest-exchange-key"] == dest and "guest:guest" not in forwarded["dest-uri"]
        assert abs(props.headers["x-shovelled-timestamp"] - time.time()) < 60
        assert _drain(peer.url, dest, 1, timeout=0.5) == []
    finally:
        api.delete(f"/api/parameters/shovel/%2F/{name}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_peer_that_is_down_shows_terminated_and_is_retried(api, broker):
    from broker.embedded import EmbeddedBroker

    port = _free_port()
    src, dest, name = uniq("sh-src"), uniq("sh-dest"), uniq("shovel")
    _fill(broker.url, src, 10, [pika.BasicProperties(delivery_mode=2)] * 10)
    later = None
    try:
        assert _put(api, name, {"src-uri": "amqp://", "src-queue": src,
                                "dest-uri": f"amqp://guest:guest@127.0.0.1:{port}/%2F",
                                "dest-queue": dest, "reconnect-delay": DELAY}).status_code == 201
        if RABBITMQ:  # RabbitMQ 3.10.8 shows "starting", without a reason, while it retries
            time.sleep(1)
            assert _status(api, name)["state"] == "starting"
        else:  # this broker says why
            wait_for(lambda: (_status(api, name) or {}).get("state") == "terminated",
                     timeout=20)
            assert "cannot connect" in _status(api, name)["reason"]
        later = EmbeddedBroker(port=port).start()
        wait_for(lambda: (_status(api, name) or {}).get("state") == "running", timeout=20)
        got = _drain(later.url, dest, 10)
        assert [b for _p, b in got] == [b"%d" % i for i in range(10)]
        assert api.delete(f"/api/shovels/vhost/%2F/{name}/restart").status_code == 204
        wait_for(lambda: (_status(api, name) or {}).get("state") == "running", timeout=20)
    finally:
        api.delete(f"/api/parameters/shovel/%2F/{name}")
        with _conn(broker.url) as conn:
            conn.channel().queue_delete(src)
        if later is not None:
            later.stop()


@pytest.mark.parametrize(("value", "error"), [
    ({"src-uri": "amqp://", "src-queue": "a", "src-exchange": "x", "dest-uri": "amqp://"},
     "Cannot specify 'src-exchange' and 'src-queue'"),
    ({"src-uri": "amqp://", "dest-uri": "amqp://"}, "Must specify 'src-exchange' or 'src-queue'"),
    ({"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "ack-mode": "no-ack",
      "src-delete-after": 5}, "Cannot specify 'no-ack' and numerical 'delete-after'"),
    ({"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://",
      "src-delete-after": "later"}, "src-delete-after should be a number greater than"),
])
def test_invalid_definitions_are_400_validation_failed(api, value, error):
    name = uniq("bad")
    r = _put(api, name, value)
    assert r.status_code == 400
    reason = r.json()["reason"]
    assert reason.startswith("Validation failed\n\n") and error in reason
    assert api.get(f"/api/parameters/shovel/%2F/{name}").status_code == 404


def test_unknown_component_and_unknown_shovel(api):
    r = api.put("/api/parameters/no-such-component/%2F/x", json={"value": {}})
    assert r.status_code == 400 and "component no-such-component not found" in r.json()["reason"]
    assert api.delete("/api/shovels/vhost/%2F/nope/restart").status_code == 404
    assert api.delete("/api/parameters/shovel/%2F/nope").status_code == 404


def test_shovel_parameters_are_exported_and_imported(api, broker, peer):
    name, src = uniq("shovel"), uniq("sh-src")
    value = {"src-uri": "amqp://", "src-queue": src, "dest-uri": peer.url,
             "dest-queue": uniq("sh-dest")}
    assert _put(api, name, value).status_code == 201
    try:
        doc = api.get("/api/definitions").json()
        mine = [p for p in doc["parameters"] if p["name"] == name]
        assert mine == [{"vhost": "/", "component": "shovel", "name": name, "value": value}]
        assert api.delete(f"/api/parameters/shovel/%2F/{name}").status_code == 204
        r = api.post("/api/definitions", json={"parameters": mine})
        assert r.status_code in (200, 201, 204), r.text
        assert api.get(f"/api/parameters/shovel/%2F/{name}").json()["value"] == value
        wait_for(lambda: (_status(api, name) or {}).get("state") == "running", timeout=20)
    finally:
        api.delete(f"/api/parameters/shovel/%2F/{name}")
        with _conn(broker.url) as conn:
            conn.channel().queue_delete(src)


def test_kill_9_of_the_destination_mid_transfer_loses_nothing(api, broker, tmp_path):
    """on-confirm: the source acks only what the destination confirmed (fsynced), so a
    destination killed with SIGKILL and started again has every message at least once,
    duplicates bounded by the prefetch."""
    from tests.recovery.brokerproc import BrokerProcess

    port, n, prefetch = _free_port(), 3000, 100
    opts = ("--port", str(port))
    peer = BrokerProcess(tmp_path / "peer", *opts).start()
    src, dest, name = uniq("sh-src"), uniq("sh-dest"), uniq("shovel")
    _fill(broker.url, src, n, [pika.BasicProperties(delivery_mode=2)] * n)
    try:
        assert _put(api, name, {"src-uri": "amqp://", "src-queue": src, "dest-uri": peer.url,
                                "dest-queue": dest, "reconnect-delay": DELAY,
                                "src-prefetch-count": prefetch}).status_code == 201

        def moved() -> int:
            with _conn(peer.url) as conn:
                ch = conn.channel()
                try:
                    return ch.queue_declare(dest, passive=True).method.message_count
                except pika.exceptions.ChannelClosedByBroker:
                    return 0

        wait_for(lambda: moved() >= 300, timeout=30)
        peer.kill()  # mid-transfer
        peer = BrokerProcess(tmp_path / "peer", *opts).start()
        seen: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(set(seen)) < n and time.monotonic() < deadline:
            seen += [b for _p, b in _drain(peer.url, dest, n, timeout=1)]
        assert set(seen) == {b"%d" % i for i in range(n)}
        assert len(seen) - n <= prefetch
        with _conn(broker.url) as conn:
            assert conn.channel().queue_declare(src, passive=True).method.message_count == 0
    finally:
        api.delete(f"/api/parameters/shovel/%2F/{name}")
        with _conn(broker.url) as conn:
            conn.channel().queue_delete(src)
        peer.stop()


def test_brokerctl_parameter_and_shovel_commands(api, api_base, broker, peer):
    import subprocess
    import sys

    def ctl(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "broker.ctl", "--api", api_base, *args],
                              capture_output=True, text=True, timeout=60)
        assert not ok or proc.returncode == 0, proc.stderr
        return proc

    name, src = uniq("shovel"), uniq("sh-src")
    value = json.dumps({"src-uri": "amqp://", "src-queue": src, "dest-uri": peer.url,
                        "dest-queue": uniq("sh-dest")})
    out = ctl("set_parameter", "shovel", name, value).stdout
    assert out.startswith(f'Setting runtime parameter "{name}" for component "shovel"')
    try:
        listed = ctl("-q", "list_parameters").stdout.splitlines()
        assert any(line.startswith(f"shovel\t{name}\t") for line in listed)
        wait_for(lambda: (_status(api, name) or {}).get("state") == "running", timeout=20)
        status = ctl("shovel_status").stdout.splitlines()
        assert status[0].startswith("Shovel status on node ")
        assert status[1].split("\t") == ["destination", "destination_protocol",
                                         "destination_queue", "last_changed", "name", "source",
                                         "source_protocol", "source_queue", "state",
                                         "termination_reason", "type", "vhost"]
        row = next(r.split("\t") for r in status[2:] if f"\t{name}\t" in r)
        assert row[8] == "running" and row[7] == src and row[5] == "amqp://"
        assert ctl("restart_shovel", name).stdout.startswith(f"Restarting dynamic Shovel {name}")
        assert ctl("delete_shovel", name).stdout.startswith(f"Deleting shovel {name} in vhost /")
        assert api.get(f"/api/parameters/shovel/%2F/{name}").status_code == 404
        assert ctl("set_parameter", "shovel", name, "{not json", ok=False).returncode == 64
    finally:
        ctl("clear_parameter", "shovel", name, ok=False)
        with _conn(broker.url) as conn:
            conn.channel().queue_delete(src)
