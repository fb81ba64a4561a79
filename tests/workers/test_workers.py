"""One broker in several worker processes (issue 47, docs/multicore.md), driven by pika
against a real `python -m broker --workers N`. The node process hands connections to the
worker with the fewest, so consecutive connections land on workers 0, 1, 0, 1, ... (with 2);
queues go to the worker with the fewest queues. Each test checks a guarantee that the split
could break (../shared/MULTICORE.md): definitions visible everywhere once -ok is seen,
confirms only after every queue took the message, prefetch on a queue of another worker,
exclusive and auto-delete queues, delete-time checks, restarts and one management view."""

from __future__ import annotations

import json
import socket
import time

import pika
import pytest
import requests

from tests.polling import wait_for

pytestmark = pytest.mark.timeout(180)


def connect(broker, n: int) -> list[pika.BlockingConnection]:
    return [pika.BlockingConnection(pika.URLParameters(broker.url)) for _ in range(n)]


def wait_until_gone(conn: pika.BlockingConnection, queue: str, within: float = 5.0) -> None:
    """Until a passive declare of `queue` on `conn` answers 404."""
    deadline = time.monotonic() + within
    while True:
        try:
            conn.channel().queue_declare(queue, passive=True)
        except pika.exceptions.ChannelClosedByBroker as exc:
            assert exc.reply_code == 404
            return
        assert time.monotonic() < deadline, f"queue {queue} is still there"
        time.sleep(0.05)


def placements(broker) -> dict[str, int]:
    rows = json.loads((broker.data_dir / "queue_workers.json").read_text())
    return {name: worker for _vhost, name, worker in rows}


def test_definitions_from_one_connection_route_publishes_on_every_worker(workers_broker):
    broker = workers_broker(2)
    conns = connect(broker, 4)
    try:
        setup = conns[0].channel()
        setup.exchange_declare("x", "direct")
        for i in range(4):
            setup.queue_declare(f"q{i}", durable=True)
            setup.queue_bind(f"q{i}", "x", f"k{i}")
        assert sorted(placements(broker).values()) == [0, 0, 1, 1]
        for j, conn in enumerate(conns):  # each -ok seen: every worker routes with it
            ch = conn.channel()
            ch.confirm_delivery()
            for i in range(4):
                ch.basic_publish("x", f"k{i}", b"%d->%d" % (j, i), mandatory=True)
        for i in range(4):
            ch = conns[(i + 1) % 4].channel()
            got = []
            for _ in range(4):
                method, _props, body = ch.basic_get(f"q{i}", auto_ack=True)
                got.append(body)
            assert sorted(got) == [b"%d->%d" % (j, i) for j in range(4)]
            assert ch.basic_get(f"q{i}")[0] is None
    finally:
        for conn in conns:
            conn.close()


def test_a_message_routed_to_queues_on_three_workers_is_confirmed_once_all_took_it(
        workers_broker):
    broker = workers_broker(3)
    (conn,) = connect(broker, 1)
    ch = conn.channel()
    ch.exchange_declare("fan", "fanout", durable=True)
    for i in range(3):
        ch.queue_declare(f"f{i}", durable=True)
        ch.queue_bind(f"f{i}", "fan")
    assert sorted(placements(broker).values()) == [0, 1, 2]  # one queue per worker
    ch.confirm_delivery()
    for n in range(200):  # pika raises on a nack or a return
        ch.basic_publish("fan", "", b"m%d" % n, pika.BasicProperties(delivery_mode=2),
                         mandatory=True)
    counts = [ch.queue_declare(f"f{i}", durable=True).method.message_count for i in range(3)]
    assert counts == [200, 200, 200]
    conn.close()
    assert broker.stop() == 0
    broker.start()  # every worker recovers its queue from its own directory
    (conn,) = connect(broker, 1)
    ch = conn.channel()
    for i in range(3):
        got = [ch.basic_get(f"f{i}", auto_ack=True)[2] for _ in range(200)]
        assert got == [b"m%d" % n for n in range(200)]  # in order, each once
    conn.close()


