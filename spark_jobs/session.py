# spark_jobs.session: the one place that builds a SparkSession for this project's jobs and tests.
# Owns the settings that keep local runs fast and quiet (UI off, shuffle partitions = cores,
# loopback bind, quiet log4j2, a large driver thread stack) and registers the `amqp` source.
# Talked to by publish_flights.py, delay_stats.py and tests/spark/conftest.py.
# Must never set anything that stops a job from running unchanged under spark-submit on a cluster:
# local-only settings are applied only when the master is local[...].

from __future__ import annotations

import os
import re
from pathlib import Path

from pyspark.sql import SparkSession

LOG4J2_FILE = Path(__file__).with_name("log4j2.properties")

# -Xss16m: stopping a streaming query while a Python data source call is in flight unwinds a deep
# py4j/Scala stack; the default 1 MiB (512 KiB on some JVMs) overflows it (StackOverflowError).
DRIVER_JAVA_OPTIONS = f"-Xss16m -Dlog4j2.configurationFile=file:{LOG4J2_FILE}"


def local_cores(master: str) -> int | None:
    """Number of cores of a `local[N]` / `local[N,F]` / `local[*]` / `local` master, else None."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if m is None:
        return None
    if m.group(1) in (None, ""):
        return 1
    if m.group(1) == "*":
        return os.cpu_count() or 1
    return int(m.group(1))


DEFAULT_MASTER = "local[2]"


def under_spark_submit() -> bool:
    """True when spark-submit (or pyspark shell) already started the JVM for this process."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(master: str | None = DEFAULT_MASTER, app_name: str = "spark_jobs",
                  extra: dict[str, str] | None = None) -> SparkSession:
    """Get or create the SparkSession for `master`, with the `amqp` data source registered.

    master: a Spark master URL, or None for "spark-submit's --master, else local[2]";
    `local[N]` also gets the local-run settings (UI off, N shuffle
    partitions, 127.0.0.1 bind, quiet log4j2, -Xss16m for the driver). On a cluster master only
    the app name and `extra` are set, so `spark-submit` decides the rest.
    extra: further `spark.*` settings, applied last.
    Errors: whatever SparkSession.builder raises (no Java, bad master).
    Note: driver JVM options take effect only when this call starts the JVM (python, pytest);
    under spark-submit pass `--driver-java-options "-Xss16m"` instead.
    Source: Spark configuration docs (spark.ui.enabled, spark.sql.shuffle.partitions,
    spark.driver.bindAddress, spark.driver.extraJavaOptions).
    """
    builder = SparkSession.builder.appName(app_name)
    if master is None and not under_spark_submit():
        master = DEFAULT_MASTER
    if master is not None:
        builder = builder.master(master)
    cores = local_cores(master) if master is not None else None
    if cores is not None:
        settings = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": str(cores),
            "spark.default.parallelism": str(cores),
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.extraJavaOptions": DRIVER_JAVA_OPTIONS,
            "spark.sql.adaptive.enabled": "false",
            "spark.sql.streaming.stateStore.maintenanceInterval": "600s",
            "spark.python.worker.reuse": "true",
        }
        for key, value in settings.items():
            builder = builder.config(key, value)
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    if cores is not None:
        # Python workers (data source readers/writers) import spark_jobs by name: make sure they
        # find it whatever the current directory. On a cluster ship it with --py-files instead.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        repo_root = str(Path(__file__).resolve().parent.parent)
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if repo_root not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([repo_root, *paths])
    # The data source's classes travel to Spark's Python processes by value, so no process needs
    # spark_jobs on its path: the driver-side stream reader process does not see --py-files.
    from pyspark import cloudpickle

    import spark_jobs

    cloudpickle.register_pickle_by_value(spark_jobs)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    from spark_jobs.amqp import AmqpDataSource

    spark.dataSource.register(AmqpDataSource)
    return spark
