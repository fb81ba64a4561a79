# spark_jobs.amqp.reader: the `amqp` sources: a micro-batch stream reader ("driver" mode) and
# a batch reader. Owns QueueConsumer (one pika consumer holding deliveries unacked) and the
# offset bookkeeping that turns Spark's commits into basic.ack(multiple=True).
# Talked to by Spark: the stream reader lives in the driver-side Python reader process (one per
# query, long-lived); its read() and the batch reader's read() run in executor tasks.
# Must never ack a delivery before Spark has committed the micro-batch that carried it (stream)
# or before Spark has taken every row of the task (batch); never logs bodies or credentials.

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import pika.exceptions
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from spark_jobs.amqp.connect import open_blocking
from spark_jobs.amqp.options import AmqpOptions

log = logging.getLogger("spark_jobs.amqp")

# Columns of every `amqp` read, in order (see delivery_row for their sources).
SCHEMA = ("body binary, routing_key string, exchange string, message_id string, "
          "correlation_id string, headers map<string,string>, timestamp timestamp, "
          "redelivered boolean, delivery_tag long")
# What a lost connection raises in pika's BlockingConnection (broker restart, network, close).
# A channel closed by the broker (404 queue deleted, 406) is not in here: it fails the query.
CONNECTION_LOST = (pika.exceptions.AMQPConnectionError, pika.exceptions.ConnectionWrongStateError,
                   pika.exceptions.ChannelWrongStateError)
ROWS_PER_PARTITION = 10000  # rows shipped in one InputPartition (one Spark task)
QUIET_POLL_S = 0.2  # with rows in hand, a poll this long that brings nothing ends the fetch