def test_a_consumer_of_a_queue_on_another_worker_keeps_its_prefetch(workers_broker):
    broker = workers_broker(2)
    producer, consumer = connect(broker, 2)  # worker 0, worker 1
    pch = producer.channel()
    pch.queue_declare("work")  # the first queue: on its declarer's worker, 0
    assert broker.api_get("/api/queues/%2F/work")["name"] == "work"
    pch.confirm_delivery()
    for n in range(30):
        pch.basic_publish("", "work", b"%d" % n)
    cch = consumer.channel()
    cch.basic_qos(prefetch_count=10)
    got: list[tuple[int, bytes]] = []
    cch.basic_consume("work", lambda c, m, p, b: got.append((m.delivery_tag, b)))
    deadline = time.monotonic() + 5
    while len(got) < 10 and time.monotonic() < deadline:
        consumer.process_data_events(0.1)
    consumer.process_data_events(0.5)
    assert [b for _, b in got] == [b"%d" % n for n in range(10)]  # no more than 10 unacked
    cch.basic_ack(got[-1][0], multiple=True)
    deadline = time.monotonic() + 5
    while len(got) < 20 and time.monotonic() < deadline:
        consumer.process_data_events(0.1)
    assert [b for _, b in got] == [b"%d" % n for n in range(20)]
    consumer.close()  # the 10 unacked go back to the queue
    assert pch.queue_declare("work", passive=True).method.message_count == 20
    producer.close()


def test_an_exclusive_queue_is_locked_to_other_workers_and_goes_with_its_connection(
        workers_broker):
    broker = workers_broker(2)
    owner, other = connect(broker, 2)
    owner.channel().queue_declare("mine", exclusive=True)
    for op in (lambda ch: ch.queue_declare("mine", passive=True),
               lambda ch: ch.basic_get("mine"),
               lambda ch: ch.queue_declare("mine", exclusive=True)):
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
            op(other.channel())
        assert err.value.reply_code == 405
    owner.close()
    wait_until_gone(other, "mine")  # the exclusive queue goes with its connection
    other.close()


def test_once_its_owner_has_close_ok_an_exclusive_queue_is_gone_on_every_worker(
        workers_broker):
    """connection.close-ok waits until every worker has deleted the owner's exclusive
    queues: a passive declare from another worker's connection right after it answers 404
    (the integration suite's aio-pika test raced here against two workers)."""
    broker = workers_broker(2)
    for round_ in range(30):
        first, second = connect(broker, 2)  # workers 0 and 1
        owner, other = (first, second) if round_ % 2 else (second, first)
        name = f"mine-{round_}"
        owner.channel().queue_declare(name, exclusive=True)
        ch = other.channel()
        owner.close()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
            ch.queue_declare(name, passive=True)
        assert err.value.reply_code == 404, (round_, err.value)
        other.close()


def test_a_client_that_reconnects_at_once_declares_its_exclusive_queue_again(
        workers_broker):
    """A connection dropped by the server (the management API's DELETE, 320), whose client
    reconnects at once through the other worker and declares its exclusive queue again (as
    aio-pika's connect_robust does), is not refused with 405: the owner asks the dropped
    connection's worker, which deletes the queue first (the integration suite's aio-pika
    test raced here against two workers)."""
    broker = workers_broker(2)
    for round_ in range(20):
        first, second = connect(broker, 2)  # workers 0 and 1
        owner, other = (first, second) if round_ % 2 else (second, first)
        name = f"again-{round_}"
        owner.channel().queue_declare(name, exclusive=True)
        port = owner._impl._transport._sock.getsockname()[1]
        conn_name = wait_for(lambda port=port: next((c["name"] for c in broker.api_get(
            "/api/connections") if c["peer_port"] == port), None), timeout=10)
        ch = other.channel()  # the reconnected client: another connection, another worker
        reply = broker.api.delete(f"http://127.0.0.1:{broker.api_port}/api/connections/"
                                  + requests.utils.quote(conn_name, safe=""), timeout=10)
        assert reply.status_code == 204
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker):
            while True:  # close-ok, as a client does, then the socket closes
                owner.process_data_events(0.01)
        ch.queue_declare(name, exclusive=True)  # at once: not 405
        other.close()


