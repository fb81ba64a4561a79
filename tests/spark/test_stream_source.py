"""The `amqp` source on a stream queue (issue 22 item 5): offsets are stream offsets, so a
read is replayable. A batch read gives the same rows every time, bounded by
startingOffsets / endingOffsets; a streaming query that crashes after its sink wrote a batch
re-reads exactly that batch's messages on restart, so a sink keyed by batch id ends with
every message once."""

from __future__ import annotations

import json

import pika
import pytest
from amqp_helpers import connect, wait_for
from pyspark.errors import StreamingQueryException
from tcp_proxy import TcpProxy


@pytest.fixture
def stream_queue(amqp_uri, unique):
    name = unique("spark-stream")
    with connect(amqp_uri) as conn:
        conn.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    yield name
    with connect(amqp_uri) as conn:
        conn.channel().queue_delete(name)


def _publish(uri: str, queue: str, ids: range, body_size: int = 0) -> None:
    """Publish {"id": i} (padded to `body_size` bytes) for each i, each confirmed before the
    next is sent: one message per stream chunk."""
    with connect(uri) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        for i in ids:
            ch.basic_publish("", queue, json.dumps({"id": i}).encode().ljust(body_size),
                             pika.BasicProperties(message_id=str(i)))


def _publish_unconfirmed(uri: str, queue: str, ids: range) -> None:
    """As _publish without waiting for each confirm; returns once the stream holds them."""
    with connect(uri) as conn:
        ch = conn.channel()
        for i in ids:
            ch.basic_publish("", queue, json.dumps({"id": i}).encode(),
                             pika.BasicProperties(message_id=str(i)))
        wait_for(lambda: ch.queue_declare(queue, passive=True).method.message_count
                 >= ids.stop, timeout=30)


def _read(spark, uri: str, queue: str, **options):
    reader = (spark.read.format("amqp").option("uri", uri).option("queue", queue)
              .option("queueType", "stream").option("fetchWaitMs", 1000))
    for key, value in options.items():
        reader = reader.option(key, value)
    return [(r.delivery_tag, json.loads(r.body)["id"]) for r in reader.load().collect()]


def test_a_batch_read_is_replayable_and_bounded(spark, amqp_uri, stream_queue):
    _publish(amqp_uri, stream_queue, range(250))
    first = sorted(_read(spark, amqp_uri, stream_queue))
    assert first == [(i, i) for i in range(250)]  # delivery_tag holds the stream offset
    assert sorted(_read(spark, amqp_uri, stream_queue)) == first  # nothing was consumed away
    assert sorted(_read(spark, amqp_uri, stream_queue, startingOffsets="100",
                        endingOffsets="150")) == [(i, i) for i in range(100, 150)]


def _publish_with_properties(uri: str, queue: str, n: int) -> None:
    """n messages with ids, correlation ids, headers and timestamps, in a few chunks."""
    with connect(uri) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        for i in range(n):
            ch.basic_publish("", queue, json.dumps({"id": i}).encode(), pika.BasicProperties(
                message_id=f"m-{i}", correlation_id=f"c-{i % 7}", timestamp=1_700_000_000 + i,
                headers={"tenant": f"t{i % 3}", "attempt": i % 2}))


def _rows(spark, uri: str, queue: str, **options) -> list[tuple]:
    reader = (spark.read.format("amqp").option("uri", uri).option("queue", queue)
              .option("queueType", "stream").option("fetchWaitMs", 1000))
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted((tuple(r) for r in reader.load().collect()), key=lambda r: r[-1])


def test_a_read_over_the_stream_protocol_gives_the_same_rows(spark, amqp_uri, stream_queue,
                                                             stream_port):
    """Issue 37 item 9: with streamPort, tasks read their offset ranges over the stream
    protocol; every column of every row is what the AMQP 0-9-1 path gives, bounds included."""
    _publish_with_properties(amqp_uri, stream_queue, 300)
    over_amqp = _rows(spark, amqp_uri, stream_queue)
    over_stream = _rows(spark, amqp_uri, stream_queue, streamPort=str(stream_port))
    assert len(over_amqp) == 300 and [r[-1] for r in over_amqp] == list(range(300))
    assert over_stream == over_amqp
    assert _rows(spark, amqp_uri, stream_queue, streamPort=str(stream_port),
                 startingOffsets="100", endingOffsets="150") == over_amqp[100:150]


class KeyedSink:
    """foreachBatch sink that stores each batch under its id (a replay overwrites: the
    idempotent sink exactly-once needs) and raises after storing batch `fail_at`."""

    def __init__(self, store: dict, attempts: dict, fail_at: int | None) -> None:
        self.store, self.attempts, self.fail_at = store, attempts, fail_at

    def __call__(self, batch, batch_id: int) -> None:
        ids = sorted(json.loads(r.body)["id"] for r in batch.select("body").collect())
        self.store[batch_id] = ids
        self.attempts.setdefault(batch_id, []).append(ids)
        if batch_id == self.fail_at:
            raise RuntimeError(f"sink crashes after writing batch {batch_id}")


def _stream(spark, uri, queue, per, sink, checkpoint, **options):
    reader = (spark.readStream.format("amqp").option("uri", uri).option("queue", queue)
              .option("queueType", "stream").option("startingOffsets", "earliest")
              .option("maxMessagesPerTrigger", per).option("fetchWaitMs", 1000))
    for key, value in options.items():
        reader = reader.option(key, value)
    return (reader.load().writeStream.foreachBatch(sink)
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())


