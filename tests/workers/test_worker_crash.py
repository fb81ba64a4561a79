"""A worker process killed with SIGKILL while publishers run (issue 47 item 3): the node
process starts it again, it recovers its durable queues from its own directory, the
clients of the other worker see nothing but nacks for what the dead queue had not
confirmed, and every confirmed persistent message is there afterwards (a Jepsen-style
check: what clients were confirmed against what the broker holds)."""

from __future__ import annotations

import re
import subprocess
import threading
import time

import pika
import pytest

pytestmark = pytest.mark.timeout(180)


def worker_pid(broker, index: int) -> int:
    out = subprocess.run(["pgrep", "-P", str(broker.proc.pid), "-f",
                          rf"broker\.workers\.worker [0-9]+ {index}$"],
                         capture_output=True, text=True)
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 1, (out.stdout, broker.log())
    return pids[0]


def wait_for_log(broker, pattern: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not re.search(pattern, broker.log()):
        assert time.monotonic() < deadline, broker.log()
        time.sleep(0.1)


def test_a_killed_worker_restarts_and_no_confirmed_message_is_lost(workers_broker):
    broker = workers_broker(2)
    setup = pika.BlockingConnection(pika.URLParameters(broker.url))  # worker 0
    ch = setup.channel()
    ch.queue_declare("kept0", durable=True)  # worker 0
    ch.queue_declare("kept1", durable=True)  # worker 1: the one killed
    bystander = pika.BlockingConnection(pika.URLParameters(broker.url))  # worker 1
    confirmed: list[bytes] = []
    nacked = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def publish() -> None:
        try:
            pch = setup.channel()
            pch.confirm_delivery()
            n = 0
            while not stop.is_set():
                body = b"m%06d" % n
                n += 1
                try:
                    pch.basic_publish("", "kept1", body, pika.BasicProperties(delivery_mode=2))
                    confirmed.append(body)
                except pika.exceptions.NackError:
                    nacked.append(body)  # the queue died before confirming it
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    thread = threading.Thread(target=publish)
    thread.start()
    try:
        time.sleep(1.0)
        before = len(confirmed)
        victim = worker_pid(broker, 1)
        subprocess.run(["kill", "-9", str(victim)], check=True)
        wait_for_log(broker, r"worker 1 restarted")
        time.sleep(1.0)
    finally:
        stop.set()
        thread.join(30)
    print(f"confirmed {len(confirmed)} (before the kill {before}), nacked {len(nacked)}")
    assert not errors, errors  # the publisher's connection, on worker 0, never dropped
    assert before > 0 and len(confirmed) > before  # it published through the restart
    with pytest.raises(pika.exceptions.AMQPConnectionError):  # worker 1's client: dropped
        bystander.channel().queue_declare("kept0", passive=True)
    # every confirmed message is in the restarted worker's queue (nacked ones may be too)
    held: set[bytes] = set()
    rch = setup.channel()
    while True:
        method, _props, body = rch.basic_get("kept1", auto_ack=True)
        if method is None:
            break
        held.add(body)
    assert set(confirmed) <= held, sorted(set(confirmed) - held)[:10]
    assert held <= set(confirmed) | set(nacked)
    setup.close()
    again = [pika.BlockingConnection(pika.URLParameters(broker.url)) for _ in range(2)]
    for conn in again:  # both workers serve new connections
        conn.channel().queue_declare("kept0", durable=True, passive=True)
        conn.close()
    assert broker.proc.poll() is None
    assert worker_pid(broker, 1) != victim



def test_what_a_killed_workers_consumer_held_unacked_goes_back_to_its_queue(workers_broker):
    broker = workers_broker(2)
    owner = pika.BlockingConnection(pika.URLParameters(broker.url))  # worker 0
    och = owner.channel()
    och.queue_declare("work", durable=True)  # worker 0
    och.confirm_delivery()
    for n in range(20):
        och.basic_publish("", "work", b"%d" % n, pika.BasicProperties(delivery_mode=2))
    consumer = pika.BlockingConnection(pika.URLParameters(broker.url))  # worker 1
    cch = consumer.channel()
    cch.basic_qos(prefetch_count=10)
    got: list[bytes] = []
    cch.basic_consume("work", lambda c, m, p, b: got.append(b))
    deadline = time.monotonic() + 10
    while len(got) < 10 and time.monotonic() < deadline:
        consumer.process_data_events(0.1)
    assert len(got) == 10
    assert och.queue_declare("work", durable=True, passive=True).method.message_count == 10
    subprocess.run(["kill", "-9", str(worker_pid(broker, 1))], check=True)
    deadline = time.monotonic() + 10
    while och.queue_declare("work", durable=True, passive=True).method.message_count != 20:
        assert time.monotonic() < deadline, "the dead consumer's unacked did not come back"
        time.sleep(0.05)
    first = och.basic_get("work", auto_ack=True)
    assert first[0].redelivered and first[2] == b"0"  # back at the head, in order
    wait_for_log(broker, r"worker 1 restarted")
    owner.close()
    with pytest.raises(pika.exceptions.AMQPError):  # its worker died: the client is told
        consumer.process_data_events(1)
    if consumer.is_open:  # pragma: no cover - pika saw the close above
        consumer.close()
