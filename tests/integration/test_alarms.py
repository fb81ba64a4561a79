"""Resource alarms and flow control with real clients (rabbitmq.com/alarms.html, memory.html,
disk-alarms.html, connection-blocked.html, flow-control.html).

Each test runs its own EmbeddedBroker with a fast monitor (memory_monitor_interval 100 ms):
- the memory alarm with an absolute watermark just above what the broker uses: pika and
  aio-pika publishers get connection.blocked, a consumer drains the queue, they get
  connection.unblocked, and every confirmed message arrives exactly once;
- the disk alarm with disk_free_limit above the free space, lowered at run time with
  Broker.set_disk_free_limit (rabbitmqctl set_disk_free_limit): a publisher is told at once
  and stops after its next publish, a consumer-only connection keeps consuming;
- a client without the connection.blocked capability is blocked without the methods;
- credit flow: a consumer-less queue over a stalled message store holds back credit until the
  reader stops reading the publisher's socket; the store's sync releases everything.
"""

from __future__ import annotations

import asyncio
import logging
import threading

import aio_pika
import pika
import pytest
from helpers import message_count, pump_until, start_embedded
from pamqp import commands
from rawamqp import RawClient

from broker.memory_monitor import release_free_memory
from tests.polling import wait_for

pytestmark = pytest.mark.usefixtures("embedded_only")

MiB = 1024 * 1024
BODY = 100 * 1024  # bytes per message in the memory test: the watermark is passed quickly


def states(b) -> list[str]:
    """flow_state() of every connection of broker `b` (what the management API shows)."""
    return b.call(lambda: sorted(c.flow_state() for c in b.broker.connections))


@pytest.fixture
def fast():
    """start(**config) -> a broker whose monitor checks every 100 ms; stopped at teardown."""
    made = []

    def start(**config):
        b = start_embedded(memory_monitor_interval=100, **config)
        made.append(b)
        return b

    yield start
    for b in made:
        b.stop()


# -- memory -------------------------------------------------------------------------------------
def _pika_publisher(url: str, q: str, n: int, events: list, confirmed: list) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    conn.add_on_connection_blocked_callback(
        lambda _c, frame: events.append(("blocked", frame.method.reason)))
    conn.add_on_connection_unblocked_callback(lambda _c, _f: events.append(("unblocked",)))
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(n):
        ch.basic_publish("", q, b"pika-%06d:" % i + b"x" * BODY)  # returns once confirmed
        confirmed.append(b"pika-%06d" % i)
    pump_until(conn, lambda: events and events[-1] == ("unblocked",), timeout=60)
    conn.close()


def _aio_publisher(url: str, q: str, n: int, confirmed: list) -> None:
    async def main() -> None:
        async with await aio_pika.connect(url) as conn:
            ch = await conn.channel()  # publisher confirms on
            for i in range(n):
                await ch.default_exchange.publish(
                    aio_pika.Message(b"aio-%06d:" % i + b"x" * BODY), q)
                confirmed.append(b"aio-%06d" % i)

    asyncio.run(asyncio.wait_for(main(), 120))


