"""Content-header properties pamqp cannot turn into Python values (issue 8 item 4): carried as
RabbitMQ carries them, while structurally malformed properties stay 501 FRAME_ERROR.

Bytes in, values out; the frames are fed whole and split at every offset.
"""

from __future__ import annotations

import datetime
import struct
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands as C
from pamqp import decode as pdecode

from broker import storage_codec
from broker.errors import AMQPError, PreconditionFailed, amqp_error, close_args
from broker.exchange.headers import HeadersRouting
from broker.message import Message
from broker.protocol.framing import ContentHeader, FrameDecoder, decode_properties
from broker.protocol.properties import (
    Timestamp,
    decode_properties_tolerant,
    decode_table,
)

GO_ZERO = 2**64 - 62135596800  # Go's zero time.Time (-62135596800 s) as the unsigned wire value
MAX_U64 = 2**64 - 1
TIMESTAMP_FLAG = 0x0040
HEADERS_FLAG = 0x2000
DELIVERY_MODE_FLAG = 0x1000


def ts_props(value: int) -> bytes:
    """raw properties: only the timestamp property."""
    return struct.pack(">HQ", TIMESTAMP_FLAG, value)


def table(*pairs: tuple[bytes, bytes]) -> bytes:
    """A field table from (key, tagged value bytes) pairs."""
    body = b"".join(bytes((len(k),)) + k + v for k, v in pairs)
    return struct.pack(">I", len(body)) + body


def T(value: int) -> bytes:
    return b"T" + struct.pack(">Q", value)


def S(text: bytes) -> bytes:
    return b"S" + struct.pack(">I", len(text)) + text


def headers_props(tbl: bytes, delivery_mode: int = 2) -> bytes:
    """raw properties: headers + delivery_mode (+ timestamp GO_ZERO)."""
    return (
        struct.pack(">H", HEADERS_FLAG | DELIVERY_MODE_FLAG | TIMESTAMP_FLAG)
        + tbl
        + bytes((delivery_mode,))
        + struct.pack(">Q", GO_ZERO)
    )


BAD_TABLE = table(
    (b"when", T(GO_ZERO)),
    (b"kind", S(b"order")),
    (b"list", b"A" + struct.pack(">I", 9) + T(MAX_U64)),
    (b"n", b"I" + struct.pack(">i", -7)),
    (b"nested", b"F" + table((b"t", T(MAX_U64)), (b"ok", b"t\x01"))),
)
BAD_HEADERS = {
    "when": Timestamp(GO_ZERO),
    "kind": "order",
    "list": [Timestamp(MAX_U64)],
    "n": -7,
    "nested": {"t": Timestamp(MAX_U64), "ok": True},
}


def header_frame(raw_props: bytes, channel: int = 1, body_size: int = 3) -> bytes:
    payload = struct.pack(">HHQ", 60, 0, body_size) + raw_props
    return struct.pack(">BHI", 2, channel, len(payload)) + payload + b"\xce"


def feed_all(chunks: list[bytes]) -> list:
    dec = FrameDecoder()
    out = []
    for chunk in chunks:
        dec.feed(chunk)
        while (f := dec.next_frame()) is not None:
            out.append(f)
    assert dec.buffered == 0
    return out


def every_split(data: bytes) -> list[list[bytes]]:
    return [[data]] + [[data[:i], data[i:]] for i in range(1, len(data))] + [
        [data[i : i + 1] for i in range(len(data))]
    ]


# --- values ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [GO_ZERO, MAX_U64, 2**63, 2**63 - 1])
def test_out_of_range_timestamp_property_is_a_timestamp_int(value: int) -> None:
    with pytest.raises((ValueError, OverflowError)):
        pdecode.timestamp(struct.pack(">Q", value))  # why the fallback exists
    props = decode_properties(ts_props(value))
    assert type(props.timestamp) is Timestamp
    assert props.timestamp == value
    assert struct.pack(">Q", props.timestamp) == struct.pack(">Q", value)
    assert repr(props.timestamp) == f"Timestamp({value})"


@pytest.mark.parametrize("value", [0, 1_700_000_000, 0xFFFFFFFF, 1_700_000_000_000])
def test_in_range_timestamp_stays_pamqps_datetime(value: int) -> None:
    want = pdecode.timestamp(struct.pack(">Q", value))[1]
    assert decode_properties(ts_props(value)).timestamp == want
    assert decode_properties_tolerant(ts_props(value)).timestamp == want
    assert isinstance(want, datetime.datetime)


