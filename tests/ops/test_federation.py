"""Federation (issue 21, rabbitmq.com/federation.html) between two real brokers: a
downstream (its `federation-upstream` parameters and policies set through its HTTP API) and
an upstream. Federated exchanges (bindings propagated as they come and go, x-received-from,
the upstream queue and its clean-up), federated queues (messages move only while a local
consumer can take them), validation, status and an upstream that is down are covered.

The pairs: without BROKER_TEST_URI, this broker (the session broker) federates from a second
EmbeddedBroker named `peer@localhost`. With BROKER_TEST_URI / BROKER_TEST_API (a RabbitMQ
3.10.8 with rabbitmq_federation and its management plugin), every test runs twice: RabbitMQ
federating from this broker ("rabbit-down"), and this broker federating from RabbitMQ
("rabbit-up").
"""

from __future__ import annotations

import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pika
import pytest

from tests.ops.amqp_messages import get_all
from tests.ops.conftest import EXTERNAL, Api
from tests.polling import wait_for


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@dataclass
class Pair:
    """The two brokers of a test: `down` federates from `up`."""

    down_url: str  # amqp URI of the downstream
    api: Api  # the downstream's management API
    up_url: str  # amqp URI of the upstream (what the federation-upstream names)
    up_cluster: str  # the upstream's cluster name (x-received-from cluster-name)

    @property
    def up_safe(self) -> str:
        """The upstream URI as link status and headers show it (no credentials)."""
        u = urllib.parse.urlparse(self.up_url)
        return f"amqp://{u.hostname}:{u.port}{u.path}"


@pytest.fixture(scope="module", params=["rabbit-down", "rabbit-up"] if EXTERNAL else
                ["ours"])
def pair(request, broker, api_base) -> Iterator[Pair]:
    from broker.embedded import EmbeddedBroker

    if request.param == "rabbit-up":  # this broker downstream of RabbitMQ
        ours = EmbeddedBroker(node_name="down@localhost", management_tcp_port=-1).start()
        try:
            cluster = Api(api_base).get("/api/overview").json()["cluster_name"]
            yield Pair(ours.url, Api(ours.api_url), broker.url, cluster)
        finally:
            ours.stop()
        return
    peer = EmbeddedBroker(node_name="peer@localhost").start()  # the upstream
    try:
        yield Pair(broker.url, Api(api_base), peer.url, "peer@localhost")
    finally:
        peer.stop()


def _conn(url: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(url))


_get_all = get_all


def _upstream(api, name: str, value: dict):
    return api.put(f"/api/parameters/federation-upstream/%2F/{name}", json={"value": value})


def _policy(api, name: str, pattern: str, definition: dict, apply_to: str = "all"):
    return api.put(f"/api/policies/%2F/{name}",
                   json={"pattern": pattern, "definition": definition, "apply-to": apply_to})


def _link(api, **match) -> dict | None:
    for item in api.get("/api/federation-links").json():
        if all(item.get(k) == v for k, v in match.items()):
            return item
    return None


def _running(api, **match) -> dict:
    wait_for(lambda: (_link(api, **match) or {}).get("status") == "running", timeout=20)
    link = _link(api, **match)
    assert link is not None
    return link


@pytest.fixture
def fed_exchange(pair) -> Iterator[tuple[str, str, str]]:
    """A direct exchange X on both brokers, the downstream one federated from the peer's:
    (exchange, upstream name, policy name)."""
    x, up, pol = uniq("fedx"), uniq("up"), uniq("pol")
    assert _upstream(pair.api, up, {"uri": pair.up_url, "prefetch-count": 50}).status_code == 201
    assert _policy(pair.api, pol, f"^{x}$", {"federation-upstream": up},
                   "exchanges").status_code in (201, 204)
    with _conn(pair.down_url) as conn:
        conn.channel().exchange_declare(x, "direct", durable=True)
    try:
        yield x, up, pol
    finally:
        pair.api.delete(f"/api/policies/%2F/{pol}")
        pair.api.delete(f"/api/parameters/federation-upstream/%2F/{up}")
        with _conn(pair.down_url) as conn:
            conn.channel().exchange_delete(x)


