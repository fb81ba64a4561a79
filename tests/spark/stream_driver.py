"""A Spark driver for the kill -9 test (tests/spark/test_stream_source.py): reads a stream
queue with the `amqp` source into a parquet file sink, with a checkpoint, until killed.

    python tests/spark/stream_driver.py URI QUEUE CHECKPOINT OUT
"""

from __future__ import annotations

import sys

from spark_jobs.session import build_session


def main(uri: str, queue: str, checkpoint: str, out: str) -> None:
    spark = build_session("local[2]", app_name="stream-driver")
    query = (spark.readStream.format("amqp").option("uri", uri).option("queue", queue)
             .option("queueType", "stream").option("startingOffsets", "earliest")
             .option("maxMessagesPerTrigger", 100).option("fetchWaitMs", 500).load()
             .select("body", "delivery_tag")
             .writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint)
             .trigger(processingTime="300 milliseconds").start())
    print("started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:5])
