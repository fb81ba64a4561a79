"""The flagship pipeline on a 20 000-flight slice: publish_flights then delay_stats through the
`broker` fixture (the project's broker in-process, or BROKER_TEST_URI), checked against pandas.
"""

from __future__ import annotations

import json

import pandas as pd
from amqp_helpers import delete, depth, drain

from spark_jobs import delay_stats, publish_flights
from spark_jobs.flights import load_flights, pandas_aggregates

SLICE = 20000


def test_flights_slice_end_to_end_matches_pandas(spark, amqp_uri, unique, tmp_path):
    exchange, stats_exchange = unique("flights"), unique("flights.stats")
    queue, stats_queue = unique("flights.delay_stats"), unique("flights.stats")
    names = ["--uri", amqp_uri, "--master", "local[2]", "--exchange", exchange,
             "--stats-exchange", stats_exchange, "--queue", queue, "--stats-queue", stats_queue]
    try:
        written = publish_flights.main([*names, "--limit", str(SLICE)])
        assert written["rows"] == SLICE
        assert depth(amqp_uri, queue) == SLICE

        read = delay_stats.main([*names, "--output", str(tmp_path / "out"),
                                 "--max-per-trigger", "8000", "--fetch-wait-ms", "3000"])
        assert read["rows"] == SLICE
        assert depth(amqp_uri, queue) == 0

        expected = pandas_aggregates(load_flights(SLICE))
        got = (pd.read_parquet(read["parquet"]).sort_values(["carrier", "hour"])
               .reset_index(drop=True))
        assert read["groups"] == len(expected) == len(got)
        assert list(got.columns) == list(expected.columns)
        for col in ["carrier", "hour", "flights", "n_delay"]:
            assert got[col].tolist() == expected[col].tolist(), col
        for col in ["mean_delay", "p90_delay"]:  # same definition, same doubles
            pd.testing.assert_series_equal(got[col], expected[col], check_exact=True)

        stats = drain(amqp_uri, stats_queue, expected=len(expected))
        published = {(d["carrier"], d["hour"]): d for d in (json.loads(b) for _, _, b in stats)}
        assert len(published) == len(expected)
        for row in expected.itertuples():
            msg = published[(row.carrier, row.hour)]
            assert msg["final"] is True
            assert (msg["flights"], msg["n_delay"]) == (row.flights, row.n_delay)
            assert msg.get("mean_delay") == (None if pd.isna(row.mean_delay) else row.mean_delay)
        keys = {rk for rk, _, _ in stats}
        assert keys == {f"stats.{c}.{h}" for c, h in zip(expected.carrier, expected.hour,
                                                          strict=True)}
    finally:
        delete(amqp_uri, exchange, [queue])
        delete(amqp_uri, stats_exchange, [stats_queue])