def test_out_of_range_timestamps_inside_headers_and_other_properties() -> None:
    raw = headers_props(BAD_TABLE)
    for chunks in every_split(header_frame(raw)):
        [(channel, hdr)] = feed_all(chunks)
        assert channel == 1 and type(hdr) is ContentHeader
        assert hdr.raw_properties == raw  # forwarded as received
        assert hdr.properties.headers == BAD_HEADERS
        assert type(hdr.properties.headers["nested"]["t"]) is Timestamp
        assert hdr.properties.delivery_mode == 2
        assert hdr.properties.timestamp == Timestamp(GO_ZERO)


def test_tolerant_decoder_matches_pamqp_on_every_field_type() -> None:
    """Where pamqp has a value, the fallback gives the same one (same type, same Decimal
    digits), so the headers exchange sees the same headers whichever path decoded them."""
    tbl = table(
        (b"t", b"t\x01"),
        (b"f0", b"t\x00"),
        (b"b", b"b\xff"),
        (b"B", b"B\xff"),
        (b"s", b"s\xff\xfe"),
        (b"u", b"u\xff\xfe"),
        (b"I", b"I" + struct.pack(">i", -(2**31))),
        (b"i", b"i" + struct.pack(">I", 2**32 - 1)),
        (b"l", b"l" + struct.pack(">q", -(2**63))),
        (b"L", b"L" + struct.pack(">q", 2**63 - 1)),
        (b"f", b"f" + struct.pack(">f", 1.5)),
        (b"d", b"d" + struct.pack(">d", -2.25)),
        (b"D", b"D\x02" + struct.pack(">I", 12345)),
        (b"D0", b"D\x03" + struct.pack(">I", 0)),
        (b"S", S("é".encode())),
        (b"Sbin", S(b"\xff\xfe")),
        (b"x", b"x" + struct.pack(">I", 2) + b"\x00\x01"),
        (b"A", b"A" + struct.pack(">I", 3) + b"b\x01V"),
        (b"T", T(1_700_000_000)),
        (b"F", b"F" + table((b"k", S(b"v")))),
        (b"V", b"V"),
        (b"Z", b"\x00"),
    )
    consumed, want = pdecode.field_table(tbl)
    got, end = decode_table(tbl, 0, len(tbl))
    assert (got, end) == (want, consumed) and end == len(tbl)
    for key, value in want.items():
        assert type(got[key]) is type(value), key
    assert got["D"].as_tuple() == want["D"].as_tuple() == Decimal("123.45").as_tuple()
    assert got["D0"].as_tuple() == want["D0"].as_tuple()


def test_tolerant_decoder_matches_pamqp_on_rich_properties() -> None:
    props = C.Basic.Properties(
        content_type="application/json",
        headers={"x-int": 7, "x-str": "v", "nested": {"a": [1, "b"]}, "flag": True},
        delivery_mode=2,
        priority=5,
        correlation_id="corr",
        expiration="60000",
        timestamp=datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC),
        user_id="guest",
        app_id="app",
    )
    raw = props.marshal()
    assert decode_properties_tolerant(raw) == decode_properties(raw) == props


def test_non_utf8_shortstr_and_key_are_surrogate_escaped() -> None:
    raw = (
        struct.pack(">H", 0x8000 | HEADERS_FLAG | 0x0010)  # content_type, headers, user_id
        + b"\x02\xff\xfe"
        + table((b"\xc3(", S(b"v")), (b"ok", S(b"\xff")))
        + b"\x03g\xe9t"
    )
    props = decode_properties(raw)
    assert props.content_type == "\udcff\udcfe"
    assert props.content_type.encode("utf-8", "surrogateescape") == b"\xff\xfe"
    assert props.headers == {"\udcc3(": "v", "ok": b"\xff"}
    assert props.user_id.encode("utf-8", "surrogateescape") == b"g\xe9t"
    assert props.user_id != "gét"  # never equals a valid user name: 406 on publish, as RabbitMQ


# --- structural errors stay 501 ---------------------------------------------------------------


def frame_error(raw_props: bytes) -> AMQPError:
    dec = FrameDecoder()
    dec.feed(header_frame(raw_props))
    with pytest.raises(AMQPError) as info:
        dec.next_frame()
    return info.value


