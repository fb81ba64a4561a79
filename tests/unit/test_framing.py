"""FrameDecoder and encoders: golden sequences at every split point, errors, pamqp parity."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body as pbody
from pamqp import commands as C
from pamqp import frame as pframe
from pamqp import header as pheader

from broker.errors import AMQPError, close_args
from broker.protocol.encoding import (
    encode_content,
    encode_content_raw,
    encode_deliver,
    encode_method,
    encode_properties,
)
from broker.protocol.framing import (
    FRAME_END,
    HEARTBEAT,
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    BadProtocolHeader,
    Command,
    ContentHeader,
    FrameDecoder,
    check_protocol_header,
)

RICH_PROPS = C.Basic.Properties(
    content_type="application/json",
    content_encoding="gzip",
    headers={"x-int": 7, "x-str": "v", "nested": {"a": [1, "b"]}, "flag": True},
    delivery_mode=2,
    priority=5,
    correlation_id="corr",
    reply_to="amq.rabbitmq.reply-to",
    expiration="60000",
    message_id="mid-1",
    message_type="t",
    user_id="guest",
    app_id="app",
)


def method(ch: int, m: object) -> bytes:
    return pframe.marshal(m, ch)


def header(ch: int, size: int, props: C.Basic.Properties | None = None) -> bytes:
    return pframe.marshal(pheader.ContentHeader(0, size, props or C.Basic.Properties()), ch)


def body(ch: int, data: bytes) -> bytes:
    return pframe.marshal(pbody.ContentBody(data), ch)


def raw(ftype: int, ch: int, payload: bytes, end: bytes = b"\xce") -> bytes:
    return struct.pack(">BHI", ftype, ch, len(payload)) + payload + end


GOLDEN = [
    # publish with a 3-frame body
    method(1, C.Basic.Publish(exchange="ex", routing_key="rk", mandatory=True))
    + header(1, 12)
    + body(1, b"abcd")
    + body(1, b"efgh")
    + body(1, b"ijkl"),
    # header with many properties
    method(1, C.Basic.Publish(exchange="", routing_key="q")) + header(1, 2, RICH_PROPS) + body(1, b"hi"),
    HEARTBEAT_FRAME,
    # method with a field table
    method(2, C.Queue.Declare(queue="q1", durable=True, arguments={"x-max-length": 10, "x-q": "s"})),
    # empty-body publish
    method(3, C.Basic.Publish(exchange="e", routing_key="")) + header(3, 0),
    # interleaved channels
    method(1, C.Basic.Publish(routing_key="a"))
    + method(2, C.Basic.Ack(delivery_tag=2**40, multiple=True))
    + header(1, 3)
    + HEARTBEAT_FRAME
    + body(1, b"xyz")
    + method(0, C.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)),
]
STREAM = b"".join(GOLDEN)


def normal(frame: object) -> object:
    """Comparable form of a decoded frame."""
    if isinstance(frame, ContentHeader):
        return ("H", frame.class_id, frame.body_size, dict(frame.properties), frame.raw_properties)
    if isinstance(frame, bytes) or frame is HEARTBEAT:
        return frame
    return (type(frame).__name__, dict(frame))


def decode_chunks(chunks: list[bytes]) -> list[tuple[int, object]]:
    dec = FrameDecoder()
    out = []
    for chunk in chunks:
        dec.feed(chunk)
        while (f := dec.next_frame()) is not None:
            if isinstance(f[1], Command):  # a publish read whole: compared frame by frame
                parts = [f[1].method, f[1].header] + ([f[1].body] if f[1].body else [])
                out.extend((f[0], normal(p)) for p in parts)
            else:
                out.append((f[0], normal(f[1])))
    assert dec.buffered == 0
    return out


EXPECTED = decode_chunks([STREAM])


def test_golden_whole() -> None:
    assert len(EXPECTED) == 18
    assert EXPECTED[0] == (
        1,
        ("Publish", {"ticket": 0, "exchange": "ex", "routing_key": "rk", "mandatory": True, "immediate": False}),
    )
    assert EXPECTED[1][1][:3] == ("H", 60, 12)
    assert [f for _, f in EXPECTED[2:5]] == [b"abcd", b"efgh", b"ijkl"]
    assert EXPECTED[6][1][3] == dict(RICH_PROPS)
    assert EXPECTED[8] == (0, HEARTBEAT)
    assert EXPECTED[9][1][1]["arguments"] == {"x-max-length": 10, "x-q": "s"}
    assert EXPECTED[-1][1][0] == "Close"


def test_golden_one_byte_at_a_time() -> None:
    assert decode_chunks([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


def test_golden_every_split_point() -> None:
    for cut in range(len(STREAM) + 1):
        assert decode_chunks([STREAM[:cut], STREAM[cut:]]) == EXPECTED, cut


def test_each_golden_sequence_split_in_three() -> None:
    for seq in GOLDEN:
        want = decode_chunks([seq])
        for a in range(0, len(seq), 3):
            for b in range(a, len(seq), 7):
                assert decode_chunks([seq[:a], seq[a:b], seq[b:]]) == want


def test_fast_paths_match_pamqp() -> None:
    for m in (
        C.Basic.Publish(exchange="ex.1", routing_key="é" * 100, mandatory=False, immediate=True),
        C.Basic.Ack(delivery_tag=1, multiple=False),
    ):
        dec = FrameDecoder()
        dec.feed(method(5, m))
        ch, got = dec.next_frame()
        assert ch == 5 and type(got) is type(m) and dict(got) == dict(m)


# --- protocol header -------------------------------------------------------------------


def test_protocol_header() -> None:
    assert check_protocol_header(b"") is None
    assert check_protocol_header(b"GET / H") is None  # RabbitMQ waits for 8 bytes
    assert check_protocol_header(PROTOCOL_HEADER) is True
    assert check_protocol_header(PROTOCOL_HEADER + b"\x01\x00") is True
    assert check_protocol_header(b"AMQP\x01\x01\x00\x09") is True  # legacy 0-9-1


@pytest.mark.parametrize("bad", [b"AMQP\x00\x00\x09\x00", b"GET / HTTP/1.1\r\n", b"AMQP\x00\x00\x08\x00"])
def test_bad_protocol_header(bad: bytes) -> None:
    with pytest.raises(BadProtocolHeader):
        check_protocol_header(bad)


# --- errors (codes and texts as RabbitMQ 3.10 sent them) ----------------------------------


def decode_error(data: bytes, frame_max: int = 131072) -> AMQPError:
    dec = FrameDecoder(frame_max)
    dec.feed(data)
    with pytest.raises(AMQPError) as info:
        while dec.next_frame() is not None:
            pass
    return info.value


@pytest.mark.parametrize(
    ("data", "code", "text", "ids"),
    [
        (raw(9, 0, b"abcd"), 501, 'FRAME_ERROR - type 9, all octets = <<"abcd">>: unknown_frame', (0, 0)),
        (
            raw(1, 0, struct.pack(">HH", 10, 50) + b"\0\0", end=b"\x00"),
            501,
            "FRAME_ERROR - type 1, all octets = <<0,10,0,50,0,0>>: {invalid_frame_end_marker,0}",
            (0, 0),
        ),
        (
            raw(1, 1, struct.pack(">HH", 50, 10) + b"\x00"),
            501,
            "FRAME_ERROR - cannot decode <<0>>",
            (50, 10),
        ),
        (
            raw(1, 1, struct.pack(">HH", 60, 40) + b"\x00\x00\x05ab"),
            501,
            "FRAME_ERROR - cannot decode <<0,0,5,97,98>>",
            (60, 40),
        ),
        (
            raw(1, 1, struct.pack(">HH", 20, 10) + b"\x00\x00zzzzz"),
            501,
            "FRAME_ERROR - cannot decode <<0,0,122,122,122,122,122>>",
            (20, 10),
        ),
        (raw(1, 1, struct.pack(">HH", 60, 80) + b"\0" * 8), 501, "FRAME_ERROR - cannot decode <<0,0,0,0,0,0,0,0>>", (60, 80)),
        (raw(8, 1, b""), 505, "UNEXPECTED_FRAME - type 8, all octets = <<>>", (0, 0)),
        (raw(8, 0, b"xx"), 501, 'FRAME_ERROR - type 8, all octets = <<"xx">>: unknown_frame', (0, 0)),
        (
            header(0, 5)[:-1] + b"\xce",
            505,
            "UNEXPECTED_FRAME - type 2, all octets = <<0,60,0,0,0,0,0,0,0,0,0,5,0,0>>",
            (0, 0),
        ),
        (raw(3, 0, b"hello"), 505, 'UNEXPECTED_FRAME - type 3, all octets = <<"hello">>', (0, 0)),
        (raw(1, 0, b""), 501, "FRAME_ERROR - type 1, all octets = <<>>: unknown_frame", (0, 0)),
        (raw(2, 1, b"\x00\x3c"), 501, "FRAME_ERROR - type 2, all octets = <<0,60>>: unknown_frame", (0, 0)),
        (raw(1, 0, struct.pack(">HH", 99, 10)), 540, None, (0, 0)),
        (raw(1, 1, struct.pack(">HH", 60, 99)), 540, None, (0, 0)),
    ],
)
def test_frame_errors(data: bytes, code: int, text: str | None, ids: tuple[int, int]) -> None:
    exc = decode_error(data)
    got_code, got_text, class_id, method_id = close_args(exc)
    assert got_code == code
    if text is not None:
        assert got_text == text
    assert (class_id, method_id) == ids


def test_long_payload_snippet_is_first_16_octets() -> None:
    exc = decode_error(raw(7, 0, bytes(range(40))))
    assert close_args(exc)[1].startswith("FRAME_ERROR - type 7, first octets = <<0,1,2,")


def test_frame_too_large_from_header_alone() -> None:
    exc = decode_error(struct.pack(">BHI", 1, 0, 200000))  # only the 7-byte header arrived
    assert close_args(exc)[:2] == (501, "FRAME_ERROR - type 1, all octets = <<>>: {frame_too_large,200000,131064}")


def test_frame_max_allows_rabbitmq_fudge_and_is_settable() -> None:
    dec = FrameDecoder()
    dec.frame_max = 4096
    dec.feed(raw(3, 1, b"x" * 4096))
    assert dec.next_frame() == (1, b"x" * 4096)
    exc = decode_error(struct.pack(">BHI", 3, 1, 4097), frame_max=4096)
    assert close_args(exc)[1].endswith("{frame_too_large,4097,4088}")


def test_bad_properties_are_501() -> None:
    exc = decode_error(raw(2, 1, struct.pack(">HHQH", 60, 0, 5, 0x8000) + b"\x05ab"))
    assert close_args(exc)[0] == 501


def test_buffer_compaction_keeps_partial_frame() -> None:
    dec = FrameDecoder()
    frames = body(1, b"a" * 70000) * 3
    dec.feed(frames[:150000])
    assert dec.next_frame() == (1, b"a" * 70000)
    assert dec.next_frame() == (1, b"a" * 70000)
    assert dec.next_frame() is None
    dec.feed(frames[150000:])
    assert dec.next_frame() == (1, b"a" * 70000)
    assert dec.buffered == 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(min_value=1, max_value=40))
def test_random_bytes_only_frames_none_or_amqp_errors(data: bytes, step: int) -> None:
    dec = FrameDecoder(frame_max=4096)
    try:
        for i in range(0, len(data), step):
            dec.feed(data[i : i + step])
            while dec.next_frame() is not None:
                pass
    except AMQPError as exc:
        assert close_args(exc)[0] in (501, 502, 505, 540)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=4, max_size=60))
def test_random_method_payloads(payload: bytes) -> None:
    dec = FrameDecoder()
    dec.feed(raw(1, 1, payload))
    try:
        dec.next_frame()
    except AMQPError as exc:
        assert close_args(exc)[0] in (501, 540)


# --- encoders ---------------------------------------------------------------------------


def pamqp_content(ch: int, m: object, props: C.Basic.Properties, data: bytes, frame_max: int) -> bytes:
    out = pframe.marshal(m, ch) + pframe.marshal(pheader.ContentHeader(0, len(data), props), ch)
    step = frame_max - 8
    for i in range(0, len(data), step):
        out += pframe.marshal(pbody.ContentBody(data[i : i + step]), ch)
    return out


BODIES = [b"", b"x", b"y" * 4088, b"z" * 4089, bytes(range(256)) * 40]


@pytest.mark.parametrize("data", BODIES, ids=len)
@pytest.mark.parametrize("props", [C.Basic.Properties(), RICH_PROPS], ids=["noprops", "rich"])
def test_encode_content_matches_pamqp(data: bytes, props: C.Basic.Properties) -> None:
    m = C.Basic.Deliver(consumer_tag="ctag", delivery_tag=9, redelivered=True, exchange="e", routing_key="rk")
    want = pamqp_content(7, m, props, data, 4096)
    assert encode_content(7, m, props, data, 4096) == want
    assert encode_content_raw(7, m, encode_properties(props), data, 4096) == want
    assert encode_properties(props) == props.marshal()


@pytest.mark.parametrize("data", BODIES, ids=len)
@pytest.mark.parametrize("redelivered", [False, True])
def test_encode_deliver_matches_pamqp(data: bytes, redelivered: bool) -> None:
    m = C.Basic.Deliver(
        consumer_tag="amq.ctag-é", delivery_tag=2**63 - 1, redelivered=redelivered, exchange="ex.1", routing_key="r" * 255
    )
    want = pamqp_content(65535, m, RICH_PROPS, data, 4096)
    got = encode_deliver(65535, "amq.ctag-é", 2**63 - 1, redelivered, "ex.1", "r" * 255, RICH_PROPS.marshal(), data, 4096)
    assert got == want


def test_encode_deliver_empty_strings() -> None:
    m = C.Basic.Deliver(consumer_tag="", delivery_tag=1, redelivered=False, exchange="", routing_key="")
    want = pamqp_content(1, m, C.Basic.Properties(), b"body", 131072)
    assert encode_deliver(1, "", 1, False, "", "", b"\x00\x00", b"body", 131072) == want


def test_encode_deliver_rejects_long_shortstr() -> None:
    with pytest.raises(ValueError):
        encode_deliver(1, "c" * 256, 1, False, "", "", b"\x00\x00", b"", 131072)


def test_encode_method_and_roundtrip() -> None:
    m = C.Exchange.Declare(exchange="x", exchange_type="topic", arguments={"alternate-exchange": "ae"})
    data = encode_method(4, m)
    assert data[-1] == FRAME_END
    dec = FrameDecoder()
    dec.feed(data)
    ch, got = dec.next_frame()
    assert ch == 4 and dict(got) == dict(m)


def test_encoded_content_decodes_back() -> None:
    data = bytes(range(256)) * 100
    dec = FrameDecoder(frame_max=4096)
    dec.feed(encode_deliver(2, "c", 1, False, "e", "k", RICH_PROPS.marshal(), data, 4096))
    frames = []
    while (f := dec.next_frame()) is not None:
        frames.append(f[1])
    assert isinstance(frames[1], ContentHeader) and frames[1].properties == RICH_PROPS
    assert b"".join(frames[2:]) == data
    assert all(len(b) <= 4088 for b in frames[2:])


def test_encode_method_skips_pamqp_name_validation() -> None:
    m = C.Basic.Deliver(consumer_tag="c", delivery_tag=1, exchange="x", routing_key="k")
    m.exchange = "my exchange é"  # legal in RabbitMQ, rejected by pamqp's regex
    dec = FrameDecoder()
    dec.feed(encode_content(1, m, C.Basic.Properties(), b"b", 131072))
    assert dec.next_frame()[1].exchange == "my exchange é"


@pytest.mark.parametrize(
    "m",
    [
        C.Queue.Declare(queue="q", passive=True, durable=False, exclusive=True, auto_delete=True, nowait=True),
        C.Basic.Consume(queue="q", consumer_tag="t", no_local=True, no_ack=False, exclusive=True, arguments={"x-priority": 3}),
        C.Connection.Start(server_properties={"product": "x", "capabilities": {"basic.nack": True}}),
        C.Basic.Nack(delivery_tag=5, multiple=True, requeue=False),
        C.Channel.CloseOk(),
    ],
    ids=lambda m: m.name,
)
def test_encode_method_matches_pamqp(m: object) -> None:
    assert encode_method(3, m) == pframe.marshal(m, 3)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([(60, 40), (60, 80), (10, 11), (50, 10)]), st.binary(max_size=40))
def test_random_arguments_of_known_methods(ids: tuple[int, int], args: bytes) -> None:
    dec = FrameDecoder()
    dec.feed(raw(1, 1, struct.pack(">HH", *ids) + args))
    try:
        ch, m = dec.next_frame()
    except AMQPError as exc:
        assert close_args(exc)[:1] == (501,)
        assert close_args(exc)[2:] == ids
    else:
        assert m.index == ids[0] << 16 | ids[1]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40))
def test_random_properties(raw_props: bytes) -> None:
    dec = FrameDecoder()
    dec.feed(raw(2, 1, struct.pack(">HHQ", 60, 0, 1) + b"\x00\x00"[: 2 - min(2, len(raw_props))] + raw_props))
    try:
        dec.next_frame()
    except AMQPError as exc:
        assert close_args(exc)[0] == 501


def test_hostile_nesting_is_a_frame_error() -> None:
    depth = 5000
    inner = b""  # field array nesting: 'A' + u32 length + values
    for _ in range(depth):
        inner = b"A" + struct.pack(">I", len(inner)) + inner
    table = b"\x01k" + inner
    args = b"\x00\x00" + b"\x01q" + b"\x00" + struct.pack(">I", len(table)) + table
    exc = decode_error(raw(1, 1, struct.pack(">HH", 50, 10) + args))  # queue.declare
    assert close_args(exc)[0] == 501
    assert isinstance(exc.__cause__, RecursionError)
    props = struct.pack(">HI", 0x2000, len(table)) + table  # the same nesting as headers
    exc = decode_error(raw(2, 1, struct.pack(">HHQ", 60, 0, 1) + props))
    assert close_args(exc)[0] == 501
    assert isinstance(exc.__cause__, RecursionError)
    # a timestamp far out of datetime's range is not an error (RabbitMQ carries it):
    # tests/unit/test_properties.py


def test_unexpected_frame_helper_texts() -> None:
    from broker.protocol.framing import unexpected_frame

    # RabbitMQ 3.10, channel.open on channel 1 before connection.open:
    assert close_args(unexpected_frame(C.Channel.Open()))[:2] == (
        505,
        "UNEXPECTED_FRAME - type 1, all octets = <<0,20,0,10,1,48>>",
    )
    assert close_args(unexpected_frame(HEARTBEAT))[1] == "UNEXPECTED_FRAME - type 8, all octets = <<>>"
    assert close_args(unexpected_frame(b"hello"))[1] == 'UNEXPECTED_FRAME - type 3, all octets = <<"hello">>'
    h = ContentHeader(60, 5, C.Basic.Properties(), b"\x00\x00")
    assert close_args(unexpected_frame(h))[1] == "UNEXPECTED_FRAME - type 2, all octets = <<0,60,0,0,0,0,0,0,0,0,0,5,0,0>>"


# --- basic.publish read whole (issue 15) -----------------------------------------------------

PUB = C.Basic.Publish(exchange="ex", routing_key="rk")


def frames_of(data: bytes, frame_max: int = 131072) -> list:
    dec = FrameDecoder(frame_max)
    dec.feed(data)
    out = []
    while (f := dec.next_frame()) is not None:
        out.append(f)
    return out


def test_publish_with_header_and_body_is_one_command() -> None:
    props = C.Basic.Properties(delivery_mode=2, expiration="60000")
    got = frames_of(method(1, PUB) + header(1, 3, props) + body(1, b"xyz"))
    assert len(got) == 1 and got[0][0] == 1
    cmd = got[0][1]
    assert isinstance(cmd, Command) and cmd.body == b"xyz"
    assert cmd.method.routing_key == "rk" and cmd.header.body_size == 3
    assert cmd.header.hot == (2, None, "60000", None, None)
    assert cmd.header.raw_properties == props.marshal()


def test_empty_body_publish_is_one_command() -> None:
    got = frames_of(method(1, PUB) + header(1, 0))
    assert len(got) == 1 and got[0][1].body == b""


@pytest.mark.parametrize("tail", [
    header(2, 3) + body(2, b"xyz"),  # the header is on another channel
    header(1, 6) + body(1, b"xyz") + body(1, b"abc"),  # the body takes two frames
    header(1, 3),  # the body has not arrived yet
    method(1, PUB),  # no header at all
])
def test_publish_not_whole_comes_frame_by_frame(tail: bytes) -> None:
    got = frames_of(method(1, PUB) + tail)
    assert not isinstance(got[0][1], Command)
    assert type(got[0][1]) is C.Basic.Publish


def test_malformed_header_after_publish_still_501_after_the_method() -> None:
    raw = C.Basic.Properties(content_type="text/plain").marshal()[:-1]
    payload = struct.pack(">HHQ", 60, 0, 3) + raw
    bad = struct.pack(">BHI", 2, 1, len(payload)) + payload + b"\xce"
    dec = FrameDecoder()
    dec.feed(method(1, PUB) + bad + body(1, b"xyz"))
    assert type(dec.next_frame()[1]) is C.Basic.Publish
    with pytest.raises(AMQPError) as info:
        dec.next_frame()
    assert close_args(info.value)[0] == 501


def test_oversized_body_frame_after_publish_is_still_frame_too_large() -> None:
    dec = FrameDecoder(frame_max=4096)
    data = b"x" * 5000
    dec.feed(method(1, PUB) + header(1, len(data)) + body(1, data))
    assert type(dec.next_frame()[1]) is C.Basic.Publish
    assert type(dec.next_frame()[1]) is ContentHeader
    with pytest.raises(AMQPError) as info:
        dec.next_frame()
    assert close_args(info.value)[0] == 501 and "frame_too_large" in close_args(info.value)[1]


def test_alike_publishes_share_decoded_method_and_header_unlike_ones_do_not() -> None:
    p1 = C.Basic.Publish(exchange="ex", routing_key="a")
    p2 = C.Basic.Publish(exchange="ex", routing_key="b")
    props = C.Basic.Properties(delivery_mode=2)
    other = C.Basic.Properties(delivery_mode=1)
    got = [f[1] for f in frames_of(
        method(1, p1) + header(1, 3, props) + body(1, b"xyz")
        + method(1, p1) + header(1, 3, props) + body(1, b"abc")
        + method(1, p2) + header(1, 4, props) + body(1, b"abcd")
        + method(1, p2) + header(1, 4, other) + body(1, b"efgh"))]
    assert [c.method.routing_key for c in got] == ["a", "a", "b", "b"]
    assert [c.body for c in got] == [b"xyz", b"abc", b"abcd", b"efgh"]
    assert [c.header.body_size for c in got] == [3, 3, 4, 4]
    assert [c.header.hot[0] for c in got] == [2, 2, 2, 1]
    assert got[0].method is got[1].method and got[0].header is got[1].header
    assert got[1].method is not got[2].method and got[1].header is not got[2].header


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2]), st.sampled_from(["a", "b"]),
                          st.sampled_from([None, 1, 2]), st.binary(max_size=12),
                          st.booleans()), min_size=1, max_size=25),
       st.lists(st.integers(1, 60), min_size=1, max_size=40))
def test_publish_streams_decode_like_pamqp_at_any_split(pubs: list, cuts: list) -> None:
    """Whole, alike and partial publishes mixed over two channels, with other methods
    between them and bodies split over frames, fed in arbitrary pieces: the commands
    equal what the frames say (the decoder's caches never hand out a stale method or
    header; issue 15)."""
    from broker.protocol.assembler import CommandAssembler

    parts, want = [], []
    for ch, rk, mode, data, split in pubs:
        props = C.Basic.Properties(delivery_mode=mode)
        parts.append(method(ch, C.Basic.Publish(exchange="x", routing_key=rk)))
        parts.append(header(ch, len(data), props))
        step = 1 if split and len(data) > 1 else max(len(data), 1)
        parts.extend(body(ch, data[i:i + step]) for i in range(0, len(data), step))
        if split:
            parts.append(method(ch, C.Basic.Qos(prefetch_count=1)))
        want.append((ch, rk, mode, data))
    stream = b"".join(parts)
    dec = FrameDecoder()
    asms = {1: CommandAssembler(), 2: CommandAssembler()}
    got = []
    pos = 0
    for n in cuts + [len(stream)]:
        dec.feed(stream[pos:pos + n])
        pos += n
        while (f := dec.next_frame()) is not None:
            ch, frame = f
            cmd = frame if isinstance(frame, Command) else asms[ch].feed(frame)
            if cmd is not None and cmd.header is not None:
                got.append((ch, cmd.method.routing_key, cmd.header.hot[0], cmd.body))
        if pos >= len(stream):
            break
    assert got == want


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 7]), st.sampled_from(["c1", "c2"]),
                          st.integers(1, 2**40), st.booleans(), st.sampled_from(["", "x"]),
                          st.sampled_from(["k", "q"]), st.sampled_from([0, 1, 2]),
                          st.binary(max_size=20), st.sampled_from([4096, 24])),
                min_size=1, max_size=12))
def test_runs_of_deliveries_encode_like_pamqp(deliveries: list) -> None:
    """encode_deliver reuses the last delivery's bytes for an alike one (issue 15), and all
    but the header frame for one that differs only in its properties (issue 26): any
    sequence, alike or not, on connections with any frame_max (24: bodies over 16 bytes
    take two frames), still encodes exactly as pamqp does."""
    props = [C.Basic.Properties(delivery_mode=1), C.Basic.Properties(delivery_mode=2),
             C.Basic.Properties(message_id="m")]
    raws = [p.marshal() for p in props]
    for ch, ctag, tag, redelivered, exchange, rk, which, data, frame_max in deliveries:
        m = C.Basic.Deliver(consumer_tag=ctag, delivery_tag=tag, redelivered=redelivered,
                            exchange=exchange, routing_key=rk)
        want = pamqp_content(ch, m, props[which], data, frame_max)
        assert encode_deliver(ch, ctag, tag, redelivered, exchange, rk, raws[which], data,
                              frame_max) == want


def test_a_delivery_after_an_alike_one_on_a_smaller_frame_max_is_split() -> None:
    """The reused bytes of the last delivery are one body frame: a delivery with the same
    tag, exchange, key and body size to a connection with a smaller frame_max must not
    reuse them."""
    props = C.Basic.Properties(message_id="m").marshal()
    body = bytes(range(20))
    for raw in (props, C.Basic.Properties(message_id="n").marshal()):
        encode_deliver(1, "c", 1, False, "x", "k", props, body, 4096)
        m = C.Basic.Deliver(consumer_tag="c", delivery_tag=2, redelivered=False,
                            exchange="x", routing_key="k")
        want = pamqp_content(1, m, C.Basic.Properties(message_id=raw[3:].decode()), body, 24)
        assert encode_deliver(1, "c", 2, False, "x", "k", raw, body, 24) == want


def _tagged(ch: int, rk: str, n: int, data: bytes, **props: object) -> bytes:
    """A publish whose properties carry their own message_id (fixed length) and timestamp."""
    import datetime

    p = C.Basic.Properties(message_id=f"id-{n:08d}", content_type="application/json",
                           timestamp=datetime.datetime.fromtimestamp(1_700_000_000 + n,
                                                                     tz=datetime.UTC),
                           **props)
    return method(ch, C.Basic.Publish(exchange="x", routing_key=rk)) + header(ch, len(data), p) \
        + (body(ch, data) if data else b"")


def test_publishes_differing_in_message_id_and_timestamp_are_taken_by_a_template() -> None:
    """The third of three publishes that differ only in message_id and timestamp comes from
    the template learnt from the first two (publish_template.py): the same method and hot
    fields objects, its own property bytes and body."""
    stream = b"".join(_tagged(1, "k", n, b"body-%d" % n, delivery_mode=2) for n in range(4))
    got = [f[1] for f in frames_of(stream)]
    assert [c.body for c in got] == [b"body-%d" % n for n in range(4)]
    assert [c.header.properties.message_id for c in got] == [f"id-{n:08d}" for n in range(4)]
    assert got[2].method is got[1].method and got[3].header.hot is got[2].header.hot
    assert all(c.header.hot[0] == 2 for c in got)


@pytest.mark.parametrize("field,values", [
    ("reply_to", ["r1", "r2"]), ("delivery_mode", [1, 2]), ("expiration", ["10", "20"]),
    ("user_id", ["u1", "u2"]), ("priority", [1, 2])])
def test_a_change_of_a_property_the_broker_reads_is_never_a_template_gap(
        field: str, values: list) -> None:
    """Publishes alternating between two values of reply_to (or delivery_mode, priority,
    expiration, user_id) with their own message_ids: each command's hot fields are its own
    frame's, never those of the publish a template was learnt from."""
    order = [values[i // 3 % 2] for i in range(12)]
    got = [f[1] for f in frames_of(b"".join(
        _tagged(1, "k", n, b"xyz", **{field: v}) for n, v in enumerate(order)))]
    index = {"delivery_mode": 0, "priority": 1, "expiration": 2, "user_id": 3, "reply_to": 4}
    assert [c.header.hot[index[field]] for c in got] == order


_CHANGES = st.one_of(  # one property (or the channel, or the body size) changed per run
    st.tuples(st.just(0), st.sampled_from([1, 2])), st.tuples(st.just(1), st.sampled_from("ab")),
    st.tuples(st.just(2), st.sampled_from([None, 1, 2])),
    st.tuples(st.just(3), st.sampled_from([None, "r1", "r2"])),
    st.tuples(st.just(4), st.sampled_from([None, {"task": "t"}, {"task": "u"}, {"n": 1}])),
    st.tuples(st.just(5), st.integers(0, 3)))
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_CHANGES, st.lists(st.tuples(st.integers(0, 10**8 - 1),
                                                      st.binary(min_size=3, max_size=3)),
                                            min_size=1, max_size=6), st.booleans()),
                min_size=1, max_size=8),
       st.lists(st.integers(1, 90), min_size=1, max_size=40))
