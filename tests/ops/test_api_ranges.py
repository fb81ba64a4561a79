"""Sample ranges of the management API (`lengths_age` / `lengths_incr`, `msg_rates_*`,
`data_rates_*`): RabbitMQ 3.10.8 answers them with `*_details` objects
{"rate", "samples": [{"sample", "timestamp"}, ... newest first], "avg_rate", "avg"}, and a
bad range with a 400. rabbit-hole's "GET /queues with arguments" specs read
`messages_details.samples[0]`.

Every test passes against RabbitMQ 3.10.8 too (BROKER_TEST_URI / BROKER_TEST_API). Its
statistics arrive every 5 s, so the module's one queue, connection and channel are set up
once and the tests poll (bounded) until the samples show the three published messages.
Increments are multiples of 5 s (RabbitMQ's sampling interval) and divide the age: then
both brokers return age / incr + 1 samples on the incr grid."""

from __future__ import annotations

import math
import time
import uuid

import pika
import pytest

from tests.ops.conftest import EXTERNAL
from tests.polling import wait_for

PUBLISHED = 3
DETAILS_KEYS = {"rate", "samples", "avg_rate", "avg"}


@pytest.fixture(scope="module")
def setup(broker):
    """A connection (named, to find it in the API), a channel that published 3 messages
    to a queue of "/", kept open for the module: (queue, connection_name)."""
    name = f"ranges-{uuid.uuid4().hex[:8]}"
    params = pika.URLParameters(broker.url)
    params.client_properties = {"connection_name": name}
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    queue = ch.queue_declare(name, auto_delete=True).method.queue
    for _ in range(PUBLISHED):
        ch.basic_publish("", queue, b"x" * 10)
    conn.process_data_events(0)
    yield queue, name
    ch.queue_delete(queue)
    conn.close()


def now_ms() -> int:
    return int(time.time() * 1000)


