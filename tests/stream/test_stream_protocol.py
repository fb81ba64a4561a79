"""The stream protocol's listener (broker/stream_protocol/reader.py, issue 37 item 1-2):
rstream's client connects, creates, finds and deletes streams; a stream created over the
stream protocol is a stream queue over AMQP 0-9-1; wrong credentials, vhosts and bad input
get RabbitMQ's response codes and a closed connection, without touching other connections.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import subprocess
import sys
import time

import pika
import pytest
import rstream
from rstream import exceptions as rexc

from broker.embedded import EmbeddedBroker
from broker.stream import osiris_chunk as oc
from broker.stream_protocol import core
from tests.stream.raw_client import (
    closed,
    declare_publisher,
    frame,
    opened,
    publish_frame,
    read_frame,
    s,
    tuned,
)
from tests.stream.raw_client import (
    create_stream as raw_create_stream,
)


@pytest.fixture(scope="module")
def sbroker():
    b = EmbeddedBroker(stream_listeners_tcp_default="0").start()
    yield b
    b.stop()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def create_stream(b, name: str) -> None:
    """Create stream `name` over the stream protocol (rstream)."""
    async def main() -> None:
        async with producer(b) as p:
            await p.create_stream(name)
    run(main())


def amqp_read(url: str, queue: str, n: int) -> list:
    """The first `n` deliveries of `queue` from its first offset over AMQP 0-9-1 (pika):
    [(routing key, headers, body)]."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    got: list = []
    ch.basic_consume(queue, lambda c, m, p, body: got.append((m.routing_key, p.headers, body)),
                     arguments={"x-stream-offset": "first"})
    deadline = time.monotonic() + 10
    while len(got) < n and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    conn.close()
    return got


def producer(b, **kw) -> rstream.Producer:
    kw.setdefault("username", "guest")
    kw.setdefault("password", "guest")
    return rstream.Producer("127.0.0.1", b.stream_port, **kw)


def test_rstream_creates_finds_and_deletes_a_stream_amqp_clients_see(sbroker):
    async def main() -> list:
        async with producer(sbroker) as p:
            await p.create_stream("sp-1", arguments={"max-length-bytes": 10_000_000})
            seen = [await p.stream_exists("sp-1"), await p.stream_exists("sp-none")]
            with pytest.raises(rexc.StreamAlreadyExists):  # equivalent arguments
                await p.create_stream("sp-1", arguments={"max-length-bytes": 10_000_000})
            with pytest.raises(rexc.PreconditionFailed):  # other arguments, as RabbitMQ's
                await p.create_stream("sp-1")
            return seen

    assert run(main()) == [True, False]
    conn = pika.BlockingConnection(pika.URLParameters(sbroker.url))
    ch = conn.channel()
    ok = ch.queue_declare("sp-1", durable=True, passive=True)
    assert ok.method.queue == "sp-1"
    q = sbroker.call(lambda: sbroker.broker.vhosts["/"].queues["sp-1"])
    assert q.queue_type == "stream" and q.arguments["x-max-length-bytes"] == 10_000_000
    conn.close()

    async def delete() -> bool:
        async with producer(sbroker) as p:
            await p.delete_stream("sp-1")
            with pytest.raises(rexc.StreamDoesNotExist):
                await p.delete_stream("sp-1")
            return await p.stream_exists("sp-1")

    assert run(delete()) is False


_REFUSED = """
import asyncio, sys, rstream
async def main(port, **kw):
    p = rstream.Producer("127.0.0.1", port, username="guest", **kw)
    try:
        await p.start()
    except Exception as exc:
        return type(exc).__name__
    return "started"
port = int(sys.argv[1])
print(asyncio.run(main(port, password="wrong")))
print(asyncio.run(main(port, password="guest", vhost="no-such-vhost")))
"""


