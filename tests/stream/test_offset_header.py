"""with_offset_header adds x-stream-offset to encoded properties without decoding them: the
result decodes to the same properties plus the header (a long), whatever was there."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands

from broker.protocol.encoding import encode_properties
from broker.protocol.framing import decode_properties
from broker.stream.queue import with_offset_header

_text = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), min_size=1,
               max_size=20)  # pamqp encodes "" as absent


@settings(max_examples=200, deadline=None)
@given(content_type=st.none() | _text, content_encoding=st.none() | _text,
       headers=st.none() | st.dictionaries(_text, st.integers(-1000, 1000)
                                           | _text, max_size=4),
       delivery_mode=st.none() | st.sampled_from([1, 2]), message_id=st.none() | _text,
       offset=st.integers(0, 2**62))
def test_the_header_is_added_and_nothing_else_changes(content_type, content_encoding,
                                                       headers, delivery_mode, message_id,
                                                       offset):
    props = commands.Basic.Properties(content_type=content_type,
                                      content_encoding=content_encoding, headers=headers,
                                      delivery_mode=delivery_mode, message_id=message_id)
    raw = with_offset_header(encode_properties(props), offset)
    got = decode_properties(raw)
    assert got.headers == {**(headers or {}), "x-stream-offset": offset}
    assert (got.content_type, got.content_encoding, got.delivery_mode, got.message_id) == (
        content_type, content_encoding, delivery_mode, message_id)
    assert b"x-stream-offsetl" in raw  # a long, as RabbitMQ sends it