@pytest.mark.parametrize(
    "raw_props",
    [
        ts_props(GO_ZERO)[:-1],  # truncated timestamp
        ts_props(GO_ZERO) + b"\x00",  # trailing byte
        headers_props(BAD_TABLE)[:-9],  # truncated after the table
        headers_props(table((b"when", T(GO_ZERO)), (b"q", b"Q\x00"))),  # unknown tag 'Q'
        headers_props(table((b"when", T(GO_ZERO)), (b"k", b"T\x00\x00"))),  # T past table end
        headers_props(struct.pack(">I", 10) + b"\x04when" + T(GO_ZERO)),  # T overruns length
        headers_props(struct.pack(">I", 3) + b"\x05abcde" + b"t\x01"),  # key overruns length
        headers_props(table((b"k", b"A" + struct.pack(">I", 5) + T(GO_ZERO)[:5]))),  # in array
        headers_props(table((b"when", T(GO_ZERO)), (b"k", b""))),  # key without a value
        b"\x00",  # half a flags word
        struct.pack(">H", 0x0001),  # continuation flag without a next word
    ],
)
def test_malformed_properties_are_still_501(raw_props: bytes) -> None:
    exc = frame_error(raw_props)
    assert close_args(exc)[0] == 501
    with pytest.raises(ValueError):
        decode_properties_tolerant(raw_props)


def test_every_truncation_of_a_tolerated_header_is_501() -> None:
    raw = headers_props(BAD_TABLE)
    for n in range(2, len(raw)):  # under 2 bytes the frame is too short: "unknown_frame"
        exc = frame_error(raw[:n])
        code, text, _, _ = close_args(exc)
        assert (code, text[:28]) == (501, "FRAME_ERROR - cannot decode "), n


# --- where the broker reads the values --------------------------------------------------------


def test_message_persistent_and_headers_routing_with_out_of_range_timestamps() -> None:
    raw = headers_props(BAD_TABLE)
    props = decode_properties(raw)
    msg = Message("hx", "", props, b"abc", raw_properties=raw)
    assert msg.persistent
    assert msg.wire_properties() is raw  # never re-encoded
    routing = HeadersRouting()
    routing.add_binding("by-kind", "", {"kind": "order"})
    routing.add_binding("by-n", "", {"x-match": "any", "n": -7, "absent": 1})
    routing.add_binding("nope", "", {"kind": "other"})
    routing.add_binding("has-when", "", {"when": None})  # void: header present, any value
    assert set(routing.route("", props.headers)) == {"by-kind", "by-n", "has-when"}


def test_storage_codec_round_trips_out_of_range_timestamps() -> None:
    raw = headers_props(BAD_TABLE)
    msg = Message("hx", "rk", decode_properties(raw), b"body", raw_properties=raw)
    data = storage_codec.encode(msg)
    back = storage_codec.decode(msg.msg_id, data)
    assert back.raw_properties == raw
    assert back.properties.headers == BAD_HEADERS
    assert back.properties.timestamp == Timestamp(GO_ZERO)
    assert back.persistent and back.body == b"body"


def test_storage_codec_rejects_malformed_properties() -> None:
    msg = Message("", "rk", C.Basic.Properties(), b"", raw_properties=ts_props(GO_ZERO)[:-1])
    with pytest.raises(storage_codec.CodecError):
        storage_codec.decode(msg.msg_id, storage_codec.encode(msg))


def test_pamqp_encodes_what_it_decoded_in_range() -> None:
    """Re-encoding (Message.wire_properties without raw bytes) only ever sees values the broker
    built itself; in-range values decoded by the fallback still re-encode byte for byte."""
    raw = C.Basic.Properties(headers={"a": 1, "b": "x"}, message_id="m").marshal()
    assert decode_properties_tolerant(raw).marshal() == raw


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([b"", struct.pack(">H", HEADERS_FLAG)]), st.binary(max_size=60))
def test_random_properties_fallback_agrees_with_pamqp(prefix: bytes, data: bytes) -> None:
    """Random property lists (half of them a headers table): the fallback raises nothing but
    ValueError, and where both decoders have a value it is the same one."""
    raw = prefix + data
    try:
        tolerant = decode_properties_tolerant(raw)
    except ValueError:
        tolerant = None
    try:
        fast = decode_properties(raw)
    except AMQPError as exc:
        assert close_args(exc)[0] == 501
        assert tolerant is None
        return
    if tolerant is not None:
        assert dict(tolerant) == dict(fast)


def test_error_text_with_a_surrogate_escaped_value_is_valid_utf8() -> None:
    """The 406 for a non-UTF-8 user_id quotes it; the reply text must still encode."""
    user_id = decode_properties(struct.pack(">H", 0x0010) + b"\x03g\xe9t").user_id
    exc = amqp_error(PreconditionFailed, f"user_id property set to '{user_id}'")
    assert close_args(exc)[:2] == (406, "PRECONDITION_FAILED - user_id property set to 'g\ufffdt'")
    long = amqp_error(PreconditionFailed, "\udce9" * 300)
    assert len(close_args(long)[1].encode()) <= 255
