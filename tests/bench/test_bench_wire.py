"""The bench's hand-built frames against pamqp, and the client's frame loop at every split."""

from __future__ import annotations

import asyncio

import pytest
from pamqp import commands, frame, header
from pamqp.body import ContentBody

from bench import wire
from bench.amqp import Channel, Connection
from bench.consumer import Consumer, Tally


def frames(data: bytes) -> list[tuple[int, object]]:
    """Split a byte stream into (channel, pamqp frame) with pamqp itself."""
    out = []
    while data:
        used, channel, value = frame.unmarshal(data)
        out.append((channel, value))
        data = data[used:]
    return out


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("mandatory", [False, True])
def test_publish_template_round_trips_through_pamqp(persistent: bool, mandatory: bool) -> None:
    t = wire.PublishTemplate(3, "ex", "rk.1", 40, persistent=persistent, mandatory=mandatory)
    data = bytes(t.build(3, 123456789, wire.make_tag(7, 10)))
    got = frames(data)
    assert len(got) == 9 and len(data) == 3 * t.size
    for i in range(3):
        (c1, pub), (c2, head), (c3, body) = got[3 * i : 3 * i + 3]
        assert (c1, c2, c3) == (3, 3, 3)
        assert isinstance(pub, commands.Basic.Publish)
        assert (pub.exchange, pub.routing_key, pub.mandatory) == ("ex", "rk.1", mandatory)
        assert isinstance(head, header.ContentHeader)
        assert head.body_size == 40
        assert head.properties.delivery_mode == (2 if persistent else 1)
        ts, tag = wire.BODY_HEADER.unpack_from(body.value)
        assert ts == 123456789 and wire.split_tag(tag) == (7, 10 + i)
        assert len(body.value) == 40


def test_large_body_is_split_at_frame_max_with_the_header_in_the_first_frame() -> None:
    t = wire.PublishTemplate(1, "", "q", 10_000, frame_max=4096)
    got = frames(bytes(t.build_tags([wire.make_tag(1, 5)], 42)))
    bodies = [v.value for _, v in got[2:]]
    assert [len(b) for b in bodies] == [4088, 4088, 1824]
    assert wire.BODY_HEADER.unpack_from(bodies[0]) == (42, wire.make_tag(1, 5))


def test_body_smaller_than_the_bench_header_is_refused() -> None:
    with pytest.raises(ValueError) as info:
        wire.PublishTemplate(1, "", "q", 15)
    assert "16" in str(info.value)


@pytest.mark.parametrize("multiple", [False, True])
def test_ack_and_nack_frames_match_pamqp(multiple: bool) -> None:
    assert wire.ack_frame(5, 2**40 + 3, multiple) == frame.marshal(
        commands.Basic.Ack(2**40 + 3, multiple), 5)
    assert wire.nack_frame(5, 9, multiple, True) == frame.marshal(
        commands.Basic.Nack(9, multiple, True), 5)
    raw = frame.marshal(commands.Basic.Nack(77, multiple, False), 1)
    assert wire.parse_ack(raw, 7) == (77, multiple)


@pytest.mark.parametrize("ctag", ["", "c", "amq.ctag-" + "x" * 100])
def test_deliver_encoder_and_parser_match_pamqp(ctag: str) -> None:
    enc = wire.DeliverEncoder(2, ctag, "ex", "rk")
    assert enc.encode(99) == frame.marshal(commands.Basic.Deliver(ctag, 99, False, "ex", "rk"), 2)
    assert wire.parse_deliver_tag(enc.encode(2**50), 7) == 2**50


def test_scan_tells_need_more_from_malformed() -> None:
    raw = frame.marshal(commands.Basic.Ack(1, False), 1)
    for cut in range(len(raw)):
        assert wire.scan(raw[:cut], 0, 131072) is None
    assert wire.scan(raw, 0, 131072) == (1, 1, 7, len(raw) - 1)
    with pytest.raises(wire.FrameError):
        wire.scan(raw[:-1] + b"\x00", 0, 131072)
    with pytest.raises(wire.FrameError):
        wire.scan(raw, 0, 4)


