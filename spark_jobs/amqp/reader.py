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
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import pika
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

from spark_jobs.amqp.connect import AmqpConnectError, open_blocking
from spark_jobs.amqp.deadline import BatchTimeout
from spark_jobs.amqp.options import AmqpOptions

log = logging.getLogger("spark_jobs.amqp")

# Columns of every `amqp` read, in order (see delivery_row for their sources).
SCHEMA = ("body binary, routing_key string, exchange string, message_id string, "
          "correlation_id string, headers map<string,string>, timestamp timestamp, "
          "redelivered boolean, delivery_tag long")
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


class ConsumerLost(ConnectionError):
    """The consumer's connection or channel is gone; its unacked deliveries are requeued.

    fatal: the broker closed the channel on purpose (404 no queue, 406, 403): reconnecting
    would fail the same way, so the query fails instead."""

    def __init__(self, message: str, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


class QueueConsumer:
    """One connection, one channel, one basic.consume on `queue` with prefetch = `prefetch`,
    driven by its own thread so heartbeats are answered while Spark runs a long micro-batch
    (the reader process is otherwise idle between calls, and a broker closes a connection
    silent for two heartbeat intervals).

    Deliveries wait in `buffer` as (delivery_tag, row) until taken by `take`; nothing is acked
    until `ack_through`. Closing the connection (or losing it) makes the broker requeue every
    unacked delivery, marked redelivered. pika's BlockingConnection is not thread-safe: only the
    I/O thread touches it; other threads hand it work with add_callback_threadsafe.
    Every request (connect, channel, basic.qos, queue.declare, basic.consume, basic.ack) must
    be done within batchTimeoutMs: pika's blocking RPCs have no timeout of their own, so a
    paused broker would otherwise hold the caller until heartbeats notice (never with
    heartbeat 0).
    Errors: ConsumerLost from any method once the connection or channel is gone; BatchTimeout
    when a request is not done in time (the consumer is unusable afterwards).
    Source: AMQP 0-9-1 basic.qos/consume/ack, RabbitMQ "Consumer Acknowledgements and Publisher
    Confirms" and "Detecting Dead TCP Connections with Heartbeats", pika threading notes.
    """

    def __init__(self, options: AmqpOptions, prefetch: int, name: str) -> None:
        self.options = options
        self.queue = options.require_queue()
        self.prefetch = prefetch
        self.name = name
        self.buffer: deque[tuple[int, tuple]] = deque()  # delivered, not yet in a batch
        self.arrived = threading.Condition()  # notified on every delivery and on failure
        self.error: BaseException | None = None  # why the I/O thread stopped, if it failed
        self._stopping = False  # close() asked the I/O thread to finish
        self._consuming = False  # basic.consume issued
        self._ready = threading.Event()  # the I/O thread opened the channel (or failed)
        self._conn: pika.BlockingConnection | None = None
        self._channel = None
        self._thread = threading.Thread(target=self._run, name=f"amqp-{name}", daemon=True)
        self._thread.start()
        # connecting is bounded by batchTimeoutMs (pika's stack_timeout), the channel and
        # basic.qos by another batchTimeoutMs
        if not self._ready.wait(2 * options.batch_timeout_s):
            self._timed_out("channel.open-ok and basic.qos-ok")
        if self._conn is None:
            assert self.error is not None
            raise self.error

    # -- the I/O thread -------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._conn = open_blocking(self.options, self.name, self.options.batch_timeout_s)
        except AmqpConnectError as e:
            self.error = e
            self._ready.set()
            return
        try:
            self._channel = self._conn.channel()
            self._channel.basic_qos(prefetch_count=self.prefetch)
            self._ready.set()
            while not self._stopping:
                self._conn.process_data_events(time_limit=0.1)
        except pika.exceptions.AMQPError as e:
            self._fail(e)
        finally:
            self._ready.set()
            if self._conn.is_open:
                try:
                    self._conn.close()
                except pika.exceptions.AMQPError as e:
                    log.info("amqp %s: close failed (%s)", self.name, type(e).__name__)

    def _fail(self, error: BaseException) -> None:
        with self.arrived:
            self.error = error
            self.arrived.notify_all()

    def _on_message(self, channel, method, props, body: bytes) -> None:
        with self.arrived:
            self.buffer.append((method.delivery_tag, delivery_row(method, props, body)))
            self.arrived.notify_all()

    def _timed_out(self, what: str) -> None:
        self._stopping = True  # the I/O thread ends (and closes) once its RPC returns, if ever
        error = BatchTimeout(
            f"amqp source: no progress for {self.options.batch_timeout_s:g} s (batchTimeoutMs) "
            f"on queue '{self.queue}' ({self.options.describe()}): waiting for {what}")
        self._fail(error)
        raise error

    def _call(self, fn, what: str):
        """Run fn() on the I/O thread and return its result (ConsumerLost if it failed,
        BatchTimeout if it is not done within batchTimeoutMs; `what` names it then)."""
        self._check()
        done = threading.Event()
        box: list = []

        def job() -> None:
            try:
                box.append(fn())
            except pika.exceptions.AMQPError as e:
                self._fail(e)
            finally:
                done.set()

        assert self._conn is not None
        try:
            self._conn.add_callback_threadsafe(job)
        except pika.exceptions.AMQPError as e:
            raise ConsumerLost(f"{self.name}: {type(e).__name__}") from e
        deadline = time.monotonic() + self.options.batch_timeout_s
        while not done.wait(min(0.5, max(0.0, deadline - time.monotonic()))):
            if not self._thread.is_alive():
                break
            if time.monotonic() >= deadline:
                self._timed_out(what)
        self._check()
        return box[0] if box else None

    def _check(self) -> None:
        if isinstance(self.error, BatchTimeout):
            raise self.error
        if self.error is not None:
            fatal = isinstance(self.error, pika.exceptions.ChannelClosedByBroker)
            raise ConsumerLost(f"{self.name}: {type(self.error).__name__} {self.error}", fatal)
        if not self._thread.is_alive():
            raise ConsumerLost(f"{self.name}: closed")

    # -- called from the reader -----------------------------------------------------------------
    def depth(self) -> int:
        """Ready messages in the queue now (queue.declare passive=True, message-count).

        Errors: ConsumerLost (wrapping ChannelClosedByBroker 404 when there is no queue)."""
        ok = self._call(lambda: self._channel.queue_declare(self.queue, passive=True),
                        "queue.declare-ok (passive)")
        return ok.method.message_count

    def start(self) -> None:
        """Start consuming (idempotent)."""
        if not self._consuming:
            self._call(lambda: self._channel.basic_consume(self.queue, self._on_message),
                       "basic.consume-ok")
            self._consuming = True

    def take(self, n: int, wait_s: float) -> list[tuple[int, tuple]]:
        """Up to `n` buffered deliveries, waiting at most `wait_s` seconds for them.

        Returns as soon as `n` are in hand, or when, with at least one in hand, QUIET_POLL_S
        pass without a new one (the broker has no more ready, or the prefetch window is full).
        """
        self.start()
        deadline = time.monotonic() + wait_s
        with self.arrived:
            while len(self.buffer) < n and self.error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                before = len(self.buffer)
                self.arrived.wait(min(left, QUIET_POLL_S) if before else left)
                if before and len(self.buffer) == before:
                    break
            self._check()
            k = min(n, len(self.buffer))
            return [self.buffer.popleft() for _ in range(k)]

    def ack_through(self, delivery_tag: int) -> None:
        """basic.ack(delivery_tag, multiple=True): every delivery up to it is done.

        Returns once the I/O thread has written the ack to the socket: Spark may destroy the
        reader process right after the call that acks (end of an availableNow query), and an
        ack still queued in this process would be lost (found by the availableNow test)."""
        self._call(lambda: self._channel.basic_ack(delivery_tag=delivery_tag, multiple=True),
                   "basic.ack to be written")

    def close(self) -> None:
        """Close the connection (after any ack already handed over); the broker requeues
        whatever is unacked. Idempotent; never raises for a connection already lost."""
        if self._thread.is_alive() and self._conn is not None and not self._stopping:
            def stop() -> None:
                self._stopping = True

            try:
                self._conn.add_callback_threadsafe(stop)
            except pika.exceptions.AMQPError:
                self._stopping = True
        # An I/O thread stuck in an RPC the broker never answered is left behind (a daemon).
        self._thread.join(timeout=0.5 if isinstance(self.error, BatchTimeout) else 30)


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
    the read limit (ReadMaxRows(maxMessagesPerTrigger) by default) from the consumer; a trigger
    that takes nothing makes one round trip (passive queue.declare), so that a broker that
    stopped answering fails the query with BatchTimeout after batchTimeoutMs.
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
        except ConsumerLost as e:
            if e.fatal:
                raise
            self._connection_lost(e, [*done, *self._held])

    def _connection_lost(self, error: BaseException, unacked: list[HeldBatch]) -> None:
        """The broker requeues whatever this consumer held unacked; they come back redelivered
        (duplicates of rows Spark may already have). Drop the consumer; the next call opens a
        new one (failing over along the URI list)."""
        rows = sum(len(b.rows) for b in unacked)
        log.warning("amqp reader %s lost its connection (%s): %d delivered rows will be "
                    "redelivered", self.run_id, type(error).__name__, rows)
        if self._available_now_left is not None:
            # Held rows were counted as read; they are back in the queue. (Buffered, untaken
            # deliveries were never counted, so they need nothing.)
            self._available_now_left += rows
        self._held = []
        if self._consumer is not None:
            self._consumer.close()
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
            consumer = self._get_consumer()
            taken = consumer.take(n, self.options.fetch_wait_ms / 1000)
            if not taken:
                # A paused broker looks like an empty queue to a consumer: ask it something,
                # so that it fails the query after batchTimeoutMs instead of idling for ever.
                consumer.depth()
        except ConsumerLost as e:
            if e.fatal:
                raise
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
            consumer.close()  # the broker requeues whatever is still unacked


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