def _bound_queue(url: str, x: str, key: str) -> str:
    q = uniq("fedq")
    with _conn(url) as conn:
        ch = conn.channel()
        ch.queue_declare(q, durable=True)
        ch.queue_bind(q, x, key)
    return q


def _publish(url: str, x: str, key: str, n: int, pad: int = 0, **props) -> None:
    """n confirmed publishes, bodies b"0".. (padded with `pad` spaces: bigger messages
    keep a transfer going long enough to kill a broker in its middle)."""
    with _conn(url) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        for i in range(n):
            ch.basic_publish(x, key, b"%d" % i + b" " * pad, pika.BasicProperties(**props))


def test_a_federated_exchange_receives_what_is_published_upstream(pair, fed_exchange):
    x, up, _pol = fed_exchange
    q = _bound_queue(pair.down_url, x, "k")
    link = _running(pair.api, exchange=x, upstream=up)
    assert link["type"] == "exchange" and link["upstream_exchange"] == x
    assert link["uri"] == pair.up_safe  # no credentials
    if "local_channel" in link:  # RabbitMQ's shows once its stats are collected
        assert link["local_channel"]["connection_details"]["name"] == \
            link["local_connection"]
        assert link["local_channel"]["confirm"] is True  # on-confirm: the link's channel
    cluster = pair.api.get("/api/overview").json()["cluster_name"]
    upstream_q = f"federation: {x} -> {cluster}"
    # the upstream queue exists (the link declared it) and the binding reached the peer
    wait_for(lambda: _routes(pair.up_url, x, "k", upstream_q), timeout=10)
    _publish(pair.up_url, x, "k", 20, message_id="m", user_id="guest")
    _publish(pair.up_url, x, "not-bound", 5)
    got = _get_all(pair.down_url, q, 20)
    assert [b for _m, _p, b in got] == [b"%d" % i for i in range(20)]
    props = got[0][1]
    assert props.message_id == "m" and props.user_id is None  # trust-user-id false
    hop = props.headers["x-received-from"]
    assert hop == [{"uri": pair.up_safe, "exchange": x,
                    "redelivered": False, "cluster-name": pair.up_cluster, "vhost": "/"}]
    assert _get_all(pair.down_url, q, 1, timeout=0.5) == []  # "not-bound" never came over
    with _conn(pair.up_url) as conn:
        depth = conn.channel().queue_declare(upstream_q, passive=True).method.message_count
    assert depth == 0


def _routes(url: str, x: str, key: str, upstream_q: str) -> bool:
    """Does a message to `x` with `key` on the peer reach the federation queue? (probed
    with a mandatory publish of a marker that the queue then holds; drained again)."""
    with _conn(url) as conn:
        ch = conn.channel()
        try:
            ch.queue_declare(upstream_q, passive=True)
        except pika.exceptions.ChannelClosedByBroker:
            return False
        ch.exchange_declare(x, "direct", passive=True)
        internal = [b for b in (f"{upstream_q} A", f"{upstream_q} B")
                    if _exists(conn, b)]
        return bool(internal)


def _exists(conn, exchange: str) -> bool:
    ch = conn.channel()
    try:
        ch.exchange_declare(exchange, passive=True)
    except pika.exceptions.ChannelClosedByBroker:
        return False
    ch.close()
    return True


def test_bindings_follow_the_local_exchange(pair, fed_exchange):
    x, up, _pol = fed_exchange
    q = _bound_queue(pair.down_url, x, "a")
    _running(pair.api, exchange=x, upstream=up)
    time.sleep(0.3)
    _publish(pair.up_url, x, "a", 3)
    assert len(_get_all(pair.down_url, q, 3)) == 3
    with _conn(pair.down_url) as conn:  # a new key appears, the old one goes
        ch = conn.channel()
        ch.queue_bind(q, x, "b")
        ch.queue_unbind(q, x, "a")
    time.sleep(0.5)
    _publish(pair.up_url, x, "a", 3)
    _publish(pair.up_url, x, "b", 4)
    got = _get_all(pair.down_url, q, 10, timeout=3)
    assert len(got) == 4 and all(m.routing_key == "b" for m, _p, _b in got)


