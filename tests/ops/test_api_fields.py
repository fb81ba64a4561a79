"""Fields of the management API's objects that RabbitMQ 3.10.8 has and tools read
(rabbit_mgmt_format / rabbit_mgmt_db): an exchange's publish_in / publish_out, a queue's
own message_stats keys with get_empty, consumer_details and the empty rate lists of the
single-object views, a connection's send_cnt and TLS fields, a vhost's recv_oct /
send_oct, the overview's and the node's churn counters. Every test also passes against
RabbitMQ 3.10.8 (BROKER_TEST_URI / BROKER_TEST_API), whose statistics appear at its next
emission (up to 5 s), so values are waited for."""

from __future__ import annotations

import uuid

import pika

from tests.polling import wait_for

STATS_WAIT = 15.0  # s: RabbitMQ emits statistics every collect_statistics_interval (5 s)


def uniq(prefix: str) -> str:
    return f"fields-{prefix}-{uuid.uuid4().hex[:8]}"


def _conn(url: str, name: str | None = None) -> pika.BlockingConnection:
    params = pika.URLParameters(url)
    if name is not None:
        params.client_properties = {"connection_name": name}
    return pika.BlockingConnection(params)


def test_an_exchange_counts_publish_in_and_publish_out(api, broker):
    x, q1, q2 = uniq("x"), uniq("q1"), uniq("q2")
    with _conn(broker.url) as conn:
        ch = conn.channel()
        ch.exchange_declare(x, "topic")
        for q in (q1, q2):
            ch.queue_declare(q)
            ch.queue_bind(q, x, "a.#")
        ch.confirm_delivery()
        for _ in range(5):
            ch.basic_publish(x, "a.b", b"m")  # to both queues
        ch.basic_publish(x, "z", b"m")  # unroutable: in, not out
        try:
            def stats() -> dict:
                return api.get(f"/api/exchanges/%2F/{x}").json().get("message_stats", {})
            # RabbitMQ emits the two counts separately: wait for both
            wait_for(lambda: (stats().get("publish_in"), stats().get("publish_out")) == (6, 10),
                     timeout=STATS_WAIT)
            ms = stats()
            assert (ms["publish_in"], ms["publish_out"]) == (6, 10)
            assert set(ms) == {"publish_in", "publish_in_details", "publish_out",
                               "publish_out_details"}
            one = api.get(f"/api/exchanges/%2F/{x}").json()
            assert (one["incoming"], one["outgoing"]) == ([], [])
            listed = next(e for e in api.get("/api/exchanges/%2F").json() if e["name"] == x)
            assert listed["message_stats"]["publish_out"] == 10
            assert "incoming" not in listed
        finally:
            ch.exchange_delete(x)
            for q in (q1, q2):
                ch.queue_delete(q)


def test_a_queue_shows_its_own_message_stats_consumers_and_rate_lists(api, broker):
    q = uniq("q")
    with _conn(broker.url) as conn:
        ch = conn.channel()
        ch.queue_declare(q)
        ch.basic_publish("", q, b"m")
        assert ch.basic_get(q, auto_ack=True)[0] is not None
        assert ch.basic_get(q, auto_ack=True)[0] is None  # get-empty
        ch.basic_qos(prefetch_count=7)
        tag = ch.basic_consume(q, lambda *a: None)
        try:
            def stats() -> dict:
                return api.get(f"/api/queues/%2F/{q}").json().get("message_stats", {})
            wait_for(lambda: stats().get("get_empty") == 1, timeout=STATS_WAIT)
            assert {k for k in stats() if not k.endswith("_details")} == {
                "ack", "deliver", "deliver_get", "deliver_no_ack", "get", "get_empty",
                "get_no_ack", "publish", "redeliver"}
            assert stats()["get_no_ack"] == 1
            one = api.get(f"/api/queues/%2F/{q}").json()
            assert (one["deliveries"], one["incoming"], one["recoverable_slaves"]) == (
                [], [], None)
            assert {"message_bytes_ram", "message_bytes_paged_out"} <= set(one)
            [c] = one["consumer_details"]
            assert (c["consumer_tag"], c["prefetch_count"], c["ack_required"]) == (
                tag, 7, True)
            assert c["queue"] == {"name": q, "vhost": "/"}
            assert c["channel_details"]["number"] == ch.channel_number
            listed = next(i for i in api.get("/api/queues/%2F").json() if i["name"] == q)
            assert "consumer_details" not in listed
            assert any(chan.get("message_stats", {}).get("get_empty", 0) >= 1
                       for chan in api.get("/api/channels").json())
        finally:
            ch.queue_delete(q)


def test_a_connection_has_send_cnt_tls_fields_and_only_a_given_name(api, broker):
    name = uniq("named")
    with _conn(broker.url, name) as named, _conn(broker.url) as anonymous:
        named.channel()
        anonymous.channel()

        def find(pred):
            return next((c for c in api.get("/api/connections").json() if pred(c)), None)
        wait_for(lambda: find(lambda c: c.get("user_provided_name") == name),
                 timeout=STATS_WAIT)
        conn = find(lambda c: c.get("user_provided_name") == name)
        assert isinstance(conn["send_cnt"], int) and conn["send_cnt"] > 0
        for key in ("ssl_protocol", "ssl_key_exchange", "ssl_cipher", "ssl_hash",
                    "peer_cert_subject", "peer_cert_issuer", "peer_cert_validity"):
            assert conn[key] is None, key  # a plain TCP connection
        others = [c for c in api.get("/api/connections").json()
                  if c.get("client_properties", {}).get("connection_name") is None]
        assert others and all("user_provided_name" not in c for c in others)


def test_vhost_octets_and_churn_counters(api, broker):
    before = api.get("/api/overview").json()["churn_rates"]
    with _conn(broker.url) as conn:
        conn.channel().queue_declare(uniq("churn"), exclusive=True)

    def churn() -> dict:
        return api.get("/api/overview").json()["churn_rates"]
    wait_for(lambda: churn()["connection_closed"] > before["connection_closed"],
             timeout=STATS_WAIT)
    after = churn()
    assert set(after) == {f"{k}{d}" for k in (
        "channel_closed", "channel_created", "connection_closed", "connection_created",
        "queue_created", "queue_declared", "queue_deleted") for d in ("", "_details")}
    assert after["connection_created"] > before["connection_created"]
    assert after["queue_created"] > before["queue_created"]
    node = api.get("/api/nodes").json()[0]
    assert node["connection_created"] >= after["connection_created"]
    assert "rate" in node["connection_created_details"]
    vhost = api.get("/api/vhosts/%2F").json()
    assert vhost["recv_oct"] > 0 and vhost["send_oct"] > 0
    assert "rate" in vhost["recv_oct_details"]
