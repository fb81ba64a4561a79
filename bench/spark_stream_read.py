# bench/spark_stream_read.py — `python -m bench.spark_stream_read`: how long the `amqp`
# Spark source takes to read a stream over AMQP 0-9-1 and over the stream protocol
# (option streamPort), alternated, on the same stream (issue 37 item 9).
#
# Owns: one stream filled once, the alternated timed batch reads, the JSON lines it prints.
# Talks to: the broker over AMQP 0-9-1 (pika, to fill the stream), Spark (local[2]).
# Must never: leave its stream behind, or time a read whose row count is short.
"""Spark batch reads of one stream, both transports, alternated:

    python -m bench.spark_stream_read --uri amqp://guest:guest@127.0.0.1:5672/%2F \\
        --stream-port 5552 -n 200000 --size 256 --rounds 3

Fills a fresh stream with `-n` messages of `--size` bytes (message ids and a header, as
a real producer sends), then per round times ``spark.read.format("amqp")…load().count()``
and the sum of the body lengths over AMQP 0-9-1 and over the stream protocol, each
checked to have read all `-n` rows. Prints one JSON line per read and a summary (median
seconds, rows/s, and the ratio), with the 1-minute load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid

import pika


def fill(uri: str, queue: str, n: int, size: int) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()
    body = b"x" * size
    for i in range(n):
        ch.basic_publish("", queue, body, pika.BasicProperties(
            message_id=f"m-{i}", headers={"seq": i}, delivery_mode=2))
        if i % 5000 == 0:
            conn.process_data_events(0)
    conn.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.spark_stream_read", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--uri", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    p.add_argument("--stream-port", type=int, default=5552)
    p.add_argument("-n", type=int, default=200_000, help="messages in the stream")
    p.add_argument("--size", type=int, default=256, help="body bytes")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    from pyspark.sql import functions as F

    from spark_jobs.session import build_session

    spark = build_session("local[2]", app_name="bench-spark-stream-read")
    queue = f"bench-spark-stream-{uuid.uuid4().hex[:8]}"
    fill(a.uri, queue, a.n, a.size)
    times: dict[str, list[float]] = {"amqp": [], "stream": []}
    try:
        for rnd in range(a.rounds):
            for via in ("amqp", "stream"):
                reader = (spark.read.format("amqp").option("uri", a.uri).option("queue", queue)
                          .option("queueType", "stream")
                          .option("maxMessagesPerTrigger", 65535))
                if via == "stream":
                    reader = reader.option("streamPort", str(a.stream_port))
                load = os.getloadavg()[0]
                t0 = time.perf_counter()
                row = reader.load().agg(F.count("*").alias("rows"),
                                        F.sum(F.length("body")).alias("bytes")).collect()[0]
                seconds = time.perf_counter() - t0
                if row["rows"] != a.n:
                    raise SystemExit(f"{via}: read {row['rows']} rows of {a.n}")
                times[via].append(seconds)
                print(json.dumps({"round": rnd, "via": via, "rows": row["rows"],
                                  "seconds": round(seconds, 2),
                                  "rows_per_s": round(a.n / seconds), "load_before": load}),
                      flush=True)
    finally:
        conn = pika.BlockingConnection(pika.URLParameters(a.uri))
        conn.channel().queue_delete(queue)
        conn.close()
        spark.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({"summary": {k: {"median_s": round(v, 2), "rows_per_s": round(a.n / v)}
                                  for k, v in med.items()},
                      "stream_over_amqp_speedup": round(med["amqp"] / med["stream"], 2),
                      "n": a.n, "size": a.size, "load_end": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