def test_an_auto_delete_queue_goes_when_its_consumer_on_another_worker_cancels(
        workers_broker):
    broker = workers_broker(2)
    declarer, consumer = connect(broker, 2)
    declarer.channel().queue_declare("temp", auto_delete=True)
    ch = consumer.channel()
    tag = ch.basic_consume("temp", lambda *a: None)
    ch.basic_cancel(tag)
    wait_until_gone(declarer, "temp")
    declarer.close()
    consumer.close()


def test_queue_delete_if_empty_is_checked_by_the_queues_worker(workers_broker):
    broker = workers_broker(2)
    a, b = connect(broker, 2)
    ach = a.channel()
    ach.queue_declare("full")
    ach.basic_publish("", "full", b"x")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        b.channel().queue_delete("full", if_empty=True)
    assert err.value.reply_code == 406 and "not empty" in err.value.reply_text
    assert b.channel().queue_delete("full").method.message_count == 1
    a.close()
    b.close()


def test_the_management_api_shows_every_workers_queues_and_totals(workers_broker):
    broker = workers_broker(2)
    a, b = connect(broker, 2)
    ach, bch = a.channel(), b.channel()
    ach.queue_declare("on0")
    ach.queue_declare("on1")  # fewest queues: worker 1
    bch.basic_publish("", "on0", b"x")
    bch.basic_publish("", "on1", b"y")
    bch.basic_publish("", "on1", b"z")
    deadline = time.monotonic() + 5
    while True:
        queues = {q["name"]: q["messages"] for q in broker.api_get("/api/queues")}
        overview = broker.api_get("/api/overview")
        if (queues == {"on0": 1, "on1": 2}
                and overview["object_totals"]["connections"] == 2
                and overview["message_stats"]["publish"] == 3):
            break
        assert time.monotonic() < deadline, (queues, overview["object_totals"],
                                             overview.get("message_stats"))
        time.sleep(0.1)
    a.close()
    b.close()


def test_fewer_workers_than_the_durable_queues_need_is_refused(workers_broker, tmp_path):
    broker = workers_broker(2)
    (conn,) = connect(broker, 1)
    conn.channel().queue_declare("a", durable=True)
    conn.channel().queue_declare("b", durable=True)  # on worker 1
    conn.close()
    broker.stop()
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "broker", "--data-dir", str(broker.data_dir),
                          "--port", "0", "--set", "management.tcp.port=0"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 78
    assert "start with workers = 2 or more" in out.stderr


def test_users_vhosts_and_permissions_made_through_the_api_reach_every_worker(
        workers_broker):
    broker = workers_broker(2)
    base = f"http://127.0.0.1:{broker.api_port}"
    assert broker.api.put(f"{base}/api/vhosts/v2").status_code in (201, 204)
    assert broker.api.put(f"{base}/api/users/ann", json={
        "password": "pw", "tags": ""}).status_code in (201, 204)
    assert broker.api.put(f"{base}/api/permissions/v2/ann", json={
        "configure": ".*", "write": ".*", "read": "^own$"}).status_code in (201, 204)
    url = f"amqp://ann:pw@127.0.0.1:{broker.port}/v2"
    conns = [pika.BlockingConnection(pika.URLParameters(url)) for _ in range(2)]  # w0, w1
    for conn in conns:  # each worker knows the vhost, the user and her permissions
        ch = conn.channel()
        ch.queue_declare("own")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
            conn.channel().basic_get("other-" + str(id(conn)))
        assert err.value.reply_code == 403
    for conn in conns:
        conn.close()
    assert broker.api.delete(f"{base}/api/vhosts/v2").status_code == 204
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        for _ in range(2):
            pika.BlockingConnection(pika.URLParameters(url)).close()


