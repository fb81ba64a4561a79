"""The stream protocol's frame codec (broker/stream_protocol/core.py) against frames built
by hand from PROTOCOL.adoc's layouts (issue 37 item 1): what a client sends parses to the
named fields, what the server sends has the documented bytes, and malformed or oversized
frames raise."""

from __future__ import annotations

import struct

import pytest

from broker.stream import osiris_chunk as oc
from broker.stream_protocol import core


def s(text: str) -> bytes:
    b = text.encode()
    return struct.pack(">H", len(b)) + b


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def test_split_frames_across_reads_and_refuse_one_above_frame_max():
    one = frame(struct.pack(">HHI", 17, 1, 7) + struct.pack(">I", 0))
    two = frame(struct.pack(">HH", 23, 1))
    sp = core.FrameSplitter(frame_max=64)
    data = one + two
    got = []
    for i in range(len(data)):  # one byte at a time
        got += sp.feed(data[i:i + 1])
    assert got == [one[4:], two[4:]]
    assert sp.feed(struct.pack(">I", 64) + b"x" * 64) == [b"x" * 64]  # the size field excluded
    with pytest.raises(core.FrameTooLarge) as err:
        sp.feed(struct.pack(">I", 65) + b"x")
    assert err.value.size == 65


def test_peer_properties_sasl_and_open_requests():
    f = core.parse(struct.pack(">HHII", 17, 1, 3, 1) + s("product") + s("RabbitMQ Stream"))
    assert (f.name, f.corr, f.fields) == ("peer_properties", 3,
                                         {"properties": {"product": "RabbitMQ Stream"}})
    f = core.parse(struct.pack(">HHI", 18, 1, 4))
    assert f.name == "sasl_handshake" and f.corr == 4
    f = core.parse(struct.pack(">HHI", 19, 1, 5) + s("PLAIN")
                   + struct.pack(">i", 12) + b"\0guest\0guest")
    assert f.fields == {"mechanism": "PLAIN", "response": b"\0guest\0guest"}
    f = core.parse(struct.pack(">HHI", 19, 1, 5) + s("EXTERNAL") + struct.pack(">i", -1))
    assert f.fields == {"mechanism": "EXTERNAL", "response": b""}
    f = core.parse(struct.pack(">HHI", 21, 1, 6) + s("/"))
    assert f.fields == {"virtual_host": "/"}
    # the client's tune is a response without a correlation id
    f = core.parse(struct.pack(">HHII", 20 | 0x8000, 1, 1048576, 60))
    assert f.response and f.fields == {"frame_max": 1048576, "heartbeat": 60}


def test_publish_v1_and_v2_keep_ids_filters_and_messages():
    v1 = struct.pack(">HHBI", 2, 1, 7, 2) + struct.pack(">Q", 1) + struct.pack(">i", 3) + b"abc" \
        + struct.pack(">Q", 2) + struct.pack(">i", 0)
    f = core.parse(v1)
    assert f.fields == {"publisher_id": 7, "messages": [(1, None, b"abc"), (2, None, b"")]}
    v2 = struct.pack(">HHBI", 2, 2, 7, 1) + struct.pack(">Q", 9) + s("eu") \
        + struct.pack(">i", 1) + b"z"
    assert core.parse(v2).fields["messages"] == [(9, "eu", b"z")]


def test_subscribe_with_every_offset_spec_and_properties():
    head = struct.pack(">HHIB", 7, 1, 11, 3) + s("s1")
    cases = [
        (struct.pack(">h", 1), (core.OFFSET_FIRST, None)),
        (struct.pack(">h", 2), (core.OFFSET_LAST, None)),
        (struct.pack(">h", 3), (core.OFFSET_NEXT, None)),
        (struct.pack(">hQ", 4, 42), (core.OFFSET_OFFSET, 42)),
        (struct.pack(">hq", 5, -5), (core.OFFSET_TIMESTAMP, -5)),
    ]
    for spec, want in cases:
        f = core.parse(head + spec + struct.pack(">H", 10))
        assert f.fields == {"subscription_id": 3, "stream": "s1", "offset_spec": want,
                            "credit": 10, "properties": {}}
    props = struct.pack(">I", 1) + s("single-active-consumer") + s("true")
    f = core.parse(head + struct.pack(">h", 1) + struct.pack(">H", 1) + props)
    assert f.fields["properties"] == {"single-active-consumer": "true"}


def test_commands_without_correlation_ids():
    f = core.parse(struct.pack(">HHBH", 9, 1, 3, 5))
    assert (f.name, f.fields) == ("credit", {"subscription_id": 3, "credit": 5})
    f = core.parse(struct.pack(">HH", 10, 1) + s("app") + s("s1") + struct.pack(">Q", 77))
    assert f.fields == {"reference": "app", "stream": "s1", "offset": 77}
    assert core.parse(struct.pack(">HH", 23, 1)).name == "heartbeat"


