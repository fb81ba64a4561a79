"""A cluster whose members run several workers each (issue 47 item 4, docs/multicore.md
"High availability with workers"): every worker's durable writes reach the followers before
a confirm goes out, the followers' clients are carried to the leader's workers, and after
the leader's whole process tree is killed the follower leads with every confirmed message,
in every worker's queues. Real etcd, real `python -m broker --workers 2` members, pika."""

from __future__ import annotations

import json
import time
import uuid

import pika
import pytest
import requests

from tests.cluster.etcd_proc import free_port
from tests.cluster.members import Member
from tests.cluster.test_failover import drain, in_sync, leader_id, takes_over, wait

pytestmark = pytest.mark.timeout(180)


def test_a_leader_with_two_workers_fails_over_with_every_confirmed_message(tmp_path, etcd):
    prefix = f"/c-{uuid.uuid4().hex[:6]}"
    b_http = free_port()
    a = Member(tmp_path, "a", etcd.endpoints, prefix, workers=2,
               **{"management.tcp.port": free_port()}).start()
    b = Member(tmp_path, "b", etcd.endpoints, prefix, workers=2,
               **{"management.tcp.port": b_http})
    try:
        a.wait_serving()
        b.start()
        in_sync(etcd, prefix, what="b never joined the ISR")
        assert leader_id(etcd, prefix) == a.node_id
        conns = [pika.BlockingConnection(pika.URLParameters(a.url)) for _ in range(2)]
        setup = conns[0].channel()
        setup.exchange_declare("fan", "fanout", durable=True)
        for name in ("w-a", "w-b"):  # the first on worker 0, the second on worker 1
            setup.queue_declare(name, durable=True)
            setup.queue_bind(name, "fan")
        setup.queue_declare("quorum", durable=True, arguments={"x-queue-type": "quorum"})
        sent = []
        for i, conn in enumerate(conns):  # publishers on both workers, confirmed
            ch = conn.channel()
            ch.confirm_delivery()
            for n in range(150):
                body = b"%d-%d" % (i, n)
                ch.basic_publish("fan", "", body, pika.BasicProperties(delivery_mode=2),
                                 mandatory=True)
                ch.basic_publish("", "quorum", body, pika.BasicProperties(delivery_mode=2),
                                 mandatory=True)
                sent.append(body)
        for conn in conns:
            conn.close()
        # a client of the follower is carried to one of the leader's workers
        with pika.BlockingConnection(pika.URLParameters(b.url)) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_publish("fan", "", b"via-b", pika.BasicProperties(delivery_mode=2),
                             mandatory=True)
            local_port = conn._impl._transport._sock.getsockname()[1]
            listed = wait(lambda: requests.get(
                f"http://127.0.0.1:{b_http}/api/connections", auth=("guest", "guest"),
                timeout=5).json(), 10, "b's API never listed the connections")
            assert any(c["peer_port"] == local_port for c in listed), listed
        nodes = requests.get(f"http://127.0.0.1:{b_http}/api/nodes", auth=("guest", "guest"),
                             timeout=5).json()  # worker 0 shows the node process's view
        assert [(n["cluster_role"], n["insync"]) for n in nodes] == [
            ("leader", True), ("follower", True)], nodes
        sent.append(b"via-b")
        placed = json.loads((b.data_dir / "queue_workers.json").read_text())
        assert {row[1]: row[2] for row in placed if row[1] in ("w-a", "w-b")} == {
            "w-a": 0, "w-b": 1}  # replicated: the follower knows where each queue lives
        a.kill_tree()
        takes_over(b, etcd, prefix)
        for queue in ("w-a", "w-b"):
            assert sorted(drain(b, queue)) == sorted(sent)
        assert sorted(drain(b, "quorum")) == sorted(sent[:-1])
        # brokerctl forget_cluster_node's request: worker 0's API asks the node process
        url = f"http://127.0.0.1:{b_http}/api/cluster/members/{a.node_id}"
        wait(lambda: requests.delete(url, auth=("guest", "guest"), timeout=5).status_code
             == 204, 20, "a was never forgotten")
    finally:
        a.kill_tree()
        b.kill_tree()


def test_a_confirm_across_workers_waits_for_the_follower(tmp_path, etcd):
    """A publish on worker 0's connection to a queue of worker 1 with the follower
    stopped: the confirm waits until the follower leaves the ISR (clustering.ack_timeout),
    as in one process; the queue's worker gates it on its own writes."""
    import os
    import signal

    prefix = f"/c-{uuid.uuid4().hex[:6]}"
    settings = {"workers": 2, "clustering.ack_timeout": 1000}
    a = Member(tmp_path, "a", etcd.endpoints, prefix, **settings).start()
    b = Member(tmp_path, "b", etcd.endpoints, prefix, **settings)
    try:
        a.wait_serving()
        b.start()
        in_sync(etcd, prefix, what="b never joined the ISR")
        first, second = (pika.BlockingConnection(pika.URLParameters(a.url))
                         for _ in range(2))
        for name in ("q1", "q2"):  # one queue per worker
            second.channel().queue_declare(name, durable=True)
        placed = {row[1]: row[2] for row in json.loads(
            (a.data_dir / "queue_workers.json").read_text())}
        remote = next(name for name, worker in placed.items() if worker == 1)
        ch = first.channel()  # worker 0's connection
        ch.confirm_delivery()
        ch.basic_publish("", remote, b"before", pika.BasicProperties(delivery_mode=2))
        os.kill(b.proc.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            ch.basic_publish("", remote, b"during", pika.BasicProperties(delivery_mode=2))
            waited = time.monotonic() - started
        finally:
            os.kill(b.proc.pid, signal.SIGCONT)
        assert 0.9 <= waited < 5, waited
        in_sync(etcd, prefix, what="b never rejoined the ISR")
        ch.basic_publish("", remote, b"after", pika.BasicProperties(delivery_mode=2))
        first.close()
        second.close()
        a.kill_tree()
        takes_over(b, etcd, prefix)
        assert drain(b, remote) == [b"before", b"during", b"after"]
    finally:
        a.kill_tree()
        b.kill_tree()