def _stream(frame_max: int) -> tuple[bytes, list[tuple[int, int]]]:
    """Deliveries from 2 producers, bodies 16 B .. 9000 B (several body frames at 4096),
    plus a confirm and a stray heartbeat, as pamqp encodes them."""
    parts, expect = [], []
    sizes = [16, 100, 4088, 4089, 9000]
    for i, size in enumerate(sizes * 2):
        pid, seq = i % 2, i // 2
        parts.append(frame.marshal(commands.Basic.Deliver(f"ct{i}", i + 1, False, "", "q"), 1))
        parts.append(frame.marshal(header.ContentHeader(0, size, commands.Basic.Properties()), 1))
        body = wire.BODY_HEADER.pack(1, wire.make_tag(pid, seq)) + bytes(size - 16)
        for start in range(0, size, frame_max - 8):
            parts.append(frame.marshal(ContentBody(body[start : start + frame_max - 8]), 1))
        expect.append((pid, seq))
        if i == 3:
            parts.append(wire.HEARTBEAT_FRAME)
    return b"".join(parts), expect


class _Sink:
    def __init__(self) -> None:
        self.data: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.data.append(bytes(data))

    def is_closing(self) -> bool:
        return False


def _feed(pieces: list[bytes]) -> tuple[Tally, list[bytes]]:
    loop = asyncio.new_event_loop()
    try:
        conn = Connection(loop)
        conn.frame_max = 4096
        sink = _Sink()
        conn.transport = sink  # type: ignore[assignment]
        ch = Channel(conn, 1)
        conn.channels[1] = ch
        tally = Tally()
        Consumer(ch, "q", tally, auto_ack=False, prefetch=0, ack_every=1)
        for p in pieces:
            conn.data_received(p)
        assert conn.error is None
        return tally, sink.data
    finally:
        loop.close()


def test_client_frame_loop_is_split_invariant() -> None:
    data, expect = _stream(4096)
    assert all(isinstance(v, (commands.Basic.Deliver, header.ContentHeader, ContentBody))
               or v.name == "Heartbeat" for _, v in frames(data))
    want = {0: [5, sum(s for p, s in expect if p == 0)],
            1: [5, sum(s for p, s in expect if p == 1)]}
    whole, acks = _feed([data])
    assert whole.per_producer == want and whole.consumed == 10
    acked = [wire.parse_ack(a, 7) for a in frames_bytes(b"".join(acks))]
    assert acked == [(i + 1, False) for i in range(10)]
    one_byte, _ = _feed([data[i : i + 1] for i in range(len(data))])
    assert one_byte.per_producer == want
    for cut in range(1, len(data), 97):
        split, _ = _feed([data[:cut], data[cut:]])
        assert split.per_producer == want, cut
        assert split.consumed_bytes == whole.consumed_bytes


