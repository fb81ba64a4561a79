"""Failover from the replication stream (issue 48, docs/high-availability.md §0.3): a
follower ends a dead leader's term by revoking its lease instead of waiting for it to
lapse; one whose own link broke is outvoted by a member that still hears the leader; a
leader paused or cut off from its followers confirms nothing once another leads, steps
down, and every confirmed message is on the new leader. Real etcd, real `python -m broker`
members, pika publishers recording what was confirmed and when."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
import uuid

import pika
import pytest

from broker.cluster.coordinator import Coordinator, LeaderRecord
from broker.cluster.etcd_client import EtcdSettings
from tests.cluster.members import Member
from tests.cluster.tcp_cut import TcpCut
from tests.cluster.test_failover import (
    drain,
    in_sync,
    leader_id,
    publish,
    takes_over,
    wait,
)

pytestmark = pytest.mark.timeout(180)


class Publisher(threading.Thread):
    """Publishes numbered persistent messages to `queue` on `url` with a confirm each, until
    its connection fails or `halt()`; `confirmed` holds (number, confirm time)."""

    def __init__(self, url: str, queue: str, prefix: str) -> None:
        super().__init__(daemon=True)
        self.url, self.queue, self.prefix = url, queue, prefix
        self.confirmed: list[tuple[bytes, float]] = []
        self._halt = threading.Event()
        self.ended = threading.Event()

    def run(self) -> None:
        conn = None
        try:
            conn = pika.BlockingConnection(pika.URLParameters(
                self.url + "?connection_attempts=1&socket_timeout=30"))
            ch = conn.channel()
            ch.queue_declare(self.queue, durable=True)
            ch.confirm_delivery()
            n = 0
            while not self._halt.is_set():
                body = b"%s-%d" % (self.prefix.encode(), n)
                ch.basic_publish("", self.queue, body, pika.BasicProperties(delivery_mode=2))
                self.confirmed.append((body, time.monotonic()))
                n += 1
                time.sleep(0.005)
        except Exception:  # noqa: BLE001 - its broker stepped down or died
            pass
        finally:
            self.ended.set()
            if conn is not None and conn.is_open:
                try:
                    conn.close()
                except Exception:  # noqa: BLE001
                    pass

    def halt(self) -> None:
        self._halt.set()
        self.join(40)


def _pair(tmp_path, etcd, **settings):
    prefix = f"/f-{uuid.uuid4().hex[:6]}"
    a = Member(tmp_path, "a", etcd.endpoints, prefix, **settings).start()
    a.wait_serving()
    b = Member(tmp_path, "b", etcd.endpoints, prefix, **settings).start()
    in_sync(etcd, prefix, what="b never joined the ISR")
    return a, b, prefix


def test_kill_9_of_the_leader_deposes_it_at_once(tmp_path, etcd):
    """The follower sees the stream reset and the leader's member port refuse: it revokes
    the lease (its log says so) rather than waiting for it to lapse, and serves every
    confirmed message."""
    a, b, prefix = _pair(tmp_path, etcd, **{"clustering.lease_ttl": 10})
    try:
        publish(a, "q", [b"%d" % i for i in range(100)], quorum=False)
        a.kill()
        started = time.monotonic()
        takes_over(b, etcd, prefix)
        took = time.monotonic() - started
        assert f"deposed leader {a.node_id}" in b.log_path.read_text(errors="replace")
        # a lease of 10 s did not have to lapse (generous for a loaded machine)
        assert took < 8, took
        assert drain(b, "q") == [b"%d" % i for i in range(100)]
    finally:
        a.kill()
        b.kill()


@pytest.mark.parametrize("pause", [1, 3, 10])
def test_a_paused_leader_confirms_nothing_once_another_leads(tmp_path, etcd, pause):
    """SIGSTOP the leader for 1, 3 or 10 s, then SIGCONT. Within a lease TTL the follower
    leads (it lost the heartbeats; the leader is the only other ISR member); the old leader
    releases no confirm after the pause once it was deposed, steps down (exit 75), and every
    message either publisher saw confirmed is on the new leader."""
    a, b, prefix = _pair(tmp_path, etcd)
    on_a = Publisher(a.url, "q", "a")
    on_a.start()
    try:
        wait(lambda: len(on_a.confirmed) > 20, 10, "nothing confirmed on a")
        os.kill(a.proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            if pause >= 3:
                takes_over(b, etcd, prefix, timeout=pause)  # within the pause
                took = time.monotonic() - stopped
            time.sleep(max(0.0, stopped + pause - time.monotonic()))
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)
        resumed = time.monotonic()
        new = b if leader_id(etcd, prefix) == b.node_id else a
        if pause >= 3:
            assert new is b and took < 3, took  # the heartbeats, not a 2 s lease + more
            wait(lambda: a.proc.poll() is not None, 15, "a never stepped down")
            assert a.proc.returncode == 75
            late = [t for _body, t in on_a.confirmed if t > stopped + 0.2]
            assert not late, f"a confirmed {len(late)} after it was paused and deposed"
        else:  # a 1 s pause may or may not cost a its term (b's suspicion may come just
            # after the pause: docs' false alarm (a)); either way nothing is lost
            time.sleep(3)  # b decides within a lease TTL
            wait(lambda: leader_id(etcd, prefix) is not None, 15, "no leader")
            new = b if leader_id(etcd, prefix) == b.node_id else a
        on_a.halt()
        assert resumed - stopped >= pause
        takes_over(new, etcd, prefix)
        held = set(drain(new, "q"))
        lost = [body for body, _t in on_a.confirmed if body not in held]
        assert not lost, lost[:5]
    finally:
        on_a.halt()
        a.kill()
        b.kill()


@contextlib.contextmanager
def three_behind_a_cut(tmp_path, etcd, **a_settings):
    """Members a (the leader, its member port reached through a TcpCut: its advertised
    URI), b and c in sync, and a Publisher on a that has had confirms; yields (a, b, c, cut,
    prefix, publisher); everything stopped at the end."""
    prefix = f"/f-{uuid.uuid4().hex[:6]}"
    a = Member(tmp_path, "a", etcd.endpoints, prefix, **a_settings)
    cut = TcpCut(("127.0.0.1", a.repl_port))
    a.cmd += ["--set", f"clustering.advertised_uri=tcp://127.0.0.1:{cut.port}"]
    b = Member(tmp_path, "b", etcd.endpoints, prefix)
    c = Member(tmp_path, "c", etcd.endpoints, prefix)
    on_a = Publisher(a.url, "q", "a")
    try:
        a.start().wait_serving()
        b.start()
        c.start()
        in_sync(etcd, prefix, 3, "the three members never were in sync")
        on_a.start()
        wait(lambda: len(on_a.confirmed) > 20, 10, "nothing confirmed on a")
        yield a, b, c, cut, prefix, on_a
    finally:
        on_a.halt()
        for m in (a, b, c):
            m.kill()
        cut.close()


def test_a_leader_cut_off_from_its_followers_is_deposed(tmp_path, etcd):
    """Three members; the leader's member port is reached through a cut-able forwarder
    (its advertised URI). Cut: both followers lose it, agree in etcd, and one of them leads;
    the old leader (which still reaches etcd) confirms nothing after the cut, steps down,
    and every confirmed message is on the new leader."""
    with three_behind_a_cut(tmp_path, etcd) as (a, b, c, cut, prefix, on_a):
        cut.cut()
        at = time.monotonic()
        wait(lambda: leader_id(etcd, prefix) in (b.node_id, c.node_id), 20,
             f"no follower took over: {b.log_tail()}")
        new = b if leader_id(etcd, prefix) == b.node_id else c
        wait(lambda: a.proc.poll() is not None, 20, "a never stepped down")
        late = [t for _body, t in on_a.confirmed if t > at + 0.2]
        assert not late, f"a confirmed {len(late)} after it was cut off"
        on_a.halt()
        takes_over(new, etcd, prefix)
        held = set(drain(new, "q"))
        assert not [body for body, _t in on_a.confirmed if body not in held]


def test_a_follower_cut_off_from_the_leader_alone_deposes_nobody(tmp_path, etcd):
    """Three members; only b's link to the leader is cut (c and etcd still hear it): b
    loses the leader and records it, c does not, so a keeps leading (it drops b from the
    ISR after clustering.ack_timeout) and confirms go on; healed, b catches up."""
    with three_behind_a_cut(tmp_path, etcd, **{"clustering.ack_timeout": 1000}) as (
            a, b, c, cut, prefix, on_a):
        cut.cut_matching(b.node_id.encode())
        time.sleep(4)  # b's silence (1 s) and its judgement (up to a lease TTL)
        assert leader_id(etcd, prefix) == a.node_id
        assert "deposed" not in b.log_path.read_text(errors="replace")
        count = len(on_a.confirmed)
        wait(lambda: len(on_a.confirmed) > count + 20, 10, "a stopped confirming")
        cut.heal()
        in_sync(etcd, prefix, 3, "b never caught up")
        on_a.halt()
        held = set(kill_leader_and_drain(a, (b, c), etcd, prefix))
        assert not [body for body, _t in on_a.confirmed if body not in held]


def kill_leader_and_drain(old: Member, others: tuple[Member, ...], etcd,
                          prefix) -> list[bytes]:
    """kill -9 `old`; once one of `others` leads and serves, the queue drained from it."""
    old.kill()
    wait(lambda: leader_id(etcd, prefix) in {m.node_id for m in others}, 20, "no new leader")
    new = next(m for m in others if m.node_id == leader_id(etcd, prefix))
    takes_over(new, etcd, prefix)
    return drain(new, "q")


def test_one_follower_that_lost_the_leader_does_not_depose_it(etcd):
    """The decision rule (Coordinator.lost_by_all): with followers b and c in the ISR and
    running, b's suspicion alone does not end a's term; c's as well does."""
    prefix = f"/f-{uuid.uuid4().hex[:6]}"
    settings = EtcdSettings(EtcdSettings.parse_endpoints(etcd.endpoints))

    async def main() -> tuple[bool, bool, bool]:
        members = {name: Coordinator(settings, prefix, name, 5, {"uri": f"tcp://{name}"})
                   for name in ("a", "b", "c")}
        for c in members.values():
            await c.start()
        try:
            a = members["a"]
            term = await a.campaign()
            assert term is not None
            await a.update_isr(term, {"b", "c"})
            leader = await members["b"].leader()
            assert isinstance(leader, LeaderRecord) and leader.id == "a"
            before = await members["b"].lost_by_all(leader)
            await members["b"].suspect(term)
            one = await members["b"].lost_by_all(leader)
            await members["c"].suspect(term)
            both = await members["b"].lost_by_all(leader)
            assert await members["c"].depose(leader)
            assert await members["b"].leader() is None  # the lease revoked: the key went
            return before, one, both
        finally:
            for c in members.values():
                await c.close(revoke=False)

    assert asyncio.run(main()) == (False, False, True)


