"""Publishing and consuming over the stream protocol (broker/stream_protocol/reader.py,
issue 37 items 3-5): confirms, deduplication, offsets, sub-entry batches, osiris-sized
chunks, a stream read across protocols, resource alarms."""

from __future__ import annotations

import asyncio
import socket
import struct

import pika
import pytest
import rstream
from rstream import exceptions as rexc

from broker.stream import osiris_chunk as oc
from tests.stream.helpers import amqp_read, consume, create_stream, producer, run
from tests.stream.raw_client import (
    confirmed_ids,
    declare_publisher,
    frame,
    opened,
    publish_frame,
    read_frame,
    s,
)
from tests.stream.raw_client import (
    create_stream as raw_create_stream,
)


def test_publish_with_confirms_and_consume_from_first(sbroker):
    async def main() -> list:
        async with producer(sbroker) as p:
            await p.create_stream("sp-pub")
            for i in range(5):
                await p.send_wait("sp-pub", rstream.AMQPMessage(body=b"m%d" % i))
            await p.send_batch("sp-pub", [rstream.AMQPMessage(body=b"b%d" % i)
                                          for i in range(3)])
        return await consume(sbroker, "sp-pub", 8)

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
        return await consume(sbroker, "sp-named", 6)

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
    assert [b for _o, b in run(consume(sbroker, "sp-cross", 2))] == [b"from-stream",
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
        return await consume(sbroker, "sp-sub", 5)

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




def test_subscribing_at_offset_zero_starts_at_the_first_message(sbroker):
    """Offset specification "offset 0" is the first message, not "next"."""
    create_stream(sbroker, "sp-zero")

    async def main() -> list:
        async with producer(sbroker) as p:
            for i in range(2):
                await p.send_wait("sp-zero", rstream.AMQPMessage(body=b"z%d" % i))
        return await consume(sbroker, "sp-zero", 2, rstream.ConsumerOffsetSpecification(
            rstream.OffsetType.OFFSET, 0))

    assert [b for _o, b in run(main())] == [b"z0", b"z1"]


@pytest.mark.parametrize("body", [b"m%d", b"m%05d"], ids=["lengths-vary", "one-length"])
def test_a_burst_is_stored_as_osiris_batches_it_each_chunk_tracking_its_publisher(
        sbroker, body):
    """5 000 messages in one publish frame become chunks of 32, 64, … 2 048 entries and the
    rest (gen_batch_server's batches of osiris's writer), each with epoch 1 and a trailer
    holding the publisher's last id in that chunk; a resend of them all is dropped. With one
    length the frame is one PublishBlock, split where each chunk ends; read back, every
    message is there in order."""
    stream = "burst-" + body.decode().strip("%m")
    sock = opened(sbroker)
    assert raw_create_stream(sock, stream) == 1
    assert declare_publisher(sock, 1, "p1", stream) == 1
    items = [(i, body % i) for i in range(1, 5001)]
    sock.sendall(publish_frame(1, items))
    assert confirmed_ids(sock, 5000) == list(range(1, 5001))
    q = sbroker.call(lambda: sbroker.broker.vhosts["/"].queues[stream])

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
    assert confirmed_ids(sock, 5000) == list(range(1, 5001))
    assert sbroker.call(lambda: q.log.next_offset) == 5000
    sock.close()
    assert sbroker.call(lambda: stored(q)) == [m for _i, m in items]


def test_a_frame_of_one_length_partly_duplicate_stores_only_the_new_messages(sbroker):
    """A one-length frame (a PublishBlock) whose first ids were stored already: those are
    confirmed and dropped, the rest stored, message by message as osiris deduplicates."""
    sock = opened(sbroker)
    assert raw_create_stream(sock, "dedup-block") == 1
    assert declare_publisher(sock, 1, "p1", "dedup-block") == 1
    sock.sendall(publish_frame(1, [(i, b"a%d" % i) for i in range(1, 6)]))
    assert confirmed_ids(sock, 5) == [1, 2, 3, 4, 5]
    sock.sendall(publish_frame(1, [(i, b"b%d" % i) for i in range(3, 9)]))
    assert confirmed_ids(sock, 6) == [3, 4, 5, 6, 7, 8]
    sock.close()
    q = sbroker.call(lambda: sbroker.broker.vhosts["/"].queues["dedup-block"])
    got = sbroker.call(lambda: stored(q))
    assert got == [b"a1", b"a2", b"a3", b"a4", b"a5", b"b6", b"b7", b"b8"]


def stored(q) -> list[bytes]:
    """Every record of stream queue `q`'s log, in order, as stored (call on the broker's
    loop)."""
    out, offset = [], 0
    while (got := q.log.read_raw(offset)) is not None:
        h, raw = got
        out += [bytes(e) for e in oc.entries(raw, h)]
        offset = h.chunk_id + h.num_records
    return out
