"""Streams on disk in osiris's layout with AMQP 1.0 entries (issue 37 item 3), and a stream
written by the previous release (its own "STRC" chunks of 0-9-1 entries) converted at first
start: every message reads back at its offset with its properties and headers, and new
publishes go on after it. The old files are built here byte by byte from that release's
format (broker/stream/log_v1.py's docstring)."""

from __future__ import annotations

import os
import struct
import time
import zlib

import pika
from pamqp import commands

from broker import amqp10
from broker.embedded import EmbeddedBroker
from broker.protocol.encoding import encode_properties
from broker.stream.log import StreamLog
from broker.stream.queue import stream_dir


def _read(url: str, queue: str, n: int) -> list[tuple[int, bytes, object]]:
    got: list = []
    with pika.BlockingConnection(pika.URLParameters(url)) as conn:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=100)
        ch.basic_consume(queue, lambda c, m, p, b: (
            got.append((p.headers["x-stream-offset"], b, p)), c.basic_ack(m.delivery_tag)),
            arguments={"x-stream-offset": "first"})
        deadline = time.monotonic() + 20
        while len(got) < n and time.monotonic() < deadline:
            conn.process_data_events(0.05)
    return got


def _old_entry(exchange: str, key: str, props: commands.Basic.Properties, body: bytes) -> bytes:
    x, k, raw = exchange.encode(), key.encode(), encode_properties(props)
    return bytes((len(x),)) + x + bytes((len(k),)) + k + struct.pack(">I", len(raw)) + raw + body


def _old_chunk(first: int, ts: int, entries: list[bytes]) -> bytes:
    data = b"".join(struct.pack(">I", len(e)) + e for e in entries)
    return struct.pack(">4sBIQQII", b"STRC", 1, len(entries), first, ts, len(data),
                       zlib.crc32(data)) + data


def test_amqp091_publishes_are_stored_as_amqp10_in_osiris_chunks(tmp_path):
    b = EmbeddedBroker(data_dir=str(tmp_path)).start()
    try:
        with pika.BlockingConnection(pika.URLParameters(b.url)) as conn:
            ch = conn.channel()
            ch.queue_declare("s-new", durable=True, arguments={"x-queue-type": "stream"})
            ch.confirm_delivery()
            ch.basic_publish("", "s-new", b"hello", pika.BasicProperties(
                content_type="text/plain", headers={"k": "v"}))
    finally:
        b.stop()
    d = stream_dir(str(tmp_path), "/", "s-new")
    seg = next(n for n in os.listdir(d) if n.endswith(".segment"))
    with open(os.path.join(d, seg), "rb") as f:
        assert f.read(8) == b"OSIL\x00\x00\x00\x01"
    log = StreamLog(d, fsync=False)
    header, raw = log.read_raw(0)
    assert raw[0] == 0x50 and header.num_records == 1  # osiris magic 5, version 0
    entry = log.read_chunk(0).entries[0]
    secs = dict(amqp10.sections(entry))
    assert secs[amqp10.DATA] == ("binary", b"hello")
    assert dict((k[1], v) for k, v in secs[amqp10.MESSAGE_ANNOTATIONS][1])[
        "x-routing-key"] == ("utf8", "s-new")
    log.close()


def test_a_stream_of_the_previous_release_is_converted_and_read(tmp_path):
    b = EmbeddedBroker(data_dir=str(tmp_path)).start()
    try:
        with pika.BlockingConnection(pika.URLParameters(b.url)) as conn:
            conn.channel().queue_declare("s-old", durable=True,
                                         arguments={"x-queue-type": "stream"})
    finally:
        b.stop()
    d = stream_dir(str(tmp_path), "/", "s-old")
    for name in os.listdir(d):  # what the previous release had written instead
        os.unlink(os.path.join(d, name))
    props = commands.Basic.Properties(content_type="application/json", message_id="m-1",
                                      headers={"n": 7}, delivery_mode=2)
    plain = commands.Basic.Properties()
    seg0 = _old_chunk(0, 1_700_000_000_000, [_old_entry("amq.direct", "rk", props, b"one"),
                                              _old_entry("", "s-old", plain, b"two")])
    seg3 = _old_chunk(2, 1_700_000_001_000, [_old_entry("", "s-old", plain, b"three")])
    for first, data in ((0, seg0), (2, seg3)):
        with open(os.path.join(d, f"{first:020d}.segment"), "wb") as f:
            f.write(data)
        with open(os.path.join(d, f"{first:020d}.index"), "wb") as f:
            f.write(struct.pack(">QQQI", first, 0, 0, 1))
    b = EmbeddedBroker(data_dir=str(tmp_path)).start()
    try:
        got = _read(b.url, "s-old", 3)
        assert [(o, body) for o, body, _p in got] == [(0, b"one"), (1, b"two"), (2, b"three")]
        p = got[0][2]
        assert (p.content_type, p.message_id, p.delivery_mode) == ("application/json", "m-1", 2)
        assert p.headers == {"n": 7, "x-stream-offset": 0}
        with pika.BlockingConnection(pika.URLParameters(b.url)) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_publish("", "s-old", b"four")
        assert [(o, body) for o, body, _p in _read(b.url, "s-old", 4)][3] == (3, b"four")
    finally:
        b.stop()
    names = sorted(os.listdir(d))
    assert names == ["00000000000000000000.index", "00000000000000000000.segment"]
    assert not os.path.exists(d + ".v1") and not os.path.exists(d + ".v2")


def _v1_dir(path, n: int = 3) -> str:
    d = str(path)
    os.makedirs(d)
    with open(os.path.join(d, f"{0:020d}.segment"), "wb") as f:
        f.write(_old_chunk(0, 1000, [b"e%d" % i for i in range(n)]))
    return d


def test_a_conversion_a_crash_interrupted_is_completed(tmp_path):
    """Between the renames (old moved aside, new complete) the new one takes its name;
    before them a partial new copy is dropped and the conversion runs again."""
    d = _v1_dir(tmp_path / "a")
    StreamLog(d, fsync=False).close()  # converted (entries unchanged: no converter given)
    os.rename(d, d + ".v2")  # as if the crash came right after moving the old copy aside
    os.makedirs(d + ".v1")
    log = StreamLog(d, fsync=False)
    assert log.read_chunk(0).entries == [b"e0", b"e1", b"e2"] and log.next_offset == 3
    assert not os.path.exists(d + ".v1") and not os.path.exists(d + ".v2")
    log.close()
    d2 = _v1_dir(tmp_path / "b", 2)
    os.makedirs(d2 + ".v2")
    with open(os.path.join(d2 + ".v2", "junk.segment"), "wb") as f:
        f.write(b"partial")
    log = StreamLog(d2, fsync=False, convert_entry=lambda e: e.upper())
    assert log.read_chunk(0).entries == [b"E0", b"E1"]
    log.close()