@pytest.mark.parametrize("via", ["amqp", "stream"])
def test_a_crashed_query_replays_exactly_the_same_batch(spark, amqp_uri, stream_queue,
                                                         tmp_path, via, request):
    """Over AMQP 0-9-1 and (streamPort) over the stream protocol alike."""
    options = ({"streamPort": str(request.getfixturevalue("stream_port"))}
               if via == "stream" else {})
    total, per = 500, 100
    _publish(amqp_uri, stream_queue, range(total))
    checkpoint = str(tmp_path / "ck")
    store: dict = {}
    attempts: dict = {}
    query = _stream(spark, amqp_uri, stream_queue, per, KeyedSink(store, attempts, 2),
                    checkpoint, **options)
    with pytest.raises(StreamingQueryException):
        query.awaitTermination(120)
    assert sorted(store) == [0, 1, 2]
    query = _stream(spark, amqp_uri, stream_queue, per, KeyedSink(store, attempts, None),
                    checkpoint, **options)
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert attempts[2][0] == attempts[2][1]  # the replay read exactly the same messages
    assert all(len(a) == 1 for b, a in attempts.items() if b != 2)
    received = [i for ids in store.values() for i in ids]
    assert sorted(received) == list(range(total))  # every message once


def test_exactly_once_into_files_across_a_killed_driver(spark, amqp_uri, stream_queue,
                                                         tmp_path):
    """A driver process (and its JVM) killed with SIGKILL in the middle of a micro-batch
    (planned in the offset log, not committed); the query restarted from its checkpoint
    replays that batch's offsets: the parquet sink holds every message exactly once."""
    import os
    import signal
    import subprocess
    import sys
    import time

    total = 1500
    _publish(amqp_uri, stream_queue, range(total))
    checkpoint, out = str(tmp_path / "ck"), str(tmp_path / "out")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    driver = subprocess.Popen(
        [sys.executable, os.path.join(root, "tests", "spark", "stream_driver.py"), amqp_uri,
         stream_queue, checkpoint, out], cwd=root, start_new_session=True,
        env={**os.environ, "PYTHONPATH": root}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        def logged(kind: str) -> int:
            d = os.path.join(checkpoint, kind)
            return len([n for n in os.listdir(d) if n.isdigit()]) if os.path.isdir(d) else 0

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # mid-batch: planned (offset log), not committed
            planned, committed = logged("offsets"), logged("commits")
            if committed >= 3 and planned > committed:
                break
            time.sleep(0.005)
        else:
            pytest.fail("the driver was never caught mid-batch within 120 s")
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and its JVM, mid-query
        driver.wait(30)
    query = (spark.readStream.format("amqp").option("uri", amqp_uri)
             .option("queue", stream_queue).option("queueType", "stream")
             .option("startingOffsets", "earliest").option("maxMessagesPerTrigger", 500)
             .option("fetchWaitMs", 500).load().select("body", "delivery_tag")
             .writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert query.exception() is None
    ids = [json.loads(r.body)["id"] for r in spark.read.parquet(out).collect()]
    assert sorted(ids) == list(range(total))  # none lost, none twice


def test_a_stream_is_read_as_a_stream_without_queue_type(spark, amqp_uri, stream_queue,
                                                         tmp_path):
    """Issue 33, the reported case: no queueType, startingOffsets=earliest,
    maxMessagesPerTrigger=2000. The source was reading the stream as a classic queue (from
    the next message published: nothing) and never got past its first micro-batch; it must
    find out the queue is a stream and read every message once, in batches of 2000."""
    total, per = 5000, 2000
    _publish_unconfirmed(amqp_uri, stream_queue, range(total))
    store: dict = {}
    attempts: dict = {}
    query = (spark.readStream.format("amqp").option("uri", amqp_uri)
             .option("queue", stream_queue).option("startingOffsets", "earliest")
             .option("maxMessagesPerTrigger", per).load()
             .writeStream.foreachBatch(KeyedSink(store, attempts, None))
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        wait_for(lambda: sum(len(ids) for ids in store.values()) >= total, timeout=60)
    finally:
        query.stop()
    assert query.exception() is None
    received = [i for ids in store.values() for i in ids]
    assert sorted(received) == list(range(total))  # every message once
    sizes = [len(ids) for _, ids in sorted(store.items()) if ids]
    assert sizes == [per, per, total - 2 * per]  # three micro-batches, each at most the limit


def test_a_stream_read_stalled_by_a_paused_broker_fails_with_the_reason(
        spark, amqp_uri, stream_queue, tmp_path):
    """Issue 33 item 3: a task reading a stream range gets part of it, then the broker stops
    answering (the proxy pauses once a connection has carried 1 MB from the broker). The task
    used to wait for the rest for ever (until heartbeats noticed, after two intervals), and
    a range that never started came back empty as if it were complete; now the batch fails
    after batchTimeoutMs naming the range and what it waited for."""
    _publish(amqp_uri, stream_queue, range(1000), body_size=4096)  # 4 MB, small tail chunk
    proxy = TcpProxy(amqp_uri)
    proxy.pause_after(1_000_000)
    query = None
    try:
        query = (spark.readStream.format("amqp").option("uri", proxy.url)
                 .option("queue", stream_queue).option("queueType", "stream")
                 .option("startingOffsets", "earliest").option("maxMessagesPerTrigger", 1000)
                 .option("batchTimeoutMs", 2000).load()
                 .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start())
        with pytest.raises(StreamingQueryException) as failure:
            query.awaitTermination(30)
    finally:
        if query is not None:
            query.stop()
        proxy.close()
    assert proxy.paused_at is not None
    assert "no progress for 2 s (batchTimeoutMs) reading offsets [0, 1000) of stream queue " \
           f"'{stream_queue}': waiting for deliveries from offset 0 up to offset 1000" \
        in str(failure.value)