def test_with_etcd_200_ms_away_kill_9_of_the_leader_loses_nothing(tmp_path, etcd):
    """Every member reaches etcd through a link adding 200 ms each way: the leader keeps its
    lease and confirms; after kill -9 of it the follower deposes it and leads, with every
    confirmed message."""
    from tests.cluster.tcp_delay import TcpDelay

    host, _sep, port = etcd.endpoints.split(",")[0].rpartition(":")
    slow = TcpDelay((host, int(port)), 0.2)
    endpoints = f"127.0.0.1:{slow.port}"
    prefix = f"/f-{uuid.uuid4().hex[:6]}"
    a = Member(tmp_path, "a", endpoints, prefix)
    b = Member(tmp_path, "b", endpoints, prefix)
    try:
        a.start().wait_serving(60)
        b.start()
        in_sync(etcd, prefix, what="b never joined the ISR")
        publish(a, "q", [b"%d" % i for i in range(100)], quorum=False)
        time.sleep(3)  # lease renewals through the slow link: a still leads
        assert leader_id(etcd, prefix) == a.node_id
        a.kill()
        takes_over(b, etcd, prefix, timeout=60)
        assert drain(b, "q") == [b"%d" % i for i in range(100)]
    finally:
        a.kill()
        b.kill()
        slow.close()


