"""Super streams, single active consumer and filtering over the stream protocol (issue 37
items 5-6; RabbitMQ 3.11 and 3.13 features), driven by rstream."""

from __future__ import annotations

import asyncio
import struct

import rstream

from tests.stream.helpers import create_stream, producer, run
from tests.stream.raw_client import (
    frame,
    opened,
    read_frame,
    s,
)


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
