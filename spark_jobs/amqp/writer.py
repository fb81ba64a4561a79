# spark_jobs.amqp.writer: the `amqp` sink, batch (`df.write`) and streaming (`writeStream`).
# Owns ConfirmingPublisher: one task's rows published with publisher confirms, a window of
# messages in flight, mandatory=True, deterministic message ids, resends of nacked messages and
# of unconfirmed ones after a connection loss (failing over to the next URI).
# Talked to by Spark executors (write()) and the driver (commit/abort, which only log).
# Must never drop a row silently: a row is either confirmed by the broker or the task fails;
# never logs message bodies or credentials.

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import pika
import pika.exceptions
from pika.spec import Basic
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from spark_jobs.amqp.options import AmqpOptionError, AmqpOptions, redact

log = logging.getLogger("spark_jobs.amqp")

MAX_RESENDS = 10  # nacks of one message before the task gives up
MAX_RECONNECTS = 5  # connection losses one task survives (each fails over to the next URI)


class UnroutableError(RuntimeError):
    """The broker returned a mandatory message (basic.return 312 NO_ROUTE): the task fails."""


class PublishError(RuntimeError):
    """The task could not get its messages confirmed (channel closed, too many nacks/losses)."""


@dataclass(slots=True)
class OutMessage:
    """One message to publish: routing key, body bytes and AMQP properties."""

    routing_key: str
    body: bytes
    properties: pika.BasicProperties
    resends: int = 0  # times this message was nacked or lost in flight and published again


@dataclass
class PublishStats(WriterCommitMessage):
    """A task's result, sent to the driver's commit(): messages confirmed and resends done."""

    confirmed: int = 0
    resent: int = 0
    reconnects: int = 0