def test_two_of_three_killed_with_min_insync_2(tmp_path, etcd):
    """min_insync_replicas = 2: kill -9 of the leader and a follower together; the last
    member leads (the leader's port refuses) and holds confirms until a second member is
    back in sync; nothing confirmed before is lost."""
    prefix = f"/f-{uuid.uuid4().hex[:6]}"
    settings = {"clustering.min_insync_replicas": 2}
    a, b, c = (Member(tmp_path, name, etcd.endpoints, prefix, **settings)
               for name in ("a", "b", "c"))
    try:
        a.start().wait_serving()
        b.start()
        c.start()
        in_sync(etcd, prefix, 3, "the three members never were in sync")
        publish(a, "q", [b"%d" % i for i in range(50)], quorum=False)
        a.kill()
        b.kill()
        takes_over(c, etcd, prefix)
        b.start()  # back as a follower: confirms resume once it is in sync
        with pika.BlockingConnection(pika.URLParameters(c.url)) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_publish("", "q", b"after", pika.BasicProperties(delivery_mode=2))
        assert drain(c, "q") == [*(b"%d" % i for i in range(50)), b"after"]
    finally:
        for m in (a, b, c):
            m.kill()


def test_the_documented_clients_reconnect_after_kill_9_of_the_leader(tmp_path, etcd):
    """docs/high-availability.md's client settings: aio-pika's connect_robust
    (reconnect_interval=0.1) on a follower's address, and kombu with every member in one
    failover URL and interval_start=0, both publish confirmed again after kill -9 of the
    leader, each message once confirmed on the new leader."""
    import aio_pika
    import kombu

    a, b, prefix = _pair(tmp_path, etcd)
    try:
        async def robust() -> list[str]:
            conn = await aio_pika.connect_robust(b.url + "?reconnect_interval=0.1")
            sent = []
            try:
                ch = await conn.channel()  # publisher confirms on by default
                await ch.declare_queue("robust", durable=True)
                for i in range(5):
                    await ch.default_exchange.publish(aio_pika.Message(
                        b"r%d" % i, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), "robust")
                    sent.append(f"r{i}")
                a.kill()
                deadline = time.monotonic() + 30
                while True:  # the carried connection is closed at the leader change
                    try:
                        await ch.default_exchange.publish(aio_pika.Message(
                            b"r-after", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                            "robust")
                        sent.append("r-after")
                        return sent
                    except Exception:  # noqa: BLE001 - reconnecting: try again
                        assert time.monotonic() < deadline, "aio-pika never published again"
                        await asyncio.sleep(0.1)
            finally:
                await conn.close()

        sent = asyncio.run(asyncio.wait_for(robust(), 60))
        takes_over(b, etcd, prefix)
        assert [body.decode() for body in drain(b, "robust")] == sent
        # kombu: every member in one failover URL; a was killed, so b answers
        urls = ";".join(m.url.replace("%2F", "") for m in (a, b))
        with kombu.Connection(urls, failover_strategy="round-robin",
                              transport_options={"confirm_publish": True}) as conn:
            conn.ensure_connection(interval_start=0, interval_step=0.1, max_retries=50)
            producer = conn.Producer()
            producer.publish(b"k", routing_key="robust", retry=True,
                             retry_policy={"interval_start": 0, "max_retries": 50})
        assert drain(b, "robust") == [b"k"]
    finally:
        a.kill()
        b.kill()