def test_removing_the_policy_stops_the_link_and_cleans_up_upstream(pair):
    x, up, pol = uniq("fedx"), uniq("up"), uniq("pol")
    _upstream(pair.api, up, {"uri": pair.up_url})
    _policy(pair.api, pol, f"^{x}$", {"federation-upstream": up}, "exchanges")
    try:
        with _conn(pair.down_url) as conn:
            conn.channel().exchange_declare(x, "fanout")
        _running(pair.api, exchange=x, upstream=up)
        cluster = pair.api.get("/api/overview").json()["cluster_name"]
        upstream_q = f"federation: {x} -> {cluster}"
        with _conn(pair.up_url) as conn:
            args = conn.channel().queue_declare(upstream_q, passive=True)
        assert args is not None
        assert pair.api.delete(f"/api/policies/%2F/{pol}").status_code == 204
        wait_for(lambda: _link(pair.api, exchange=x) is None, timeout=10)

        def gone() -> bool:
            with _conn(pair.up_url) as conn:
                ch = conn.channel()
                try:
                    ch.queue_declare(upstream_q, passive=True)
                except pika.exceptions.ChannelClosedByBroker as exc:
                    return exc.reply_code == 404
                return False
        wait_for(gone, timeout=10)
    finally:
        pair.api.delete(f"/api/policies/%2F/{pol}")
        pair.api.delete(f"/api/parameters/federation-upstream/%2F/{up}")


def test_a_federated_queue_pulls_only_while_a_consumer_can_take(pair):
    q, up, pol = uniq("fq"), uniq("up"), uniq("pol")
    assert _upstream(pair.api, up, {"uri": pair.up_url, "prefetch-count": 10}).status_code == 201
    assert _policy(pair.api, pol, f"^{q}$", {"federation-upstream": up}, "queues").status_code \
        in (201, 204)
    try:
        with _conn(pair.down_url) as conn:
            conn.channel().queue_declare(q, durable=True)
        link = _running(pair.api, queue=q, upstream=up)
        assert link["type"] == "queue" and link["upstream_queue"] == q
        assert link["consumer_tag"] == f"federation-link-{up}"
        _publish(pair.up_url, "", q, 50, headers={"CC": ["x"]})
        time.sleep(0.5)  # no local consumer: nothing moves
        with _conn(pair.up_url) as conn:
            assert conn.channel().queue_declare(q, passive=True).method.message_count == 50
        with _conn(pair.down_url) as conn:
            assert conn.channel().queue_declare(q, passive=True).method.message_count == 0
        got: list = []
        with _conn(pair.down_url) as conn:
            ch = conn.channel()
            ch.basic_qos(prefetch_count=5)

            def on_message(ch, method, props, body):
                got.append((props, body))
                ch.basic_ack(method.delivery_tag)
            ch.basic_consume(q, on_message)
            deadline = time.monotonic() + 15
            while len(got) < 50 and time.monotonic() < deadline:
                conn.process_data_events(0.05)
        assert sorted(int(b) for _p, b in got) == list(range(50))
        hop = got[0][0].headers["x-received-from"][0]
        assert hop["queue"] == q and hop["visit-count"] == 1 and hop["redelivered"] is False
        assert got[0][0].headers["x-original-exchange"] == ""
        assert got[0][0].headers["x-original-routing-key"] == q
        assert got[0][0].headers["x-original-cc"] == ["x"] and "CC" not in got[0][0].headers
        with _conn(pair.up_url) as conn:
            assert conn.channel().queue_declare(q, passive=True).method.message_count == 0
    finally:
        pair.api.delete(f"/api/policies/%2F/{pol}")
        pair.api.delete(f"/api/parameters/federation-upstream/%2F/{up}")
        with _conn(pair.down_url) as conn:
            conn.channel().queue_delete(q)
        with _conn(pair.up_url) as conn:
            conn.channel().queue_delete(q)


