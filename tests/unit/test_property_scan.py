"""The hot-property scan (issue 15: properties stay encoded unless asked for) agrees with the
full decoder: the same five values, and ValueError on exactly the bytes the decoder refuses.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands as C

from broker.errors import AMQPError, close_args
from broker.message import Message
from broker.protocol.framing import FrameDecoder, decode_header
from broker.protocol.properties import (
    decode_properties_tolerant,
    hot_fields,
    scan_properties,
)

short = st.text(max_size=20).filter(lambda s: len(s.encode()) <= 255)
props_st = st.builds(
    C.Basic.Properties,
    content_type=st.none() | short,
    content_encoding=st.none() | short,
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 255),
    correlation_id=st.none() | short,
    reply_to=st.none() | short,
    expiration=st.none() | st.from_regex(r"\A[0-9]{1,9}\Z"),
    message_id=st.none() | short,
    message_type=st.none() | short,
    user_id=st.none() | short,
    app_id=st.none() | short,
)


@settings(max_examples=300, deadline=None)
@given(props_st)
def test_scan_gives_the_decoders_hot_fields(props: C.Basic.Properties) -> None:
    raw = props.marshal()
    assert scan_properties(raw) == hot_fields(decode_properties_tolerant(raw))


@settings(max_examples=300, deadline=None)
@given(props_st, st.data())
def test_scan_refuses_exactly_what_the_decoder_refuses(props: C.Basic.Properties,
                                                       data: st.DataObject) -> None:
    raw = props.marshal()
    cut = data.draw(st.integers(0, len(raw) + 3))
    mutated = raw[:cut] if cut <= len(raw) else raw + b"\x00" * (cut - len(raw))
    assert_scan_agrees(mutated)


@given(st.binary(max_size=40))
def test_scan_on_random_bytes_agrees(raw: bytes) -> None:
    if len(raw) >= 2 and raw[0] & 0x20:  # a headers table: the scan leaves it to the decoder
        return
    assert_scan_agrees(raw)


def assert_scan_agrees(raw: bytes) -> None:
    """The scan raises ValueError exactly when the full decoder does, else gives its
    five hot fields."""
    try:
        expected = hot_fields(decode_properties_tolerant(raw))
    except ValueError:
        with pytest.raises(ValueError):
            scan_properties(raw)
    else:
        assert scan_properties(raw) == expected


def test_headers_table_is_decoded_at_once() -> None:
    raw = C.Basic.Properties(headers={"a": 1}, delivery_mode=2).marshal()
    assert scan_properties(raw) is None
    hdr = decode_header(struct.pack(">HHQ", 60, 0, 3) + raw)
    assert hdr.decoded is not None and hdr.decoded.headers == {"a": 1}
    assert hdr.hot == (2, None, None, None, None)


def test_header_without_table_decodes_lazily_and_message_keeps_bytes() -> None:
    props = C.Basic.Properties(content_type="text/plain", delivery_mode=2, priority=7,
                               expiration="100", message_id="m")
    raw = props.marshal()
    hdr = decode_header(struct.pack(">HHQ", 60, 0, 3) + raw)
    assert hdr.decoded is None and hdr.hot == (2, 7, "100", None, None)
    message = Message.from_wire("x", "k", raw, hdr.hot, b"abc")
    assert message.persistent and message.priority == 7 and message.expiration == "100"
    assert message.headers is None and message.wire_properties() is raw
    assert message.properties.message_id == "m"  # decoded on first use
    assert hdr.properties.content_type == "text/plain"


def test_decoder_still_501_for_a_truncated_list_without_headers() -> None:
    raw = C.Basic.Properties(content_type="text/plain").marshal()[:-1]
    payload = struct.pack(">HHQ", 60, 0, 3) + raw
    frame = struct.pack(">BHI", 2, 1, len(payload)) + payload + b"\xce"
    dec = FrameDecoder()
    dec.feed(frame)
    with pytest.raises(AMQPError) as info:
        dec.next_frame()
    assert close_args(info.value)[0] == 501
