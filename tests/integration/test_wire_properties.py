"""Content-header properties that pamqp cannot decode but RabbitMQ carries (issue 8 item 4):
a timestamp outside datetime's range (Go's zero time.Time) as the timestamp property and inside
the headers table. The message is enqueued, and get-ok, deliver and return carry the exact
property bytes that were published; a headers exchange still routes on the other headers.

The content header is hand-built and read back undecoded (pamqp would raise on it).
"""

from __future__ import annotations

import struct

import pytest
from pamqp import commands
from rawamqp import RawClient

GO_ZERO = 2**64 - 62135596800  # Go's zero time.Time (-62135596800 s) as the unsigned wire value
MAX_U64 = 2**64 - 1
CONTENT_TYPE, HEADERS, DELIVERY_MODE, TIMESTAMP = 0x8000, 0x2000, 0x1000, 0x0040


def T(value: int) -> bytes:
    return b"T" + struct.pack(">Q", value)


def S(text: bytes) -> bytes:
    return b"S" + struct.pack(">I", len(text)) + text


def table(*pairs: tuple[bytes, bytes]) -> bytes:
    body = b"".join(bytes((len(k),)) + k + v for k, v in pairs)
    return struct.pack(">I", len(body)) + body


HEADERS_TABLE = table(
    (b"when", T(GO_ZERO)),
    (b"kind", S(b"order")),
    (b"deadlines", b"A" + struct.pack(">I", 18) + T(MAX_U64) + T(GO_ZERO)),
    (b"meta", b"F" + table((b"t", T(MAX_U64)))),
)
TIMESTAMP_ONLY = struct.pack(">HQ", TIMESTAMP, GO_ZERO)
WITH_HEADERS = (
    struct.pack(">H", CONTENT_TYPE | HEADERS | DELIVERY_MODE | TIMESTAMP)
    + b"\x0atext/plain"
    + HEADERS_TABLE
    + b"\x02"
    + struct.pack(">Q", GO_ZERO)
)
PROPS = pytest.mark.parametrize(
    "raw_props", [TIMESTAMP_ONLY, WITH_HEADERS], ids=["timestamp", "headers+timestamp"]
)


def declare_queue(c: RawClient) -> str:
    c.send(commands.Queue.Declare(queue="", exclusive=True), 1)
    return c.expect(commands.Queue.DeclareOk, 1).queue


@PROPS
def test_get_and_deliver_forward_the_property_bytes(broker, raw_props: bytes) -> None:
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        q = declare_queue(c)
        c.publish_raw_properties(1, raw_props, b"via get", routing_key=q)
        assert c.get_bytes(1, q) == (raw_props, b"via get")
        c.send(commands.Basic.Consume(queue=q, consumer_tag="ct", no_ack=True), 1)
        c.expect(commands.Basic.ConsumeOk, 1)
        c.publish_raw_properties(1, raw_props, b"via deliver", routing_key=q)
        deliver = c.read_method_bytes()
        assert isinstance(deliver, commands.Basic.Deliver) and deliver.consumer_tag == "ct"
        assert c.read_content_bytes() == (raw_props, b"via deliver")
        c.close()  # the connection is still open: no 501


@PROPS
def test_return_forwards_the_property_bytes(broker, unique, raw_props: bytes) -> None:
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.publish_raw_properties(1, raw_props, b"back", routing_key=unique("nowhere"), mandatory=True)
        ret = c.read_method_bytes()
        assert isinstance(ret, commands.Basic.Return) and ret.reply_code == 312
        assert c.read_content_bytes() == (raw_props, b"back")
        c.close()


def test_headers_exchange_routes_on_the_other_headers(broker, unique) -> None:
    x = unique("hx")
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Exchange.Declare(exchange=x, exchange_type="headers", auto_delete=True), 1)
        c.expect(commands.Exchange.DeclareOk, 1)
        bound = {}
        for name, args in (
            ("kind", {"kind": "order"}),
            ("any", {"x-match": "any", "kind": "nope", "when": None}),
            ("other", {"kind": "invoice"}),
        ):
            bound[name] = declare_queue(c)
            c.send(commands.Queue.Bind(queue=bound[name], exchange=x, arguments=args), 1)
            c.expect(commands.Queue.BindOk, 1)
        c.send(commands.Confirm.Select(), 1)
        c.expect(commands.Confirm.SelectOk, 1)
        c.publish_raw_properties(1, WITH_HEADERS, b"routed", exchange=x)
        assert isinstance(c.read_method_bytes(), commands.Basic.Ack)  # reached its queues
        assert c.get_bytes(1, bound["kind"]) == (WITH_HEADERS, b"routed")
        assert c.get_bytes(1, bound["any"]) == (WITH_HEADERS, b"routed")
        assert c.get_bytes(1, bound["other"], timeout=0) is None
        c.close()


def test_malformed_headers_table_is_still_501(broker, embedded_only) -> None:
    """An unknown field-table tag is a malformed frame: 501 here. RabbitMQ 3.10 decodes
    lazily and answers this one with 541 INTERNAL_ERROR when its decoder crashes (checked with
    BROKER_TEST_URI), so this is ours only."""
    bad = struct.pack(">H", HEADERS) + table((b"when", T(GO_ZERO)), (b"k", b"Q\x00"))
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.publish_raw_properties(1, bad, b"x", routing_key="q")
        close = c.read_until_connection_close()
        assert close.reply_code == 501
        assert close.reply_text.startswith("FRAME_ERROR")


def test_non_utf8_user_id_is_a_406_not_a_crash(broker, embedded_only) -> None:
    """user_id "g\\xe9t" (latin-1, not UTF-8) is carried, and never equals the
    authenticated user: 406 as on RabbitMQ (rabbitmq.com/validated-user-id.html). RabbitMQ
    echoes the raw bytes in the reply text, which pamqp (this test's client) cannot decode,
    so the test runs against our broker only; ours shows them as U+FFFD."""
    raw_props = struct.pack(">H", 0x0010) + b"\x03g\xe9t"
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.publish_raw_properties(1, raw_props, b"x", routing_key="q")
        close = c.read_until_channel_close(1)
        assert isinstance(close, commands.Channel.Close), close
        assert close.reply_code == 406
        assert close.reply_text.startswith("PRECONDITION_FAILED - user_id property set to 'g")
        c.open_channel(2)  # the connection is fine
        c.close()
