"""The `amqp` data source against a real broker: round trip, crash/restart, idle, availableNow.

Each test uses its own exchange and queues (unique names) and one shared SparkSession.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import threading
import time

import pytest
from amqp_helpers import declare_topology, delete, depth, drain, publish_json, wait_for
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from tcp_proxy import TcpProxy


@pytest.fixture
def topology(amqp_uri, unique):
    """(exchange, queue): a durable topic exchange with a durable queue bound with '#'."""
    exchange, queue = unique("spark-x"), unique("spark-q")
    declare_topology(amqp_uri, exchange, queue)
    yield exchange, queue
    delete(amqp_uri, exchange, [queue])


ALL_TYPES = StructType([
    StructField("id", IntegerType()),
    StructField("b", ByteType()),
    StructField("s", ShortType()),
    StructField("l", LongType()),
    StructField("f", FloatType()),
    StructField("d", DoubleType()),
    StructField("dec", DecimalType(20, 5)),
    StructField("str", StringType()),
    StructField("bool", BooleanType()),
    StructField("date", DateType()),
    StructField("ts", TimestampType()),
    StructField("bin", BinaryType()),
    StructField("arr", ArrayType(IntegerType())),
    StructField("m", MapType(StringType(), DoubleType())),
    StructField("st", StructType([StructField("x", LongType()), StructField("y", StringType())])),
])


def _typed_rows(n: int) -> list[tuple]:
    rows = []
    for i in range(n):
        if i % 7 == 3:  # a row of nulls besides the id
            rows.append((i,) + (None,) * (len(ALL_TYPES.fields) - 1))
            continue
        rows.append((
            i, (i % 256) - 128, i * 7 - 30000, 2**40 + i, i / 4, i * 1.25e-3,
            decimal.Decimal(f"{i}.{i % 100000:05d}"), f"héllo ✓ {i} \"q\"", i % 2 == 0,
            dt.date(2013, 1, 1) + dt.timedelta(days=i),
            dt.datetime(2013, 1, 1, 5, 15) + dt.timedelta(seconds=i, milliseconds=i % 1000),
            bytes([i % 256, 0, 255]), [i, -i], {"k": i / 2}, (i * 3, f"y{i}"),
        ))
    return rows


def test_round_trip_all_types(spark, amqp_uri, topology):
    exchange, queue = topology
    n = 60
    started = int(time.time())
    df = spark.createDataFrame(_typed_rows(n), ALL_TYPES)
    out = df.select(
        F.to_json(F.struct(*df.columns)).alias("body"),
        F.concat(F.lit("rt."), (F.col("id") % 3).cast("string")).alias("rk"),
        F.when(F.col("id") % 2 == 0, F.concat(F.lit("own-"), F.col("id").cast("string")))
        .alias("message_id"),
        F.concat(F.lit("corr-"), F.col("id").cast("string")).alias("correlation_id"),
        F.create_map(F.lit("row"), F.col("id").cast("string")).alias("headers"),
    ).repartition(2)
    (out.write.format("amqp").option("uri", amqp_uri).option("exchange", exchange)
     .option("routingKeyColumn", "rk").option("messageIdPrefix", "rtp")
     .option("confirmWindow", 7).mode("append").save())
    wait_for(lambda: depth(amqp_uri, queue) == n, timeout=10)

    got = (spark.read.format("amqp").option("uri", amqp_uri).option("queue", queue)
           .option("maxMessagesPerTrigger", 1000).option("fetchWaitMs", 2000).load()
           .withColumn("v", F.from_json(F.col("body").cast("string"), ALL_TYPES))
           .collect())
    assert len(got) == n
    assert depth(amqp_uri, queue) == 0  # acked once Spark had every row
    by_id = {r.v.id: r for r in got}
    expected = {r.id: r for r in df.collect()}
    assert sorted(by_id) == sorted(expected)
    for i, row in by_id.items():
        assert row.v == expected[i], i
        assert row.routing_key == f"rt.{i % 3}"
        assert row.exchange == exchange
        assert row.correlation_id == f"corr-{i}"
        assert row.headers == {"row": str(i)}
        assert row.redelivered is False
        assert row.timestamp.timestamp() >= started - 1
        if i % 2 == 0:
            assert row.message_id == f"own-{i}"
        else:
            prefix, batch, partition, position = row.message_id.split(":")
            assert (prefix, batch) == ("rtp", "b") and partition in ("0", "1")
            assert int(position) >= 0
    generated = [r.message_id for r in got if r.message_id.startswith("rtp:")]
    assert len(set(generated)) == len(generated) == n // 2
    assert len({r.delivery_tag for r in got}) == n


def test_binary_body_round_trip_failover_and_unroutable_fails(spark, amqp_uri, topology):
    exchange, queue = topology
    blobs = [bytes(range(256)), b"", b"\x00\xff" * 1000]
    df = spark.createDataFrame([(b,) for b in blobs], "body binary")
    # The first URI refuses connections: writer and reader fail over to the second.
    failover = f"amqp://guest:guest@127.0.0.1:1/%2F,{amqp_uri}"
    (df.write.format("amqp").option("uri", failover).option("exchange", exchange)
     .option("routingKey", "bin.x").mode("append").save())
    got = (spark.read.format("amqp").option("uri", failover).option("queue", queue)
           .option("fetchWaitMs", 2000).load().collect())
    assert sorted(r.body for r in got) == sorted(blobs)
    assert {r.routing_key for r in got} == {"bin.x"}
    assert depth(amqp_uri, queue) == 0

    # mandatory=True: a message no queue takes fails the task, so the write fails.
    with pytest.raises(Exception) as failure:  # noqa: B017 (py4j wraps the task's error)
        (df.write.format("amqp").option("uri", amqp_uri).option("exchange", "amq.direct")
         .option("routingKey", "nobody-is-bound-here").mode("append").save())
    assert "UnroutableError" in str(failure.value)


def _publish_ids(uri: str, exchange: str, ids: range) -> None:
    publish_json(uri, exchange, "crash.test", ({"id": i} for i in ids))


def _ids(batch) -> list[int]:
    return [json.loads(r.body)["id"] for r in batch.select("body").collect()]


class FailAfter:
    """foreachBatch sink keeping every batch's ids; raises after storing batch `fail_at`."""

    def __init__(self, store: dict, fail_at: int | None) -> None:
        self.store = store
        self.fail_at = fail_at

    def __call__(self, batch, batch_id: int) -> None:
        self.store.setdefault(batch_id, []).append(_ids(batch))
        if batch_id == self.fail_at:
            raise RuntimeError(f"sink crashes after writing batch {batch_id}")