def frames_bytes(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        _, _, start, end = wire.scan(data, pos, 131072)
        out.append(data[pos : end + 1])
        pos = end + 1
    return out


def _run_stream() -> tuple[bytes, set[tuple[int, int]]]:
    """Same-shaped deliveries in runs on channels 1 and 2 (tags per channel from 1), plus
    one odd-shaped delivery in the middle of a run."""
    parts, delivered = [], set()
    next_tag = {1: 1, 2: 1}
    seq = 0
    for chan, count in [(1, 150), (2, 100), (1, 90), (2, 3), (1, 70)]:
        for i in range(count):
            size = 40 if (chan, i) == (1, 100) else 16
            tag = next_tag[chan]
            next_tag[chan] += 1
            delivered.add((chan, tag))
            parts.append(frame.marshal(commands.Basic.Deliver("ctag", tag, False, "", "q"), chan))
            parts.append(frame.marshal(header.ContentHeader(0, size, commands.Basic.Properties()),
                                       chan))
            body = wire.BODY_HEADER.pack(1, wire.make_tag(seq % 3, seq)) + bytes(size - 16)
            parts.append(frame.marshal(ContentBody(body), chan))
            seq += 1
    return b"".join(parts), delivered


def _consume_runs(pieces: list[bytes], vectorised: bool, ack_every: int) -> tuple:
    loop = asyncio.new_event_loop()
    try:
        conn = Connection(loop)
        sink = _Sink()
        conn.transport = sink  # type: ignore[assignment]
        tally = Tally()
        cons = []
        for chan in (1, 2):
            ch = Channel(conn, chan)
            conn.channels[chan] = ch
            cons.append(Consumer(ch, "q", tally, auto_ack=False, prefetch=0,
                                 ack_every=ack_every))
            if not vectorised:
                ch.on_deliver_run = None
        for p in pieces:
            conn.data_received(p)
        for c in cons:
            c.flush_acks()
    finally:
        loop.close()
    acked = []
    for f in frames_bytes(b"".join(sink.data)):
        tag, multiple = wire.parse_ack(f, 7)
        acked.append((int.from_bytes(f[1:3], "big"), tag, multiple))
    return tally.consumed, tally.per_producer, tally.latency.total, acked


@pytest.mark.parametrize("ack_every", [0, 7])
def test_runs_of_deliveries_decode_and_ack_like_single_ones(ack_every: int) -> None:
    data, delivered = _run_stream()
    for pieces in ([data], [data[:1000], data[1000:5001], data[5001:]]):
        vec = _consume_runs(pieces, True, ack_every)
        assert vec == _consume_runs(pieces, False, ack_every)
        consumed, _, latencies, acked = vec
        assert consumed == len(delivered) == latencies
        if ack_every == 0:
            assert sorted((c, t) for c, t, _ in acked) == sorted(delivered)
        else:
            covered = {(c, t) for c, top, m in acked for cc, t in delivered
                       if cc == c and (t <= top if m else t == top)}
            assert covered == delivered


def test_decode_run_finds_the_run_on_its_channel_only() -> None:
    from bench import batch

    data, _ = _run_stream()
    one = frames_bytes(data)  # deliver, header, body frames of the first delivery first
    msg = sum(len(f) for f in one[:3])
    recs = batch.decode_run(data, msg, 1, len(one[0]), 4, len(one[1]), len(one[2]))
    assert recs is not None and len(recs) == 99  # up to the odd-shaped delivery (index 100)
    assert [int(t) for t in recs["dtag"][:3]] == [2, 3, 4]
    assert batch.decode_run(data, msg, 2, len(one[0]), 4, len(one[1]), len(one[2])) is None


def test_message_id_template_gives_every_message_its_own_id() -> None:
    """--message-id: each message's properties carry its tag, so no two are alike."""
    from pamqp import frame as pframe

    t = wire.PublishTemplate(1, "", "q", 32, message_id=True)
    buf = bytes(t.build(3, 123, 40)) + bytes(t.build_tags([7], 5))
    ids = []
    pos = 0
    while pos < len(buf):
        n, _ch, value = pframe.unmarshal(buf[pos:])
        pos += n
        if hasattr(value, "properties"):
            ids.append(value.properties.message_id)
    assert ids == [f"{40:016x}", f"{41:016x}", f"{42:016x}", f"{7:016x}"]


def test_celery_template_gives_every_message_its_own_task_id() -> None:
    """--properties celery: a Celery task message's properties, its task id (correlation_id,
    headers id and root_id) distinct per message; the rest as Celery sends it."""
    from pamqp import frame as pframe

    t = wire.PublishTemplate(1, "", "q", 32, persistent=True, message_id=True,
                             properties="celery")
    buf = bytes(t.build(2, 123, 40)) + bytes(t.build_tags([7], 5))
    seen = []
    pos = 0
    while pos < len(buf):
        n, _ch, value = pframe.unmarshal(buf[pos:])
        pos += n
        if hasattr(value, "properties"):
            p = value.properties
            h = p.headers
            assert p.correlation_id == h["id"] == h["root_id"]
            assert (p.content_type, p.delivery_mode, h["task"], h["timelimit"], h["stamps"]) == (
                "application/json", 2, "tasks.add", [None, None], {"bench": "celery-shape"})
            seen.append((p.message_id, p.correlation_id))
    assert [m for m, _c in seen] == [f"{40:016x}", f"{41:016x}", f"{7:016x}"]
    assert [c.replace("-", "") for _m, c in seen] == [f"{t:032x}" for t in (40, 41, 7)]