def test_templated_publish_streams_decode_like_pamqp(runs: list, cuts: list) -> None:
    """Runs of publishes with their own message_id and timestamp; between runs the other
    properties (the hot ones, a headers table), the channel or the body size change; over
    two channels, fed in arbitrary pieces, read with next_frame and next_publish as the
    reader reads them: every command's property bytes, hot fields and body are the frames'
    own (a template never hands out another publish's values)."""
    import datetime

    from broker.protocol.assembler import CommandAssembler
    from broker.protocol.properties import scan_properties

    parts, want = [], []
    shape = [1, "a", 2, "r1", {"task": "t"}, 3]
    for (field, value), each, other in runs:
        shape[field] = value
        ch, rk, mode, reply_to, hdrs, size = shape
        for n, data in each:
            data = data[:size]
            parts.append(_tagged(ch, rk, n, data, delivery_mode=mode, reply_to=reply_to,
                                 headers=hdrs))
            raw_props = header(ch, len(data), C.Basic.Properties(
                message_id=f"id-{n:08d}", content_type="application/json",
                timestamp=datetime.datetime.fromtimestamp(1_700_000_000 + n,
                                                          tz=datetime.UTC),
                delivery_mode=mode, reply_to=reply_to, headers=hdrs))[19:-1]
            want.append((ch, rk, raw_props, scan_properties(raw_props), data))
        if other:
            parts.append(method(ch, C.Basic.Qos(prefetch_count=1)))
    stream = b"".join(parts)
    dec = FrameDecoder()
    asms = {1: CommandAssembler(), 2: CommandAssembler()}
    got = []

    def note(ch: int, cmd: Command) -> None:
        got.append((ch, cmd.method.routing_key, cmd.header.raw_properties, cmd.header.hot,
                    cmd.body or b""))

    pos = 0
    for n in cuts + [len(stream)]:
        dec.feed(stream[pos:pos + n])
        pos += n
        while (f := dec.next_frame()) is not None:
            ch, frame = f
            cmd = frame if isinstance(frame, Command) else asms[ch].feed(frame)
            if cmd is not None and cmd.header is not None:
                note(ch, cmd)
                if isinstance(frame, Command):
                    while (more := dec.next_publish(ch)) is not None:
                        note(ch, more)
        if pos >= len(stream):
            break
    assert got == want


def test_publishes_differing_in_a_headers_value_are_taken_by_a_template() -> None:
    """A task id in the headers table (Celery's shape): once table_check has learnt the
    table's layout, the template embeds it, and later publishes come from the template
    with their own table bytes."""
    stream = b"".join(_tagged(1, "k", n, b"xyz", headers={"id": f"{n:036d}", "retries": n})
                      for n in range(8))
    got = [f[1] for f in frames_of(stream)]
    assert [c.header.properties.headers["id"] for c in got] == [f"{n:036d}" for n in range(8)]
    assert [c.header.properties.headers["retries"] for c in got] == list(range(8))
    assert got[7].header.hot is got[6].header.hot  # both from the template