def test_an_upstream_that_is_down_shows_an_error_and_is_retried(pair):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    x, up, pol = uniq("fedx"), uniq("up"), uniq("pol")
    _upstream(pair.api, up, {"uri": f"amqp://guest:guest@127.0.0.1:{port}", "reconnect-delay": 1})
    _policy(pair.api, pol, f"^{x}$", {"federation-upstream-set": "all"}, "exchanges")
    try:
        with _conn(pair.down_url) as conn:
            conn.channel().exchange_declare(x, "fanout")
        def failed() -> dict | None:  # the status alternates: error, starting (retry), ...
            link = _link(pair.api, exchange=x, upstream=up) or {}
            return link if link.get("status") == "error" else None
        link = wait_for(failed, timeout=15)
        assert link["error"] == "econnrefused"  # RabbitMQ's text
        down = pair.api.get("/api/federation-links/state/down").json()
        assert any(i["id"] == link["id"] for i in down)
        node = link["node"]
        assert pair.api.delete(f"/api/federation-links/vhost/%2F/{link['id']}/{node}/restart"
                          ).status_code == 204
        assert pair.api.delete(f"/api/federation-links/vhost/%2F/nosuchid/{node}/restart"
                          ).status_code == 404
    finally:
        pair.api.delete(f"/api/policies/%2F/{pol}")
        pair.api.delete(f"/api/parameters/federation-upstream/%2F/{up}")
        with _conn(pair.down_url) as conn:
            conn.channel().exchange_delete(x)


@pytest.mark.parametrize("value,error", [
    ({}, 'Key "uri" not found in'),
    ({"uri": "http://x"}, "not a valid URI"),
    ({"uri": "amqp://", "prefetch-count": "many"}, "prefetch-count should be a number"),
    ({"uri": "amqp://", "ack-mode": "sometimes"}, "ack-mode should be one of"),
    ({"uri": "amqp://", "trust-user-id": "yes"}, "trust-user-id should be boolean"),
    ({"uri": "amqp://", "colour": "blue"}, "Unrecognised terms"),
])
def test_invalid_upstreams_are_400_validation_failed(pair, value, error):
    r = _upstream(pair.api, uniq("bad"), value)
    reason = r.json()["reason"]
    assert r.status_code == 400 and "Validation failed" in reason and error in reason, reason


def test_upstream_sets_and_policy_keys_are_validated(pair):
    name = uniq("set")
    r = pair.api.put(f"/api/parameters/federation-upstream-set/%2F/{name}",
                json={"value": [{"upstream": "a"}, {"upstream": "b", "max-hops": 2}]})
    assert r.status_code == 201, r.text
    assert pair.api.get(f"/api/parameters/federation-upstream-set/%2F/{name}").json()["value"][1] \
        == {"upstream": "b", "max-hops": 2}
    assert pair.api.delete(f"/api/parameters/federation-upstream-set/%2F/{name}").status_code == 204
    r = pair.api.put(f"/api/parameters/federation-upstream-set/%2F/{name}",
                json={"value": [{"max-hops": 2}]})
    assert r.status_code == 400 and 'Key "upstream" not found' in r.json()["reason"]
    r = _policy(pair.api, uniq("pol"), "^x$", {"federation-upstream": "a",
                                          "federation-upstream-set": "all"})
    assert r.status_code == 400 and "cannot specify federation-upstream" in r.text


def test_brokerctl_federation_commands(pair, fed_exchange):
    """brokerctl federation_status [--only-down] and restart_federation_link, with
    rabbitmqctl's banners (this broker's CLI: the downstream must be this broker)."""
    import subprocess
    import sys

    if pair.api.get("/api/overview").json().get("product_name") == "RabbitMQ":
        pytest.skip("brokerctl drives this broker's API")

    def ctl(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "broker.ctl", "--api", pair.api.base,
                               *args], capture_output=True, text=True, timeout=60)
        assert not ok or proc.returncode == 0, proc.stderr
        return proc

    x, up, _pol = fed_exchange
    link = _running(pair.api, exchange=x, upstream=up)
    lines = ctl("federation_status").stdout.splitlines()
    assert lines[0].startswith("Listing federation links on node ")
    header = lines[1].split("\t")
    assert header[:3] == ["exchange", "upstream_exchange", "queue"]
    row = dict(zip(header, next(r.split("\t") for r in lines[2:] if link["id"] in r),
                   strict=True))
    assert row["status"] == "running" and row["exchange"] == x and row["upstream"] == up
    assert len(row["last_changed"].split(" ")[1]) == 8  # hh:mm:ss, zero-padded
    down = ctl("federation_status", "--only-down").stdout
    assert "which are down" in down and link["id"] not in down
    out = ctl("restart_federation_link", link["id"]).stdout
    assert out.startswith(f"Restarting federation link {link['id']} on node ")
    _running(pair.api, exchange=x, upstream=up)
    assert ctl("restart_federation_link", "nosuchid", ok=False).returncode != 0