def _stream(spark, uri, queue, per_trigger, sink, checkpoint, **trigger):
    return (spark.readStream.format("amqp").option("uri", uri).option("queue", queue)
            .option("maxMessagesPerTrigger", per_trigger).option("fetchWaitMs", 2000).load()
            .writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
            .trigger(**trigger).start())


def test_crash_and_restart_duplicates_exactly_the_failed_batch(spark, amqp_uri, topology,
                                                               tmp_path):
    exchange, queue = topology
    total, per = 600, 100
    _publish_ids(amqp_uri, exchange, range(total))
    checkpoint = str(tmp_path / "ck")
    first: dict = {}
    query = _stream(spark, amqp_uri, queue, per, FailAfter(first, fail_at=3), checkpoint,
                    availableNow=True)
    with pytest.raises(StreamingQueryException):
        query.awaitTermination(90)
    assert sorted(first) == [0, 1, 2, 3]
    failed = first[3][0]
    assert len(failed) == per
    # Batches 0-2 were acked when batch 3 was planned; batch 3 was not: it comes back.
    wait_for(lambda: depth(amqp_uri, queue) == total - 3 * per, timeout=20)

    second: dict = {}
    query = _stream(spark, amqp_uri, queue, per, FailAfter(second, fail_at=None), checkpoint,
                    availableNow=True)
    assert query.awaitTermination(90)
    assert query.exception() is None
    # The restart replays batch 3 from the offset log: the reader holds none of it -> no rows.
    assert second[3] == [[]]
    received = [i for runs in (first, second) for b in runs.values() for ids in b for i in ids]
    assert set(received) == set(range(total))  # nothing lost
    dups = sorted(i for i in set(received) if received.count(i) > 1)
    assert dups == sorted(failed)  # duplicates are exactly the failed batch
    assert all(received.count(i) == 2 for i in dups)
    assert depth(amqp_uri, queue) == 0