def test_memory_alarm_blocks_publishers_until_a_consumer_drains(fast, unique, caplog):
    """An absolute watermark 40 MiB above what the broker uses now, and no paging at all
    (a paging ratio above 1, as RabbitMQ allows, so paging cannot free the memory first:
    with paging at the watermark the queue paged itself below it before both publishers
    were blocked, and the alarm cleared on its own). The alarm stops the publishers; the
    consumer starts while both are blocked, and its draining clears the alarm."""
    caplog.set_level(logging.WARNING, logger="broker.alarms")
    caplog.set_level(logging.WARNING, logger="aiormq")
    b = fast(vm_memory_high_watermark_paging_ratio=2.0)
    # the broker shares this process with earlier tests: hand their freed heap back first, or
    # the publishers' 120 MB refill it without RSS moving past the watermark (seen once in a
    # full run: neither publisher was blocked)
    used = b.call(lambda: (release_free_memory(), b.broker.resources.source.used())[-1])
    limit = b.call(lambda: b.broker.set_vm_memory_high_watermark(absolute=used + 40 * MiB))
    assert limit == used + 40 * MiB
    admin = pika.BlockingConnection(pika.URLParameters(b.url)).channel()
    q = unique("mem")
    admin.queue_declare(q)
    n = 600  # per publisher: 2 x 60 MB, well past the watermark
    events: list = []
    pika_ok: list = []
    aio_ok: list = []
    threads = [
        threading.Thread(target=_pika_publisher, args=(b.url, q, n, events, pika_ok)),
        threading.Thread(target=_aio_publisher, args=(b.url, q, n, aio_ok)),
    ]
    for t in threads:
        t.start()
    # both publishers' readers stop (pika hands its callback out only once it pumps again,
    # after the confirm it waits for: checked at the end)
    wait_for(lambda: states(b).count("blocked") == 2, timeout=60)
    assert len(pika_ok) < n and len(aio_ok) < n  # both stopped short
    wait_for(lambda: "was blocked by: 'low on memory'" in caplog.text, timeout=30)
    assert "vm_memory_high_watermark set. Memory used:" in caplog.text

    got: list[bytes] = []
    conn = admin.connection

    def on_message(ch, method, _props, body):
        got.append(body[:body.index(b":")])

    admin.basic_consume(q, on_message, auto_ack=True)
    pump_until(conn, lambda: len(got) == 2 * n, timeout=120)
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert events[0] == ("blocked", "low on memory") and events[-1] == ("unblocked",)
    wait_for(lambda: "was unblocked" in caplog.text, timeout=30)
    assert "vm_memory_high_watermark clear. Memory used:" in caplog.text
    assert len(got) == len(set(got))  # exactly once
    assert set(got) == set(pika_ok) | set(aio_ok)  # every confirmed message
    assert len(pika_ok) == len(aio_ok) == n
    conn.close()


# -- disk ---------------------------------------------------------------------------------------
def test_disk_alarm_set_and_lowered_at_run_time(fast, unique, caplog):
    caplog.set_level(logging.INFO, logger="broker.alarms")
    b = fast()
    pub_conn = pika.BlockingConnection(pika.URLParameters(b.url))
    events: list = []
    pub_conn.add_on_connection_blocked_callback(
        lambda _c, frame: events.append(("blocked", frame.method.reason)))
    pub_conn.add_on_connection_unblocked_callback(lambda _c, _f: events.append(("unblocked",)))
    pub = pub_conn.channel()
    pub.confirm_delivery()
    q = unique("disk")
    pub.queue_declare(q)
    pub.basic_publish("", q, b"before")
    cons = pika.BlockingConnection(pika.URLParameters(b.url)).channel()  # never publishes

    free = b.call(lambda: b.broker.resources.free)
    assert free > 0
    assert b.call(lambda: b.broker.set_disk_free_limit(free + 10**15)) == free + 10**15
    assert "Free disk space is insufficient" in caplog.text
    assert b.call(lambda: b.broker.active_alarms()) == ["disk"]
    pump_until(pub_conn, lambda: events)  # it has published: told at once
    assert events == [("blocked", "low on disk")]
    assert states(b) == ["blocking", "running"]
    assert cons.basic_get(q, auto_ack=True)[2] == b"before"  # consumers keep consuming

    progress: list[str] = []

    def publish_twice() -> None:
        pub.basic_publish("", q, b"during")  # read, routed and confirmed: then reading stops
        progress.append("during")
        pub.basic_publish("", q, b"held")  # not read until the alarm clears
        progress.append("held")

    t = threading.Thread(target=publish_twice)
    t.start()
    wait_for(lambda: progress == ["during"])
    wait_for(lambda: states(b) == ["blocked", "running"])
    assert message_count(cons, q) == 1 and progress == ["during"]

    b.call(lambda: b.broker.set_disk_free_limit("1MB"))
    assert "Free disk space is sufficient again" in caplog.text
    t.join(10)
    assert progress == ["during", "held"]
    assert b.call(lambda: b.broker.active_alarms()) == []
    assert [cons.basic_get(q, auto_ack=True)[2] for _ in range(2)] == [b"during", b"held"]
    pump_until(pub_conn, lambda: len(events) == 2)  # pika hands callbacks out when pumped
    assert events == [("blocked", "low on disk"), ("unblocked",)]
    with pytest.raises(ValueError):
        b.call(lambda: b.broker.set_disk_free_limit("lots"))
    pub_conn.close()
    cons.connection.close()