class ConfirmingPublisher:
    """Publishes an iterator of OutMessage on one channel in confirm mode (pika SelectConnection).

    At most `options.confirm_window` messages await a basic.ack at any time; a basic.nack puts the
    message back to be published again (up to MAX_RESENDS); a lost connection puts every
    unconfirmed message back and reconnects to the next URI (up to MAX_RECONNECTS). Every
    message is published with mandatory=True: a basic.return raises UnroutableError.
    Source: RabbitMQ "Consumer Acknowledgements and Publisher Confirms" guide; pika asynchronous
    publisher example (SelectConnection, confirm_delivery with an ack_nack_callback).
    """

    def __init__(self, options: AmqpOptions) -> None:
        self.options = options
        self.params = options.connection_parameters("spark-amqp-writer")
        self.stats = PublishStats()
        self._source: Iterator[OutMessage] = iter(())
        self._source_done = False
        self._resend: deque[OutMessage] = deque()  # nacked or lost in flight, published first
        self._pending: dict[int, OutMessage] = {}  # msg_seq_no -> message awaiting a confirm
        self._seq = 0  # msg_seq_no of the last publish on the current channel
        self._error: BaseException | None = None  # set once; ends the run
        self._closing = False  # we asked the connection to close (done or failed)
        self._attempt = 0  # connection attempts made, for failover order
        self._conn: pika.SelectConnection | None = None
        self._channel = None

    # -- driving ------------------------------------------------------------------------------
    def publish_all(self, messages: Iterator[OutMessage]) -> PublishStats:
        """Publish every message and wait for all confirms; returns the counts.

        Errors: UnroutableError (basic.return), PublishError (channel closed by the broker, e.g.
        404 no exchange; too many nacks; connection lost more than MAX_RECONNECTS times).
        """
        self._source = iter(messages)
        self._connect()
        while True:
            assert self._conn is not None
            self._conn.ioloop.start()  # returns when _on_connection_closed stops it
            if self._error is not None:
                raise self._error
            if self._done():
                return self.stats
            self._reconnect_or_fail(PublishError("connection closed before all confirms"))

    def _connect(self) -> None:
        params = self.params[self._attempt % len(self.params)]
        self._attempt += 1
        self._closing = False
        self._conn = pika.SelectConnection(
            params,
            on_open_callback=self._on_connection_open,
            on_open_error_callback=self._on_open_error,
            on_close_callback=self._on_connection_closed,
        )

    def _reconnect_or_fail(self, reason: BaseException) -> None:
        if self.stats.reconnects >= MAX_RECONNECTS * len(self.params):
            raise PublishError(f"giving up after {self.stats.reconnects} reconnects: {reason}")
        # Everything unconfirmed may or may not have reached a queue: publish it again
        # (same message_id, so consumers can drop the duplicate).
        lost = [self._pending[k] for k in sorted(self._pending)]
        self._pending.clear()
        for msg in reversed(lost):
            msg.resends += 1
            self._resend.appendleft(msg)
        self.stats.resent += len(lost)
        self.stats.reconnects += 1
        time.sleep(min(0.1 * self.stats.reconnects, 2.0))  # back off before the next broker
        self._connect()

    def _done(self) -> bool:
        return self._source_done and not self._resend and not self._pending

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        self._close()

    def _close(self) -> None:
        if self._conn is not None and not self._closing:
            self._closing = True
            if self._conn.is_open:
                self._conn.close()
            else:
                self._conn.ioloop.stop()

    # -- connection and channel callbacks ---------------------------------------------------
    def _on_open_error(self, conn: pika.SelectConnection, err: BaseException) -> None:
        uri = redact(self.options.uris[(self._attempt - 1) % len(self.options.uris)])
        log.warning("amqp publisher could not connect to %s: %s", uri, type(err).__name__)
        if isinstance(err, pika.exceptions.ProbableAuthenticationError):
            self._error = PublishError(f"authentication refused by {uri}")
        conn.ioloop.stop()

    def _on_connection_open(self, conn: pika.SelectConnection) -> None:
        conn.channel(on_open_callback=self._on_channel_open)

    def _on_connection_closed(self, conn: pika.SelectConnection, reason: BaseException) -> None:
        self._channel = None
        conn.ioloop.stop()

    def _on_channel_open(self, channel) -> None:
        self._channel = channel
        channel.add_on_return_callback(self._on_return)
        channel.add_on_close_callback(self._on_channel_closed)
        channel.confirm_delivery(ack_nack_callback=self._on_confirm,
                                 callback=self._on_confirm_select_ok)

    def _on_channel_closed(self, channel, reason: BaseException) -> None:
        self._channel = None
        # Only a channel the broker closed on purpose (404 no exchange, 406, 403) fails the
        # task; a channel that goes down with its connection is handled by the reconnect.
        if not self._closing and isinstance(reason, pika.exceptions.ChannelClosedByBroker):
            self._fail(PublishError(f"channel closed by the broker: {reason}"))

    def _on_confirm_select_ok(self, _frame) -> None:
        self._seq = 0
        self._pump()

    def _on_return(self, channel, method: Basic.Return, props, body: bytes) -> None:
        self._fail(UnroutableError(
            f"message {props.message_id!r} returned by the broker: {method.reply_code} "
            f"{method.reply_text} (exchange {method.exchange!r}, "
            f"routing key {method.routing_key!r})"))

    def _on_confirm(self, frame) -> None:
        method = frame.method
        tag = method.delivery_tag
        nacked = isinstance(method, Basic.Nack)
        for msg in self._pop_confirmed(tag, method.multiple):
            if not nacked:
                self.stats.confirmed += 1
                continue
            msg.resends += 1
            if msg.resends > MAX_RESENDS:
                self._fail(PublishError(f"message {msg.properties.message_id!r} nacked "
                                        f"{msg.resends} times"))
                return
            self.stats.resent += 1
            self._resend.append(msg)
        self._pump()

    def _pop_confirmed(self, tag: int, multiple: bool) -> list[OutMessage]:
        # _pending is keyed by increasing msg_seq_no in insertion order, so the messages a
        # multiple=True confirm covers are a prefix: pop from the front instead of scanning.
        if not multiple:
            msg = self._pending.pop(tag, None)
            return [] if msg is None else [msg]
        out = []
        while self._pending:
            first = next(iter(self._pending))
            if first > tag:
                break
            out.append(self._pending.pop(first))
        return out

    def _next_message(self) -> OutMessage | None:
        if self._resend:
            return self._resend.popleft()
        if self._source_done:
            return None
        try:
            return next(self._source)
        except StopIteration:
            self._source_done = True
            return None

    def _pump(self) -> None:
        """Publish until the window is full or nothing is left; close when all are confirmed."""
        if self._error is not None or self._channel is None or self._closing:
            return
        window = self.options.confirm_window
        while len(self._pending) < window:
            msg = self._next_message()
            if msg is None:
                break
            self._channel.basic_publish(self.options.exchange, msg.routing_key, msg.body,
                                        msg.properties, mandatory=True)
            self._seq += 1
            self._pending[self._seq] = msg
        if self._done():
            self._close()


# -- rows to messages -------------------------------------------------------------------------
def check_write_schema(schema: StructType, options: AmqpOptions) -> None:
    """Check the DataFrame has what the writer needs, on the driver before any task runs.

    Required: `body` (string or binary). Optional: the `routingKeyColumn` column (string),
    `message_id`, `correlation_id` (strings), `headers` (map<string,string>).
    Errors: AmqpOptionError naming the column.
    """
    fields = {f.name: f.dataType for f in schema.fields}
    if not isinstance(fields.get("body"), StringType | BinaryType):
        raise AmqpOptionError("the amqp writer needs a column `body` of type string or binary "
                              "(e.g. to_json(struct(*)) AS body)")
    for name in filter(None, [options.routing_key_column, "message_id", "correlation_id"]):
        if name in fields and not isinstance(fields[name], StringType):
            raise AmqpOptionError(f"column {name} must be a string")
    if options.routing_key_column and options.routing_key_column not in fields:
        raise AmqpOptionError(f"routingKeyColumn {options.routing_key_column!r} is not a column")
    if "headers" in fields and not isinstance(fields["headers"], MapType):
        raise AmqpOptionError("column headers must be a map<string,string>")