def test_wrong_password_and_a_vhost_without_access_are_refused(sbroker):
    """In a process of its own: rstream leaves its socket open when the server refuses it
    (a client-side leak the test process must not inherit)."""
    out = subprocess.run([sys.executable, "-c", _REFUSED, str(sbroker.stream_port)],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["AuthenticationFailure", "VirtualHostAccessFailure"], out


# -- raw frames, built by hand from PROTOCOL.adoc -----------------------------------------------
def test_a_command_before_authentication_closes_the_connection(sbroker):
    sock = socket.create_connection(("127.0.0.1", sbroker.stream_port), timeout=5)
    sock.sendall(frame(struct.pack(">HHI", 13, 1, 1) + s("early") + struct.pack(">I", 0)))
    assert closed(sock)
    sock.close()
    exists = sbroker.call(lambda: "early" in sbroker.broker.vhosts["/"].queues)
    assert not exists


def test_unknown_command_and_oversized_frame_get_a_close_with_their_code(sbroker):
    sock = opened(sbroker)
    sock.sendall(frame(struct.pack(">HHI", 99, 1, 5)))
    key, _v, _corr, code = struct.unpack_from(">HHIH", read_frame(sock))
    assert (key, code) == (22, 13)  # close, UNKNOWN_FRAME
    assert closed(sock)
    sock.close()
    sock = tuned(sbroker)  # frame_max 4096, not open yet
    sock.sendall(struct.pack(">I", 4097) + b"\0" * 16)
    key, _v, _corr, code = struct.unpack_from(">HHIH", read_frame(sock))
    assert (key, code) == (22, 14)  # close, FRAME_TOO_LARGE
    assert closed(sock)
    sock.close()


@pytest.fixture(scope="module")
def small_broker():
    b = EmbeddedBroker(stream_listeners_tcp_default="0", max_message_size=65536).start()
    yield b
    b.stop()


def test_once_open_frames_above_frame_max_are_read_up_to_max_message_size(small_broker):
    """RabbitMQ 3.10-3.13 read frames of any size after open, and rstream's producer sends
    frames above the frame_max it negotiated; max_message_size bounds them here."""
    sock = opened(small_broker)  # tuned to frame_max 4096
    assert raw_create_stream(sock, "big-frames") == 1
    assert declare_publisher(sock, 1, "", "big-frames") == 1
    sock.sendall(publish_frame(1, [(1, b"x" * 3000), (2, b"y" * 3000)]))  # 6 KB > 4096
    f = read_frame(sock)
    key, _v, pub, n, first, second = struct.unpack(">HHBIQQ", f)
    assert (key, pub, n, first, second) == (3, 1, 2, 1, 2)  # publish_confirm of both
    sock.sendall(struct.pack(">I", 65537) + b"\0" * 16)
    key, _v, _corr, code = struct.unpack_from(">HHIH", read_frame(sock))
    assert (key, code) == (22, 14)  # close, FRAME_TOO_LARGE
    assert closed(sock)
    sock.close()


def test_a_malformed_frame_closes_only_its_connection(sbroker):
    other = opened(sbroker)
    sock = opened(sbroker)
    sock.sendall(frame(struct.pack(">HHI", 15, 1, 9) + b"\x00\x00\x00\x05"))  # 5 names, none
    assert closed(sock)
    sock.close()
    other.sendall(frame(struct.pack(">HHII", 15, 1, 10, 1) + s("nope")))  # metadata
    reply = read_frame(other)
    assert struct.unpack_from(">HHI", reply) == (0x800F, 1, 10)
    assert reply.endswith(s("nope") + struct.pack(">HHI", 2, 0xFFFF, 0))
    other.close()


def test_close_by_the_client_is_answered(sbroker):
    sock = opened(sbroker)
    sock.sendall(frame(struct.pack(">HHIH", 22, 1, 7, 1) + s("bye")))
    assert struct.unpack(">HHIH", read_frame(sock)) == (0x8016, 1, 7, 1)
    assert closed(sock)
    sock.close()


# -- publishing and consuming ----------------------------------------------------------------
async def _consume(b, stream: str, n: int, spec=None, name: str | None = None) -> list:
    """(offset, body) of the first `n` messages rstream's consumer gets."""
    got: list = []
    done = asyncio.Event()
    consumer = rstream.Consumer("127.0.0.1", b.stream_port, username="guest",
                                password="guest")

    async def on_message(msg, ctx) -> None:
        got.append((ctx.offset, bytes(msg.body) if hasattr(msg, "body") else msg))
        if len(got) >= n:
            done.set()

    async with consumer:
        await consumer.subscribe(stream, on_message, decoder=rstream.amqp_decoder,
                                 offset_specification=spec or rstream.ConsumerOffsetSpecification(
                                     rstream.OffsetType.FIRST, None),
                                 subscriber_name=name)
        task = asyncio.create_task(consumer.run())
        await asyncio.wait_for(done.wait(), 20)
        await consumer.close()
        task.cancel()
    return got


def test_publish_with_confirms_and_consume_from_first(sbroker):
    async def main() -> list:
        async with producer(sbroker) as p:
            await p.create_stream("sp-pub")
            for i in range(5):
                await p.send_wait("sp-pub", rstream.AMQPMessage(body=b"m%d" % i))
            await p.send_batch("sp-pub", [rstream.AMQPMessage(body=b"b%d" % i)
                                          for i in range(3)])
        return await _consume(sbroker, "sp-pub", 8)

    got = run(main())
    assert [body for _o, body in got] == [b"m0", b"m1", b"m2", b"m3", b"m4", b"b0", b"b1", b"b2"]
    assert [o for o, _b in got] == list(range(8))


def test_a_named_producer_continues_its_sequence_across_connections(sbroker):
    """rstream asks for the last publishing id of its producer name when it declares the
    publisher (query_publisher_sequence) and numbers on from there."""
    async def main() -> list:
        async with producer(sbroker) as p:
            await p.create_stream("sp-named")
        for _ in range(2):
            async with producer(sbroker) as again:
                for i in range(3):
                    await again.send_wait("sp-named", rstream.AMQPMessage(body=b"d%d" % i),
                                          publisher_name="app-1")
        return await _consume(sbroker, "sp-named", 6)

    assert [body for _o, body in run(main())] == [b"d0", b"d1", b"d2"] * 2
    q = sbroker.call(lambda: sbroker.broker.vhosts["/"].queues["sp-named"])
    assert sbroker.call(lambda: q.log.sequences["app-1"]) == 6


def test_a_publishing_id_at_or_below_the_last_stored_is_confirmed_and_dropped(sbroker):
    """Deduplication (osiris): a publisher with a reference that sends ids 1, 2 and then
    2, 3 gets every id confirmed, and the stream holds three messages."""
    create_stream(sbroker, "sp-dedup")
    sock = opened(sbroker)
    sock.sendall(frame(struct.pack(">HHIB", 1, 1, 20, 3) + s("raw-1") + s("sp-dedup")))
    assert struct.unpack(">HHIH", read_frame(sock)) == (0x8001, 1, 20, 1)
    confirmed: list[int] = []
    for batch, total in (([(1, b"a"), (2, b"b")], 2), ([(2, b"b-again"), (3, b"c")], 4)):
        sock.sendall(publish_frame(3, batch))
        while len(confirmed) < total:
            f = read_frame(sock)
            key, _v, pub, n = struct.unpack_from(">HHBI", f)
            assert (key, pub) == (3, 3)
            confirmed += list(struct.unpack_from(f">{n}Q", f, 9))
    assert sorted(confirmed) == [1, 2, 2, 3]
    sock.sendall(frame(struct.pack(">HHI", 5, 1, 21) + s("raw-1") + s("sp-dedup")))
    assert struct.unpack(">HHIHQ", read_frame(sock)) == (0x8005, 1, 21, 1, 3)
    sock.close()
    q = sbroker.call(lambda: sbroker.broker.vhosts["/"].queues["sp-dedup"])
    assert sbroker.call(lambda: q.log.next_offset) == 3


def test_offsets_are_stored_and_queried(sbroker):
    async def main() -> tuple:
        async with producer(sbroker) as p:
            await p.create_stream("sp-offsets")
            for i in range(3):
                await p.send_wait("sp-offsets", rstream.AMQPMessage(body=b"o%d" % i))
        consumer = rstream.Consumer("127.0.0.1", sbroker.stream_port, username="guest",
                                    password="guest")
        async with consumer:
            with pytest.raises(rexc.OffsetNotFound):
                await consumer.query_offset("sp-offsets", "reader-1")
            await consumer.store_offset("sp-offsets", "reader-1", 2)
            await asyncio.sleep(0.2)
            return await consumer.query_offset("sp-offsets", "reader-1")

    assert run(main()) == 2


def test_a_stream_is_read_across_protocols(sbroker):
    """Published over the stream protocol, consumed over AMQP 0-9-1 (from the default
    exchange with the stream's name, with the application properties as headers); and
    published over AMQP 0-9-1, consumed over the stream protocol as AMQP 1.0."""
    async def publish() -> None:
        async with producer(sbroker) as p:
            await p.create_stream("sp-cross")
            await p.send_wait("sp-cross", rstream.AMQPMessage(
                body=b"from-stream", application_properties={"region": "eu"}))

    run(publish())
    with pika.BlockingConnection(pika.URLParameters(sbroker.url)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("", "sp-cross", b"from-amqp")
    got = amqp_read(sbroker.url, "sp-cross", 2)
    assert got[0] == ("sp-cross", {"region": "eu", "x-stream-offset": 0}, b"from-stream")
    assert got[1][2] == b"from-amqp"
    assert [b for _o, b in run(_consume(sbroker, "sp-cross", 2))] == [b"from-stream",
                                                                     b"from-amqp"]


def test_publishing_to_an_unknown_publisher_or_a_deleted_stream(sbroker):
    sock = opened(sbroker)
    sock.sendall(frame(struct.pack(">HHBI", 2, 1, 9, 1) + struct.pack(">Q", 5)
                       + struct.pack(">i", 1) + b"x"))
    assert read_frame(sock) == struct.pack(">HHBIQH", 4, 1, 9, 1, 5, 0x12)  # not declared
    sock.sendall(frame(struct.pack(">HHIB", 1, 1, 11, 1) + s("") + s("no-such-stream")))
    assert struct.unpack(">HHIH", read_frame(sock)) == (0x8001, 1, 11, 2)
    sock.close()


def test_a_resource_alarm_stops_reading_from_publishing_connections(sbroker):
    """While a disk alarm is in effect a connection with a publisher is not read (its
    publishes wait in the socket), a consumer-only connection still is; when the alarm
    clears the publishes are stored and confirmed."""
    create_stream(sbroker, "sp-alarm")
    pub = opened(sbroker)
    pub.sendall(frame(struct.pack(">HHIB", 1, 1, 30, 1) + s("") + s("sp-alarm")))
    assert struct.unpack(">HHIH", read_frame(pub)) == (0x8001, 1, 30, 1)
    other = opened(sbroker)
    free = sbroker.call(lambda: sbroker.broker.resources.free)
    sbroker.call(lambda: sbroker.broker.set_disk_free_limit(free + 10**15))
    try:
        pub.sendall(publish_frame(1, [(1, b"held")]))
        pub.settimeout(1.0)
        with pytest.raises(socket.timeout):
            read_frame(pub)
        other.sendall(frame(struct.pack(">HHII", 15, 1, 31, 1) + s("sp-alarm")))
        assert struct.unpack_from(">HHI", read_frame(other)) == (0x800F, 1, 31)
    finally:
        sbroker.call(lambda: sbroker.broker.set_disk_free_limit("1MB"))
    pub.settimeout(10)
    assert read_frame(pub) == struct.pack(">HHBIQ", 3, 1, 1, 1, 1)
    pub.close()
    other.close()


def test_the_http_api_lists_stream_connections_publishers_and_consumers():
    """/api/stream/connections, /api/stream/publishers and /api/stream/consumers in the
    shapes of RabbitMQ's rabbitmq_stream_management, read with a real HTTP client while
    rstream publishes and consumes."""
    import requests

    b = EmbeddedBroker(stream_listeners_tcp_default="0", management_tcp_port=-1,
                       prometheus_tcp_port=-1).start()
    api = f"http://127.0.0.1:{b.management_port}"
    auth = ("guest", "guest")
    try:
        async def main() -> tuple:
            async with producer(b, connection_name="api-producer") as p:
                await p.create_stream("sp-api")
                for i in range(4):
                    await p.send_wait("sp-api", rstream.AMQPMessage(body=b"%d" % i),
                                      publisher_name="api-ref")
                consumer = rstream.Consumer("127.0.0.1", b.stream_port, username="guest",
                                            password="guest")
                async with consumer:
                    seen = asyncio.Event()
                    await consumer.subscribe("sp-api", lambda m, c: seen.set(),
                                             decoder=rstream.amqp_decoder,
                                             offset_specification=rstream.ConsumerOffsetSpecification(
                                                 rstream.OffsetType.FIRST, None))
                    task = asyncio.create_task(consumer.run())
                    await asyncio.wait_for(seen.wait(), 10)
                    loop = asyncio.get_running_loop()
                    got = await loop.run_in_executor(None, lambda: [
                        requests.get(api + path, auth=auth, timeout=10).json()
                        for path in ("/api/stream/connections", "/api/stream/publishers",
                                     "/api/stream/consumers/%2F",
                                     "/api/stream/publishers/%2F/sp-api")])
                    metrics = await loop.run_in_executor(None, lambda: requests.get(
                        f"http://127.0.0.1:{b.prometheus_port}/metrics", timeout=10).text)
                    task.cancel()
                    return (*got, metrics)

        conns, pubs, cons, by_stream, metrics = run(main())
        for line in ('rabbitmq_global_messages_received_total{protocol="stream"} 4.0',
                     'rabbitmq_global_messages_confirmed_total{protocol="stream"} 4.0',
                     'rabbitmq_global_publishers{protocol="stream"} 1.0',
                     'rabbitmq_global_consumers{protocol="stream"} 1.0'):
            assert line in metrics, line
        assert 'rabbitmq_global_messages_delivered_total{protocol="stream"}' in metrics
        assert {c["protocol"] for c in conns} == {"stream"} and len(conns) >= 2
        producer_conn = next(c for c in conns
                             if c["client_properties"].get("connection_name") == "api-producer")
        assert producer_conn["user"] == "guest" and producer_conn["vhost"] == "/"
        assert producer_conn["auth_mechanism"] == "PLAIN"
        pub = next(p for p in pubs if p["reference"] == "api-ref")
        assert pub["queue"] == {"name": "sp-api", "vhost": "/"}
        assert (pub["published"], pub["confirmed"], pub["errored"]) == (4, 4, 0)
        assert pub["connection_details"]["name"] == producer_conn["name"]
        assert by_stream == pubs
        con = cons[0]
        assert con["queue"]["name"] == "sp-api" and con["consumed"] == 4
        assert {"credits", "offset", "offset_lag", "subscription_id", "properties"} <= set(con)
        r = requests.get(api + "/api/stream/connections", auth=("nobody", "x"), timeout=10)
        assert r.status_code == 401
    finally:
        b.stop()


def test_api_connections_lists_stream_connections_and_delete_closes_them():
    """GET /api/connections lists a stream connection beside AMQP 0-9-1 ones, as RabbitMQ's
    stream reader registers it (protocol "stream", user_provided_name from the client's
    connection_name, byte counters), and DELETE /api/connections/{name} closes its socket
    (what rstream's own tests do through the HTTP API)."""
    import requests

    b = EmbeddedBroker(stream_listeners_tcp_default="0", management_tcp_port=-1,
                       prometheus_tcp_port=-1).start()
    api = f"http://127.0.0.1:{b.management_port}/api"
    auth = ("guest", "guest")
    sock = opened(b, {"connection_name": "raw-api", "product": "test"})
    try:
        conns = requests.get(api + "/connections", auth=auth, timeout=10).json()
        (conn,) = [c for c in conns if c.get("user_provided_name") == "raw-api"]
        assert conn["protocol"] == "stream" and conn["channels"] == 0
        assert conn["client_properties"] == {"connection_name": "raw-api", "product": "test"}
        assert conn["user"] == "guest" and conn["vhost"] == "/" and conn["state"] == "running"
        assert conn["recv_oct"] > 0 and conn["send_oct"] > 0 and "type" not in conn
        one = requests.get(api + "/connections/" + requests.utils.quote(conn["name"], safe=""),
                           auth=auth, timeout=10).json()
        assert one["name"] == conn["name"]
        by_vhost = requests.get(api + "/vhosts/%2F/connections", auth=auth, timeout=10).json()
        assert conn["name"] in {c["name"] for c in by_vhost}
        channels = requests.get(api + "/connections/"
                                + requests.utils.quote(conn["name"], safe="") + "/channels",
                                auth=auth, timeout=10).json()
        assert channels == []
        r = requests.delete(api + "/connections/" + requests.utils.quote(conn["name"], safe=""),
                            auth=auth, timeout=10)
        assert r.status_code == 204
        assert closed(sock)
        conns = requests.get(api + "/connections", auth=auth, timeout=10).json()
        assert not [c for c in conns if c.get("user_provided_name") == "raw-api"]
    finally:
        sock.close()
        b.stop()


def test_sub_entry_batches_are_stored_as_they_come_and_read_by_both_protocols(sbroker):
    """rstream's sub-entry batching, uncompressed and gzip: each batch is one entry of
    the chunk holding its records (stored as received), read back by rstream and, record by
    record with consecutive offsets, over AMQP 0-9-1."""
    async def main() -> list:
        async with producer(sbroker) as p:
            await p.create_stream("sp-sub")
            await p.send_sub_entry("sp-sub", [rstream.AMQPMessage(body=b"u%d" % i)
                                              for i in range(3)])
            await p.send_sub_entry("sp-sub", [rstream.AMQPMessage(body=b"g%d" % i)
                                              for i in range(2)],
                                   compression_type=rstream.CompressionType.Gzip)
            await asyncio.sleep(0.5)
        return await _consume(sbroker, "sp-sub", 5)

    got = run(main())
    assert [b for _o, b in got] == [b"u0", b"u1", b"u2", b"g0", b"g1"]
    q = sbroker.call(lambda: sbroker.broker.vhosts["/"].queues["sp-sub"])
    def stored() -> list:
        out, offset = [], 0
        while (got := q.log.read_raw(offset)) is not None:
            header, raw = got
            out += list(oc.entries(raw, header))
            offset = header.chunk_id + header.num_records
        return out

    entries = sbroker.call(stored)  # one chunk or two, as the batches came
    assert [(e.records, e.compression) for e in entries] == [(3, 0), (2, 1)]
    seen = [(h["x-stream-offset"], body) for _k, h, body in amqp_read(sbroker.url, "sp-sub", 5)]
    assert seen == [(0, b"u0"), (1, b"u1"), (2, b"u2"), (3, b"g0"), (4, b"g1")]


def test_a_super_stream_is_created_routed_consumed_and_deleted(sbroker):
    """rstream's super stream producer creates one (3 partitions: create_super_stream)
    and spreads messages over the partitions it lists (`partitions`; rstream's key routing
    caches the first key's route, so its hash routing is used), its consumer reads every
    partition; the partitions are streams bound to a direct exchange with
    x-stream-partition-order, `route` answers a binding key's partition, and
    delete_super_stream removes exchange and partitions."""
    async def main() -> list:
        async def key(msg) -> str:
            return msg.application_properties["k"]

        async with rstream.SuperStreamProducer(
                "127.0.0.1", sbroker.stream_port, username="guest", password="guest",
                super_stream="invoices", routing_extractor=key,
                super_stream_creation_option=rstream.SuperStreamCreationOption(
                    n_partitions=3)) as p:
            for i in range(6):
                await p.send(rstream.AMQPMessage(body=b"i%d" % i,
                                                 application_properties={"k": str(i % 3)}))
            await asyncio.sleep(1.0)  # the batch goes out every 0.2 s
        got: list = []
        done = asyncio.Event()

        def on_message(msg, ctx) -> None:
            got.append((ctx.stream, bytes(msg.body)))
            if len(got) == 6:
                done.set()

        consumer = rstream.SuperStreamConsumer("127.0.0.1", sbroker.stream_port,
                                               username="guest", password="guest",
                                               super_stream="invoices")
        async with consumer:
            await consumer.subscribe(on_message, decoder=rstream.amqp_decoder,
                                     offset_specification=rstream.ConsumerOffsetSpecification(
                                         rstream.OffsetType.FIRST, None))
            task = asyncio.create_task(consumer.run())
            await asyncio.wait_for(done.wait(), 15)
            task.cancel()
        return got

    got = run(main())
    assert sorted(b for _s, b in got) == [b"i%d" % i for i in range(6)]
    assert {s_ for s_, _b in got} <= {"invoices-0", "invoices-1", "invoices-2"}
    vhost = sbroker.broker.vhosts["/"]
    bindings = sbroker.call(lambda: sorted(
        (d, k, a["x-stream-partition-order"])
        for d, k, a in vhost.exchanges["invoices"].routing.bindings()))
    assert bindings == [("invoices-0", "0", 0), ("invoices-1", "1", 1), ("invoices-2", "2", 2)]
    assert sbroker.call(lambda: vhost.exchanges["invoices"].arguments) == {"x-super-stream": True}
    sock = opened(sbroker)
    sock.sendall(frame(struct.pack(">HHI", 24, 1, 38) + s("1") + s("invoices")))
    assert read_frame(sock) == struct.pack(">HHIHI", 0x8018, 1, 38, 1, 1) + s("invoices-1")
    sock.sendall(frame(struct.pack(">HHI", 25, 1, 39) + s("invoices")))
    assert read_frame(sock) == struct.pack(">HHIHI", 0x8019, 1, 39, 1, 3) + b"".join(
        s(f"invoices-{i}") for i in range(3))
    sock.sendall(frame(struct.pack(">HHI", 30, 1, 40) + s("invoices")))
    assert struct.unpack(">HHIH", read_frame(sock)) == (0x801E, 1, 40, 1)
    sock.sendall(frame(struct.pack(">HHI", 30, 1, 41) + s("invoices")))
    assert struct.unpack(">HHIH", read_frame(sock)) == (0x801E, 1, 41, 2)
    sock.close()
    gone = sbroker.call(lambda: ("invoices" in vhost.exchanges,
                                 [f"invoices-{i}" in vhost.queues for i in range(3)]))
    assert gone == (False, [False, False, False])


def test_single_active_consumer_on_a_stream(sbroker):
    """Two rstream consumers subscribe with single-active-consumer and one name: the first
    is activated (consumer_update, answered with where to start) and gets the messages, the
    second gets nothing until the first goes, then takes over where its own answer says."""
    create_stream(sbroker, "sp-sac")

    async def main() -> tuple:
        async with producer(sbroker) as p:
            for i in range(3):
                await p.send_wait("sp-sac", rstream.AMQPMessage(body=b"a%d" % i))
        got: dict[str, list] = {"one": [], "two": []}
        updates: list = []

        def consumer(tag: str):
            c = rstream.Consumer("127.0.0.1", sbroker.stream_port, username="guest",
                                 password="guest")

            async def on_update(active: bool, ctx) -> rstream.OffsetSpecification:
                updates.append((tag, active))
                return rstream.OffsetSpecification(
                    rstream.OffsetType.FIRST if tag == "one" else rstream.OffsetType.NEXT, 0)

            async def sub() -> None:
                await c.subscribe("sp-sac", lambda m, ctx: got[tag].append(bytes(m.body)),
                                  decoder=rstream.amqp_decoder, subscriber_name="grp",
                                  properties={"single-active-consumer": "true", "name": "grp"},
                                  consumer_update_listener=on_update)
            return c, sub

        one, sub_one = consumer("one")
        two, sub_two = consumer("two")
        await one.start()
        await two.start()
        await sub_one()
        t1 = asyncio.create_task(one.run())
        await sub_two()
        t2 = asyncio.create_task(two.run())
        for _ in range(100):
            if len(got["one"]) == 3:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        first = (list(got["one"]), list(got["two"]))
        t1.cancel()
        await one.close()
        for _ in range(100):
            if ("two", True) in updates:
                break
            await asyncio.sleep(0.05)
        async with producer(sbroker) as p:
            await p.send_wait("sp-sac", rstream.AMQPMessage(body=b"b0"))
        for _ in range(100):
            if got["two"]:
                break
            await asyncio.sleep(0.05)
        t2.cancel()
        await two.close()
        return first, got["two"], updates

    first, second, updates = run(main())
    assert first == ([b"a0", b"a1", b"a2"], [])
    assert second == [b"b0"]  # from "next", as its answer said
    assert updates[0] == ("one", True) and ("two", True) in updates


def test_single_active_consumer_spreads_a_super_streams_partitions(sbroker):
    """Two consumers of a 2-partition super stream in one single-active-consumer group
    (property super-stream): the first is active on both until the second joins, then the
    first steps down on the second partition (consumer_update active=false, answered) and
    the second takes it: each partition has one active consumer."""
    run(_create_super(sbroker, "orders-ss", 2))

    async def main() -> dict:
        got: dict[str, set] = {"x": set(), "y": set()}
        updates: list = []
        clients = []
        for tag in ("x", "y"):
            c = rstream.SuperStreamConsumer("127.0.0.1", sbroker.stream_port, username="guest",
                                            password="guest", super_stream="orders-ss")
            await c.start()

            async def on_update(active: bool, ctx, tag=tag) -> rstream.OffsetSpecification:
                updates.append((tag, ctx.stream, active))
                return rstream.OffsetSpecification(rstream.OffsetType.NEXT, 0)

            await c.subscribe(lambda m, ctx, tag=tag: got[tag].add(ctx.stream),
                              decoder=rstream.amqp_decoder,
                              properties={"single-active-consumer": "true", "name": "g",
                                          "super-stream": "orders-ss"},
                              consumer_update_listener=on_update)
            clients.append((c, asyncio.create_task(c.run())))
            await asyncio.sleep(0.5)
        async with producer(sbroker) as p:
            for part in ("orders-ss-0", "orders-ss-1"):
                await p.send_wait(part, rstream.AMQPMessage(body=part.encode()))
        for _ in range(100):
            if got["x"] and got["y"]:
                break
            await asyncio.sleep(0.05)
        for c, task in clients:
            task.cancel()
            await c.close()
        return {"got": got, "updates": updates}

    out = run(main())
    assert out["got"] == {"x": {"orders-ss-0"}, "y": {"orders-ss-1"}}
    assert ("x", "orders-ss-1", False) in out["updates"]  # stepped down, then
    assert ("y", "orders-ss-1", True) in out["updates"]  # the second took over


async def _create_super(b, name: str, n: int) -> None:
    async with rstream.SuperStreamProducer(
            "127.0.0.1", b.stream_port, username="guest", password="guest",
            super_stream=name, routing_extractor=lambda m: "0",
            super_stream_creation_option=rstream.SuperStreamCreationOption(n_partitions=n)):
        pass


def _region(msg) -> str:
    """The region application property of a message rstream decoded (keys and values come
    back as bytes)."""
    props = msg.application_properties or {}
    value = props.get(b"region", props.get("region"))
    return value.decode() if isinstance(value, bytes) else value


def test_filtering_skips_chunks_whose_bloom_filter_cannot_match(sbroker):
    """3.13 filtering: publish v2 carries each message's filter value into the chunk's
    bloom filter; a consumer subscribed with filter.0 = eu is sent only chunks that may hold
    eu messages (the client then filters message by message)."""
    create_stream(sbroker, "sp-filter")

    async def main() -> list:
        async def region(msg) -> str:
            return _region(msg)

        async with producer(sbroker, filter_value_extractor=region) as p:
            for r in ("eu", "us", "us", "eu"):  # one send, one chunk each
                await p.send_wait("sp-filter", rstream.AMQPMessage(
                    body=r.encode(), application_properties={"region": r}))
        got: list = []
        done = asyncio.Event()
        c = rstream.Consumer("127.0.0.1", sbroker.stream_port, username="guest",
                             password="guest")
        async with c:
            def on_message(msg, ctx) -> None:
                got.append(bytes(msg.body))
                if len(got) == 2:
                    done.set()

            await c.subscribe(
                "sp-filter", on_message, decoder=rstream.amqp_decoder,
                offset_specification=rstream.ConsumerOffsetSpecification(
                    rstream.OffsetType.FIRST, None),
                filter_input=rstream.FilterConfiguration(
                    values_to_filter=["eu"], predicate=lambda m: _region(m) == "eu"))
            task = asyncio.create_task(c.run())
            await asyncio.wait_for(done.wait(), 10)
            await asyncio.sleep(0.3)
            q = sbroker.broker.vhosts["/"].queues["sp-filter"]
            consumed = [s_.consumed for s_ in q.subscriptions]
            task.cancel()
        return got, consumed

    got, consumed = run(main())
    assert got == [b"eu", b"eu"]
    assert consumed == [2]  # the two "us" chunks were never sent


def test_subscribing_at_offset_zero_starts_at_the_first_message(sbroker):
    """Offset specification "offset 0" is the first message, not "next"."""
    create_stream(sbroker, "sp-zero")

    async def main() -> list:
        async with producer(sbroker) as p:
            for i in range(2):
                await p.send_wait("sp-zero", rstream.AMQPMessage(body=b"z%d" % i))
        return await _consume(sbroker, "sp-zero", 2, rstream.ConsumerOffsetSpecification(
            rstream.OffsetType.OFFSET, 0))

    assert [b for _o, b in run(main())] == [b"z0", b"z1"]


def _confirmed(sock: socket.socket, n: int) -> list[int]:
    """Publishing ids of publish_confirm frames read until `n` are confirmed."""
    got: list[int] = []
    while len(got) < n:
        f = read_frame(sock)
        key, _v, _pub, count = struct.unpack_from(">HHBI", f)
        if key == 3:
            got += struct.unpack_from(f">{count}Q", f, 9)
    return got


def test_a_burst_is_stored_as_osiris_batches_it_each_chunk_tracking_its_publisher(sbroker):
    """5 000 messages in one publish frame become chunks of 32, 64, … 2 048 entries and the
    rest (gen_batch_server's batches of osiris's writer), each with epoch 1 and a trailer
    holding the publisher's last id in that chunk; a resend of them all is dropped."""
    sock = opened(sbroker)
    assert raw_create_stream(sock, "burst") == 1
    assert declare_publisher(sock, 1, "p1", "burst") == 1
    items = [(i, b"m%d" % i) for i in range(1, 5001)]
    sock.sendall(publish_frame(1, items))
    assert _confirmed(sock, 5000) == list(range(1, 5001))
    q = sbroker.call(lambda: sbroker.broker.vhosts["/"].queues["burst"])

    def chunks() -> list[tuple[int, int, dict]]:
        out, offset = [], 0
        while (got := q.log.read_raw(offset)) is not None:
            h, raw = got
            seqs, _offs = oc.parse_tracking(raw[h.size - h.trailer_length:])
            out.append((h.num_records, h.epoch, seqs))
            offset = h.chunk_id + h.num_records
        return out

    got = sbroker.call(chunks)
    assert [n for n, _e, _s in got] == [32, 64, 128, 256, 512, 1024, 2048, 936]
    assert {e for _n, e, _s in got} == {oc.FIRST_EPOCH}
    ends = [sum(n for n, _e, _s in got[:i + 1]) for i in range(len(got))]
    assert [s_ for _n, _e, s_ in got] == [{"p1": end} for end in ends]
    sock.sendall(publish_frame(1, items))  # all duplicates: confirmed, not stored
    assert _confirmed(sock, 5000) == list(range(1, 5001))
    assert sbroker.call(lambda: q.log.next_offset) == 5000
    sock.close()


def test_metadata_advertises_the_host_name_when_listening_on_every_address():
    """rabbit_stream:host/0 answers the node's host name; this broker does so when bound to
    every address, else the bound address, and stream.advertised_* win over both."""
    from broker.stream_protocol.reader import StreamListener

    def endpoint(host: str, **kw) -> tuple[str, int]:
        return StreamListener(None, host=host, port=5552, frame_max=1 << 20,  # type: ignore[arg-type]
                              heartbeat=60, **kw).endpoint()

    assert endpoint("0.0.0.0") == (socket.gethostname(), 5552)
    assert endpoint("::") == (socket.gethostname(), 5552)
    assert endpoint("127.0.0.1") == ("127.0.0.1", 5552)
    assert endpoint("0.0.0.0", advertised_host="stream.example", advertised_port=6000) == (
        "stream.example", 6000)


def test_peer_properties_announce_the_stream_protocol_version_clients_gate_features_on(sbroker):
    """The Go client turns super streams, single active consumer and filtering on only for a
    server version of 3.11 / 3.13 or more: peer_properties says 3.13.7, the version of
    rabbit_stream_reader this reader follows, and this broker's own version beside it."""
    from broker import __version__

    sock = socket.create_connection(("127.0.0.1", sbroker.stream_port), timeout=5)
    sock.sendall(frame(struct.pack(">HHII", 17, 1, 1, 0)))
    reply = read_frame(sock)
    assert struct.unpack_from(">HHIH", reply) == (0x8011, 1, 1, 1)
    props = core.Cursor(reply, 10).string_map()
    assert (props["product"], props["version"]) == ("RabbitMQ", "3.13.7")
    assert props["pybroker_version"] == __version__
    sock.close()


def _stream_stats(sock: socket.socket, name: str, corr: int) -> dict[str, int]:
    sock.sendall(frame(struct.pack(">HHI", 28, 1, corr) + s(name)))
    while True:
        f = read_frame(sock)
        key, _v, c, code = struct.unpack_from(">HHIH", f)
        if key == 0x801C and c == corr:
            break
    assert code == 1
    c = core.Cursor(f, 10)  # the map: count, then (string, i64) pairs
    return {c.string() or "": c.i64() for _ in range(c.u32())}


def test_stream_stats_answer_osiris_keys_with_minus_one_for_what_is_not_there_yet(sbroker):
    """osiris:get_stats/1 (RabbitMQ 3.13): first_chunk_id, committed_chunk_id and
    last_chunk_id, -1 on an empty stream (the Go client's StreamStats errors on -1)."""
    sock = opened(sbroker)
    assert raw_create_stream(sock, "stats") == 1
    assert _stream_stats(sock, "stats", 200) == {
        "first_chunk_id": -1, "committed_chunk_id": -1, "last_chunk_id": -1}
    assert declare_publisher(sock, 1, "", "stats") == 1
    sock.sendall(publish_frame(1, [(1, b"a"), (2, b"b")]))
    assert _confirmed(sock, 2) == [1, 2]
    sock.sendall(publish_frame(1, [(3, b"c")]))
    assert _confirmed(sock, 1) == [3]
    assert _stream_stats(sock, "stats", 201) == {
        "first_chunk_id": 0, "committed_chunk_id": 2, "last_chunk_id": 2}
    sock.close()
