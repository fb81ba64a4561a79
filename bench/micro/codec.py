"""Micro-benchmark of the AMQP codec hot paths (broker/protocol/framing.py, encoding.py).

Run: python bench/micro/codec.py   — prints µs per operation (best of 5 timeit repeats).
Measures: decode of one basic.publish (method + header + 100-byte body), the Basic.Publish /
Basic.Ack method decode with and without the hand-written fast path, pamqp's own unmarshal
for comparison, properties decode (typical, with a headers table, and with out-of-range
timestamps that take the tolerant fallback) and encode of one basic.deliver (fast path vs
encode_content vs pamqp).
"""

from __future__ import annotations

import datetime
import struct
import sys
import timeit
from pathlib import Path

if not any(Path(p, "broker").is_dir() for p in sys.path[1:] if p):  # ab.py sets PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pamqp import body as pbody  # noqa: E402
from pamqp import commands as C  # noqa: E402
from pamqp import frame as pframe  # noqa: E402
from pamqp import header as pheader  # noqa: E402

from broker.protocol import framing  # noqa: E402

encoding = getattr(__import__("broker.protocol", fromlist=["x"]), "encoding", framing)  # older trees: framing

PROPS = C.Basic.Properties(content_type="application/octet-stream", delivery_mode=2)
BODY = b"x" * 100
PUBLISH = C.Basic.Publish(exchange="amq.direct", routing_key="bench.queue")
ACK = C.Basic.Ack(delivery_tag=123456, multiple=False)
PUBLISH_BYTES = (
    pframe.marshal(PUBLISH, 1)
    + pframe.marshal(pheader.ContentHeader(0, len(BODY), PROPS), 1)
    + pframe.marshal(pbody.ContentBody(BODY), 1)
)
PUBLISH_ARGS = pframe.marshal(PUBLISH, 1)[11:-1]
ACK_ARGS = pframe.marshal(ACK, 1)[11:-1]
RAW_PROPS = PROPS.marshal()
HEADERS_PROPS = C.Basic.Properties(
    content_type="application/json",
    headers={"x-trace": "abc123", "x-retries": 3, "x-when": datetime.datetime(2024, 5, 1)},
    delivery_mode=2,
    timestamp=datetime.datetime(2024, 5, 1),
).marshal()
# Go's zero time.Time as timestamp property and header: pamqp raises, the fallback decodes
GO_ZERO = struct.pack(">Q", 2**64 - 62135596800)
GO_ZERO_PROPS = HEADERS_PROPS[:-8] + GO_ZERO
_GO_HDR = HEADERS_PROPS.index(b"T", 2)
GO_ZERO_PROPS = GO_ZERO_PROPS[: _GO_HDR + 1] + GO_ZERO + GO_ZERO_PROPS[_GO_HDR + 9 :]
DELIVER = C.Basic.Deliver(
    consumer_tag="amq.ctag-abc", delivery_tag=42, exchange="amq.direct", routing_key="bench.queue"
)


def decode_publish() -> None:
    dec = framing.FrameDecoder()
    dec.feed(PUBLISH_BYTES)
    dec.next_frame()
    dec.next_frame()
    dec.next_frame()


STREAM_DECODER = framing.FrameDecoder()


def decode_publish_stream() -> None:
    dec = STREAM_DECODER
    dec.feed(PUBLISH_BYTES)
    dec.next_frame()
    dec.next_frame()
    dec.next_frame()


def pamqp_decode_publish() -> None:
    data = PUBLISH_BYTES
    while data:
        n, _, _ = pframe.unmarshal(data)
        data = data[n:]


CASES = {
    "decode publish (method+header+body), fresh decoder": decode_publish,
    "decode publish (method+header+body), reused decoder": decode_publish_stream,
    "pamqp frame.unmarshal x3 (reference)": pamqp_decode_publish,
    "Basic.Publish args, fast path": lambda: framing._decode_publish(PUBLISH_ARGS),
    "Basic.Publish args, generic decoder": lambda: framing._decode_args(
        C.Basic.Publish, PUBLISH_ARGS
    ),
    "Basic.Ack args, fast path": lambda: framing._decode_ack(ACK_ARGS),
    "Basic.Ack args, generic decoder": lambda: framing._decode_args(C.Basic.Ack, ACK_ARGS),
    "properties decode (content_type+delivery_mode)": lambda: framing.decode_properties(RAW_PROPS),
    "properties decode (headers table + timestamp)": lambda: framing.decode_properties(
        HEADERS_PROPS
    ),
    "properties decode (Go zero timestamps: pamqp fails, fallback)": lambda: (
        framing.decode_properties(GO_ZERO_PROPS)
    ),
    "encode_deliver (fast path)": lambda: encoding.encode_deliver(
        1, "amq.ctag-abc", 42, False, "amq.direct", "bench.queue", RAW_PROPS, BODY, 131072
    ),
    "encode_content_raw (generic method encoder)": lambda: encoding.encode_content_raw(
        1, DELIVER, RAW_PROPS, BODY, 131072
    ),
    "pamqp marshal deliver+header+body (reference)": lambda: (
        pframe.marshal(DELIVER, 1)
        + pframe.marshal(pheader.ContentHeader(0, len(BODY), PROPS), 1)
        + pframe.marshal(pbody.ContentBody(BODY), 1)
    ),
}


def main() -> None:
    """Print µs per operation; with --json, one JSON object {case: µs} (bench/micro/ab.py)."""
    results = {}
    for name, fn in CASES.items():
        number = 20000
        results[name] = min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6
    if "--json" in sys.argv:
        import json

        print(json.dumps(results))
        return
    print(f"Python {sys.version.split()[0]}")
    for name, us in results.items():
        print(f"{us:8.2f} µs  {name}")


if __name__ == "__main__":
    main()
