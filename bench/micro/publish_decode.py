"""Micro-benchmark: socket bytes → publish commands, as the reader does it (issue 15).

Run: python bench/micro/publish_decode.py [--json]  — µs per publish, best of 5 repeats.

A buffer of 1 000 basic.publish commands (method + content header + one body frame) is fed
to a FrameDecoder and turned into commands the way `broker.reader.Reader` does: a whole
`Command` from the decoder is taken as it is, anything else goes through the channel's
CommandAssembler. Cases: s1's shape (16 B, delivery_mode only), every publish with its own
message_id (nothing alike to reuse), the paper's (1 500 B, persistent, content_type), and one
with a headers table. It runs against whatever `broker`
package is first on sys.path, so `bench/micro/ab.py` can compare two checkouts.
"""

from __future__ import annotations

import json
import sys
import timeit

from pamqp import body as pbody
from pamqp import commands as C
from pamqp import frame as pframe
from pamqp import header as pheader

from broker.protocol import framing
from broker.protocol.assembler import CommandAssembler

RUN = 1000  # publishes per buffer, about what one 64 KB socket read holds for s1


def stream(size: int, props: C.Basic.Properties) -> bytes:
    """RUN publishes to amq.direct/bench.queue on channel 1 with a `size`-byte body."""
    one = (pframe.marshal(C.Basic.Publish(exchange="amq.direct", routing_key="bench.queue"), 1)
           + pframe.marshal(pheader.ContentHeader(0, size, props), 1)
           + pframe.marshal(pbody.ContentBody(b"x" * size), 1))
    return one * RUN


def unique_ids(size: int) -> bytes:
    """RUN publishes whose properties differ (a message_id each), as many applications send
    them: no two are alike, so the decoder's reuse of the last publish's bytes never applies."""
    return b"".join(
        pframe.marshal(C.Basic.Publish(exchange="amq.direct", routing_key="bench.queue"), 1)
        + pframe.marshal(pheader.ContentHeader(0, size, C.Basic.Properties(
            delivery_mode=2, message_id=f"id-{i:08d}")), 1)
        + pframe.marshal(pbody.ContentBody(b"x" * size), 1)
        for i in range(RUN))


CASES = {
    "s1: 16 B, delivery_mode=1": stream(16, C.Basic.Properties(delivery_mode=1)),
    "unique message_id each, 100 B": unique_ids(100),
    "paper: 1500 B, persistent, content_type": stream(
        1500, C.Basic.Properties(content_type="application/octet-stream", delivery_mode=2)),
    "headers table, 100 B": stream(100, C.Basic.Properties(headers={"k": "v", "n": 1},
                                                           delivery_mode=2)),
}


def commands_of(data: bytes) -> int:
    """Decode `data` into commands like the reader; returns how many."""
    decoder = framing.FrameDecoder()
    assembler = CommandAssembler()
    command_cls = getattr(framing, "Command", None)
    decoder.feed(data)
    n = 0
    while (item := decoder.next_frame()) is not None:
        frame = item[1]
        if frame.__class__ is command_cls:
            n += 1
        elif assembler.feed(frame) is not None:
            n += 1
    return n


def measure() -> dict[str, float]:
    """µs per publish for each case."""
    out = {}
    for name, data in CASES.items():
        assert commands_of(data) == RUN
        best = min(timeit.repeat(lambda d=data: commands_of(d), number=20, repeat=5)) / 20
        out[name] = best / RUN * 1e6
    return out


if __name__ == "__main__":
    result = measure()
    if "--json" in sys.argv:
        print(json.dumps(result))
    else:
        for name, us in result.items():
            print(f"{us:8.3f} µs/publish  {name}")