def task_identity(fallback_prefix: str) -> tuple[str, str, int]:
    """(prefix, batch, partition) naming this task's messages; stable across task retries.

    In a streaming query: the query id and micro-batch id (Spark's local properties
    `sql.streaming.queryId`, `streaming.sql.batchId`), stable across restarts from the
    checkpoint. In a batch write: `fallback_prefix` (messageIdPrefix, or one uuid per write) and
    "b". Source: pyspark TaskContext.getLocalProperty, Spark MicroBatchExecution.
    """
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return fallback_prefix, "b", 0
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    query = ctx.getLocalProperty("sql.streaming.queryId")
    if batch is not None and query is not None:
        return query, batch, ctx.partitionId()
    return fallback_prefix, "b", ctx.partitionId()


def batches_to_messages(batches: Iterator, options: AmqpOptions, prefix: str, batch: str,
                        partition: int) -> Iterator[OutMessage]:
    """Turn Arrow RecordBatches of the task's rows into OutMessages, column-wise (much cheaper
    than Row objects); message_id `<prefix>:<batch>:<partition>:<row>` unless the row has its
    own non-null `message_id`. Errors: PublishError for a null body or routing key."""
    rk_col = options.routing_key_column
    position = 0
    now = int(time.time())
    for rb in batches:
        n = rb.num_rows
        names = rb.schema.names

        def column(name: str, n: int = n, rb=rb, names=names) -> list:
            return rb.column(names.index(name)).to_pylist() if name in names else [None] * n

        bodies = column("body")
        keys = column(rk_col) if rk_col else [options.routing_key] * n
        ids, corr, headers = column("message_id"), column("correlation_id"), column("headers")
        for i in range(n):
            body = bodies[i]
            if body is None:
                raise PublishError(f"row {position} of partition {partition} has a null body")
            if keys[i] is None:
                raise PublishError(f"row {position} of partition {partition}: null routing key")
            h = headers[i]
            props = pika.BasicProperties(
                delivery_mode=2,
                message_id=ids[i] or f"{prefix}:{batch}:{partition}:{position}",
                correlation_id=corr[i],
                headers=dict(h) if h else None,  # Arrow gives a map as [(key, value), ...]
                timestamp=now,
            )
            yield OutMessage(keys[i], body.encode("utf-8") if isinstance(body, str) else body,
                             props)
            position += 1


def _write_task(options: AmqpOptions, fallback_prefix: str, batches: Iterator) -> PublishStats:
    prefix, batch, partition = task_identity(fallback_prefix)
    publisher = ConfirmingPublisher(options)
    return publisher.publish_all(batches_to_messages(batches, options, prefix, batch, partition))


def _log_commit(kind: str, messages: list, batch_id: int | None = None) -> None:
    # Duck-typed: classes pickled by value come back as other class objects than ours.
    def total(field: str) -> int:
        return sum(getattr(m, field, 0) for m in messages if m is not None)

    log.info("amqp %s write committed%s: %d confirmed, %d resent, %d reconnects", kind,
             "" if batch_id is None else f" (batch {batch_id})", total("confirmed"),
             total("resent"), total("reconnects"))


class AmqpBatchWriter(DataSourceArrowWriter):
    """`df.write.format("amqp")`: each task publishes its partition with confirms (see module).

    Message ids: messageIdPrefix (default: a uuid drawn once per write on the driver), "b",
    partition id, row position. Errors in a task fail the write (UnroutableError, PublishError,
    AmqpConnectError). Source: Spark "Python Data Source API" (DataSourceWriter).
    """

    def __init__(self, options: AmqpOptions, schema: StructType) -> None:
        check_write_schema(schema, options)
        self.options = options
        self.prefix = options.message_id_prefix or uuid.uuid4().hex

    def write(self, iterator: Iterator) -> PublishStats:
        return _write_task(self.options, self.prefix, iterator)

    def commit(self, messages: list) -> None:
        _log_commit("batch", messages)

    def abort(self, messages: list) -> None:
        log.warning("amqp batch write aborted; confirmed messages stay published")


class AmqpStreamWriter(DataSourceStreamArrowWriter):
    """`writeStream.format("amqp")`: as AmqpBatchWriter, message ids from the query id and
    micro-batch id, so a batch replayed after a restart republishes the same ids."""

    def __init__(self, options: AmqpOptions, schema: StructType) -> None:
        check_write_schema(schema, options)
        self.options = options
        self.prefix = options.message_id_prefix or uuid.uuid4().hex

    def write(self, iterator: Iterator) -> PublishStats:
        return _write_task(self.options, self.prefix, iterator)

    def commit(self, messages: list, batchId: int) -> None:  # noqa: N803 (Spark's name)
        _log_commit("stream", messages, batchId)

    def abort(self, messages: list, batchId: int) -> None:  # noqa: N803
        log.warning("amqp stream write of batch %d aborted; confirmed messages stay", batchId)