def test_super_stream_and_versions_requests():
    body = struct.pack(">HHI", 29, 1, 8) + s("inv") + struct.pack(">I", 2) + s("inv-0") \
        + s("inv-1") + struct.pack(">I", 2) + s("0") + s("1") + struct.pack(">I", 0)
    f = core.parse(body)
    assert f.fields == {"super_stream": "inv", "partitions": ["inv-0", "inv-1"],
                        "binding_keys": ["0", "1"], "arguments": {}}
    f = core.parse(struct.pack(">HHII", 27, 1, 9, 1) + struct.pack(">HHH", 2, 1, 2))
    assert f.fields == {"commands": [(2, 1, 2)]}


def test_unknown_key_or_version_and_malformed_frames():
    assert core.parse(struct.pack(">HHI", 99, 1, 1)).fields == {"unknown": True}
    assert core.parse(struct.pack(">HHI", 21, 9, 1) + s("/")).fields == {"unknown": True}
    with pytest.raises(core.ParseError):
        core.parse(struct.pack(">HHI", 21, 1, 1) + b"\x00\x05ab")  # string cut short
    with pytest.raises(core.ParseError):
        core.parse(struct.pack(">HHI", 12, 1, 1) + b"\x01\x02")  # a byte left over
    with pytest.raises(core.ParseError):
        core.parse(struct.pack(">HHI", 21, 1, 1) + s("x")[:2] + b"\xff")  # not UTF-8


def test_server_frames_have_the_documented_bytes():
    assert core.tune(1048576, 60) == struct.pack(">IHHII", 12, 20, 1, 1048576, 60)
    assert core.response(core.OPEN, 6, core.OK) == struct.pack(">IHHIH", 10, 0x8015, 1, 6, 1)
    assert core.publish_confirm(7, [1, 2]) == struct.pack(">IHHBIQQ", 25, 3, 1, 7, 2, 1, 2)
    assert core.publish_confirm(7, struct.pack(">QQ", 1, 2)) == core.publish_confirm(7, [1, 2])
    assert core.publish_error(7, [(5, core.PUBLISHER_DOES_NOT_EXIST)]) == struct.pack(
        ">IHHBIQH", 19, 4, 1, 7, 1, 5, 0x12)
    assert core.credit_response(core.SUBSCRIPTION_ID_DOES_NOT_EXIST, 3) == struct.pack(
        ">IHHHB", 7, 0x8009, 1, 4, 3)
    chunk = b"C" * 10
    assert core.deliver_header(3, len(chunk)) + chunk == frame(struct.pack(">HHB", 8, 1, 3)
                                                               + chunk)
    assert core.deliver_header(3, len(chunk), 2, 99) + chunk == frame(
        struct.pack(">HHBQ", 8, 2, 3, 99) + chunk)
    md = core.metadata_response(4, [("localhost", 5552)],
                                [("s1", core.OK, 0, []),
                                 ("nope", core.STREAM_DOES_NOT_EXIST, 0xFFFF, [])])
    assert md == frame(struct.pack(">HHII", 0x800F, 1, 4, 1) + struct.pack(">H", 0)
                       + s("localhost") + struct.pack(">I", 5552) + struct.pack(">I", 2)
                       + s("s1") + struct.pack(">HHI", 1, 0, 0)
                       + s("nope") + struct.pack(">HHI", 2, 0xFFFF, 0))
    assert core.close(1, 1, "OK") == frame(struct.pack(">HHIH", 22, 1, 1, 1) + s("OK"))
    assert core.consumer_update(5, 3, True) == frame(struct.pack(">HHIBB", 26, 1, 5, 3, 1))


def test_publish_keeps_a_sub_entry_batch_as_it_came():
    body = b"\x00\x00\x00\x01a\x00\x00\x00\x01b"
    batch = struct.pack(">BHII", 0x80 | (1 << 4), 2, 99, len(body)) + body  # gzip flag
    f = core.parse(struct.pack(">HHBI", 2, 1, 4, 2) + struct.pack(">Q", 7) + batch
                   + struct.pack(">Qi", 8, 1) + b"x")
    (pid, flt, sub), simple = f.fields["messages"]
    assert (pid, flt) == (7, None) and simple == (8, None, b"x")
    assert (sub.records, sub.compression, sub.uncompressed_length, sub.data) == (2, 1, 99, body)
    with pytest.raises(core.ParseError):
        core.parse(struct.pack(">HHBI", 2, 1, 4, 1) + struct.pack(">Q", 7) + batch[:-3])


def _publish_v1(items: list[tuple[int, bytes]]) -> bytes:
    return struct.pack(">HHBI", 2, 1, 7, len(items)) + b"".join(
        struct.pack(">QI", pid, len(m)) + m for pid, m in items)