def test_one_memory_figure_one_alarm_and_a_view_per_worker(workers_broker):
    """Issue 47 item 4: the memory monitor counts the whole process tree (node process and
    every worker) against the one watermark, so with a watermark above any one worker's
    RSS but below the broker's, every worker raises the alarm and blocks its publishers
    (connection.blocked on connections served by both workers); GET /api/nodes gives the
    tree's figure and a per-worker view."""
    probe = workers_broker(2)
    node = probe.api_get("/api/nodes")[0]
    views = node["workers"]
    assert [v["index"] for v in views] == [0, 1]
    assert len({v["os_pid"] for v in views}) == 2 and node["mem_alarm"] is False
    assert node["mem_used"] >= sum(v["mem_used"] for v in views)  # plus the node process
    watermark = int(max(v["mem_used"] for v in views) * 1.3)
    assert node["mem_used"] > watermark * 1.2
    probe.stop()

    broker = workers_broker(2, **{"vm_memory_high_watermark.absolute": watermark})
    wait_for(lambda: broker.api_get("/api/nodes")[0]["mem_alarm"] is True, timeout=20)
    events: list[list] = [[], []]
    # (a blocked connection is not read, as in RabbitMQ: its close-ok would never come,
    # so the broker's stop closes these)
    conns = [pika.BlockingConnection(pika.URLParameters(broker.url)) for _ in range(2)]
    for conn, seen in zip(conns, events, strict=True):
        conn.add_on_connection_blocked_callback(
            lambda _c, frame, seen=seen: seen.append(frame.method.reason))
    wait_for(lambda: [v["connections"] for v in
                      broker.api_get("/api/nodes")[0]["workers"]] == [1, 1], timeout=20)
    for conn in conns:
        conn.channel().basic_publish("", "nowhere", b"x")
    for conn, seen in zip(conns, events, strict=True):
        deadline = time.monotonic() + 20
        while not seen and time.monotonic() < deadline:
            conn.process_data_events(0.1)
        assert seen == ["low on memory"]
    broker.stop()  # closes the blocked connections' sockets after its grace period
    for conn in conns:
        try:
            while conn.is_open:
                conn.process_data_events(0.1)
        except pika.exceptions.AMQPError:
            pass  # the broker's close


def test_connection_limits_count_every_workers_connections(workers_broker):
    """A vhost's max-connections (and the user's) counts the connections every worker
    serves, as RabbitMQ counts every node's: with a limit of 2, two connections (one per
    worker) are in and a third is refused with 530, whichever worker it reaches; once one
    closes, a new one is admitted again."""
    broker = workers_broker(2)
    r = broker.api.put(f"http://127.0.0.1:{broker.api_port}/api/vhost-limits/%2F/"
                       "max-connections", json={"value": 2}, timeout=10)
    assert r.status_code == 204
    first = pika.BlockingConnection(pika.URLParameters(broker.url))
    second = pika.BlockingConnection(pika.URLParameters(broker.url))
    wait_for(lambda: [v["connections"] for v in
                      broker.api_get("/api/nodes")[0]["workers"]] == [1, 1], timeout=20)
    for _ in range(2):  # the node hands each to a worker: both workers refuse
        with pytest.raises(pika.exceptions.AMQPConnectionError) as refused:
            pika.BlockingConnection(pika.URLParameters(broker.url))
        assert ("(530) \"NOT_ALLOWED - access to vhost '/' refused for user 'guest': "
                "connection limit (2) is reached\"") in str(refused.value)
    second.close()
    wait_for(lambda: sum(v["connections"] for v in
                         broker.api_get("/api/nodes")[0]["workers"]) == 1, timeout=20)
    third = pika.BlockingConnection(pika.URLParameters(broker.url))
    third.close()
    first.close()


def test_a_channel_wide_prefetch_holds_across_workers(workers_broker):
    """basic.qos global=true (Celery asks for it from RabbitMQ) limits a channel's unacked
    deliveries from queues of both workers together; acks let more come; lifting the
    limit lets everything come."""
    broker = workers_broker(2)
    first, second = connect(broker, 2)  # workers 0 and 1
    setup = first.channel()
    setup.queue_declare("gq-0")  # the first queue: on worker 0
    setup.queue_declare("gq-1")  # the second: on worker 1, which has fewer
    setup.confirm_delivery()
    for n in range(20):
        for name in ("gq-0", "gq-1"):
            setup.basic_publish("", name, b"%s-%d" % (name.encode(), n))
    ch = second.channel()  # worker 1: gq-0 is another worker's queue
    ch.basic_qos(prefetch_count=6, global_qos=True)
    got: list[tuple[int, bytes]] = []
    for name in ("gq-0", "gq-1"):
        ch.basic_consume(name, lambda c, m, p, b: got.append((m.delivery_tag, b)))

    def settle(until: int) -> None:
        deadline = time.monotonic() + 5
        while len(got) < until and time.monotonic() < deadline:
            second.process_data_events(0.05)
        second.process_data_events(0.5)  # and nothing beyond the limit
    settle(6)
    assert len(got) == 6, got
    ch.basic_ack(got[-1][0], multiple=True)  # room for 6 more, from either queue
    settle(12)
    assert len(got) == 12, got
    ch.basic_qos(prefetch_count=0, global_qos=True)  # no channel-wide limit: the rest
    settle(40)
    assert sorted(b for _, b in got) == sorted(
        b"%s-%d" % (name.encode(), n) for name in ("gq-0", "gq-1") for n in range(20))
    first.close()
    second.close()