def test_idle_queue_keeps_nothing_unacked(spark, amqp_uri, topology, tmp_path):
    exchange, queue = topology
    total = 250
    _publish_ids(amqp_uri, exchange, range(total))
    store: dict = {}
    query = _stream(spark, amqp_uri, queue, 100, FailAfter(store, None), str(tmp_path / "ck"),
                    processingTime="200 milliseconds")
    try:
        seen = lambda: sum(len(ids) for b in store.values() for ids in b)  # noqa: E731
        wait_for(lambda: seen() == total, timeout=60)
        last_data = max(i for i, p in enumerate(query.recentProgress) if p["numInputRows"])

        def idle_trigger_after_last_batch() -> bool:
            progress = query.recentProgress
            return any(p["numInputRows"] == 0 for p in progress[last_data + 1:])

        # An idle trigger has run latestOffset after the last batch was committed ...
        wait_for(idle_trigger_after_last_batch, timeout=30)
        assert query.isActive
    finally:
        query.stop()
    # ... so once the consumer is gone nothing comes back: nothing had stayed unacked.
    assert depth(amqp_uri, queue) == 0
    with pytest.raises(AssertionError):
        drain(amqp_uri, queue, expected=1, timeout=1.0)
    assert seen() == total


def test_available_now_drains_exactly_the_depth(spark, amqp_uri, topology, tmp_path):
    exchange, queue = topology
    total, late = 300, 40
    _publish_ids(amqp_uri, exchange, range(total))
    checkpoint = str(tmp_path / "ck")
    store: dict = {}

    def sink(batch, batch_id):
        FailAfter(store, None)(batch, batch_id)
        if batch_id == 0:  # published after the query took the depth: not for this run
            _publish_ids(amqp_uri, exchange, range(total, total + late))

    query = _stream(spark, amqp_uri, queue, 70, sink, checkpoint, availableNow=True)
    assert query.awaitTermination(90)
    got = [i for b in store.values() for ids in b for i in ids]
    assert sorted(got) == list(range(total))
    assert [len(store[b][0]) for b in sorted(store)] == [70, 70, 70, 70, 20]
    wait_for(lambda: depth(amqp_uri, queue) == late, timeout=20)

    store.clear()
    query = _stream(spark, amqp_uri, queue, 70, FailAfter(store, None), checkpoint,
                    availableNow=True)
    assert query.awaitTermination(90)
    got = [i for b in store.values() for ids in b for i in ids]
    assert sorted(got) == list(range(total, total + late))
    assert depth(amqp_uri, queue) == 0


def test_batch_longer_than_heartbeat_timeout_keeps_the_consumer(spark, amqp_uri, topology,
                                                                 tmp_path):
    # heartbeat=1 s: a broker closes a connection silent for ~2 s. The sink works 5 s on batch
    # 0, during which the reader process is idle; its consumer must still answer heartbeats,
    # or the broker drops it and batch 0 comes back as duplicates.
    exchange, queue = topology
    total = 200
    _publish_ids(amqp_uri, exchange, range(total))
    store: dict = {}

    def slow_sink(batch, batch_id):
        FailAfter(store, None)(batch, batch_id)
        if batch_id == 0:
            time.sleep(5)  # a long micro-batch, on purpose

    query = (spark.readStream.format("amqp").option("uri", amqp_uri).option("queue", queue)
             .option("maxMessagesPerTrigger", 100).option("fetchWaitMs", 2000)
             .option("heartbeat", 1).load()
             .writeStream.foreachBatch(slow_sink)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
             .start())
    assert query.awaitTermination(90)
    got = [i for b in store.values() for ids in b for i in ids]
    assert sorted(got) == list(range(total))  # every message once: no redelivery
    assert depth(amqp_uri, queue) == 0


