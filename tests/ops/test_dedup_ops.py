"""Prometheus counts what deduplication dropped (issue 50): per exchange and per queue on
/metrics/per-object, summed on /metrics."""

from __future__ import annotations

import time
import uuid

import pika
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.usefixtures("ours_only")


def _values(url: str, name: str) -> dict:
    text = requests.get(url, timeout=10).text
    return {(s.labels.get("exchange") or s.labels.get("queue")): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name in (name, name + "_total")}


def test_prometheus_counts_duplicates(metrics_url, ch) -> None:
    x, q = f"opsdd-{uuid.uuid4().hex[:8]}", f"opsddq-{uuid.uuid4().hex[:8]}"
    ch.exchange_declare(x, "x-message-deduplication", arguments={"x-cache-size": 5})
    ch.queue_declare(q, arguments={"x-message-deduplication": True})
    try:
        props = pika.BasicProperties(headers={"x-deduplication-header": "k"})
        for _ in range(3):
            ch.basic_publish(x, "", b"m", props)
            ch.basic_publish("", q, b"m", props)
        deadline = time.monotonic() + 10
        while True:
            per_x = _values(metrics_url + "/metrics/per-object",
                            "pybroker_exchange_messages_deduplicated")
            per_q = _values(metrics_url + "/metrics/per-object",
                            "pybroker_queue_messages_deduplicated")
            if (per_x.get(x), per_q.get(q)) == (2, 2) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert (per_x.get(x), per_q.get(q)) == (2, 2)
        total = _values(metrics_url + "/metrics", "pybroker_exchange_messages_deduplicated")
        assert total.get(None, 0) >= 2
    finally:
        ch.exchange_delete(x)
        ch.queue_delete(q)
