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
    assert_scan_agrees(raw)


def assert_scan_agrees(raw: bytes) -> None:
    """The scan raises ValueError exactly when the full decoder does, else gives its
    five hot fields (or None: decode it all, which the decoder then does)."""
    try:
        expected = hot_fields(decode_properties_tolerant(raw))
    except (ValueError, RecursionError):
        with pytest.raises(ValueError):
            if scan_properties(raw) is None:  # left to the decoder, which refuses it
                raise ValueError("decoded: refused") from None
    else:
        got = scan_properties(raw)
        assert got is None or got == expected


# --- headers tables: checked at publish, decoded only when read (issue 26) ------------------

def _u32(n: int) -> bytes:
    return struct.pack(">I", n)


def _key() -> st.SearchStrategy[bytes]:
    return st.binary(max_size=6).map(lambda k: bytes([len(k)]) + k)


# every field type tag the decoders read, as raw bytes (pamqp's encoder emits only some)
_fixed_values = st.one_of(
    st.sampled_from([b"V", b"\x00"]),
    st.tuples(st.sampled_from(b"tbB"), st.binary(min_size=1, max_size=1)),
    st.tuples(st.sampled_from(b"su"), st.binary(min_size=2, max_size=2)),
    st.tuples(st.sampled_from(b"Iif"), st.binary(min_size=4, max_size=4)),
    st.tuples(st.sampled_from(b"lLdT"), st.binary(min_size=8, max_size=8)),
    st.tuples(st.just(ord("D")), st.binary(min_size=5, max_size=5)),
    st.tuples(st.sampled_from(b"Sx"), st.binary(max_size=8)).map(
        lambda t: (t[0], _u32(len(t[1])) + t[1])),
).map(lambda v: v if isinstance(v, bytes) else bytes([v[0]]) + v[1])


def _values(children: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    table = st.lists(st.tuples(_key(), children), max_size=4).map(
        lambda pairs: b"F" + _u32(sum(len(k) + len(v) for k, v in pairs))
        + b"".join(k + v for k, v in pairs))
    array = st.lists(children, max_size=4).map(
        lambda vs: b"A" + _u32(sum(map(len, vs))) + b"".join(vs))
    return table | array


raw_values = st.recursive(_fixed_values, _values, max_leaves=12)
raw_tables = st.lists(st.tuples(_key(), raw_values), max_size=5).map(
    lambda pairs: _u32(sum(len(k) + len(v) for k, v in pairs))
    + b"".join(k + v for k, v in pairs))


def _with_headers(table: bytes, delivery_mode: int = 2) -> bytes:
    """content_type "ct", headers `table`, delivery_mode: flags 0x8000|0x2000|0x1000."""
    return b"\xb0\x00" + b"\x02ct" + table + bytes([delivery_mode])


@settings(max_examples=400, deadline=None)
@given(raw_tables)
def test_scan_checks_a_headers_table_without_decoding_it(table: bytes) -> None:
    raw = _with_headers(table)
    decoded = decode_properties_tolerant(raw)
    for _ in range(3):  # walked, its layout noted, then learnt and matched
        got = scan_properties(raw)
        if "CC" in decoded.headers or "BCC" in decoded.headers:
            assert got is None  # sender-selected distribution: decoded at once
        else:
            assert got == hot_fields(decoded) == (2, None, None, None, None)


@settings(max_examples=600, deadline=None)
@given(raw_tables, st.data())
def test_scan_refuses_exactly_the_broken_tables_the_decoder_refuses(
        table: bytes, data: st.DataObject) -> None:
    raw = bytearray(_with_headers(table))
    if data.draw(st.booleans()):  # the unbroken layout learnt first: the match must not lie
        for _ in range(3):
            scan_properties(bytes(raw))
    for _ in range(data.draw(st.integers(1, 3))):  # flip, cut or grow somewhere
        how = data.draw(st.sampled_from(["flip", "cut", "grow"]))
        at = data.draw(st.integers(0, max(0, len(raw) - 1)))
        if how == "flip" and raw:
            raw[at] = data.draw(st.integers(0, 255))
        elif how == "cut":
            del raw[at:at + data.draw(st.integers(1, 4))]
        else:
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=4))
    assert_scan_agrees(bytes(raw))


@given(props_st, st.dictionaries(short, st.none() | st.booleans() | st.integers(-2**31, 2**31 - 1)
                                 | short | st.lists(st.integers(0, 9), max_size=3),
                                 max_size=5))
def test_scan_of_pamqp_encoded_headers(props: C.Basic.Properties, headers: dict) -> None:
    props.headers = headers
    raw = props.marshal()
    got = scan_properties(raw)
    if "CC" in headers or "BCC" in headers:
        assert got is None
    else:
        assert got == hot_fields(decode_properties_tolerant(raw))


def test_deep_nesting_is_left_to_the_decoder() -> None:
    value = b"V"
    for _ in range(40):
        value = b"A" + _u32(len(value)) + value
    raw = _with_headers(_u32(2 + len(value)) + b"\x01k" + value)
    assert scan_properties(raw) is None
    assert decode_properties_tolerant(raw).headers["k"] is not None


def test_cc_and_bcc_tables_are_decoded_at_once() -> None:
    for key in ("CC", "BCC"):
        raw = C.Basic.Properties(headers={key: ["a"]}, delivery_mode=2).marshal()
        assert scan_properties(raw) is None
        hdr = decode_header(struct.pack(">HHQ", 60, 0, 3) + raw)
        assert hdr.decoded is not None and hdr.decoded.headers == {key: ["a"]}


def test_a_learnt_layout_accepts_new_values_and_refuses_a_new_structure() -> None:
    def table(task_id: bytes, tag: bytes = b"S") -> bytes:
        body = b"\x02id" + tag + _u32(36) + task_id + b"\x07retriesb\x01"
        return _with_headers(_u32(len(body)) + body)

    for i in range(3):
        assert scan_properties(table(b"%036d" % i)) == (2, None, None, None, None)
    assert scan_properties(table(b"x" * 36)) == (2, None, None, None, None)  # matched
    with pytest.raises(ValueError):
        scan_properties(table(b"x" * 36, tag=b"?"))  # same length, unknown tag

    def keyed(key: bytes) -> bytes:
        body = b"\x02" + key + b"A" + _u32(6) + b"S" + _u32(1) + b"q"
        return _with_headers(_u32(len(body)) + body)

    for _ in range(3):
        assert scan_properties(keyed(b"XY")) == (2, None, None, None, None)
    assert scan_properties(keyed(b"CC")) is None  # keys are part of the layout


def test_headers_table_stays_encoded_until_read() -> None:
    raw = C.Basic.Properties(headers={"a": 1, "nested": {"b": [1, "x"]}},
                             delivery_mode=2).marshal()
    hdr = decode_header(struct.pack(">HHQ", 60, 0, 3) + raw)
    assert hdr.decoded is None and hdr.hot == (2, None, None, None, None)
    message = Message.from_wire("x", "k", raw, hdr.hot, b"abc")
    assert message.has_headers and message._properties is None
    assert message.headers == {"a": 1, "nested": {"b": [1, "x"]}}  # decoded now
    assert message.wire_properties() is raw


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
