"""Chunks in osiris's layout (broker/stream/osiris_chunk.py, issue 37 item 3): the bytes of
a chunk built by hand from osiris_log.erl's format comment, entries read back (simple and
sub-batch, gzip), the tracking trailer, the bloom filter, and torn or corrupt chunks
refused."""

from __future__ import annotations

import gzip
import struct
import zlib

import pytest

from broker.stream import osiris_chunk as oc


def test_a_user_chunk_has_osiris_bytes():
    pieces, records = oc.encode_chunk([(None, b"ab"), (None, b"")], chunk_id=10,
                                      timestamp=1_700_000_000_000, epoch=3)
    chunk = b"".join(pieces)
    data = struct.pack(">I", 2) + b"ab" + struct.pack(">I", 0)
    head = struct.pack(">BBHIqQQIIIB3x", 0x50, 0, 2, 2, 1_700_000_000_000, 3, 10,
                       zlib.crc32(data), len(data), 0, 0)
    assert len(head) == 48
    assert chunk == head + data
    assert records == 2
    h = oc.check(chunk)
    assert (h.chunk_id, h.num_entries, h.num_records, h.size) == (10, 2, 2, len(chunk))
    assert list(oc.entries(chunk, h)) == [b"ab", b""]


def test_sub_batches_count_their_records_and_come_back_as_stored():
    body = b"".join(struct.pack(">I", len(r)) + r for r in (b"one", b"two", b"three"))
    gz = gzip.compress(body)
    batch = oc.SubBatch(3, oc.COMPRESSION_GZIP, len(body), gz)
    pieces, records = oc.encode_chunk([(None, b"x"), (None, batch)], chunk_id=0,
                                      timestamp=1)
    chunk = b"".join(pieces)
    assert records == 4
    h = oc.check(chunk)
    assert h.num_entries == 2 and h.num_records == 4
    got = list(oc.entries(chunk, h))
    assert got[1] == batch
    # the entry header: 1 | gzip (1) | 0000, then records, uncompressed and stored lengths
    entry_at = 48 + 4 + 1
    assert chunk[entry_at:entry_at + 11] == struct.pack(">BHII", 0x90, 3, len(body), len(gz))
    assert oc.sub_batch_records(got[1]) == [b"one", b"two", b"three"]
    plain = oc.SubBatch(3, oc.COMPRESSION_NONE, len(body), body)
    assert oc.sub_batch_records(plain) == [b"one", b"two", b"three"]
    with pytest.raises(oc.ChunkError):
        oc.sub_batch_records(oc.SubBatch(1, oc.COMPRESSION_ZSTD, 1, b"?"))


def test_torn_and_corrupt_chunks_are_refused():
    chunk = b"".join(oc.encode_chunk([(None, b"payload")], 0, 1)[0])
    with pytest.raises(oc.ChunkError):
        oc.check(chunk[:-1])
    bad = bytearray(chunk)
    bad[-1] ^= 0xFF
    with pytest.raises(oc.ChunkError):
        oc.check(bytes(bad))
    with pytest.raises(oc.ChunkError):
        oc.read_header(b"\x60" + chunk[1:])  # another magic/version


def test_tracking_trailer_and_snapshot_round_trip():
    trailer = oc.tracking_entries(sequences={"app-1": 41}, offsets={"reader": 1000})
    assert trailer == (bytes((0, 5)) + b"app-1" + struct.pack(">Q", 41)
                       + bytes((1, 6)) + b"reader" + struct.pack(">Q", 1000))
    assert oc.parse_tracking(trailer) == ({"app-1": 41}, {"reader": 1000})
    snap = oc.tracking_entries(snapshot_sequences={"app-1": (640, 41)})
    assert oc.parse_tracking(snap, snapshot=True) == ({"app-1": (640, 41)}, {})
    pieces, _ = oc.encode_chunk([(None, b"m")], 5, 1, trailer=trailer)
    chunk = b"".join(pieces)
    h = oc.check(chunk)
    assert h.trailer_length == len(trailer)
    assert chunk[h.data_start + h.data_length:] == trailer
    with pytest.raises(oc.ChunkError):
        oc.parse_tracking(trailer[:-1])


def test_bloom_filter_marks_filter_values_and_unfiltered_entries():
    assert oc.bloom([None, None]) == b""  # osiris writes no filter then
    f = oc.bloom(["eu", "us", None])
    assert len(f) == oc.DEFAULT_FILTER_SIZE
    assert f[0] & 0x80  # bit 0: some entry has no filter value
    assert oc.bloom_may_contain(f, ["eu"], match_unfiltered=False)
    assert oc.bloom_may_contain(f, ["nowhere"], match_unfiltered=True)
    only_eu = oc.bloom(["eu"])
    assert not only_eu[0] & 0x80
    assert not oc.bloom_may_contain(only_eu, [], match_unfiltered=True)
    assert not oc.bloom_may_contain(b"", ["eu"], match_unfiltered=False)
    pieces, _ = oc.encode_chunk([("eu", b"a"), (None, b"b")], 0, 1)
    h = oc.check(b"".join(pieces))
    assert h.bloom_size == 16 and list(oc.entries(b"".join(pieces), h)) == [b"a", b"b"]