def check_details(d: dict, age: int, incr: int, ceil: bool, before: int, after: int) -> list:
    """The shape RabbitMQ gives one field for a range: age/incr + 1 samples, newest first,
    incr apart, the newest the request's clock rounded to incr (up for lengths, down
    otherwise); rate from the two newest, avg_rate from the newest and oldest, avg the
    mean. Returns the sample values, newest first."""
    assert set(d) == DETAILS_KEYS, d
    samples = d["samples"]
    assert len(samples) == age // incr + 1
    stamps = [s["timestamp"] for s in samples]
    values = [s["sample"] for s in samples]
    assert all(set(s) == {"sample", "timestamp"} for s in samples)
    assert all(b - a == incr * 1000 for a, b in zip(stamps[1:], stamps, strict=False)), stamps
    assert all(t % (incr * 1000) == 0 for t in stamps)
    step = incr * 1000
    rounding = (lambda t: math.ceil(t / step) * step) if ceil else (lambda t: t // step * step)
    assert stamps[0] in {rounding(before), rounding(after)}, (stamps[0], before, after)
    assert d["rate"] == pytest.approx((values[0] - values[1]) * 1000 / (stamps[0] - stamps[1]))
    assert d["avg_rate"] == pytest.approx(
        (values[0] - values[-1]) * 1000 / (stamps[0] - stamps[-1]))
    assert d["avg"] == pytest.approx(sum(values) / len(values))
    return values


def get_timed(api, path: str) -> tuple[dict, int, int]:
    before = now_ms()
    r = api.get(path)
    after = now_ms()
    assert r.status_code == 200, r.text
    return r.json(), before, after


def test_queue_lengths_range(api, setup):
    queue, _ = setup
    path = f"/api/queues/%2F/{api.q(queue)}?lengths_age=60&lengths_incr=5"

    def newest_is_published():
        q, before, after = get_timed(api, path)
        d = q.get("messages_details") or {}
        ok = d.get("samples") and d["samples"][0]["sample"] == PUBLISHED
        return (q, before, after) if ok else None

    q, before, after = wait_for(newest_is_published, timeout=20, interval=0.5)
    values = check_details(q["messages_details"], 60, 5, True, before, after)
    assert values[0] == PUBLISHED and set(values) <= {0, PUBLISHED}
    assert check_details(q["messages_ready_details"], 60, 5, True, before, after)[0] == PUBLISHED
    assert set(check_details(q["messages_unacknowledged_details"], 60, 5, True, before,
                             after)) == {0}
    # msg_rates not asked for: message_stats keep their plain {"rate": R}
    for key, d in q.get("message_stats", {}).items():
        if key.endswith("_details"):
            assert set(d) == {"rate"}, (key, d)


def test_queue_lists_with_rabbit_hole_range(api, setup):
    """rabbit-hole: ListQueuesWithParameters(lengths_age=1800, lengths_incr=30), then
    qs[0].MessagesDetails.Samples[0]: every listed queue has the samples."""
    queue, _ = setup
    for path in ("/api/queues", "/api/queues/%2F"):
        def listed(path: str = path):
            items, before, after = get_timed(api, f"{path}?lengths_age=1800&lengths_incr=30")
            mine = [i for i in items if i["name"] == queue and i["vhost"] == "/"]
            return (items, mine[0], before, after) if mine and mine[0].get(
                "messages_details") else None

        items, mine, before, after = wait_for(listed, timeout=20, interval=0.5)
        assert all(i["messages_details"]["samples"] for i in items if "messages_details" in i)
        check_details(mine["messages_details"], 1800, 30, True, before, after)


def test_queue_msg_rates_range(api, setup):
    queue, _ = setup
    path = f"/api/queues/%2F/{api.q(queue)}?msg_rates_age=30&msg_rates_incr=5"

    def published():
        q, before, after = get_timed(api, path)
        d = q.get("message_stats", {}).get("publish_details") or {}
        ok = d.get("samples") and d["samples"][0]["sample"] == PUBLISHED
        return (q, before, after) if ok else None

    q, before, after = wait_for(published, timeout=25, interval=0.5)
    values = check_details(q["message_stats"]["publish_details"], 30, 5, False, before, after)
    assert values == sorted(values, reverse=True)  # a counter: newest first never smaller
    assert set(q["messages_details"]) == {"rate"}  # lengths not asked for


def _mine(items: list, name: str, conn_field: str) -> dict | None:
    for item in items:
        if conn_field == "client":
            if (item.get("client_properties") or {}).get("connection_name") == name:
                return item
        elif item.get("connection_details", {}).get("name") == name:
            return item
    return None


def test_connection_data_rates_range(api, setup):
    _, name = setup

    def found():
        items, before, after = get_timed(api, "/api/connections?data_rates_age=60&data_rates_incr=10")
        c = _mine(items, name, "client")
        ok = c and c.get("recv_oct_details", {}).get("samples") and \
            c["recv_oct_details"]["samples"][0]["sample"] > 0
        return (c, before, after) if ok else None

    c, before, after = wait_for(found, timeout=25, interval=0.5)
    for field in ("recv_oct", "send_oct"):
        values = check_details(c[f"{field}_details"], 60, 10, False, before, after)
        assert values == sorted(values, reverse=True)
    one, before, after = get_timed(
        api, f"/api/connections/{api.q(c['name'])}?data_rates_age=60&data_rates_incr=10")
    check_details(one["recv_oct_details"], 60, 10, False, before, after)


def test_channel_msg_rates_range(api, setup):
    _, name = setup

    def found():
        items, before, after = get_timed(api, "/api/channels?msg_rates_age=60&msg_rates_incr=10")
        conns = api.get("/api/connections").json()
        c = _mine(conns, name, "client")
        ch = _mine(items, c["name"], "channel") if c else None
        d = (ch or {}).get("message_stats", {}).get("publish_details") or {}
        ok = d.get("samples") and d["samples"][0]["sample"] == PUBLISHED
        return (ch, before, after) if ok else None

    ch, before, after = wait_for(found, timeout=25, interval=0.5)
    check_details(ch["message_stats"]["publish_details"], 60, 10, False, before, after)
    one, before, after = get_timed(
        api, f"/api/channels/{api.q(ch['name'])}?msg_rates_age=60&msg_rates_incr=10")
    check_details(one["message_stats"]["publish_details"], 60, 10, False, before, after)


def test_vhost_ranges(api, setup):
    """A vhost: msg_rates on message_stats and on messages* (RabbitMQ picks the msg_rates
    range for a vhost's lengths), data_rates on recv_oct / send_oct."""
    def found():
        v, before, after = get_timed(
            api, "/api/vhosts/%2F?msg_rates_age=60&msg_rates_incr=10"
                 "&data_rates_age=60&data_rates_incr=10")
        d = v.get("message_stats", {}).get("publish_details") or {}
        ok = d.get("samples") and d["samples"][0]["sample"] >= PUBLISHED and \
            v.get("recv_oct_details", {}).get("samples")
        return (v, before, after) if ok else None

    v, before, after = wait_for(found, timeout=25, interval=0.5)
    check_details(v["message_stats"]["publish_details"], 60, 10, False, before, after)
    check_details(v["messages_details"], 60, 10, False, before, after)
    for field in ("recv_oct", "send_oct"):
        assert isinstance(v[field], int)
        check_details(v[f"{field}_details"], 60, 10, False, before, after)
    items, before, after = get_timed(api, "/api/vhosts?msg_rates_age=60&msg_rates_incr=10")
    root = next(i for i in items if i["name"] == "/")
    check_details(root["messages_details"], 60, 10, False, before, after)


def test_overview_ranges(api, setup):
    def found():
        o, before, after = get_timed(
            api, "/api/overview?lengths_age=60&lengths_incr=5&msg_rates_age=60&msg_rates_incr=5")
        d = o.get("message_stats", {}).get("publish_details") or {}
        ok = d.get("samples") and d["samples"][0]["sample"] >= PUBLISHED and \
            o["queue_totals"].get("messages_details", {}).get("samples")
        return (o, before, after) if ok else None

    o, before, after = wait_for(found, timeout=25, interval=0.5)
    # the overview rounds lengths down (rabbit_mgmt_util:range/1), queues up (range_ceil/1)
    check_details(o["queue_totals"]["messages_details"], 60, 5, False, before, after)
    check_details(o["message_stats"]["publish_details"], 60, 5, False, before, after)


def test_one_sample_has_no_averages(api, setup):
    """age < incr: one sample, {"rate": 0.0, "samples": [...]} without avg / avg_rate."""
    o = api.get("/api/overview?lengths_age=5&lengths_incr=10").json()
    d = o["queue_totals"]["messages_details"]
    assert set(d) == {"rate", "samples"} and d["rate"] == 0.0 and len(d["samples"]) == 1


def test_no_range_no_samples(api, setup):
    """Without range parameters (or with a kind's age or incr missing or not an integer)
    no details object has samples."""
    queue, _ = setup
    for query in ("", "?lengths_age=60", "?lengths_age=abc&lengths_incr=5",
                  "?lengths_age=1.5&lengths_incr=1"):
        q = api.get(f"/api/queues/%2F/{api.q(queue)}{query}").json()
        assert "samples" not in str(q), query


BAD = [
    ("/api/queues", "lengths_age=0&lengths_incr=5", "invalid_range_parameters", "age 0, incr 5"),
    ("/api/queues/%2F", "lengths_age=60&lengths_incr=0", "invalid_range_parameters",
     "age 60, incr 0"),
    ("/api/queues", "msg_rates_age=-5&msg_rates_incr=5", "invalid_range_parameters",
     "age -5, incr 5"),
    ("/api/queues", "lengths_age=501&lengths_incr=1", "invalid_range_parameters",
     "age 501, incr 1"),
    ("/api/exchanges", "node_stats_age=1&node_stats_incr=0", "invalid_range_parameters",
     "age 1, incr 0"),
    ("/api/exchanges/%2F", "msg_rates_age=5&msg_rates_incr=0", "invalid_range_parameters",
     "age 5, incr 0"),
    ("/api/vhosts", "data_rates_age=5&data_rates_incr=0", "invalid_range_parameters",
     "age 5, incr 0"),
    ("/api/vhosts/%2F", "data_rates_age=5&data_rates_incr=0", "bad_request", "age 5, incr 0"),
    ("/api/overview", "lengths_age=5&lengths_incr=0", "bad_request", "age 5, incr 0"),
    ("/api/channels", "msg_rates_age=5&msg_rates_incr=0", "bad_request", "age 5, incr 0"),
    ("/api/connections", "data_rates_age=05&data_rates_incr=0", "bad_request", "age 5, incr 0"),
    ("/api/vhosts/%2F/connections", "data_rates_age=5&data_rates_incr=0", "bad_request",
     "age 5, incr 0"),
    ("/api/vhosts/%2F/channels", "data_rates_age=5&data_rates_incr=0", "bad_request",
     "age 5, incr 0"),
    ("/api/nodes", "lengths_age=5&lengths_incr=0", "bad_request", "age 5, incr 0"),
    ("/api/exchanges/%2F/amq.direct", "msg_rates_age=5&msg_rates_incr=0", "bad_request",
     "age 5, incr 0"),
]


@pytest.mark.parametrize(("path", "query", "error", "text"), BAD)
def test_bad_ranges(api, path, query, error, text):
    r = api.get(f"{path}?{query}")
    assert r.status_code == 400
    assert r.json() == {"error": error, "reason": f"Invalid range parameters: {text}"}


def test_bad_range_on_one_queue(api, setup):
    queue, _ = setup
    r = api.get(f"/api/queues/%2F/{api.q(queue)}?lengths_age=5&lengths_incr=0")
    assert (r.status_code, r.json()["error"]) == (400, "bad_request")
    # a missing queue is a 404 before the range is looked at
    r = api.get("/api/queues/%2F/no-such-queue-ranges?lengths_age=5&lengths_incr=0")
    assert r.status_code == 404


def test_largest_range_accepted(api, setup):
    """age div incr = 500 is the most RabbitMQ allows: 501 samples here (RabbitMQ, whose
    slides hold one sample per 5 s, gives fewer for a 1 s increment)."""
    r = api.get("/api/overview?lengths_age=500&lengths_incr=1")
    assert r.status_code == 200
    samples = r.json()["queue_totals"]["messages_details"]["samples"]
    assert samples and (EXTERNAL or len(samples) == 501)
