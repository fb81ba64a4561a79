"""Jepsen-style (issue 35 item 7): three members and etcd; a publisher in its own process
sends numbered persistent messages with confirms, reconnecting to the next member whenever
its connection drops, and records every confirmed number; the leader is killed with -9
again and again (`KILLS`, 20 by default), each time after the member killed before has
rejoined the ISR. Then a checker reads the queue from the last leader: every confirmed
number is there (duplicates are allowed: a publish whose confirm was lost is sent again)."""

from __future__ import annotations

import json
import os
import time
import uuid

import pika
import pytest

from tests.cluster.members import Member
from tests.cluster.test_failover import in_sync, isr, leader_id, takes_over, wait
from tests.integration.client_proc import start_client, stop_client

KILLS = int(os.environ.get("BROKER_CLUSTER_KILLS", "20"))

PUBLISHER = """
import json, sys, time, pika
urls = URLS
path = PATH
n = 0
confirmed = open(path, "a")
print(json.dumps("started"), flush=True)
i = 0
while True:
    url = urls[i % len(urls)]
    i += 1
    try:
        conn = pika.BlockingConnection(pika.URLParameters(url + "?connection_attempts=1&socket_timeout=2"))
        ch = conn.channel()
        ch.queue_declare("jepsen", durable=True, arguments={"x-queue-type": "quorum"})
        ch.confirm_delivery()
        while True:
            ch.basic_publish("", "jepsen", str(n).encode(), pika.BasicProperties(delivery_mode=2))
            confirmed.write(f"{n}\\n")
            confirmed.flush()
            n += 1
            time.sleep(0.002)
    except Exception:
        n += 1  # the unconfirmed one may or may not be in the queue: a fresh number next
        time.sleep(0.2)
"""


@pytest.mark.timeout(600)
def test_kill_9_of_the_leader_in_a_loop_loses_no_confirmed_message(tmp_path, etcd):
    prefix = f"/j-{uuid.uuid4().hex[:6]}"
    members = [Member(tmp_path, name, etcd.endpoints, prefix) for name in ("a", "b", "c")]
    try:
        members[0].start().wait_serving()
        for m in members[1:]:
            m.start()
        in_sync(etcd, prefix, 3, "the three members never were in sync")
        log = tmp_path / "confirmed.txt"
        urls = [m.url for m in members]
        source = PUBLISHER.replace("URLS", repr(urls)).replace("PATH", repr(str(log)))
        publisher, _ = start_client(source, urls[0])
        failovers = []
        try:
            for _ in range(KILLS):
                leader = next(m for m in members if m.node_id == leader_id(etcd, prefix))
                wait(lambda: log.exists() and log.stat().st_size > 0, 30, "nothing confirmed")
                time.sleep(0.5)  # publishing meanwhile
                leader.kill()
                started = time.monotonic()
                victim = leader.node_id
                wait(lambda v=victim: leader_id(etcd, prefix) not in (None, v), 30,
                     "no new leader")
                new = next(m for m in members if m.node_id == leader_id(etcd, prefix))
                takes_over(new, etcd, prefix)
                failovers.append(time.monotonic() - started)
                leader.start()
                in_sync(etcd, prefix, 3, "the killed member never rejoined the ISR")
            time.sleep(0.5)
        finally:
            stop_client(publisher)
        confirmed = {int(x) for x in log.read_text().split()}
        leader = next(m for m in members if m.node_id == leader_id(etcd, prefix))
        seen = set()
        with pika.BlockingConnection(pika.URLParameters(leader.url)) as conn:
            ch = conn.channel()
            while True:
                method, _p, body = ch.basic_get("jepsen", auto_ack=True)
                if method is None:
                    break
                seen.add(int(body))
    finally:  # a failure anywhere above must not leave members running
        for m in members:
            m.kill()
    lost = confirmed - seen
    report = {"kills": KILLS, "confirmed": len(confirmed), "read": len(seen),
              "lost": sorted(lost)[:20], "failover_s": [round(f, 2) for f in failovers],
              "isr_at_end": len(isr(etcd, prefix) or ())}
    (tmp_path / "report.json").write_text(json.dumps(report))
    assert not lost, report
    assert len(confirmed) > 100, report
