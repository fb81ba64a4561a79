# spark_jobs.amqp.stream_reader: the `amqp` source on a stream queue (x-queue-type stream):
# offsets are stream offsets, so a micro-batch is an offset range that any task can read
# again, and a query is replayable (exactly-once into an idempotent or transactional sink).
# Talked to by Spark through the data source (driver: offsets and partitions; executors:
# read()).
# Must never ack anything away (a stream keeps its messages) or ship rows from the driver, or
# refer to a module object of spark_jobs from a function (the classes travel by value, and
# cloudpickle would then pickle the whole module).

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterator

import pika
import pika.exceptions
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from spark_jobs.amqp.connect import open_blocking
from spark_jobs.amqp.deadline import Watch, run_with_deadline
from spark_jobs.amqp.options import AmqpOptions
from spark_jobs.amqp.reader import ROWS_PER_PARTITION, delivery_row
from spark_jobs.amqp.stream_protocol import first_at as first_at_over_stream
from spark_jobs.amqp.stream_protocol import read_range as read_range_over_stream
from spark_jobs.amqp.stream_protocol import tail as tail_over_stream

log = logging.getLogger("spark_jobs.amqp")
QUIET_S = 0.3  # a probe ends once nothing more came for this long
MAX_PREFETCH = 65535


class OffsetRange(InputPartition):
    """Stream offsets [start, end) that one task reads from the broker itself."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__(start)
        self.start = start
        self.end = end


def _consume(options: AmqpOptions, offset: object, until: int | None, prefetch: int,
             wait_s: float, what: str) -> list[tuple[int, tuple]]:
    """Consume the stream from `offset` (an x-stream-offset value): (offset, row) pairs, in
    order. With `until`: up to (excluding) offset `until`, however long that takes, as long as
    deliveries keep coming. Without: at most `prefetch` deliveries, ending once nothing more
    comes for QUIET_S or `wait_s` has passed (a busy stream is never quiet). Acks as it goes
    (a stream only counts them as credit).
    `what` names the work in errors and in the connection's name.

    Errors: deadline.BatchTimeout when the broker makes no progress (connection, channel,
    basic.qos, basic.consume, the next delivery of a range) for batchTimeoutMs; AmqpConnectError;
    pika.exceptions.AMQPError when the broker closes the channel or connection.
    """
    queue = options.require_queue()
    return run_with_deadline(
        lambda watch: _consume_watched(watch, options, queue, offset, until, prefetch, wait_s),
        options.batch_timeout_s, f"{what} of stream queue '{queue}'")


def _consume_watched(watch: Watch, options: AmqpOptions, queue: str, offset: object,
                     until: int | None, prefetch: int,
                     wait_s: float) -> list[tuple[int, tuple]]:
    watch.step(f"a connection to {options.describe()}")
    conn = open_blocking(options, "spark-amqp-stream-reader", options.batch_timeout_s)
    got: list[tuple[int, tuple]] = []
    try:
        watch.step("channel.open-ok")
        ch = conn.channel()
        watch.step("basic.qos-ok")
        ch.basic_qos(prefetch_count=prefetch)
        state = {"last": time.monotonic()}

        def on_message(c, method, props, body: bytes) -> None:
            if until is None and len(got) >= prefetch:
                return  # past the probe's limit: left unacked, forgotten with the channel
            off = int((props.headers or {}).get("x-stream-offset", -1))
            row = delivery_row(method, props, body)
            got.append((off, (*row[:-1], off)))  # delivery_tag column: the stream offset
            state["last"] = time.monotonic()
            watch.tick()
            c.basic_ack(method.delivery_tag)

        watch.step(f"basic.consume-ok (x-stream-offset {offset})")
        ch.basic_consume(queue, on_message, arguments={"x-stream-offset": offset})
        watch.step(f"deliveries from offset {offset}" if until is None else
                   f"deliveries from offset {offset} up to offset {until}")
        start = time.monotonic()
        while not watch.cancelled:
            conn.process_data_events(0.02)
            now = time.monotonic()
            if until is not None:
                if got and got[-1][0] >= until - 1:
                    break
                continue  # the deadline ends a range that stops short, never a quiet wait
            if len(got) >= prefetch or now - start > wait_s:
                break
            if got and now - state["last"] > QUIET_S:
                break
    finally:
        if conn.is_open and not watch.cancelled:
            try:
                conn.close()
            except pika.exceptions.AMQPError as e:
                log.info("amqp stream read: close failed (%s)", type(e).__name__)
    return got


def tail(options: AmqpOptions) -> int | None:
    """The stream's next offset (one past the last message), or None when it is empty:
    the last chunk is read from x-stream-offset "last" (on a busy stream, whatever came
    within fetchWaitMs: an offset below the true tail is still a valid end). With
    streamPort: stream_stats and that one chunk over the stream protocol."""
    if options.stream_port is not None:
        return tail_over_stream(options)
    got = _consume(options, "last", None, MAX_PREFETCH, options.fetch_wait_ms / 1000,
                   "finding the tail")
    return max(off for off, _row in got) + 1 if got else None


def first_at(options: AmqpOptions, spec: object) -> int | None:
    """The first offset a consumer starting at `spec` ("first", a timestamp) gets, or None
    when there is none yet (one delivery is taken: prefetch 1, stop after it)."""
    if options.stream_port is not None:
        if isinstance(spec, dt.datetime):
            return first_at_over_stream(options, 5, int(spec.timestamp() * 1000))
        return first_at_over_stream(options, 1)
    got = _consume(options, spec, None, 1, options.fetch_wait_ms / 1000,
                   f"finding the first offset at {spec}")
    return got[0][0] if got else None


def read_range(options: AmqpOptions, start: int, end: int) -> Iterator[tuple]:
    """The rows of offsets [start, end), in order (offsets below `start` that a broker
    sends from the start of a chunk are skipped; offsets retention removed are gone).

    Errors: deadline.BatchTimeout when the deliveries stop before offset end - 1 for
    batchTimeoutMs (a paused broker; a range retention removed with nothing after it): the
    task fails rather than returning part of the range as if it were all of it."""
    if end <= start:
        return
    if options.stream_port is not None:
        yield from read_range_over_stream(options, start, end)
        return
    got = _consume(options, start, end, min(MAX_PREFETCH, end - start), 0,
                   f"reading offsets [{start}, {end})")
    for off, row in got:
        if start <= off < end:
            yield row


def resolve_start(options: AmqpOptions, default: str) -> int:
    """startingTimestamp (ms) or startingOffsets (earliest | latest | an offset; `default`
    when neither is given) as a stream offset."""
    if options.starting_timestamp is not None:
        when = dt.datetime.fromtimestamp(options.starting_timestamp / 1000, tz=dt.UTC)
        found = first_at(options, when)
        return found if found is not None else (tail(options) or 0)
    spec = options.starting_offsets or default
    if spec == "earliest":
        found = first_at(options, "first")
        return found if found is not None else 0
    if spec == "latest":
        return tail(options) or 0
    return int(spec)


class AmqpStreamOffsetReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`readStream.format("amqp")` on a stream queue: offsets {"offset": n} are
    stream offsets (n = the next offset to read); a micro-batch [start, end) becomes ranges
    of ROWS_PER_PARTITION offsets that executors read themselves, so a batch replayed after
    a crash reads exactly the same messages. latestOffset probes the stream's tail and caps
    the batch at maxMessagesPerTrigger; commit does nothing (nothing to delete).
    Source: Spark "Python Data Source API" (DataSourceStreamReader); options named as
    Spark's Kafka source (startingOffsets, startingTimestamp, maxMessagesPerTrigger)."""

    def __init__(self, options: AmqpOptions) -> None:
        options.require_queue()
        self.options = options
        self._until: int | None = None  # availableNow: the tail when the trigger began

    def initialOffset(self) -> dict:  # noqa: N802 (Spark's name)
        return {"offset": resolve_start(self.options, "latest")}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        return ReadMaxRows(self.options.max_messages_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._until = tail(self.options) or 0

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # noqa: N802
        lo = int(start["offset"])
        if isinstance(limit, ReadMaxRows):
            n = limit.max_rows
        elif isinstance(limit, ReadAllAvailable):
            n = self.options.max_messages_per_trigger
        else:
            raise ValueError(f"amqp source: unsupported read limit {limit!r}")
        top = self._until if self._until is not None else tail(self.options)
        if top is None or top <= lo:
            return start
        return {"offset": min(top, lo + n)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        lo, hi = int(start["offset"]), int(end["offset"])
        return [OffsetRange(a, min(hi, a + ROWS_PER_PARTITION))
                for a in range(lo, hi, ROWS_PER_PARTITION)]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        assert isinstance(partition, OffsetRange)
        yield from read_range(self.options, partition.start, partition.end)

    def commit(self, end: dict) -> None:
        """Nothing to do: a stream keeps what was read."""


class AmqpStreamBatchReader(DataSourceReader):
    """`read.format("amqp")` on a stream queue: the offsets from
    startingOffsets (default earliest) to endingOffsets (default latest: the tail when the
    read is planned), as ranges that executors read themselves."""

    def __init__(self, options: AmqpOptions) -> None:
        options.require_queue()
        self.options = options

    def partitions(self) -> list[InputPartition]:
        lo = resolve_start(self.options, "earliest")
        ending = self.options.ending_offsets or "latest"
        hi = (tail(self.options) or 0) if ending == "latest" else int(ending)
        return [OffsetRange(a, min(hi, a + ROWS_PER_PARTITION))
                for a in range(lo, hi, ROWS_PER_PARTITION)] or [OffsetRange(lo, lo)]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        assert isinstance(partition, OffsetRange)
        yield from read_range(self.options, partition.start, partition.end)


__all__ = ["AmqpStreamBatchReader", "AmqpStreamOffsetReader", "OffsetRange"]