def test_a_users_max_channels_counts_every_workers_channels(workers_broker):
    """A user's max-channels counts the channels every worker serves, as RabbitMQ counts
    every node's, whether they opened before the limit was set or after; a refusal (530)
    closes its connection, whose channels then stop counting."""
    broker = workers_broker(2)
    first, second = connect(broker, 2)  # workers 0 and 1
    held = [first.channel(), second.channel()]  # before the limit
    r = broker.api.put(f"http://127.0.0.1:{broker.api_port}/api/user-limits/guest/"
                       "max-channels", json={"value": 3}, timeout=10)
    assert r.status_code == 204
    held.append(first.channel())  # the third: within the limit
    for conn in (second, first):  # a fourth, on either worker, counting the other's
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as refused:
            conn.channel()
        assert refused.value.reply_code == 530
        assert "number of channels opened for user 'guest' has reached the maximum " \
            "allowed user limit of (3)" in refused.value.reply_text
        if conn is second:  # its channel went with it: one free, taken on worker 1
            (third,) = connect(broker, 1)
            held.append(third.channel())
    third.close()


def test_a_remote_consumer_whose_socket_stops_leaves_the_messages_in_the_queue(
        workers_broker):
    """A no-ack consumer on another worker than its queue, whose client stops reading: once
    its socket's buffers fill, its worker tells the queue's worker (FLOW), which holds the
    rest in the queue, as a local consumer's paused writer does, instead of pushing
    everything into the consumer worker's memory."""
    from pamqp import commands as C

    from tests.integration.rawamqp import RawClient

    broker = workers_broker(2)
    q = "held-back"
    owner = pika.BlockingConnection(pika.URLParameters(broker.url))  # the queue's worker
    ch = owner.channel()
    ch.queue_declare(q)  # ties go to the declaring connection's worker
    reader = RawClient("127.0.0.1", broker.port)  # the node hands it to the other worker
    try:
        reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.handshake()
        reader.open_channel(1)
        reader.send(C.Basic.Consume(queue=q, consumer_tag="slow", no_ack=True), 1)
        reader.expect(C.Basic.ConsumeOk, 1)
        body = b"x" * 100_000
        for _ in range(400):  # 40 MB: far beyond what the sockets buffer; what the queue
            ch.basic_publish("", q, body)  # sent before the pause was told is on its way
        time.sleep(0.5)
        for _ in range(200):  # these come after: they stay in the queue
            ch.basic_publish("", q, body)
        time.sleep(1.0)
        held = ch.queue_declare(q, passive=True).method.message_count
        assert held >= 150, held  # without FLOW every message left for the other worker
    finally:
        reader.close_socket()
        owner.close()


def test_confirm_on_ack_confirms_after_the_consumer_acks_across_workers(workers_broker):
    """The paper's confirm-after-ack mode (seed 000, confirm_on = ack) with the publisher on
    another worker than the queue: the confirm comes only once the consumer acked, not when
    the queue took the message or delivered it."""
    import threading

    broker = workers_broker(2, confirm_on="ack")
    consumer = pika.BlockingConnection(pika.URLParameters(broker.url))
    cch = consumer.channel()
    cch.queue_declare("after-ack")  # on the consumer's worker (ties go to the declarer)
    publisher = pika.BlockingConnection(pika.URLParameters(broker.url))  # the other one
    pch = publisher.channel()
    pch.confirm_delivery()
    confirmed = threading.Event()

    def publish() -> None:
        pch.basic_publish("", "after-ack", b"hello")  # returns once confirmed
        confirmed.set()
    thread = threading.Thread(target=publish)
    thread.start()
    try:
        assert not confirmed.wait(1.0)  # the queue has it: no confirm yet
        method, _props, body = cch.basic_get("after-ack", auto_ack=False)
        assert body == b"hello"
        assert not confirmed.wait(0.5)  # delivered, not acked: still none
        cch.basic_ack(method.delivery_tag)
        assert confirmed.wait(10)
    finally:
        thread.join(10)
        publisher.close()
        consumer.close()