def test_clients_without_the_capability_are_blocked_without_the_methods(fast, unique):
    b = fast()
    q = unique("nocap")
    admin = pika.BlockingConnection(pika.URLParameters(b.url)).channel()
    admin.queue_declare(q)
    with RawClient(b.host, b.port) as raw:
        raw.handshake(capabilities={})  # no connection.blocked capability
        raw.open_channel(1)
        b.call(lambda: b.broker.set_vm_memory_high_watermark(0.0))  # 0: block all publishing
        raw.publish(1, b"first", routing_key=q)  # read: the reader stops after it
        wait_for(lambda: message_count(admin, q) == 1)
        raw.publish(1, b"second", routing_key=q)
        wait_for(lambda: "blocked" in states(b))
        assert message_count(admin, q) == 1
        b.call(lambda: b.broker.set_vm_memory_high_watermark(0.4))
        wait_for(lambda: message_count(admin, q) == 2)
        # neither connection.blocked nor unblocked was sent: next on the wire is this reply
        raw.send(commands.Channel.Close(200, "bye", 0, 0), 1)
        assert isinstance(raw.read_frame()[1], commands.Channel.CloseOk)
    admin.connection.close()


# -- credit flow --------------------------------------------------------------------------------
def test_a_stalled_store_pauses_the_publishers_socket(fast, unique):
    """reader -> channel -> queue -> store: persistent bodies written to the message store at
    publish (embedding off) spend the queue's store credit; with the store's syncs stalled no
    credit comes back, the queue holds back the channel's credit, the channel the reader's,
    and the reader stops reading. The stall's end lets every message through in order."""
    b = fast(queue_index_embed_msgs_below=0, msg_store_credit_disc_bound_initial=40,
             msg_store_credit_disc_bound_more_after=8, credit_flow_initial=20,
             credit_flow_more_after=10)
    q = unique("credit")
    admin = pika.BlockingConnection(pika.URLParameters(b.url)).channel()
    admin.queue_declare(q, durable=True)
    gate = threading.Event()
    b.call(lambda: b.broker.vhosts["/"].stores.persistent.stall_syncs(gate))
    n = 400
    try:
        with RawClient(b.host, b.port) as raw:
            raw.handshake()
            raw.open_channel(1)
            persistent = commands.Basic.Properties(delivery_mode=2)
            for i in range(n):
                raw.publish(1, b"%04d" % i, routing_key=q, properties=persistent)
            wait_for(lambda: "flow" in states(b))
            queue = b.call(lambda: b.broker.vhosts["/"].queues[q])
            assert b.call(queue.flow_state) == "flow"
            held = message_count(admin, q)
            assert 40 <= held < n  # the store took its credit's worth, then it stopped
            chans = b.call(lambda: [ch.flow_state() for c in b.broker.connections
                                    for ch in c.channels.values()])
            assert "flow" in chans
            gate.set()
            wait_for(lambda: message_count(admin, q) == n, timeout=30)
            raw.close()
    finally:
        gate.set()
    bodies = []
    while (got := admin.basic_get(q, auto_ack=True))[0] is not None:
        bodies.append(got[2])
    assert bodies == [b"%04d" % i for i in range(n)]
    admin.queue_delete(q)
    admin.connection.close()