def _header_value(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def delivery_row(method, props, body: bytes) -> tuple:
    """One delivery as a row of SCHEMA.

    body: bytes as published; routing_key, exchange, redelivered, delivery_tag: from
    basic.deliver; message_id, correlation_id, headers (values as strings), timestamp (AMQP
    seconds -> UTC timestamp): from the content header; absent properties are null.
    """
    ts = None
    if props.timestamp is not None:
        ts = dt.datetime.fromtimestamp(props.timestamp, tz=dt.UTC)
    headers = None
    if props.headers is not None:
        headers = {str(k): _header_value(v) for k, v in props.headers.items()}
    return (bytes(body), method.routing_key, method.exchange, props.message_id,
            props.correlation_id, headers, ts, bool(method.redelivered), method.delivery_tag)


class QueueConsumer:
    """One connection, one channel, one basic.consume on `queue` with prefetch = `prefetch`.

    Deliveries wait in `buffer` as (delivery_tag, row) until taken by `take`; nothing is acked
    until `ack_through`. Closing the connection (or losing it) makes the broker requeue every
    unacked delivery, marked redelivered. Source: AMQP 0-9-1 basic.qos/consume/ack, RabbitMQ
    "Consumer Acknowledgements and Publisher Confirms".
    """

    def __init__(self, options: AmqpOptions, prefetch: int, name: str) -> None:
        self.options = options
        self.queue = options.require_queue()
        self.conn = open_blocking(options, name)
        self.channel = self.conn.channel()
        self.channel.basic_qos(prefetch_count=prefetch)
        self.buffer: deque[tuple[int, tuple]] = deque()  # delivered, not yet in a batch
        self.consumer_tag: str | None = None  # set once consuming started

    def depth(self) -> int:
        """Ready messages in the queue now (queue.declare passive=True, message-count).

        Errors: pika ChannelClosedByBroker 404 if the queue does not exist."""
        return self.channel.queue_declare(self.queue, passive=True).method.message_count

    def start(self) -> None:
        """Start consuming (idempotent)."""
        if self.consumer_tag is None:
            self.consumer_tag = self.channel.basic_consume(self.queue, self._on_message)

    def _on_message(self, channel, method, props, body: bytes) -> None:
        self.buffer.append((method.delivery_tag, delivery_row(method, props, body)))

    def take(self, n: int, wait_s: float) -> list[tuple[int, tuple]]:
        """Up to `n` buffered deliveries, polling the socket for at most `wait_s` seconds.

        Returns as soon as `n` are in hand, or when, with at least one in hand, a short poll
        brings nothing new (the broker has no more ready, or the prefetch window is full)."""
        self.start()
        deadline = time.monotonic() + wait_s
        self.conn.process_data_events(time_limit=0)
        while len(self.buffer) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            before = len(self.buffer)
            self.conn.process_data_events(time_limit=min(left, QUIET_POLL_S) if before else left)
            if before and len(self.buffer) == before:
                break
        k = min(n, len(self.buffer))
        return [self.buffer.popleft() for _ in range(k)]

    def ack_through(self, delivery_tag: int) -> None:
        """basic.ack(delivery_tag, multiple=True): every delivery up to it is done."""
        self.channel.basic_ack(delivery_tag=delivery_tag, multiple=True)

    def close(self) -> None:
        """Close the connection; the broker requeues whatever is unacked."""
        if self.conn.is_open:
            self.conn.close()


class RowsPartition(InputPartition):
    """The rows of part of a micro-batch, shipped from the driver-side reader to a task."""

    def __init__(self, rows: list[tuple]) -> None:
        super().__init__(len(rows))
        self.rows = rows


@dataclass
class HeldBatch:
    """A planned micro-batch whose deliveries are held unacked until Spark commits it."""

    start: int  # offset "seq" the batch starts after
    end: int  # offset "seq" of its last row
    last_tag: int  # delivery_tag of its last delivery (acked with multiple=True)
    rows: list[tuple]  # the rows, shipped in partitions()


class AmqpStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("amqp")`, driver mode: at-least-once micro-batches from a queue.

    Offsets are {"seq": n}: n = rows handed to Spark by this query so far. latestOffset(start)
    first acks every held batch ending at or before `start` (Spark runs latestOffset for batch
    N+1 only after writing batch N to its commit log, and calls commit(N) only when batch N+1
    has data, so an idle query would otherwise hold its last batch forever), then takes up to
    the read limit (ReadMaxRows(maxMessagesPerTrigger) by default) from the consumer.
    partitions(start, end) ships the held rows; a range this process does not hold (a batch
    replayed from the offset log after a restart) yields no rows: the broker redelivers them.
    Source: Spark "Python Data Source API" (DataSourceStreamReader, SupportsTriggerAvailableNow).
    """

    def __init__(self, options: AmqpOptions) -> None:
        options.require_queue()
        self.options = options
        self.run_id = uuid.uuid4().hex[:8]  # tells this reader process apart in logs
        self._consumer: QueueConsumer | None = None  # opened lazily, in the reader process
        self._held: list[HeldBatch] = []  # planned batches, oldest first
        self._available_now_left: int | None = None  # rows left to read under availableNow

    def _get_consumer(self) -> QueueConsumer:
        if self._consumer is None:
            self._consumer = QueueConsumer(self.options, self.options.max_messages_per_trigger,
                                           f"spark-amqp-stream-reader-{self.run_id}")
        return self._consumer

    def initialOffset(self) -> dict:  # noqa: N802 (Spark's name)
        return {"seq": 0}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        return ReadMaxRows(self.options.max_messages_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        """Record the queue depth (passive declare, before consuming) as the rows to drain."""
        consumer = self._get_consumer()
        self._available_now_left = consumer.depth() + len(consumer.buffer)
        log.info("amqp reader %s: availableNow will drain %d messages", self.run_id,
                 self._available_now_left)

    def _ack_through(self, seq: int) -> None:
        done = [b for b in self._held if b.end <= seq]
        if not done:
            return
        self._held = [b for b in self._held if b.end > seq]
        assert self._consumer is not None
        try:
            self._consumer.ack_through(max(b.last_tag for b in done))
        except CONNECTION_LOST as e:
            self._connection_lost(e, [*done, *self._held])

    def _connection_lost(self, error: BaseException, unacked: list[HeldBatch]) -> None:
        """The broker requeues whatever this consumer held unacked; they come back redelivered
        (duplicates of rows Spark may already have). Drop the consumer; the next call opens a
        new one (failing over along the URI list)."""
        rows = sum(len(b.rows) for b in unacked)
        log.warning("amqp reader %s lost its connection (%s): %d delivered rows will be "
                    "redelivered", self.run_id, type(error).__name__, rows)
        if self._available_now_left is not None:
            self._available_now_left += rows + (len(self._consumer.buffer) if self._consumer
                                                else 0)
        self._held = []
        self._consumer = None

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # noqa: N802
        seq = int(start["seq"])
        self._ack_through(seq)
        if isinstance(limit, ReadMaxRows):
            n = limit.max_rows
        elif isinstance(limit, ReadAllAvailable):
            n = self.options.max_messages_per_trigger  # the prefetch window bounds a batch
        else:
            raise ValueError(f"amqp source: unsupported read limit {limit!r}")
        if self._available_now_left is not None:
            n = min(n, self._available_now_left)
        if n <= 0:
            return start
        try:
            taken = self._get_consumer().take(n, self.options.fetch_wait_ms / 1000)
        except CONNECTION_LOST as e:
            self._connection_lost(e, self._held)
            return start
        if not taken:
            return start
        if self._available_now_left is not None:
            self._available_now_left -= len(taken)
        end = seq + len(taken)
        self._held.append(HeldBatch(seq, end, taken[-1][0], [row for _, row in taken]))
        return {"seq": end}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        lo, hi = int(start["seq"]), int(end["seq"])
        rows = [r for b in self._held if lo <= b.start and b.end <= hi for r in b.rows]
        if not rows and hi > lo:
            log.warning("amqp reader %s: batch (%d, %d] is not held here (replay after a "
                        "restart); its messages come back as redeliveries", self.run_id, lo, hi)
        return [RowsPartition(rows[i:i + ROWS_PER_PARTITION])
                for i in range(0, len(rows), ROWS_PER_PARTITION)]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        yield from partition.rows  # type: ignore[attr-defined]

    def commit(self, end: dict) -> None:
        self._ack_through(int(end["seq"]))

    def stop(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            try:
                consumer.close()
            except CONNECTION_LOST as e:  # already gone: the broker requeues all the same
                log.info("amqp reader %s: close on a lost connection (%s)", self.run_id,
                         type(e).__name__)


class AmqpBatchReader(DataSourceReader):
    """`spark.read.format("amqp")`: one task drains up to maxMessagesPerTrigger messages (fewer
    if fewer are ready when it starts) and acks them (multiple=True) once Spark has taken the
    last row. If the task stops early or fails, the connection closes unacked and the broker
    requeues everything. Each action re-reads the queue: cache or write the result.
    Source: Spark "Python Data Source API" (DataSourceReader).
    """

    def __init__(self, options: AmqpOptions) -> None:
        options.require_queue()
        self.options = options

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        consumer = QueueConsumer(self.options, self.options.max_messages_per_trigger,
                                 "spark-amqp-batch-reader")
        try:
            n = min(self.options.max_messages_per_trigger, consumer.depth())
            taken = consumer.take(n, self.options.fetch_wait_ms / 1000) if n else []
            for _, row in taken:
                yield row
            if taken:
                consumer.ack_through(taken[-1][0])
        finally:
            consumer.close()