def test_the_unacked_list_covers_every_workers_channels(workers_broker):
    """GET /api/queues/{vhost}/{name}/unacked (beyond RabbitMQ) lists the deliveries held
    by channels of every worker: two consumers on two connections (the node hands them to
    different workers) each hold one unacked message; both are listed."""
    broker = workers_broker(2)
    conns = [pika.BlockingConnection(pika.URLParameters(broker.url)) for _ in range(2)]
    try:
        chans = [c.channel() for c in conns]
        chans[0].queue_declare("held-unacked")
        for ch in chans:
            ch.basic_qos(prefetch_count=1)
            ch.basic_consume("held-unacked", lambda *a: None)
        for _ in range(2):
            chans[0].basic_publish("", "held-unacked", b"m")
        for c in conns:
            c.process_data_events(0.3)
        rows = wait_for(lambda: (lambda r: r if len(r) == 2 else None)(
            broker.api_get("/api/queues/%2F/held-unacked/unacked")), timeout=10)
        assert sorted(r["delivery_tag"] for r in rows) == [1, 1]
        assert len({r["channel_details"]["connection_name"] for r in rows}) == 2
    finally:
        for c in conns:
            c.close()


def test_a_deduplicating_exchange_drops_a_duplicate_published_through_another_worker(
        workers_broker):
    """A publisher that retries through a new connection lands on the other worker: the
    key its first publish put in worker 0's cache is in worker 1's too (and the other way
    round), so the retry is confirmed and dropped, as on one process; the duplicates count
    both workers' drops."""
    broker = workers_broker(2)
    first, second = connect(broker, 2)  # workers 0 and 1
    setup = first.channel()
    setup.exchange_declare("dd", "x-message-deduplication",
                           arguments={"x-cache-size": 1000})
    setup.queue_declare("ddq")
    setup.queue_bind("ddq", "dd")
    a, b = first.channel(), second.channel()
    a.confirm_delivery()
    b.confirm_delivery()
    for i in range(20):
        one, other = (a, b) if i % 2 else (b, a)
        props = pika.BasicProperties(headers={"x-deduplication-header": f"k{i}"})
        one.basic_publish("dd", "", b"first %d" % i, props)
        other.basic_publish("dd", "", b"retry %d" % i, props)  # confirmed, not routed
    assert setup.queue_declare("ddq", passive=True).method.message_count == 20
    bodies = [setup.basic_get("ddq", auto_ack=True)[2] for _ in range(20)]
    assert all(body.startswith(b"first") for body in bodies), bodies
    wait_for(lambda: broker.api_get("/api/exchanges/%2F/dd").get(
        "messages_deduplicated") == 20, timeout=15)
    first.close()
    second.close()


def test_the_delayed_browse_lists_what_every_worker_holds(workers_broker):
    """Each worker holds the delayed publishes of its own connections; the management
    API's browse (served by worker 0) lists them all, merged in due order, and the count
    covers both."""
    broker = workers_broker(2)
    first, second = connect(broker, 2)  # workers 0 and 1
    first.channel().exchange_declare("dx", "x-delayed-message",
                                     arguments={"x-delayed-type": "direct"})
    for conn, delays in ((first, (40_000, 20_000)), (second, (30_000, 10_000))):
        ch = conn.channel()
        ch.confirm_delivery()
        for delay in delays:
            ch.basic_publish("dx", "k", b"%d" % delay,
                             pika.BasicProperties(headers={"x-delay": delay}))
    rows = broker.api_get("/api/exchanges/%2F/dx/delayed?count=3")
    assert [r["payload"] for r in rows] == ["10000", "20000", "30000"]
    wait_for(lambda: broker.api_get("/api/exchanges/%2F/dx").get("messages_delayed") == 4,
             timeout=15)
    first.close()
    second.close()
