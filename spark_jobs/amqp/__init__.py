# spark_jobs.amqp: the PySpark Python Data Source "amqp" (pure Python, pika inside, no JVM jar).
# Owns the DataSource class Spark instantiates on the driver for every read and write; the work
# is in options.py, writer.py (publishing with confirms) and reader.py (consuming with acks).
# Talked to by Spark (`spark.dataSource.register(AmqpDataSource)`, then format("amqp")).
# Must never hold connections here: the DataSource object is pickled to other processes.
"""PySpark data source `amqp`: at-least-once AMQP 0-9-1 reads and writes.

Guarantees (see docs/spark.md): writes are at-least-once (a row is confirmed by the broker or
its task fails and Spark retries it); stream reads are at-least-once (a delivery is acked only
after Spark committed the micro-batch that carried it); duplicates are bounded by the batch in
flight at a crash and carry the same `message_id`, so drop them with an idempotent sink or
`dropDuplicatesWithinWatermark`.
"""

from __future__ import annotations

import pyspark

if tuple(int(x) for x in pyspark.__version__.split(".")[:2]) < (4, 2):
    # latestOffset(start, limit), ReadLimit and SupportsTriggerAvailableNow arrived in 4.2.
    raise ImportError(f"the amqp data source needs PySpark >= 4.2, found {pyspark.__version__}")

from pyspark.sql.datasource import DataSource  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402

from spark_jobs.amqp.deadline import BatchTimeout
from spark_jobs.amqp.options import AmqpOptionError, AmqpOptions
from spark_jobs.amqp.queue_type import resolve as resolve_queue_type
from spark_jobs.amqp.reader import SCHEMA, AmqpBatchReader, AmqpStreamReader
from spark_jobs.amqp.stream_reader import AmqpStreamBatchReader, AmqpStreamOffsetReader
from spark_jobs.amqp.writer import (
    AmqpBatchWriter,
    AmqpStreamWriter,
    PublishError,
    UnroutableError,
)

__all__ = ["AmqpDataSource", "AmqpOptionError", "AmqpOptions", "BatchTimeout", "PublishError",
           "UnroutableError", "SCHEMA"]


class AmqpDataSource(DataSource):
    """The `amqp` format: batch and streaming reads from a queue, writes to an exchange.

    Options (camelCase, read from Spark's case-insensitive options object): uri (failover
    list), exchange, routingKey | routingKeyColumn, queue, maxMessagesPerTrigger (<= 65535; also
    the prefetch), fetchWaitMs, batchTimeoutMs, confirmWindow, heartbeat, messageIdPrefix,
    queueType, managementUri; for a stream queue startingOffsets, startingTimestamp,
    endingOffsets (a stream is read by offsets: replayable, exactly-once into a transactional
    sink). A reader first learns the queue's type (spark_jobs.amqp.queue_type: a stream is
    always read as a stream) and refuses options that do not apply to it, and a queueType
    that says otherwise.
    Read schema: SCHEMA (on a stream, delivery_tag holds the stream offset).
    Errors: AmqpOptionError at planning for a bad option, an option the queue's type does not
    take, or a DataFrame without `body`; BatchTimeout when the broker makes no progress for
    batchTimeoutMs.
    Source: Spark "Python Data Source API" (pyspark.sql.datasource, PySpark >= 4).
    """

    def __init__(self, options) -> None:
        super().__init__(options)
        self.amqp = AmqpOptions.from_options(options)

    @classmethod
    def name(cls) -> str:
        return "amqp"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> AmqpBatchReader | AmqpStreamBatchReader:
        if resolve_queue_type(self.amqp, streaming=False) == "stream":
            return AmqpStreamBatchReader(self.amqp)
        return AmqpBatchReader(self.amqp)

    def streamReader(  # noqa: N802 (Spark's name)
            self, schema: StructType) -> AmqpStreamReader | AmqpStreamOffsetReader:
        if resolve_queue_type(self.amqp, streaming=True) == "stream":
            return AmqpStreamOffsetReader(self.amqp)
        return AmqpStreamReader(self.amqp)

    def writer(self, schema: StructType, overwrite: bool) -> AmqpBatchWriter:
        return AmqpBatchWriter(self.amqp, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> AmqpStreamWriter:  # noqa: N802
        return AmqpStreamWriter(self.amqp, schema)
