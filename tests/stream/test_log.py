"""The stream log (broker/stream/log.py): offsets, chunks, segments, seeking by offset and
timestamp, retention by whole segments, and recovery from a torn tail."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.stream.log import FIRST, LAST, NEXT, StreamLog


def entries(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


def read_all(log: StreamLog, start: int) -> list[tuple[int, bytes]]:
    out, offset = [], start
    while (chunk := log.read_chunk(offset)) is not None:
        for i, e in enumerate(chunk.entries):
            if chunk.first + i >= offset:
                out.append((chunk.first + i, e))
        offset = chunk.first + len(chunk.entries)
    return out


def test_offsets_are_consecutive_across_chunks_and_segments(tmp_path):
    log = StreamLog(str(tmp_path), max_segment_size=200, fsync=False)
    spans = [log.append(entries(f"c{c}-", 5)) for c in range(10)]
    assert spans[0] == (0, 4) and spans[-1] == (45, 49)
    assert len([n for n in os.listdir(tmp_path) if n.endswith(".segment")]) > 2
    got = read_all(log, 0)
    assert [o for o, _e in got] == list(range(50))
    assert got[17] == (17, b"c3-2")
    assert read_all(log, 23)[0] == (23, b"c4-3")  # mid-chunk start
    assert log.read_chunk(50) is None
    log.close()


def test_first_last_next_and_clamping(tmp_path):
    log = StreamLog(str(tmp_path), fsync=False)
    assert (log.locate(FIRST), log.locate(LAST), log.locate(NEXT)) == (0, 0, 0)
    log.append(entries("a", 3))
    log.append(entries("b", 4))
    assert (log.locate(FIRST), log.locate(LAST), log.locate(NEXT)) == (0, 3, 7)
    assert log.locate(-5) == 0 and log.locate(5) == 5 and log.locate(99) == 7
    log.close()


def test_seek_by_timestamp(tmp_path):
    log = StreamLog(str(tmp_path), max_segment_size=100, fsync=False)
    for i in range(20):
        log.append([b"x%d" % i], now_ms=1000 * (i + 1))
    assert log.locate(("timestamp", 0)) == 0
    assert log.locate(("timestamp", 7500)) == 7  # the first chunk written at or after
    assert log.locate(("timestamp", 20_000)) == 19
    assert log.locate(("timestamp", 99_000)) == 20  # none: next
    log.close()


def test_retention_removes_whole_segments_from_the_start(tmp_path):
    log = StreamLog(str(tmp_path), max_segment_size=100, fsync=False)
    for i in range(30):
        log.append([b"y" * 40], now_ms=1000 * (i + 1))
    before = log.total_bytes()
    assert log.apply_retention(max_bytes=before // 2, max_age_ms=None) > 0
    assert log.total_bytes() <= before // 2 + 200
    first = log.locate(FIRST)
    assert first > 0 and log.read_chunk(first - 1) is None
    assert read_all(log, first)[0][0] == first and log.locate(NEXT) == 30
    removed = log.apply_retention(max_bytes=None, max_age_ms=5000, now_ms=31_000)
    assert removed > 0 and log.locate(FIRST) >= 20
    log.close()


def test_reopen_keeps_every_offset(tmp_path):
    log = StreamLog(str(tmp_path), max_segment_size=150)
    for c in range(8):
        log.append(entries(f"r{c}-", 3))
    log.sync()
    log.close()
    again = StreamLog(str(tmp_path), max_segment_size=150)
    assert again.locate(NEXT) == 24 and again.locate(LAST) == 21
    assert [e for _o, e in read_all(again, 0)] == [
        f"r{c}-{i}".encode() for c in range(8) for i in range(3)]
    assert again.append([b"more"]) == (24, 24)
    again.close()


@pytest.mark.parametrize("cut", [1, 5, 20, 29])
def test_a_torn_tail_is_truncated_on_open(tmp_path, cut):
    log = StreamLog(str(tmp_path), fsync=False)
    log.append(entries("ok", 4))
    log.append(entries("torn", 4))
    log.close()
    seg = next(os.path.join(tmp_path, n) for n in os.listdir(tmp_path) if n.endswith(".segment"))
    size = os.path.getsize(seg)
    os.truncate(seg, size - cut)  # the last chunk is cut short
    again = StreamLog(str(tmp_path), fsync=False)
    assert again.locate(NEXT) == 4
    assert [e for _o, e in read_all(again, 0)] == entries("ok", 4)
    assert again.append([b"new"]) == (4, 4)
    assert read_all(again, 4) == [(4, b"new")]
    again.close()


@pytest.mark.parametrize("damage", ["index-lost", "index-behind", "garbage-record",
                                    "record-naming-another-chunk"])
def test_an_index_whose_tail_was_not_fsynced_is_rebuilt_from_the_segment(tmp_path, damage):
    """sync() fsyncs the segment, not its index (the index is derived): after a power cut
    the index may miss its last records, or hold records that name no chunk. Recovery drops
    such records and rebuilds the index from the segment, losing nothing."""
    import struct

    log = StreamLog(str(tmp_path), fsync=False)
    for c in range(6):
        log.append(entries(f"c{c}-", 3))
    log.close()
    index = next(os.path.join(tmp_path, n) for n in os.listdir(tmp_path) if n.endswith(".index"))
    header, record = 8, 29  # "OSII" | version, then ChunkId | Timestamp | Epoch | Pos | Type
    size = os.path.getsize(index)
    if damage == "index-lost":
        os.truncate(index, header)
    elif damage == "index-behind":
        os.truncate(index, size - 3 * record)
    elif damage == "garbage-record":
        with open(index, "ab") as f:
            f.write(b"\x00" * record + b"\xff" * record)
    else:  # a record with the next chunk id but the first chunk's position
        with open(index, "ab") as f:
            f.write(struct.pack(">QqQIB", 18, 0, 1, 8, 0))
    again = StreamLog(str(tmp_path), fsync=False)
    assert [o for o, _e in read_all(again, 0)] == list(range(18))
    assert read_all(again, 15) == [(15, b"c5-0"), (16, b"c5-1"), (17, b"c5-2")]
    assert again.append([b"new"]) == (18, 18)
    assert again.locate(("timestamp", 0)) == 0
    again.close()
    assert os.path.getsize(index) == header + 7 * record  # rebuilt: one record per chunk


def test_a_corrupt_tail_is_truncated_on_open(tmp_path):
    log = StreamLog(str(tmp_path), fsync=False)
    log.append(entries("ok", 2))
    log.append(entries("bad", 2))
    log.close()
    seg = next(os.path.join(tmp_path, n) for n in os.listdir(tmp_path) if n.endswith(".segment"))
    with open(seg, "r+b") as f:
        f.seek(os.path.getsize(seg) - 2)
        f.write(b"\xff\xff")  # a flipped byte in the last chunk's data: CRC mismatch
    again = StreamLog(str(tmp_path), fsync=False)
    assert again.locate(NEXT) == 2
    again.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.binary(max_size=50), min_size=1, max_size=6), min_size=1,
                max_size=25), st.integers(min_value=60, max_value=400))
def test_whatever_is_appended_reads_back_in_order(tmp_path_factory, chunks, segment_size):
    d = tmp_path_factory.mktemp("p")
    log = StreamLog(str(d), max_segment_size=segment_size, fsync=False)
    for c in chunks:
        log.append(c)
    flat = [e for c in chunks for e in c]
    assert [e for _o, e in read_all(log, 0)] == flat
    log.close()
    again = StreamLog(str(d), max_segment_size=segment_size, fsync=False)
    assert [e for _o, e in read_all(again, 0)] == flat
    again.close()


def test_tracking_survives_reopen_and_retention_through_segment_snapshots(tmp_path):
    """Publisher sequences (chunk trailers) and consumer offsets (delta chunks) are rebuilt
    at open from the last segment alone: a new segment starts with a snapshot of both, so
    retention deleting the segments that first held them loses nothing (osiris's
    tracking). Tracking chunks take an offset and read as no message."""
    log = StreamLog(str(tmp_path), max_segment_size=300, fsync=False)
    log.append_chunk([(None, b"a"), (None, b"b")], sequences={"producer-1": 2})
    at = log.store_offsets({"reader": 1})
    assert at == 2 and log.read_chunk(2).entries == [None]
    assert log.locate(LAST) == 0  # the last chunk of messages, not the tracking one
    for i in range(20):  # roll past several segments
        log.append_chunk([(None, b"x" * 40)], sequences={"producer-2": 100 + i})
    assert len([n for n in os.listdir(tmp_path) if n.endswith(".segment")]) > 3
    log.apply_retention(max_bytes=400, max_age_ms=None)
    assert log.first_offset > 2  # the chunks that first held both are gone
    log.close()
    again = StreamLog(str(tmp_path), max_segment_size=300, fsync=False)
    assert again.sequences == {"producer-1": 2, "producer-2": 119}
    assert again.offsets == {"reader": 1}  # carried by each segment's snapshot
    assert [e for _o, e in read_all(again, again.first_offset) if e is not None][-1] == b"x" * 40
    again.close()


def test_a_stored_offset_survives_reopen(tmp_path):
    log = StreamLog(str(tmp_path), fsync=False)
    log.append([b"m"] * 3)
    log.store_offsets({"app": 2})
    log.store_offsets({"app": 3, "other": 1})
    log.close()
    again = StreamLog(str(tmp_path), fsync=False)
    assert again.offsets == {"app": 3, "other": 1}
    assert again.next_offset == 5
    again.close()


def test_an_in_order_reader_is_served_the_same_chunks_before_and_after_retention(tmp_path):
    """read_raw remembers where each next chunk starts; what it returns is what a search
    returns, across segments, and nothing removed by retention is ever read back."""
    log = StreamLog(str(tmp_path), max_segment_size=300, fsync=False)
    for i in range(40):
        log.append([f"m{i}".encode()] * 3, now_ms=1000 * (i + 1))

    def in_order(start: int) -> list[tuple[int, bytes]]:
        out, offset = [], start
        while (got := log.read_raw(offset)) is not None:
            h, raw = got
            out.append((h.chunk_id, raw))
            offset = h.chunk_id + h.num_records
        return out

    first_pass = in_order(0)
    assert [c for c, _r in first_pass] == list(range(0, 120, 3))
    assert in_order(0) == first_pass  # the second pass follows the remembered positions
    fresh = StreamLog(str(tmp_path), max_segment_size=300, fsync=False)
    backwards = [fresh.read_raw(c) for c, _r in reversed(first_pass)]  # each one a search
    assert [(h.chunk_id, raw) for h, raw in reversed(backwards)] == first_pass
    fresh.close()
    assert log.apply_retention(max_bytes=log.total_bytes() // 2, max_age_ms=None) > 0
    first = log.locate(FIRST)
    assert log.read_raw(0) is None and in_order(first) == [p for p in first_pass
                                                           if p[0] >= first]
    log.close()
