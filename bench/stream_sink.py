# bench/stream_sink.py — `python -m bench.stream_sink --port 5559`: a stream server that
# stores nothing, to measure the stream benchmark client's own ceiling.
#
# Owns: the server side of the frames bench.stream_client sends; every publish confirmed at
# once (ids read in one numpy pass when the messages have one length); a subscription served
# one canned chunk per credit.
# Talks to: bench.stream_client over TCP.
# Must never: be used as a broker: it keeps no message.
"""Null stream server (issue 37 item 10: "a null server that only acks gives the client's
own ceiling"). Accepts any login. A subscription gets chunks of `CHUNK_RECORDS` records of
the size last published to this server, over any connection (12 B until then; the benchmark
consumes on a second connection what the first published), each as a broker would send it
(Deliver v1: the chunk header and data entries), as long as it has credit."""

from __future__ import annotations

import argparse
import asyncio
import signal
import struct
import time
from typing import Any

import numpy as np

from bench.stream_client import amqp_data_prefix
from broker.stream import osiris_chunk as oc
from broker.stream_protocol import core

CHUNK_RECORDS = 200  # records per canned chunk


def _response(key: int, corr: int, payload: bytes = b"") -> bytes:
    return core.response(key, corr, core.OK, payload)


def canned_chunk(size: int) -> bytes:
    """A Deliver v1 frame body's chunk: `CHUNK_RECORDS` AMQP 1.0 messages of `size` bytes."""
    record = amqp_data_prefix(size) + b"x" * size
    pieces, _n = oc.encode_chunk([(None, record)] * CHUNK_RECORDS, 0, int(time.time() * 1000),
                                 filter_size=0)
    head, _bloom, *rest = pieces
    return head + b"".join(rest)


class SinkConnection(asyncio.Protocol):
    """One client connection of the null server."""

    published_size = 12  # body bytes last published to this server, over any connection

    def __init__(self) -> None:
        self.transport: Any = None
        self.buf = bytearray()
        self.sub: int | None = None
        self.credit = 0
        self.chunk = b""

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.write(b"")

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos, end = 0, len(buf)
        while end - pos >= 8:
            size = int.from_bytes(buf[pos:pos + 4], "big")
            if end - pos - 4 < size:
                break
            self._frame(memoryview(buf)[pos + 4:pos + 4 + size])
            pos += 4 + size
        if pos:
            del buf[:pos]
        self._serve()

    def _frame(self, f: memoryview) -> None:
        key = (f[0] << 8) | f[1]
        w = self.transport.write
        if key == 2:  # publish v1: publisher id, count, (id u64, len i32, message)*
            pub = f[4]
            count = int.from_bytes(f[5:9], "big")
            w(self._confirm(pub, f, count))
            return
        if key == 9:  # credit: subscription id, credit
            self.credit += int.from_bytes(f[5:7], "big")
            return
        if key in (0x8014, 23):  # tune answer, heartbeat
            return
        corr = int.from_bytes(f[4:8], "big")
        if key == 17:
            w(_response(17, corr, struct.pack(">I", 0)))
        elif key == 18:
            w(_response(18, corr, struct.pack(">I", 1) + b"\x00\x05PLAIN"))
        elif key == 19:
            w(_response(19, corr))
            w(core.tune(1_048_576, 0))
        elif key == 21:
            w(_response(21, corr, struct.pack(">I", 0)))
        elif key == 7:  # subscribe: subscription id, stream, offset spec, credit, properties
            self.sub = f[8]
            slen = int.from_bytes(f[9:11], "big")
            at = 11 + slen
            kind = int.from_bytes(f[at:at + 2], "big")
            at += 2 + (8 if kind in (4, 5) else 0)
            self.credit = int.from_bytes(f[at:at + 2], "big")
            w(_response(7, corr))
            chunk = canned_chunk(SinkConnection.published_size)
            self.chunk = struct.pack(">IHHB", len(chunk) + 5, 8, 1, self.sub) + chunk
        elif key == 22:
            w(_response(22, corr))
            self.transport.close()
        else:  # create, delete, declare publisher, anything else: OK
            w(_response(key, corr))

    def _confirm(self, pub: int, f: memoryview, count: int) -> bytes:
        """publish_confirm with every id of the publish frame `f` (ids read in one numpy
        pass when all messages have the first one's length)."""
        if count:
            length = int.from_bytes(f[17:21], "big")
            SinkConnection.published_size = (length - 5 if length - 5 < 256
                                              else length - 8)  # minus the prefix
            stride = 12 + length
            if len(f) - 9 == stride * count:
                arr = np.ndarray((count,), dtype=">u8", buffer=f, offset=9, strides=(stride,))
                lens = np.ndarray((count,), dtype=">i4", buffer=f, offset=17, strides=(stride,))
                if (lens == length).all():
                    ids = arr.tobytes()
                    return struct.pack(">IHHBI", 9 + len(ids), 3, 1, pub, count) + ids
        out = []
        at = 9
        for _ in range(count):
            out.append(bytes(f[at:at + 8]))
            at += 12 + int.from_bytes(f[at + 8:at + 12], "big")
        ids = b"".join(out)
        return struct.pack(">IHHBI", 9 + len(ids), 3, 1, pub, count) + ids

    def _serve(self) -> None:
        """Send canned chunks while the subscription has credit and the socket drains."""
        t = self.transport
        while self.sub is not None and self.credit > 0 and t.get_write_buffer_size() < 4 << 20:
            t.write(self.chunk)
            self.credit -= 1

    def resume_writing(self) -> None:
        self._serve()


async def serve(port: int, host: str = "127.0.0.1") -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(SinkConnection, host, port)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.stream_sink", description=__doc__)
    p.add_argument("--port", type=int, default=5559)
    p.add_argument("--host", default="127.0.0.1")
    a = p.parse_args(argv)
    asyncio.run(serve(a.port, a.host))


if __name__ == "__main__":
    main()
