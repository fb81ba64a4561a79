"""AMQP 1.0 dynamic shovels (src-protocol / dest-protocol `amqp10`, rabbit_amqp10_shovel in
RabbitMQ 3.10.8): the session broker runs the shovel (runtime parameter through the HTTP
API); the AMQP 1.0 end is tests/ops/amqp10_peer.py, a proton Container.listen peer with
in-memory queues, in a thread. Covered: rabbit-hole's declaration stored and returned as
given; 0-9-1 queue -> 1.0 address with RabbitMQ's properties, application properties and
forward / timestamp headers; 1.0 address -> 0-9-1 queue; on-confirm across a peer restart;
src-delete-after; a peer that is not there yet.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pika
import pytest

from tests.ops.amqp_messages import depth, fill, get_all, put_shovel, shovel_status
from tests.ops.conftest import EXTERNAL
from tests.polling import wait_for

proton = pytest.importorskip("proton")

from tests.ops.amqp10_peer import Amqp10Peer, free_port  # noqa: E402

pytestmark = pytest.mark.skipif(EXTERNAL, reason="drives this broker's shovels and a local "
                                "AMQP 1.0 peer")


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def peer() -> Iterator[Amqp10Peer]:
    p = Amqp10Peer().start()
    try:
        yield p
    finally:
        p.stop()


_put = put_shovel
_status = shovel_status
_fill = fill
_depth = depth


def _state(api, name: str) -> str | None:
    return (_status(api, name) or {}).get("state")


def _drain(url: str, queue: str, n: int, timeout: float = 10.0) -> list:
    return get_all(url, queue, n, timeout)


RABBIT_HOLE = {  # rabbit-hole v2.15.0's shovel test declaration, field for field
    "ack-mode": "on-confirm", "reconnect-delay": 20,
    "src-uri": ["amqp://127.0.0.1/%2f"], "src-address": "mySourceQueue",
    "src-protocol": "amqp10", "src-prefetch-count": 42, "src-delete-after": "never",
    "dest-uri": ["amqp://127.0.0.1/%2f", "amqp://localhost/%2f"], "dest-protocol": "amqp10",
    "dest-address": "myDestQueue", "dest-add-forward-headers": True,
    "dest-add-timestamp-header": True, "dest-application-properties": {"key": "value"},
    "dest-message-annotations": {"annotation": "something"},
    "dest-properties": {"prop0": "value0"},
}


def test_rabbit_hole_declaration_is_stored_returned_and_deleted(api):
    name = "rabbit/hole"
    r = api.put("/api/parameters/shovel/%2F/rabbit%2Fhole",
                json={"value": RABBIT_HOLE, "component": "shovel", "name": name})
    assert r.status_code in (201, 204), r.text
    try:
        got = api.get("/api/parameters/shovel/%2F/rabbit%2Fhole").json()
        assert got["name"] == name and got["component"] == "shovel" and got["vhost"] == "/"
        assert got["value"] == RABBIT_HOLE
        s = wait_for(lambda: _status(api, name))
        assert s["src_protocol"] == "amqp10" and s["dest_protocol"] == "amqp10"
        assert s["src_address"] == "mySourceQueue" and s["dest_address"] == "myDestQueue"
        # amqp10_client refuses a URI with a path ("/%2f"): the link cannot start
        wait_for(lambda: _state(api, name) == "terminated", timeout=10)
        assert "path_segment_not_supported" in _status(api, name)["reason"]
    finally:
        assert api.delete("/api/parameters/shovel/%2F/rabbit%2Fhole").status_code == 204
    assert api.get("/api/parameters/shovel/%2F/rabbit%2Fhole").status_code == 404
    wait_for(lambda: _status(api, name) is None)


@pytest.mark.parametrize(("value", "error"), [
    ({"src-protocol": "amqp10", "src-uri": "amqp://h", "dest-uri": "amqp://",
      "dest-queue": "q"}, 'Key "src-address" not found'),
    ({"src-protocol": "amqp10", "src-uri": "amqp://h", "src-address": "a",
      "src-queue": "q", "dest-uri": "amqp://", "dest-queue": "q"},
     "Unrecognised terms ['src-queue']"),
    ({"src-uri": "amqp://", "src-queue": "q", "dest-protocol": "amqp10",
      "dest-uri": "amqp://h", "dest-address": "a",
      "dest-application-properties": {"n": 1}}, "n should be binary"),
    ({"src-uri": "amqp://", "src-queue": "q", "dest-protocol": "amqp1",
      "dest-uri": "amqp://h"}, "dest-protocol should be one of amqp10, amqp091"),
])
def test_invalid_amqp10_definitions_are_400(api, value, error):
    name = uniq("bad")
    r = _put(api, name, value)
    assert r.status_code == 400
    assert error in r.json()["reason"]
    assert api.get(f"/api/parameters/shovel/%2F/{name}").status_code == 404


def test_amqp091_queue_to_amqp10_address(api, broker, peer):
    src, address, name = uniq("sh10-src"), uniq("addr"), uniq("shovel10")
    props = [pika.BasicProperties(delivery_mode=2, message_id=f"m{i}", content_type="text/plain",
                                  correlation_id="c", priority=3, app_id="app",
                                  headers={"i": i, "s": "x", "nested": {"k": 1}})
             for i in range(20)]
    _fill(broker.url, src, 20, props)
    before = time.time()
    assert _put(api, name, {"src-uri": "amqp://", "src-queue": src,
                            "dest-protocol": "amqp10", "dest-uri": peer.uri,
                            "dest-address": address, "dest-add-forward-headers": True,
                            "dest-add-timestamp-header": True,
                            "dest-application-properties": {"key": "value"},
                            "dest-message-annotations": {"annotation": "something"},
                            "dest-properties": {"subject": "subj", "prop0": "ignored"},
                            "src-prefetch-count": 5}).status_code == 201
    try:
        wait_for(lambda: len(peer.messages(address)) >= 20, timeout=10)
        got = peer.messages(address)
        assert [bytes(m.body) for m in got] == [b"%d" % i for i in range(20)]
        m = got[3]
        assert m.id == "m3" and m.content_type == "text/plain" and m.correlation_id == "c"
        assert m.durable is True and m.subject == "subj"
        assert abs(m.creation_time - time.time()) < 60 and m.creation_time >= before - 1
        assert m.annotations == {"annotation": "something"}
        ap = m.properties
        assert ap["key"] == "value" and ap["src-queue"] == src
        assert ap["shovel-name"] == name and ap["shovel-type"] == "dynamic"
        assert ap["shovelled-by"] == api.get("/api/cluster-name").json()["name"]
        assert ap["i"] == 3 and ap["s"] == "x" and "nested" not in ap
        assert ap["priority"] == 3 and ap["app_id"] == "app" and ap["routing_key"] == src
        assert ap["exchange"] == ""
        s = _status(api, name)
        assert s["state"] == "running" and s["dest_protocol"] == "amqp10"
        assert s["src_protocol"] == "amqp091" and s["dest_address"] == address
        assert s["src_queue"] == src
        wait_for(lambda: _depth(broker.url, src) == 0)
    finally:
        assert api.delete(f"/api/parameters/shovel/%2F/{name}").status_code == 204
        with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
            conn.channel().queue_delete(src)


def test_amqp10_address_to_amqp091_queue(api, api_base, broker, peer):
    address, dest, name = uniq("addr"), uniq("sh10-dest"), uniq("shovel10")
    peer.put(address, [proton.Message(body=b"b%d" % i, inferred=True, id=f"x{i}")
                       for i in range(30)] + [proton.Message(body="text")])
    assert _put(api, name, {"src-protocol": "amqp10", "src-uri": peer.uri,
                            "src-address": address, "dest-uri": "amqp://",
                            "dest-queue": dest, "dest-add-forward-headers": True,
                            "src-prefetch-count": 10}).status_code == 201
    try:
        wait_for(lambda: _state(api, name) == "running", timeout=10)
        got = _drain(broker.url, dest, 31)
        bodies = [b for _m, _p, b in got]
        assert bodies[:30] == [b"b%d" % i for i in range(30)]
        # an amqp-value body crosses as its AMQP encoding (amqp10_msg:body_bin)
        assert bodies[30] == b"\x00\x53\x77\xa1\x04text"
        _m, p, _b = got[0]
        assert p.message_id is None  # only the body crosses from AMQP 1.0
        fwd = p.headers["x-shovelled"][0]
        assert fwd["shovel-name"] == name and fwd["dest-queue"] == dest
        assert "src-queue" not in fwd and "src-exchange" not in fwd
        wait_for(lambda: peer.moved[address] == 31)
        s = _status(api, name)
        assert s["src_protocol"] == "amqp10" and s["src_address"] == address
        assert s["dest_queue"] == dest and s["messages_moved"] == 31
        # rabbitmqctl shovel_status adds the endpoint columns its shovels have
        # (ShovelStatusCommand details_to_map): an AMQP 1.0 source shows its address
        import subprocess
        import sys
        out = subprocess.run([sys.executable, "-m", "broker.ctl", "--api", api_base,
                              "shovel_status"], capture_output=True, text=True,
                             timeout=60).stdout.splitlines()
        columns = out[1].split("\t")
        assert {"source_address", "destination_queue"} <= set(columns), columns
        row = dict(zip(columns, next(r.split("\t") for r in out[2:] if f"\t{name}\t" in r),
                       strict=True))
        assert (row["source_address"], row["destination_queue"]) == (address, dest)
        assert (row["source_protocol"], row["destination_protocol"]) == ("amqp10", "amqp091")
    finally:
        api.delete(f"/api/parameters/shovel/%2F/{name}")
        with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
            conn.channel().queue_delete(dest)


def test_on_confirm_loses_nothing_when_the_peer_restarts(api, broker):
    """Under on-confirm a source message is acked only after the peer accepted it, so a
    peer stopped mid-stream (its in-memory queue gone with it) and started again holds,
    with what it had accepted before, every message at least once."""
    port, n = free_port(), 400
    src, address, name = uniq("sh10-src"), uniq("addr"), uniq("shovel10")
    _fill(broker.url, src, n)
    first = Amqp10Peer(port=port, credit=10).start()
    second = None
    try:
        assert _put(api, name, {"src-uri": "amqp://", "src-queue": src,
                                "dest-protocol": "amqp10", "dest-uri": first.uri,
                                "dest-address": address, "reconnect-delay": 0.2,
                                "src-prefetch-count": 20}).status_code == 201
        wait_for(lambda: len(first.messages(address)) >= 50, timeout=10)
        first.stop()  # mid-stream
        before = [bytes(m.body) for m in first.messages(address)]
        assert len(before) < n
        wait_for(lambda: _state(api, name) == "terminated", timeout=10)
        second = Amqp10Peer(port=port).start()
        everything = {b"%d" % i for i in range(n)}

        def after() -> list[bytes]:
            return [bytes(m.body) for m in second.messages(address)]

        wait_for(lambda: set(before) | set(after()) == everything, timeout=15)
        wait_for(lambda: _depth(broker.url, src) == 0)
        assert _state(api, name) == "running"
        assert len(before) + len(after()) - n <= 20 + 10  # duplicates: at most what was in flight
    finally:
        api.delete(f"/api/parameters/shovel/%2F/{name}")
        with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
            conn.channel().queue_delete(src)
        if second is not None:
            second.stop()


def test_src_delete_after_moves_the_count_then_deletes_itself(api, broker, peer):
    address, dest, name = uniq("addr"), uniq("sh10-dest"), uniq("shovel10")
    peer.put(address, [proton.Message(body=b"%d" % i, inferred=True) for i in range(12)])
    assert _put(api, name, {"src-protocol": "amqp10", "src-uri": peer.uri,
                            "src-address": address, "src-delete-after": 5,
                            "dest-uri": "amqp://", "dest-queue": dest}).status_code == 201
    try:
        wait_for(lambda: api.get(f"/api/parameters/shovel/%2F/{name}").status_code == 404,
                 timeout=10)
        wait_for(lambda: peer.moved[address] == 5)
        assert _status(api, name) is None
        got = _drain(broker.url, dest, 5)
        assert [b for _m, _p, b in got] == [b"%d" % i for i in range(5)]
        assert _drain(broker.url, dest, 1, timeout=0.3) == []
        wait_for(lambda: len(peer.queues[address]) == 7)  # the rest stays at the source
        assert peer.moved[address] == 5
    finally:
        api.delete(f"/api/parameters/shovel/%2F/{name}")
        with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
            conn.channel().queue_delete(dest)


def test_a_peer_that_is_not_there_shows_terminated_then_running(api, broker):
    port = free_port()
    src, address, name = uniq("sh10-src"), uniq("addr"), uniq("shovel10")
    _fill(broker.url, src, 3)
    later = None
    try:
        assert _put(api, name, {"src-uri": "amqp://", "src-queue": src,
                                "dest-protocol": "amqp10",
                                "dest-uri": f"amqp://127.0.0.1:{port}",
                                "dest-address": address, "ack-mode": "on-publish",
                                "reconnect-delay": 0.3}).status_code == 201
        wait_for(lambda: _state(api, name) == "terminated", timeout=10)
        reason = _status(api, name)["reason"]
        assert f"127.0.0.1:{port}" in reason and "refused" in reason.lower()
        later = Amqp10Peer(port=port).start()
        wait_for(lambda: _state(api, name) == "running", timeout=10)
        wait_for(lambda: len(later.messages(address)) == 3, timeout=10)
    finally:
        api.delete(f"/api/parameters/shovel/%2F/{name}")
        with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
            conn.channel().queue_delete(src)
        if later is not None:
            later.stop()


def test_no_ack_amqp10_to_amqp10(api, broker, peer):
    """Both ends AMQP 1.0, pre-settled: the peer's receiver link is settled mode."""
    a, b, name = uniq("addr"), uniq("addr"), uniq("shovel10")
    peer.put(a, [proton.Message(body=b"%d" % i, inferred=True) for i in range(10)])
    assert _put(api, name, {"src-protocol": "amqp10", "src-uri": peer.uri, "src-address": a,
                            "dest-protocol": "amqp10", "dest-uri": peer.uri,
                            "dest-address": b, "ack-mode": "no-ack"}).status_code == 201
    try:
        wait_for(lambda: len(peer.messages(b)) == 10, timeout=10)
        assert [bytes(m.body) for m in peer.messages(b)] == [b"%d" % i for i in range(10)]
        assert peer.moved[a] == 10
    finally:
        api.delete(f"/api/parameters/shovel/%2F/{name}")