def test_prometheus_counts_links_and_what_they_forwarded(pair, fed_exchange, metrics_url):
    import requests

    if EXTERNAL:
        pytest.skip("this broker's own counters (RabbitMQ 3.10 exports none)")
    x, up, _pol = fed_exchange
    q = _bound_queue(pair.down_url, x, "k")
    _running(pair.api, exchange=x, upstream=up)
    time.sleep(0.3)
    _publish(pair.up_url, x, "k", 7)
    assert len(_get_all(pair.down_url, q, 7)) == 7
    line = (f'rabbitmq_federation_link_messages_forwarded_total{{name="{x}",type="exchange",'
            f'upstream="{up}",vhost="/"}} 7.0')
    wait_for(lambda: line in requests.get(f"{metrics_url}/metrics", timeout=10).text)
    text = requests.get(f"{metrics_url}/metrics", timeout=10).text
    assert 'rabbitmq_federation_links{status="running"}' in text


@pytest.mark.parametrize("victim", ["upstream", "downstream"])
def test_kill_9_mid_transfer_loses_nothing(pair, tmp_path, victim):
    """on-confirm: an upstream message is acked only once the downstream confirmed its
    republished copy (fsynced). Two broker processes; a backlog of 2000 × 64 KB persistent
    messages waits in the upstream's federation queue (published, confirmed, while the
    downstream was stopped); the downstream starts, and mid-transfer one broker is killed
    with SIGKILL and started again. Every message arrives at least once. Duplicates: at
    most prefetch-count when the downstream dies (what was in flight); when the upstream
    dies, also what it had acked in the last moments, since an ack reaches its queue
    index journal up to 200 ms later (SYNC_INTERVAL; RabbitMQ's acks are not durable at
    once either), so the bound there is prefetch-count plus 500."""
    import socket

    from tests.recovery.brokerproc import BrokerProcess

    if EXTERNAL:
        pytest.skip("kills broker processes of this broker's")
    ports = []
    for _ in range(3):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    up_opts = ("--port", str(ports[0]), "--set", "node_name=up@localhost")
    down_opts = ("--port", str(ports[1]), "--set", f"management.tcp.port={ports[2]}",
                 "--set", "node_name=down@localhost")
    upstream = BrokerProcess(tmp_path / "up", *up_opts).start()
    down = BrokerProcess(tmp_path / "down", *down_opts).start()
    api = Api(f"http://127.0.0.1:{ports[2]}")
    x, up, pol, n, prefetch = uniq("fedx"), uniq("up"), uniq("pol"), 2000, 100
    try:
        assert _upstream(api, up, {"uri": upstream.url, "prefetch-count": prefetch,
                                   "reconnect-delay": 0.2}).status_code == 201
        _policy(api, pol, f"^{x}$", {"federation-upstream": up}, "exchanges")
        with _conn(down.url) as conn:
            conn.channel().exchange_declare(x, "fanout", durable=True)
        q = _bound_queue(down.url, x, "")
        _running(api, exchange=x, upstream=up)
        with _conn(upstream.url) as conn:
            conn.channel().exchange_declare(x, "fanout", durable=True)
        wait_for(lambda: _routes(upstream.url, x, "", f"federation: {x} -> down@localhost"))
        down.stop()  # a graceful stop keeps the upstream queue: the backlog waits there
        _publish(upstream.url, x, "", n, pad=65536, delivery_mode=2)
        down = BrokerProcess(tmp_path / "down", *down_opts).start()

        def arrived() -> int:
            with _conn(down.url) as conn:
                return conn.channel().queue_declare(q, passive=True).method.message_count
        wait_for(lambda: arrived() >= 200, timeout=30)
        assert arrived() < n  # mid-transfer
        if victim == "upstream":
            upstream.kill()
            upstream = BrokerProcess(tmp_path / "up", *up_opts).start()
        else:
            down.kill()
            down = BrokerProcess(tmp_path / "down", *down_opts).start()
        seen: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(set(seen)) < n and time.monotonic() < deadline:
            seen += [b.rstrip() for _m, _p, b in _get_all(down.url, q, n, timeout=1)]
        assert set(seen) == {b"%d" % i for i in range(n)}
        assert len(seen) - n <= prefetch + (500 if victim == "upstream" else 0)
    finally:
        down.stop()
        upstream.stop()


