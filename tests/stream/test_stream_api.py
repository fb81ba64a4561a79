"""Stream connections, publishers and consumers in the HTTP API (issue 37 item 7), read
with a real HTTP client while rstream publishes and consumes."""

from __future__ import annotations

import asyncio

import rstream

from broker.embedded import EmbeddedBroker
from tests.stream.helpers import producer, run
from tests.stream.raw_client import (
    closed,
    opened,
)


def test_the_http_api_lists_stream_connections_publishers_and_consumers():
    """/api/stream/connections, /api/stream/publishers and /api/stream/consumers in the
    shapes of RabbitMQ's rabbitmq_stream_management, read with a real HTTP client while
    rstream publishes and consumes."""
    import requests

    b = EmbeddedBroker(stream_listeners_tcp_default="0", management_tcp_port=-1,
                       prometheus_tcp_port=-1).start()
    api = f"http://127.0.0.1:{b.management_port}"
    auth = ("guest", "guest")
    try:
        async def main() -> tuple:
            async with producer(b, connection_name="api-producer") as p:
                await p.create_stream("sp-api")
                for i in range(4):
                    await p.send_wait("sp-api", rstream.AMQPMessage(body=b"%d" % i),
                                      publisher_name="api-ref")
                consumer = rstream.Consumer("127.0.0.1", b.stream_port, username="guest",
                                            password="guest")
                async with consumer:
                    seen = asyncio.Event()
                    await consumer.subscribe("sp-api", lambda m, c: seen.set(),
                                             decoder=rstream.amqp_decoder,
                                             offset_specification=rstream.ConsumerOffsetSpecification(
                                                 rstream.OffsetType.FIRST, None))
                    task = asyncio.create_task(consumer.run())
                    await asyncio.wait_for(seen.wait(), 10)
                    loop = asyncio.get_running_loop()
                    got = await loop.run_in_executor(None, lambda: [
                        requests.get(api + path, auth=auth, timeout=10).json()
                        for path in ("/api/stream/connections", "/api/stream/publishers",
                                     "/api/stream/consumers/%2F",
                                     "/api/stream/publishers/%2F/sp-api")])
                    metrics = await loop.run_in_executor(None, lambda: requests.get(
                        f"http://127.0.0.1:{b.prometheus_port}/metrics", timeout=10).text)
                    task.cancel()
                    return (*got, metrics)

        conns, pubs, cons, by_stream, metrics = run(main())
        for line in ('rabbitmq_global_messages_received_total{protocol="stream"} 4.0',
                     'rabbitmq_global_messages_confirmed_total{protocol="stream"} 4.0',
                     'rabbitmq_global_publishers{protocol="stream"} 1.0',
                     'rabbitmq_global_consumers{protocol="stream"} 1.0'):
            assert line in metrics, line
        assert 'rabbitmq_global_messages_delivered_total{protocol="stream"}' in metrics
        assert {c["protocol"] for c in conns} == {"stream"} and len(conns) >= 2
        producer_conn = next(c for c in conns
                             if c["client_properties"].get("connection_name") == "api-producer")
        assert producer_conn["user"] == "guest" and producer_conn["vhost"] == "/"
        assert producer_conn["auth_mechanism"] == "PLAIN"
        pub = next(p for p in pubs if p["reference"] == "api-ref")
        assert pub["queue"] == {"name": "sp-api", "vhost": "/"}
        assert (pub["published"], pub["confirmed"], pub["errored"]) == (4, 4, 0)
        assert pub["connection_details"]["name"] == producer_conn["name"]
        assert by_stream == pubs
        con = cons[0]
        assert con["queue"]["name"] == "sp-api" and con["consumed"] == 4
        assert {"credits", "offset", "offset_lag", "subscription_id", "properties"} <= set(con)
        r = requests.get(api + "/api/stream/connections", auth=("nobody", "x"), timeout=10)
        assert r.status_code == 401
    finally:
        b.stop()


def test_api_connections_lists_stream_connections_and_delete_closes_them():
    """GET /api/connections lists a stream connection beside AMQP 0-9-1 ones, as RabbitMQ's
    stream reader registers it (protocol "stream", user_provided_name from the client's
    connection_name, byte counters), and DELETE /api/connections/{name} closes its socket
    (what rstream's own tests do through the HTTP API)."""
    import requests

    b = EmbeddedBroker(stream_listeners_tcp_default="0", management_tcp_port=-1,
                       prometheus_tcp_port=-1).start()
    api = f"http://127.0.0.1:{b.management_port}/api"
    auth = ("guest", "guest")
    sock = opened(b, {"connection_name": "raw-api", "product": "test"})
    try:
        conns = requests.get(api + "/connections", auth=auth, timeout=10).json()
        (conn,) = [c for c in conns if c.get("user_provided_name") == "raw-api"]
        assert conn["protocol"] == "stream" and conn["channels"] == 0
        assert conn["client_properties"] == {"connection_name": "raw-api", "product": "test"}
        assert conn["user"] == "guest" and conn["vhost"] == "/" and conn["state"] == "running"
        assert conn["recv_oct"] > 0 and conn["send_oct"] > 0 and "type" not in conn
        one = requests.get(api + "/connections/" + requests.utils.quote(conn["name"], safe=""),
                           auth=auth, timeout=10).json()
        assert one["name"] == conn["name"]
        by_vhost = requests.get(api + "/vhosts/%2F/connections", auth=auth, timeout=10).json()
        assert conn["name"] in {c["name"] for c in by_vhost}
        channels = requests.get(api + "/connections/"
                                + requests.utils.quote(conn["name"], safe="") + "/channels",
                                auth=auth, timeout=10).json()
        assert channels == []
        r = requests.delete(api + "/connections/" + requests.utils.quote(conn["name"], safe=""),
                            auth=auth, timeout=10)
        assert r.status_code == 204
        assert closed(sock)
        conns = requests.get(api + "/connections", auth=auth, timeout=10).json()
        assert not [c for c in conns if c.get("user_provided_name") == "raw-api"]
    finally:
        sock.close()
        b.stop()