def test_a_publish_frame_of_one_length_is_one_block_laid_out_as_a_chunk_stores_it():
    items = [(10 + i, b"msg%02d" % i) for i in range(50)]
    f = core.parse(_publish_v1(items))
    block = f.fields["messages"]
    assert isinstance(block, core.PublishBlock)
    assert len(block) == 50 and block.entries.count == 50 and block.entries.stride == 9
    assert block.id_list() == [pid for pid, _m in items]
    assert block.ids == b"".join(struct.pack(">Q", pid) for pid, _m in items)
    assert block.entries.data == b"".join(struct.pack(">I", 5) + m for _p, m in items)
    assert block.messages() == [(pid, None, m) for pid, m in items]
    # what encode_chunk makes of the block is what it makes of the messages one by one
    one_by_one = oc.encode_chunk([(None, m) for _p, m in items], 0, 1)
    assert oc.encode_chunk([block.entries], 0, 1) == one_by_one
    halves = [block.entries.head(20), block.entries.tail(20)]
    assert oc.encode_chunk(halves, 0, 1) == one_by_one
    mixed = [(None, items[0][1]), block.entries.tail(1)]
    assert oc.encode_chunk(mixed, 0, 1) == one_by_one


@pytest.mark.parametrize("items", [
    [(1, b"a"), (2, b"bb")],  # lengths differ
    [(1, b"only")],  # one message
    [(1, b"ab"), (2, b"cd"), (3, b"ef")][:0],  # none
])
def test_other_publish_frames_are_read_message_by_message(items):
    got = core.parse(_publish_v1(items)).fields["messages"]
    assert got == [(pid, None, m) for pid, m in items]


def test_a_one_length_frame_cut_short_or_with_a_sub_entry_is_not_a_block():
    items = [(1, b"abc"), (2, b"def")]
    with pytest.raises(core.ParseError):
        core.parse(_publish_v1(items)[:-1])
    # a sub-entry batch has the size field's top bit set: never part of a block
    batch = struct.pack(">QBHII", 3, 0x80, 1, 3, 3) + b"xyz"
    frame_ = struct.pack(">HHBI", 2, 1, 7, 2) + struct.pack(">QI", 1, 3) + b"abc" + batch
    got = core.parse(frame_).fields["messages"]
    assert isinstance(got, list) and isinstance(got[1][2], oc.SubBatch)


def test_a_run_of_like_publish_frames_is_read_as_one_block_in_order():
    """FrameSplitter.feed(blocks=True): publish v1 frames with one head and one message
    length become one (publisher id, PublishBlock) per run, whatever the reads' borders;
    any other frame comes as bytes, in order."""
    def pub(first: int, n: int = 3, pid: int = 7, body: bytes = b"xy") -> bytes:
        return frame(_publish_v1([(first + i, body) for i in range(n)])[:4] + bytes((pid,))
                     + _publish_v1([(first + i, body) for i in range(n)])[5:])

    heartbeat = frame(struct.pack(">HH", 23, 1))
    data = (pub(1) + pub(4) + pub(7) + heartbeat + pub(10, n=2) + pub(12, n=2)
            + pub(14, pid=8) + pub(17, body=b"abc") + pub(20, body=b"abc"))
    for step in (len(data), 7, 1):  # all at once, in pieces, a byte at a time
        sp = core.FrameSplitter(frame_max=1 << 20)
        got = []
        for i in range(0, len(data), step):
            got += sp.feed(data[i:i + step], blocks=True)
        flat = []  # (publisher id, ids) per item; bytes frames as their parse
        for item in got:
            if isinstance(item, tuple):
                pid, block = item
                flat.append((pid, block.id_list(), block.entries.stride))
            else:
                f = core.parse(item)
                msgs = f.fields.get("messages")
                if isinstance(msgs, core.PublishBlock):
                    flat.append((f.fields["publisher_id"], msgs.id_list(), "frame"))
                elif msgs is not None:
                    flat.append((f.fields["publisher_id"], [m[0] for m in msgs], "frame"))
                else:
                    flat.append(f.name)
        ids = [i for x in flat if isinstance(x, tuple) for i in x[1]]
        assert ids == list(range(1, 23))  # every message once, in order
        if step == len(data):  # whole: runs where the heads match
            assert flat == [(7, list(range(1, 10)), 6), "heartbeat", (7, [10, 11, 12, 13], 6),
                            (8, [14, 15, 16], "frame"), (7, list(range(17, 23)), 7)]


def test_a_run_keeps_the_frame_max_check():
    big = frame(_publish_v1([(i, b"x" * 100) for i in range(10)]))
    sp = core.FrameSplitter(frame_max=200)
    with pytest.raises(core.FrameTooLarge):
        sp.feed(big + big, blocks=True)