def test_queues_federated_in_a_cycle_move_messages_to_their_consumers_once():
    """Two brokers whose queue Q federates from each other: messages published to one
    side go, once each, to whichever side has a consumer, and nothing is lost when the
    consumer moves (rabbitmq.com/federated-queues.html: a cycle is fine)."""
    from broker.embedded import EmbeddedBroker

    if EXTERNAL:
        pytest.skip("two brokers of this broker's")
    a = EmbeddedBroker(node_name="a@localhost", management_tcp_port=-1).start()
    b = EmbeddedBroker(node_name="b@localhost", management_tcp_port=-1).start()
    q = uniq("cyc")
    try:
        for here, there in ((a, b), (b, a)):
            api = Api(here.api_url)
            assert _upstream(api, "other", {"uri": there.url, "prefetch-count": 20}
                             ).status_code == 201
            assert _policy(api, "cycle", f"^{q}$", {"federation-upstream": "other"},
                           "queues").status_code in (201, 204)
            with _conn(here.url) as conn:
                conn.channel().queue_declare(q, durable=True)
        for here in (a, b):
            _running(Api(here.api_url), queue=q)
        _publish(a.url, "", q, 100)

        def consume(url: str, n: int, timeout: float = 15.0) -> list[bytes]:
            got: list[bytes] = []
            with _conn(url) as conn:
                ch = conn.channel()
                ch.basic_qos(prefetch_count=10)
                ch.basic_consume(q, lambda c, m, p, body: (got.append(body),
                                                           c.basic_ack(m.delivery_tag)))
                deadline = time.monotonic() + timeout
                while len(got) < n and time.monotonic() < deadline:
                    conn.process_data_events(0.05)
            return got

        first = consume(b.url, 60)  # at least 60 move from a to b, to b's consumer
        assert len(first) >= 60  # (all 100 if they came fast enough)
        rest = consume(a.url, 100 - len(first))  # the rest: left on a, or back from b
        late = consume(b.url, 100, timeout=1.0)  # and nothing else turns up anywhere
        assert sorted(int(x) for x in first + rest + late) == list(range(100))
    finally:
        a.stop()
        b.stop()


def test_upstreams_are_exported_and_imported_with_the_definitions(pair):
    up = uniq("up")
    value = {"uri": "amqp://guest:guest@127.0.0.1:1", "max-hops": 2}
    assert _upstream(pair.api, up, value).status_code == 201
    try:
        doc = pair.api.get("/api/definitions").json()
        mine = [p for p in doc["parameters"] if p["name"] == up]
        assert mine == [{"vhost": "/", "component": "federation-upstream", "name": up,
                         "value": value}]
        assert pair.api.delete(f"/api/parameters/federation-upstream/%2F/{up}"
                               ).status_code == 204
        r = pair.api.post("/api/definitions", json={"parameters": mine})
        assert r.status_code in (200, 201, 204), r.text
        got = pair.api.get(f"/api/parameters/federation-upstream/%2F/{up}").json()
        assert got["value"] == value
    finally:
        pair.api.delete(f"/api/parameters/federation-upstream/%2F/{up}")
