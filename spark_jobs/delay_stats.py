# spark_jobs.delay_stats: Structured Streaming job over the flights queue: per carrier and
# scheduled hour, count, mean and p90 of departure delay; the result table goes to Parquet after
# every micro-batch, and finished aggregates are published to exchange `flights.stats`.
# Talked to by people (python -m / spark-submit) and tests (main(argv)).
# Must never count a redelivered flight twice: flights are de-duplicated on message_id
# (the `amqp` source is at-least-once) before they are aggregated.
"""Stream flights from the broker and compute departure-delay statistics.

python -m spark_jobs.delay_stats [--uri URI] [--master local[2]] [--output DIR]
"""

from __future__ import annotations

import argparse
import os
import time

from pyspark.sql import DataFrame, SparkSession

from spark_jobs.flights import (
    add_topology_args,
    declare_topology,
    delay_aggregates,
    parse_flights,
    stats_messages,
)
from spark_jobs.session import build_session


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    add_topology_args(p)
    p.add_argument("--output", default="delay_stats_out",
                   help="directory for stats.parquet and the checkpoint (default %(default)s)")
    p.add_argument("--max-per-trigger", type=int, default=50000,
                   help="messages per micro-batch, also the prefetch (<= 65535)")
    p.add_argument("--fetch-wait-ms", type=int, default=5000,
                   help="longest wait of a trigger for messages (default %(default)s)")
    p.add_argument("--processing-time", type=float, default=None, metavar="SECONDS",
                   help="run until stopped, one trigger every SECONDS, publishing interim "
                        "aggregates; default: drain the queue (availableNow) and publish the "
                        "finished aggregates")
    return p.parse_args(argv)


class StatsSink:
    """foreachBatch sink: writes the whole result table (complete mode) to Parquet each batch,
    publishes interim changes (processing-time mode) and remembers the last table."""

    def __init__(self, spark: SparkSession, args: argparse.Namespace) -> None:
        self.spark = spark
        self.args = args
        self.parquet = os.path.join(args.output, "stats.parquet")
        self.last: list = []  # rows of the latest result table, for the final publish
        self.batches = 0  # micro-batches seen
        self.schema = None  # the result table's schema, for the final publish

    def __call__(self, table: DataFrame, batch_id: int) -> None:
        rows = table.collect()  # one row per (carrier, hour): a few hundred at most
        self.batches += 1
        if not rows:
            return
        result = self.spark.createDataFrame(rows, schema=table.schema).coalesce(1)
        result.write.mode("overwrite").parquet(self.parquet)
        if self.args.processing_time is not None:
            before = {(r.carrier, r.hour): r for r in self.last}
            changed = [r for r in rows if before.get((r.carrier, r.hour)) != r]
            if changed:
                publish_stats(self.spark.createDataFrame(changed, schema=table.schema),
                              self.args, batch_id)
        self.last = rows
        self.schema = table.schema


def publish_stats(aggregates: DataFrame, args: argparse.Namespace, batch_id: int | None) -> None:
    """Publish one message per aggregate row to the stats exchange (flights.stats_messages)."""
    (stats_messages(aggregates, batch_id).write.format("amqp")
     .option("uri", args.uri)
     .option("exchange", args.stats_exchange)
     .option("routingKeyColumn", "routing_key")
     .mode("append").save())


def main(argv: list[str] | None = None) -> dict:
    """Run the job; returns {"rows", "seconds", "rows_per_s", "batches", "groups", "parquet"}.

    rows: flights read from the queue (including redeliveries) by this run."""
    args = parse_args(argv)
    spark = build_session(args.master, app_name="delay_stats")
    declare_topology(args.uri.split(",")[0], args.queue, args.stats_queue, args.exchange,
                     args.stats_exchange)
    raw = (spark.readStream.format("amqp")
           .option("uri", args.uri)
           .option("queue", args.queue)
           .option("maxMessagesPerTrigger", args.max_per_trigger)
           .option("fetchWaitMs", args.fetch_wait_ms)
           .load())
    flights = parse_flights(raw).dropDuplicates(["message_id"])
    sink = StatsSink(spark, args)
    writer = (delay_aggregates(flights).writeStream
              .outputMode("complete")
              .foreachBatch(sink)
              .option("checkpointLocation", os.path.join(args.output, "checkpoint")))
    if args.processing_time is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{args.processing_time} seconds")
    started = time.perf_counter()
    query = writer.start()
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    seconds = time.perf_counter() - started
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    if args.processing_time is None and sink.last:
        publish_stats(spark.createDataFrame(sink.last, schema=sink.schema), args, None)
    result = {"rows": rows, "seconds": round(seconds, 2),
              "rows_per_s": round(rows / seconds) if seconds else 0,
              "batches": sink.batches, "groups": len(sink.last), "parquet": sink.parquet}
    print(f"read {rows} flights from {args.queue!r} in {seconds:.1f} s "
          f"({result['rows_per_s']} rows/s, {sink.batches} micro-batches); "
          f"{len(sink.last)} aggregates in {sink.parquet}")
    return result


if __name__ == "__main__":
    main()
