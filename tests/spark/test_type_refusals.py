"""A reader refuses options that do not apply to its queue's type, and a queueType option
that says otherwise (issue 33 item 2), before it reads anything: the type is learnt first
(spark_jobs.amqp.queue_type)."""

from __future__ import annotations

import pytest
from amqp_helpers import connect
from pyspark.errors import PySparkException, StreamingQueryException


def _batch_read(spark, uri: str, queue: str, **options: str) -> list:
    reader = spark.read.format("amqp").option("uri", uri).option("queue", queue)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load().collect()


@pytest.mark.parametrize("declared, options, message", [
    ("classic", {"startingOffsets": "earliest"},
     "option startingOffsets does not apply to classic queue '{q}'"),
    ("classic", {"endingOffsets": "latest"},
     "option endingOffsets does not apply to classic queue '{q}'"),
    ("classic", {"queueType": "stream"}, "option queueType is stream, but queue '{q}' is a "
                                         "classic queue"),
    ("stream", {"queueType": "classic"}, "option queueType is classic, but queue '{q}' is a "
                                         "stream queue"),
])
def test_options_that_do_not_fit_the_queue_type_are_refused(spark, amqp_uri, queues,
                                                            declared, options, message):
    queue = queues[declared]
    with pytest.raises(PySparkException) as e:
        _batch_read(spark, amqp_uri, queue, **options)
    assert message.format(q=queue) in str(e.value)
    with connect(amqp_uri) as conn:  # the refused read consumed nothing
        ok = conn.channel().queue_declare(queues["classic"], passive=True)
        assert ok.method.message_count == 1


def test_ending_offsets_are_refused_in_a_streaming_read(spark, amqp_uri, queues, tmp_path):
    queue = queues["stream"]
    query = (spark.readStream.format("amqp").option("uri", amqp_uri).option("queue", queue)
             .option("endingOffsets", "latest").load()
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    try:
        with pytest.raises(StreamingQueryException) as e:
            query.awaitTermination(60)
    finally:
        query.stop()
    assert (f"option endingOffsets does not apply to a streaming read of stream queue "
            f"'{queue}'") in str(e.value)
