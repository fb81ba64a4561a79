"""CommandAssembler: frames → commands, with RabbitMQ 3.10's errors (verified on the wire)."""

from __future__ import annotations

import pytest
from pamqp import body as pbody
from pamqp import commands as C
from pamqp import frame as pframe
from pamqp import header as pheader

from broker.errors import AMQPError, close_args
from broker.protocol.assembler import Command, CommandAssembler
from broker.protocol.framing import ContentHeader, FrameDecoder, decode_properties

PUBLISH = C.Basic.Publish(exchange="", routing_key="q")
PROPS = C.Basic.Properties(content_type="text/plain", delivery_mode=2)


def hdr(size: int, class_id: int = 60, props: C.Basic.Properties = PROPS) -> ContentHeader:
    raw = props.marshal()
    return ContentHeader(class_id, size, decode_properties(raw), raw)


def error_of(frames: list, max_message_size: int = 134217728) -> tuple[AMQPError, CommandAssembler]:
    asm = CommandAssembler(max_message_size)
    with pytest.raises(AMQPError) as info:
        for f in frames:
            asm.feed(f)
    return info.value, asm


def test_method_without_content_completes_at_once() -> None:
    m = C.Queue.Declare(queue="q")
    assert CommandAssembler().feed(m) == Command(m, None, None)


def test_publish_multi_frame_body() -> None:
    asm = CommandAssembler()
    assert asm.feed(PUBLISH) is None
    h = hdr(6)
    assert asm.feed(h) is None
    assert asm.feed(b"ab") is None
    assert asm.feed(b"cd") is None
    assert not asm.idle
    cmd = asm.feed(b"ef")
    assert cmd == Command(PUBLISH, h, b"abcdef")
    assert asm.idle


def test_single_body_frame_is_not_copied() -> None:
    asm = CommandAssembler()
    asm.feed(PUBLISH)
    asm.feed(hdr(5))
    data = b"hello"
    assert asm.feed(data).body is data


def test_empty_body_completes_at_header() -> None:
    asm = CommandAssembler()
    asm.feed(PUBLISH)
    h = hdr(0)
    assert asm.feed(h) == Command(PUBLISH, h, b"")
    assert asm.feed(C.Basic.Ack(delivery_tag=1)).method.delivery_tag == 1


@pytest.mark.parametrize(
    ("frames", "text", "ids"),
    [
        ([hdr(5)], "UNEXPECTED_FRAME - expected method frame, got non method frame instead", (0, 0)),
        ([b"body"], "UNEXPECTED_FRAME - expected method frame, got non method frame instead", (0, 0)),
        (
            [PUBLISH, PUBLISH],
            "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead",
            (60, 40),
        ),
        (
            [PUBLISH, b"body"],
            "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead",
            (60, 40),
        ),
        (
            [PUBLISH, hdr(5, class_id=50)],
            "UNEXPECTED_FRAME - expected content header for class 60, got one for class 50 instead",
            (60, 40),
        ),
        (
            [PUBLISH, hdr(5), C.Channel.Open()],
            "UNEXPECTED_FRAME - expected content body, got non content body frame instead",
            (60, 40),
        ),
        (
            [PUBLISH, hdr(5), hdr(5)],
            "UNEXPECTED_FRAME - expected content body, got non content body frame instead",
            (60, 40),
        ),
        ([PUBLISH, hdr(5), b"hello!"], None, (60, 40)),  # RabbitMQ hangs here; we fail with 505
    ],
)
def test_unexpected_frames_are_505(frames: list, text: str | None, ids: tuple[int, int]) -> None:
    exc, asm = error_of(frames)
    code, got_text, class_id, method_id = close_args(exc)
    assert code == 505
    if text is not None:
        assert got_text == text
    assert (class_id, method_id) == ids
    assert asm.idle


def test_body_too_large_is_soft_406_and_assembler_is_reusable() -> None:
    exc, asm = error_of([PUBLISH, hdr(2000)], max_message_size=1000)
    assert close_args(exc) == (
        406,
        "PRECONDITION_FAILED - message size 2000 is larger than configured max size 1000",
        60,
        40,
    )
    assert asm.idle
    # the reader discards the closing channel's remaining frames, then the channel reopens
    asm.reset()
    asm.feed(PUBLISH)
    asm.feed(hdr(3))
    assert asm.feed(b"abc").body == b"abc"


def test_reset_drops_partial_command() -> None:
    asm = CommandAssembler()
    asm.feed(PUBLISH)
    asm.feed(hdr(10))
    asm.feed(b"abc")
    asm.reset()
    assert asm.idle
    m = C.Basic.Qos(prefetch_count=10)
    assert asm.feed(m) == Command(m, None, None)


def wire_stream() -> tuple[bytes, list[tuple[int, str, bytes | None]]]:
    parts = []
    want = []
    for ch, size in [(1, 0), (2, 10), (1, 300000), (3, 4088), (2, 4089)]:
        data = bytes((ch,)) * size
        parts.append(pframe.marshal(C.Basic.Publish(routing_key=f"k{ch}"), ch))
        parts.append(pframe.marshal(pheader.ContentHeader(0, size, PROPS), ch))
        for i in range(0, size, 4088):
            parts.append(pframe.marshal(pbody.ContentBody(data[i : i + 4088]), ch))
        want.append((ch, f"k{ch}", data))
    parts.append(pframe.marshal(C.Basic.Ack(delivery_tag=3), 2))
    want.append((2, "ack", None))
    return b"".join(parts), want


def assemble(chunks: list[bytes]) -> list[tuple[int, str, bytes | None]]:
    dec = FrameDecoder(frame_max=4096)
    asms: dict[int, CommandAssembler] = {}
    out = []
    for chunk in chunks:
        dec.feed(chunk)
        while (f := dec.next_frame()) is not None:
            ch, frame = f
            asm = asms.setdefault(ch, CommandAssembler())
            if isinstance(frame, Command):  # a publish the decoder read whole (as the reader)
                assert asm.idle
                cmd = frame
            else:
                cmd = asm.feed(frame)
            if cmd is not None:
                key = cmd.method.routing_key if cmd.header is not None else "ack"
                out.append((ch, key, cmd.body))
    return out


def test_commands_from_wire_at_split_points() -> None:
    stream, want = wire_stream()
    assert assemble([stream]) == want
    small = stream[:200]  # every split of the head; a stride over the rest keeps it quick
    for cut in range(len(small)):
        assert assemble([stream[:cut], stream[cut:]]) == want
    for cut in range(200, len(stream), 997):
        assert assemble([stream[:cut], stream[cut:]]) == want
    assert assemble([stream[i : i + 4093] for i in range(0, len(stream), 4093)]) == want
