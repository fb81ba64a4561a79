"""What an operator sees of an x-delayed-message exchange (issue 50): the count and next due
time in GET /api/exchanges (`messages_delayed`, as RabbitMQ 3.13's plugin reports it), a
browse of what waits, `brokerctl list_exchanges ... messages_delayed`, and Prometheus."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pika
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.usefixtures("ours_only")


def _samples(url: str, name: str) -> list:
    text = requests.get(url, timeout=10).text
    return [s for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name in (name, name + "_total")]


@pytest.fixture
def held(broker, ch):
    """A delayed exchange holding three messages due in 50, 60 and 70 s."""
    x = f"opsdx-{uuid.uuid4().hex[:8]}"
    ch.exchange_declare(x, "x-delayed-message", arguments={"x-delayed-type": "topic"})
    for delay, body in ((70_000, b"c"), (50_000, b"a"), (60_000, b"b")):
        ch.basic_publish(x, "k.1", body, pika.BasicProperties(headers={"x-delay": delay}))
    yield x
    ch.exchange_delete(x)


def test_the_api_browses_what_waits_in_due_order(api, held) -> None:
    got = api.get(f"/api/exchanges/%2F/{held}/delayed?count=2")
    assert got.status_code == 200
    rows = got.json()
    assert [(r["payload"], r["delay"], r["routing_key"]) for r in rows] == [
        ("a", 50_000, "k.1"), ("b", 60_000, "k.1")]
    assert rows[0]["due"] < rows[1]["due"]
    assert rows[0]["properties"]["headers"] == {"x-delay": -50_000}  # as it will be delivered
    deadline = time.monotonic() + 10  # with --workers N the count comes with a report
    while api.get(f"/api/exchanges/%2F/{held}").json()["messages_delayed"] != 3:
        assert time.monotonic() < deadline, "the three are not all still there"
        time.sleep(0.2)
    assert api.get("/api/exchanges/%2F/amq.direct/delayed").status_code == 400
    assert api.get(f"/api/exchanges/%2F/{held}/delayed?count=5000").status_code == 400


def test_brokerctl_lists_the_count(api_base, held) -> None:
    deadline = time.monotonic() + 10  # with --workers N the count comes with a report
    while True:
        out = subprocess.run([sys.executable, "-m", "broker.ctl", "--api", api_base, "-q",
                              "--no-table-headers", "list_exchanges", "name", "type",
                              "messages_delayed"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        if (f"{held}\tx-delayed-message\t3" in out.stdout.splitlines()
                or time.monotonic() > deadline):
            break
        time.sleep(0.3)
    assert f"{held}\tx-delayed-message\t3" in out.stdout.splitlines()


def test_prometheus_counts_per_exchange_and_in_total(metrics_url, held) -> None:
    deadline = time.monotonic() + 10
    while True:
        per = {s.labels.get("exchange"): s.value for s in _samples(
            metrics_url + "/metrics/per-object", "pybroker_exchange_messages_delayed")}
        if per.get(held) == 3 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert per.get(held) == 3
    total = _samples(metrics_url + "/metrics", "pybroker_exchange_messages_delayed")
    assert total and total[0].value >= 3
    published = {s.labels.get("exchange"): s.value for s in _samples(
        metrics_url + "/metrics/per-object", "pybroker_exchange_messages_delayed_published")}
    assert published.get(held) == 3


def test_prometheus_shows_how_late_due_messages_went_out(metrics_url, ch) -> None:
    """`pybroker_exchange_delayed_lateness_seconds`: one observation per due message sent,
    how long after its due time (a histogram, per exchange and summed)."""
    x = f"opslate-{uuid.uuid4().hex[:8]}"
    ch.exchange_declare(x, "x-delayed-message", arguments={"x-delayed-type": "fanout"})
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, x)
    for _ in range(5):
        ch.basic_publish(x, "", b"m", pika.BasicProperties(headers={"x-delay": 200}))
    deadline = time.monotonic() + 15
    while ch.queue_declare(q, passive=True).method.message_count < 5:
        assert time.monotonic() < deadline, "the five did not come due"
        time.sleep(0.1)
    while True:
        per = [s for s in _samples(metrics_url + "/metrics/per-object",
                                   "pybroker_exchange_delayed_lateness_seconds_count")
               if s.labels.get("exchange") == x]
        if (per and per[0].value == 5) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert per and per[0].value == 5
    buckets = {s.labels["le"]: s.value for s in _samples(
        metrics_url + "/metrics/per-object", "pybroker_exchange_delayed_lateness_seconds_bucket")
        if s.labels.get("exchange") == x}
    assert buckets["+Inf"] == 5 and buckets["1.0"] == 5  # none a second late
    total = _samples(metrics_url + "/metrics", "pybroker_exchange_delayed_lateness_seconds_count")
    assert total and total[0].value >= 5
    ch.exchange_delete(x)
