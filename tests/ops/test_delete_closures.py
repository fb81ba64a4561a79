"""Deleting what clients hold, over the management API and brokerctl: every call answers at
once, whatever the clients do, and closes exactly what RabbitMQ 3.10.8 closes — no more, no
fewer (issue 33 item 2; AMQPStorm's `test_functional_alternative_virtual_host` deletes a vhost
while its single-threaded client, waiting on that HTTP call, still holds a connection in it).

What RabbitMQ 3.10.8 does, observed with these tests' raw client (which never answers
connection.close, so nothing here can wait for a close-ok):

| call | what the clients see |
|---|---|
| DELETE /api/vhosts/{v} | basic.cancel to its consumers that asked, then connection.close 320 "CONNECTION_FORCED - vhost 'v' is deleted" on each of its connections |
| DELETE /api/users/{u}, POST /api/users/bulk-delete | connection.close 320 "CONNECTION_FORCED - user 'u' is deleted" on each of u's connections |
| DELETE /api/queues/{v}/{q} | basic.cancel to its consumers that asked; channels and connections stay open |
| DELETE /api/connections/{name} | connection.close 320 "CONNECTION_FORCED - Closed via management plugin" on that one |
| DELETE /api/connections/username/{u} | the same on each of u's connections |

Every test also holds a bystander connection (another vhost or user, a consumer on another
queue) that must see nothing. Passes against RabbitMQ 3.10.8 with BROKER_TEST_URI and
BROKER_TEST_API set.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from pamqp import commands as C

from tests.integration.rawamqp import Closed, RawClient
from tests.polling import wait_for

CANCEL_NOTIFY = {"consumer_cancel_notify": True}
AT_ONCE = 1.0  # s: AMQPStorm's test gives the HTTP call 1 s
CTL_AT_ONCE = 2.5  # s: brokerctl's start (about 0.5 s) and the call, less than a close-ok wait


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Peer:
    """A raw AMQP client that reads what the broker sends and never answers it."""

    def __init__(self, broker, vhost: str = "/", user: str = "guest", password: str = "guest",
                 capabilities: dict | None = None) -> None:
        self.raw = RawClient(broker.host, broker.port)
        self.raw.handshake(user=user, password=password, vhost=vhost,
                           capabilities=capabilities or {})
        host, port = self.raw.sock.getsockname()[:2]
        peer_host, peer_port = self.raw.sock.getpeername()[:2]
        self.name = f"{host}:{port} -> {peer_host}:{peer_port}"  # RabbitMQ's connection name

    def consume(self, queue: str, channel: int = 1, durable: bool = False) -> None:
        self.raw.open_channel(channel)
        self.raw.send(C.Queue.Declare(queue=queue, durable=durable), channel)
        self.raw.expect(C.Queue.DeclareOk, channel)
        self.raw.send(C.Basic.Consume(queue=queue, consumer_tag=f"ctag-{channel}"), channel)
        self.raw.expect(C.Basic.ConsumeOk, channel)

    def seen(self, within: float = 0.7) -> list[tuple]:
        """What arrives within `within` s: (channel, method name, reply code or consumer
        tag, reply text), heartbeats left out; "closed" if the socket closes."""
        out: list[tuple] = []
        deadline = time.monotonic() + within
        while (left := deadline - time.monotonic()) > 0:
            try:
                channel, frame = self.raw.read_frame(timeout=left)
            except Closed:
                out.append(("closed",))
                break
            except (TimeoutError, OSError):
                break
            name = type(frame).__name__
            if name == "Heartbeat":
                continue
            if name == "Close":
                out.append((channel, name, frame.reply_code, frame.reply_text))
            else:
                out.append((channel, name, getattr(frame, "consumer_tag", None)))
        return out

    def listed(self, api) -> str:
        """The connection's name in the path form, once the API lists it (RabbitMQ's
        GET/DELETE /api/connections/{name} find a connection once its stats arrived)."""
        path = f"/api/connections/{quote(self.name, safe='')}"
        wait_for(lambda: api.get(path).status_code == 200, timeout=15)
        return path

    def still_works(self, channel: int = 9) -> bool:
        self.raw.open_channel(channel)
        return True

    def close(self) -> None:
        self.raw.close_socket()


@pytest.fixture
def peers(broker) -> Iterator[list[Peer]]:
    made: list[Peer] = []
    yield made
    for p in made:
        p.close()


@pytest.fixture
def vhost(api) -> Iterator[str]:
    name = uniq("delv")
    assert api.put(f"/api/vhosts/{name}").status_code in (201, 204)
    assert api.put(f"/api/permissions/{name}/guest",
                   json={"configure": ".*", "write": ".*", "read": ".*"}).status_code in (201, 204)
    yield name
    api.delete(f"/api/vhosts/{name}")


@pytest.fixture
def user(api) -> Iterator[str]:
    name = uniq("delu")
    assert api.put(f"/api/users/{name}", json={"password": "pw", "tags": ""}).status_code == 201
    assert api.put(f"/api/permissions/%2F/{name}",
                   json={"configure": ".*", "write": ".*", "read": ".*"}).status_code == 201
    yield name
    api.delete(f"/api/users/{name}")


def timed(call) -> tuple[int, float]:
    t0 = time.monotonic()
    response = call()
    return response.status_code, time.monotonic() - t0


def forced(text: str) -> tuple:
    return (0, "Close", 320, f"CONNECTION_FORCED - {text}")


def vhost_gone(seen: list[tuple], vhost: str) -> tuple:
    """The connection.close a deleted vhost's connection gets. This broker says "is
    deleted"; RabbitMQ 3.10.8 says so too, or "is down" when its vhost_down event overtakes
    vhost_deleted (rabbit_connection_tracking handles both, whichever comes first)."""
    down = forced(f"vhost '{vhost}' is down")
    return down if down in seen else forced(f"vhost '{vhost}' is deleted")


@pytest.fixture
def ctl(api_base):
    def run(*args: str) -> float:
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "broker.ctl", "--api", api_base, *args],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return time.monotonic() - t0
    return run


# -- vhosts -------------------------------------------------------------------------------
def test_delete_vhost_answers_at_once_and_closes_only_its_connections(broker, api, vhost,
                                                                       peers):
    inside = Peer(broker, vhost, capabilities=CANCEL_NOTIFY)
    peers.append(inside)
    inside.consume("q", 1, durable=True)
    inside.raw.open_channel(2)
    plain = Peer(broker, vhost)  # no consumer, no capabilities
    peers.append(plain)
    outside = Peer(broker, "/", capabilities=CANCEL_NOTIFY)
    peers.append(outside)
    outside.consume(uniq("bystander"), 1)
    status, took = timed(lambda: api.delete(f"/api/vhosts/{vhost}", timeout=10))
    assert status == 204
    assert took < AT_ONCE
    seen = inside.seen()
    assert seen[:2] == [(1, "Cancel", "ctag-1"), vhost_gone(seen, vhost)]
    seen = plain.seen()
    assert seen[:1] == [vhost_gone(seen, vhost)]
    assert outside.seen() == []
    assert outside.still_works()
    assert api.get(f"/api/vhosts/{vhost}").status_code == 404


def test_delete_vhost_then_create_it_again_at_once(broker, api, vhost, peers):
    inside = Peer(broker, vhost)
    peers.append(inside)
    inside.consume("kept", 1, durable=True)
    assert api.delete(f"/api/vhosts/{vhost}", timeout=10).status_code == 204
    assert api.put(f"/api/vhosts/{vhost}").status_code == 201
    assert api.get(f"/api/queues/{vhost}/kept").status_code == 404  # starts empty


def test_brokerctl_delete_vhost_answers_at_once(broker, api, vhost, peers, ctl):
    inside = Peer(broker, vhost)
    peers.append(inside)
    assert ctl("delete_vhost", vhost) < CTL_AT_ONCE
    seen = inside.seen()
    assert seen[:1] == [vhost_gone(seen, vhost)]


# -- users --------------------------------------------------------------------------------
def test_delete_user_closes_only_that_users_connections(broker, api, user, peers):
    mine = [Peer(broker, "/", user, "pw") for _ in range(2)]
    peers.extend(mine)
    guest = Peer(broker, "/")
    peers.append(guest)
    status, took = timed(lambda: api.delete(f"/api/users/{user}", timeout=10))
    assert status == 204
    assert took < AT_ONCE
    for p in mine:
        assert p.seen()[:1] == [forced(f"user '{user}' is deleted")]
    assert guest.seen() == []
    assert guest.still_works()


def test_bulk_delete_users_closes_their_connections(broker, api, user, peers):
    mine = Peer(broker, "/", user, "pw")
    peers.append(mine)
    status, took = timed(lambda: api.post("/api/users/bulk-delete", json={"users": [user]},
                                          timeout=10))
    assert status == 204
    assert took < AT_ONCE
    assert mine.seen()[:1] == [forced(f"user '{user}' is deleted")]


def test_brokerctl_delete_user_closes_its_connections(broker, user, peers, ctl):
    mine = Peer(broker, "/", user, "pw")
    peers.append(mine)
    assert ctl("delete_user", user) < CTL_AT_ONCE
    assert mine.seen()[:1] == [forced(f"user '{user}' is deleted")]


# -- queues -------------------------------------------------------------------------------
def test_delete_queue_cancels_its_consumers_and_closes_nothing(broker, api, peers):
    q = uniq("delq")
    told = Peer(broker, capabilities=CANCEL_NOTIFY)
    peers.append(told)
    told.consume(q, 1)
    untold = Peer(broker)  # did not ask for consumer_cancel_notify
    peers.append(untold)
    untold.consume(q, 1)
    other = Peer(broker, capabilities=CANCEL_NOTIFY)
    peers.append(other)
    other.consume(uniq("bystander"), 1)
    status, took = timed(lambda: api.delete(f"/api/queues/%2F/{q}", timeout=10))
    assert status == 204
    assert took < AT_ONCE
    assert told.seen() == [(1, "Cancel", "ctag-1")]
    assert untold.seen() == []
    assert other.seen() == []
    for p in (told, untold, other):
        assert p.still_works()


def test_brokerctl_delete_queue_cancels_its_consumer(broker, peers, ctl):
    q = uniq("delq")
    told = Peer(broker, capabilities=CANCEL_NOTIFY)
    peers.append(told)
    told.consume(q, 1)
    assert ctl("delete_queue", q) < CTL_AT_ONCE
    assert told.seen() == [(1, "Cancel", "ctag-1")]
    assert told.still_works()


# -- connections --------------------------------------------------------------------------
def test_delete_connection_closes_that_one_only(broker, api, peers):
    target, bystander = Peer(broker), Peer(broker)
    peers.extend([target, bystander])
    path = target.listed(api)
    status, took = timed(lambda: api.delete(path, timeout=10))
    assert status == 204
    assert took < AT_ONCE
    assert target.seen()[:1] == [forced("Closed via management plugin")]
    assert bystander.seen() == []


def test_delete_connections_of_a_user(broker, api, user, peers):
    mine = [Peer(broker, "/", user, "pw") for _ in range(2)]
    guest = Peer(broker)
    peers.extend([*mine, guest])
    status, took = timed(lambda: api.delete(f"/api/connections/username/{user}",
                                            headers={"X-Reason": "bye"}, timeout=10))
    assert status == 204
    assert took < AT_ONCE
    for p in mine:
        assert p.seen()[:1] == [forced("bye")]
    assert guest.seen() == []


def test_brokerctl_close_connection(broker, api, peers, ctl):
    target, bystander = Peer(broker), Peer(broker)
    peers.extend([target, bystander])
    target.listed(api)
    assert ctl("close_connection", target.name, "go away") < CTL_AT_ONCE
    assert target.seen()[:1] == [forced("go away")]
    assert bystander.seen() == []
