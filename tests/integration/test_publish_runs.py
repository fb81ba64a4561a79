"""Runs of publishes whose properties differ (issue 26): the reader hands a channel every
whole publish of one read at once, and publishes with the same method but their own
properties (a message_id, a Celery-shaped headers table each) are checked, routed and
queued together. What a client sees must be what it sees one by one: every message once,
in order, its properties byte for byte; a refused header (a bad expiration, a foreign
user_id) closes the channel with 406 after the publishes before it and before any after
it; a headers exchange still routes each message by its own headers.

All pass against RabbitMQ 3.10.8 (BROKER_TEST_URI).
"""

from __future__ import annotations

from pamqp import commands, frame, header
from pamqp.body import ContentBody
from rawamqp import RawClient


def publish_bytes(channel: int, exchange: str, routing_key: str, body: bytes,
                  props: commands.Basic.Properties) -> bytes:
    return (frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key),
                          channel)
            + frame.marshal(header.ContentHeader(0, len(body), props), channel)
            + (frame.marshal(ContentBody(body), channel) if body else b""))


def celery_props(i: int, **extra: object) -> commands.Basic.Properties:
    task_id = f"00000000-0000-0000-0000-{i:012d}"
    return commands.Basic.Properties(
        content_type="application/json", content_encoding="utf-8", delivery_mode=2,
        correlation_id=task_id, reply_to="results", message_id=f"m{i}",
        headers={"id": task_id, "task": "tasks.add", "retries": i % 3, "eta": None,
                 "timelimit": [None, None], "stamps": {"n": i}}, **extra)


def declare_queue(c: RawClient, channel: int = 1) -> str:
    c.send(commands.Queue.Declare(queue="", exclusive=True), channel)
    return c.expect(commands.Queue.DeclareOk, channel).queue


def depth(c: RawClient, q: str, channel: int = 1) -> int:
    c.send(commands.Queue.Declare(queue=q, passive=True), channel)
    return c.expect(commands.Queue.DeclareOk, channel).message_count


def test_a_run_of_distinct_properties_keeps_each_messages_own(broker):
    n = 400
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        q = declare_queue(c)
        props = [celery_props(i) for i in range(n)]
        data = frame.marshal(commands.Confirm.Select(nowait=True), 1) + b"".join(
            publish_bytes(1, "", q, b"%d" % i, props[i]) for i in range(n))
        c.send_bytes(data)
        acked = 0
        while acked < n:
            acked = c.expect(commands.Basic.Ack, 1).delivery_tag
        assert depth(c, q) == n
        for i in range(n):
            raw, body = c.get_bytes(1, q)
            assert body == b"%d" % i
            assert raw == props[i].marshal()  # byte for byte
        c.close()


def _refused_mid_run(broker, bad: commands.Basic.Properties, text_part: str) -> None:
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.open_channel(2)
        q = declare_queue(c, 2)
        parts = [publish_bytes(1, "", q, b"%d" % i, celery_props(i)) for i in range(60)]
        parts.insert(30, publish_bytes(1, "", q, b"bad", bad))
        c.send_bytes(b"".join(parts))
        close = c.read_until_channel_close(1)
        assert close.reply_code == 406 and text_part in close.reply_text
        assert depth(c, q, 2) == 30
        assert [c.get_bytes(2, q)[1] for _ in range(30)] == [b"%d" % i for i in range(30)]
        c.close()


def test_a_bad_expiration_mid_run_publishes_the_ones_before_only(broker):
    _refused_mid_run(broker, celery_props(999, expiration="soon"), "invalid expiration")


def test_a_foreign_user_id_mid_run_publishes_the_ones_before_only(broker):
    _refused_mid_run(broker, celery_props(999, user_id="mallory"), "user_id property")


def test_a_headers_exchange_routes_each_message_of_a_run_by_its_own_headers(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        even, odd = declare_queue(c), declare_queue(c)
        c.send(commands.Queue.Bind(queue=even, exchange="amq.headers",
                                   arguments={"x-match": "all", "parity": "even"}), 1)
        c.expect(commands.Queue.BindOk, 1)
        c.send(commands.Queue.Bind(queue=odd, exchange="amq.headers",
                                   arguments={"x-match": "all", "parity": "odd"}), 1)
        c.expect(commands.Queue.BindOk, 1)
        data = b"".join(publish_bytes(
            1, "amq.headers", "", b"%d" % i,
            commands.Basic.Properties(message_id=f"m{i}",
                                      headers={"parity": "odd" if i % 2 else "even"}))
            for i in range(100))
        c.send_bytes(data)
        got_even = [c.get_bytes(1, even)[1] for _ in range(50)]
        got_odd = [c.get_bytes(1, odd)[1] for _ in range(50)]
        assert got_even == [b"%d" % i for i in range(0, 100, 2)]
        assert got_odd == [b"%d" % i for i in range(1, 100, 2)]
        assert depth(c, even) == depth(c, odd) == 0
        c.close()