@pytest.fixture
def proxy(amqp_uri):
    p = TcpProxy(amqp_uri)
    yield p
    p.close()


def test_writer_resends_what_a_lost_connection_left_unconfirmed(spark, amqp_uri, topology,
                                                                proxy):
    exchange, queue = topology
    total, window = 30000, 500
    df = spark.range(total).selectExpr("cast(id as string) AS body").repartition(2).cache()
    df.count()
    cut_at: list[int] = []

    def cut_mid_write() -> None:
        wait_for(lambda: depth(amqp_uri, queue) >= 3000, timeout=60, interval=0.02)
        cut_at.append(depth(amqp_uri, queue))
        proxy.cut()

    killer = threading.Thread(target=cut_mid_write)
    killer.start()
    (df.write.format("amqp").option("uri", proxy.url).option("exchange", exchange)
     .option("routingKey", "w").option("confirmWindow", window).mode("append").save())
    killer.join()
    assert cut_at and cut_at[0] < total  # the cut happened while the write was running
    assert proxy.accepted > 2  # the tasks reconnected
    got = drain(amqp_uri, queue, expected=depth(amqp_uri, queue), timeout=60)
    ids_by_body: dict[bytes, set] = {}
    for _, props, body in got:
        ids_by_body.setdefault(body, set()).add(props.message_id)
    assert set(ids_by_body) == {str(i).encode() for i in range(total)}  # nothing lost
    assert len(got) - total <= 2 * window  # resent: at most each task's window in flight
    assert all(len(ids) == 1 for ids in ids_by_body.values())  # a resend keeps its message_id


def test_stream_reader_reconnects_after_a_lost_connection(spark, amqp_uri, topology, proxy,
                                                          tmp_path):
    exchange, queue = topology
    total, per = 400, 100
    _publish_ids(amqp_uri, exchange, range(total))
    store: dict = {}
    sink = FailAfter(store, None)
    query = _stream(spark, proxy.url, queue, per, sink, str(tmp_path / "ck"),
                    processingTime="200 milliseconds")
    try:
        wait_for(lambda: len(store) >= 1, timeout=60)
        assert proxy.cut() >= 1
        received = lambda: [i for b in store.values() for ids in b for i in ids]  # noqa: E731
        wait_for(lambda: set(received()) == set(range(total)), timeout=60)
        assert query.isActive  # it reconnected instead of failing
    finally:
        query.stop()
    got = received()
    assert len(got) - total <= per  # duplicates: at most the batch held when the link broke


def test_a_paused_broker_fails_the_query_with_the_reason(spark, amqp_uri, topology, proxy,
                                                         tmp_path):
    """Issue 33 item 3: the broker stops answering (the proxy forwards nothing, as a
    SIGSTOPped broker) while the query waits for more: after batchTimeoutMs the query fails
    naming what it waited for, instead of looking like an idle queue for ever (heartbeats
    would notice only after two intervals, and never with heartbeat 0)."""
    exchange, queue = topology
    _publish_ids(amqp_uri, exchange, range(20))
    store: dict = {}
    query = (spark.readStream.format("amqp").option("uri", proxy.url).option("queue", queue)
             .option("fetchWaitMs", 200).option("batchTimeoutMs", 2000)
             .option("heartbeat", 0).load()
             .writeStream.foreachBatch(FailAfter(store, None))
             .option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="100 milliseconds").start())
    try:
        wait_for(lambda: sum(len(ids) for b in store.values() for ids in b) == 20, timeout=60)
        proxy.pause()
        _publish_ids(amqp_uri, exchange, range(20, 40))  # waiting, but out of the reader's reach
        with pytest.raises(StreamingQueryException) as failure:
            query.awaitTermination(30)
    finally:
        query.stop()
    assert time.monotonic() - proxy.paused_at < 25
    assert "no progress for 2 s (batchTimeoutMs)" in str(failure.value)
    assert f"on queue '{queue}'" in str(failure.value)
