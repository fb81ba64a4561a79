"""Queue index: journal and segment byte formats, folding, clean and unclean recovery
(rabbit_queue_index v1)."""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib

import pytest

from broker.queue_index import journal as jf
from broker.queue_index import segment as sf
from broker.queue_index.files import count_store_refs, queue_dir_name
from broker.queue_index.index import QueueIndex
from broker.queue_index.journal import PubRecord


def mid(n: int) -> bytes:
    return n.to_bytes(16, "big")


def pub(n: int, embedded: bytes = b"", persistent: bool = True, size: int = 10) -> PubRecord:
    return PubRecord(mid(n), persistent, 0, size, embedded)


def new_index(path, **kw) -> QueueIndex:
    kw.setdefault("fsync", False)
    qi = QueueIndex(str(path), kw.pop("on_sync", None), **kw)
    qi.recover()
    return qi


# -- byte formats --------------------------------------------------------------------------
def test_journal_publish_entry_bytes():
    p = PubRecord(mid(5), True, 1_700_000_000_000_000, 300, b"EMB")
    data = jf.encode_publish(7, p)
    head = struct.pack(">Q16sQII", 7, mid(5), 1_700_000_000_000_000, 300, 3)
    assert data == head + b"EMB" + struct.pack(">I", zlib.crc32(head + b"EMB"))
    transient = jf.encode_publish(7, p._replace(is_persistent=False))
    assert transient[0] >> 6 == 0b01
    assert jf.encode_deliver(7) == struct.pack(">Q", (0b10 << 62) | 7)
    assert jf.encode_ack(2**62 - 1) == b"\xff" * 8


def test_journal_parse_every_split_point():
    data = jf.encode_publish(0, pub(1, b"xyz")) + jf.encode_deliver(0) + jf.encode_ack(0)
    data += jf.encode_publish(1, pub(2, persistent=False))
    entries, end = jf.parse(data)
    assert [(k, s) for k, s, _ in entries] == [(0, 0), (2, 0), (3, 0), (1, 1)]
    assert entries[0][2] == pub(1, b"xyz")
    assert end == len(data)
    for cut in range(len(data)):
        part, end = jf.parse(data[:cut])
        assert end <= cut
        assert part == entries[: len(part)]


def test_journal_zeroed_tail_is_not_a_publish_of_seq_0():
    data = jf.encode_publish(3, pub(3))
    entries, end = jf.parse(data + bytes(200))
    assert len(entries) == 1
    assert end == len(data)


def test_segment_block_round_trip_and_del_then_ack_order():
    block = sf.encode_block(1, [(16384, sf.SegEntry(pub(1, b"e"), True, False))])
    block += sf.encode_block(1, [(16384, sf.SegEntry(None, False, True)), (16390, sf.SegEntry(pub(2)))])
    entries, end = sf.parse(1, block)
    assert end == len(block)
    assert entries[16384].pub == pub(1, b"e")
    assert entries[16384].delivered
    assert entries[16384].acked
    assert entries[16390].pub == pub(2)
    assert not entries[16390].delivered
    # first record of the first block: 1 | persistent 1 | rel seq 0
    assert block[8:10] == b"\xc0\x00"
    torn, end = sf.parse(1, block[:-3])
    assert 16390 not in torn
    with pytest.raises(ValueError) as err:
        sf.encode_block(0, [(16384, sf.SegEntry(pub(1)))])
    assert "not in segment 0" in str(err.value)


def test_queue_dir_name_is_md5_base36():
    name = queue_dir_name("/", "q")
    assert name.isalnum()
    assert name == name.upper()
    assert name != queue_dir_name("/q", "")


# -- QueueIndex ----------------------------------------------------------------------------
def test_publish_deliver_ack_and_read(tmp_path):
    qi = new_index(tmp_path)
    for s in range(5):
        qi.publish(s, pub(s, b"m%d" % s))
    qi.deliver([0, 1])
    qi.ack([0])
    got = qi.read(0, 16384)
    assert [(e.seq_id, e.delivered) for e in got] == [(1, True), (2, False), (3, False), (4, False)]
    qi.fold()
    assert os.path.getsize(tmp_path / "journal.jif") == 0
    assert [(e.seq_id, e.delivered, e.pub.embedded) for e in qi.read(0, 16384)] == [
        (1, True, b"m1"), (2, False, b"m2"), (3, False, b"m3"), (4, False, b"m4")
    ]


def test_journal_folds_past_max_entries_and_acked_segments_go(tmp_path):
    qi = new_index(tmp_path, max_journal_entries=50)
    n = sf.SEGMENT_ENTRY_COUNT + 10
    for s in range(n):
        qi.publish(s, pub(s))
    assert qi.journal_entries() <= 50
    assert sf.list_segments(str(tmp_path)) == [0]  # the last entries are still journalled
    qi.fold()
    assert sf.list_segments(str(tmp_path)) == [0, 1]
    seg0 = range(sf.SEGMENT_ENTRY_COUNT)
    qi.deliver(seg0)
    qi.ack(seg0)
    qi.fold()
    assert sf.list_segments(str(tmp_path)) == [1]
    assert [e.seq_id for e in qi.read(sf.SEGMENT_ENTRY_COUNT, n)] == list(range(sf.SEGMENT_ENTRY_COUNT, n))


def test_journal_folds_past_max_embedded_bytes(tmp_path):
    qi = new_index(tmp_path, max_journal_bytes=1000)
    for s in range(9):
        qi.publish(s, pub(s, b"e" * 100))
    assert qi.journal_entries() == 9  # 900 embedded bytes
    qi.publish(9, pub(9, b"e" * 101))
    assert qi.journal_entries() == 0  # 1001 > 1000: folded
    qi.publish(10, pub(10))  # store-backed publishes carry no embedded bytes
    assert [e.pub.embedded for e in qi.read(0, 11)][-2:] == [b"e" * 101, b""]


def test_acked_embedded_publishes_leave_the_ram_journal_and_do_not_force_a_fold(tmp_path):
    """Written publishes that consumers ack leave the in-RAM journal map (a fold would skip
    them), so their embedded bytes stop counting towards max_journal_bytes: a queue whose
    consumers keep up folds by entry count only, as RabbitMQ's v1 index does. The file keeps
    publish, deliver and ack, and a replay still finds nothing left."""
    qi = new_index(tmp_path, max_journal_bytes=1000, max_journal_entries=10_000)
    for s in range(30):
        qi.publish(s, pub(s, b"e" * 100))
        qi.flush()  # the publish reaches the file before its ack
        qi.deliver([s])
        qi.ack([s])
    assert qi.journal_entries() == 90  # 3000 embedded bytes written, all acked: no fold
    qi.publish(30, pub(30, b"e" * 100))
    qi.flush()
    assert [e.seq_id for e in qi.read(0, 31)] == [30]
    qi.close_abruptly()
    again = new_index(tmp_path)
    assert [e.seq_id for e in again.read(0, 31)] == [30]
    again.fold()
    assert sf.list_segments(str(tmp_path)) == [0]


def test_sync_reports_confirms_from_a_worker_thread(tmp_path):
    got = []
    done = threading.Event()

    def on_sync(ids):
        got.append((ids, threading.current_thread().name))
        done.set()

    qi = new_index(tmp_path, fsync=True, on_sync=on_sync)
    qi.publish(0, pub(0), confirm=True)
    qi.publish(1, pub(1))
    assert qi.needs_sync()
    qi.sync()
    assert done.wait(5)
    assert got == [([mid(0)], got[0][1])]
    assert got[0][1].startswith("qi-fsync")
    assert not qi.needs_sync()
    qi.terminate(1, 10, 2)


def test_clean_terms_skip_the_replay(tmp_path):
    qi = new_index(tmp_path)
    for s in range(3):
        qi.publish(s, pub(s))
    qi.deliver([0])
    qi.ack([0])
    qi.terminate(2, 20, 3)
    assert (tmp_path / "clean.terms").exists()
    again = QueueIndex(str(tmp_path), fsync=False)
    rec = again.recover(lambda m: pytest.fail("clean recovery must not ask the store"))
    assert (rec.clean, rec.count, rec.bytes, rec.next_seq_id) == (True, 2, 20, 3)
    assert [(e.seq_id, e.delivered) for e in again.read(rec.low_seq_id, 3)] == [(1, False), (2, False)]


def test_unclean_replay_marks_delivered_and_drops_transient_and_missing(tmp_path, caplog):
    qi = new_index(tmp_path)
    qi.publish(0, pub(0, b"embedded"))
    qi.publish(1, pub(1))  # body in the store
    qi.publish(2, pub(2))  # body missing from the store
    qi.publish(3, pub(3, b"t", persistent=False))
    qi.publish(4, pub(4, b"acked"))
    qi.flush()  # written before its ack, so the ack is written too (an earlier ack drops all)
    qi.deliver([4])
    qi.ack([4])
    qi.flush()
    qi.close_abruptly()
    caplog.set_level(logging.WARNING, logger="broker.queue")
    again = QueueIndex(str(tmp_path), fsync=False)
    rec = again.recover(lambda m: m != mid(2))
    assert not rec.clean
    assert (rec.count, rec.bytes, rec.next_seq_id) == (2, 20, 5)
    assert [(e.seq_id, e.delivered) for e in again.read(0, 5)] == [(0, True), (1, True)]
    assert "body missing from the message store" in caplog.text
    # a second crash right after recovery loses nothing
    again.close_abruptly()
    third = QueueIndex(str(tmp_path), fsync=False)
    assert third.recover(lambda m: True).count == 2


@pytest.mark.parametrize("tail", ["half_entry", "zeroed"])
def test_torn_journal_tail_is_truncated_and_logged(tmp_path, caplog, tail):
    qi = new_index(tmp_path)
    qi.publish(0, pub(0, b"whole"))
    qi.flush()
    qi.close_abruptly()
    path = tmp_path / "journal.jif"
    good = path.stat().st_size
    extra = jf.encode_publish(1, pub(1, b"torn" * 50))
    with open(path, "ab") as f:
        f.write(extra[: len(extra) // 2] if tail == "half_entry" else bytes(100))
    caplog.set_level(logging.WARNING, logger="broker.queue")
    again = QueueIndex(str(tmp_path), fsync=False)
    rec = again.recover(lambda m: True)
    assert rec.count == 1
    assert f"torn journal entry at offset {good}" in caplog.text
    assert [e.pub.embedded for e in again.read(0, 10)] == [b"whole"]


def test_orphaned_ack_is_ignored(tmp_path):
    qi = new_index(tmp_path)
    qi.publish(0, pub(0, b"a"))
    qi.fold()
    qi.close_abruptly()
    with open(tmp_path / "journal.jif", "ab") as f:
        f.write(jf.encode_ack(999) + jf.encode_deliver(998))
    again = QueueIndex(str(tmp_path), fsync=False)
    rec = again.recover(lambda m: True)
    assert (rec.count, rec.next_seq_id) == (1, 1000)
    assert [e.seq_id for e in again.read(0, 1000)] == [0]


def test_torn_segment_block_is_replayed_from_the_journal(tmp_path, caplog):
    qi = new_index(tmp_path)
    qi.publish(0, pub(0, b"a"))
    qi.fold()
    qi.publish(1, pub(1, b"b"))
    qi.flush()
    qi.close_abruptly()
    # a fold that crashed half-way: half a block in the segment, the journal still whole
    block = sf.encode_block(0, [(1, sf.SegEntry(pub(1, b"b")))])
    with open(tmp_path / "0.idx", "ab") as f:
        f.write(block[:-4])
    caplog.set_level(logging.WARNING, logger="broker.queue")
    again = QueueIndex(str(tmp_path), fsync=False)
    rec = again.recover(lambda m: True)
    assert rec.count == 2
    assert "torn segment block" in caplog.text
    assert [e.pub.embedded for e in again.read(0, 2)] == [b"a", b"b"]


def test_missing_segment_file_loses_its_messages_only(tmp_path):
    qi = new_index(tmp_path, max_journal_entries=10)
    n = sf.SEGMENT_ENTRY_COUNT + 3
    for s in range(n):
        qi.publish(s, pub(s, b"x"))
    qi.fold()
    qi.close_abruptly()
    os.unlink(tmp_path / "0.idx")
    again = QueueIndex(str(tmp_path), fsync=False)
    rec = again.recover(lambda m: True)
    assert (rec.count, rec.low_seq_id, rec.next_seq_id) == (3, sf.SEGMENT_ENTRY_COUNT, n)


def test_unclean_replay_by_segment_survives_a_crash_half_way(tmp_path, monkeypatch):
    seg = sf.SEGMENT_ENTRY_COUNT
    qi = new_index(tmp_path, max_journal_entries=10**6)
    for s in range(seg + 10):
        qi.publish(s, pub(s, b"x"))
    qi.fold()  # segments 0 and 1 on disk; what follows stays in the journal
    gone = [s for s in range(seg) if s != 5]
    qi.deliver(gone)
    qi.ack(gone)
    for s in [*range(seg + 10, seg + 20), *range(2 * seg, 2 * seg + 3)]:
        qi.publish(s, pub(s, b"y"))
    qi.deliver([seg + 1])
    qi.ack([seg + 1])
    qi.flush()
    qi.close_abruptly()
    survivors = [5, seg, *range(seg + 2, seg + 20), *range(2 * seg, 2 * seg + 3)]

    calls = []
    real = QueueIndex._append_block

    def crash_on_second(self, s, entries):
        calls.append(s)
        if len(calls) == 2:
            raise OSError("simulated crash between segments")
        real(self, s, entries)

    monkeypatch.setattr(QueueIndex, "_append_block", crash_on_second)
    with pytest.raises(OSError):
        QueueIndex(str(tmp_path), fsync=False).recover(lambda m: True)
    monkeypatch.undo()
    assert calls == [0, 1]
    for _ in range(2):  # the replay after the crash, then a crash right after it
        again = QueueIndex(str(tmp_path), fsync=False)
        rec = again.recover(lambda m: True)
        assert (rec.count, rec.low_seq_id, rec.next_seq_id) == (len(survivors), 5, 2 * seg + 3)
        got = [e for start in (0, seg, 2 * seg) for e in again.read(start, start + seg)]
        assert [e.seq_id for e in got] == survivors
        assert all(e.delivered for e in got)
        again.close_abruptly()


def test_count_store_refs_counts_unacked_persistent_store_messages(tmp_path):
    for q, acked in (("a", False), ("b", True)):
        qi = QueueIndex(str(tmp_path / queue_dir_name("/", q)), fsync=False)
        qi.recover()
        qi.publish(0, pub(1))  # in the store
        qi.publish(1, pub(2, b"embedded"))
        qi.publish(2, pub(3, persistent=False))
        if acked:
            qi.deliver([0])
            qi.ack([0])
        qi.flush()
        qi.close_abruptly()
    refs = count_store_refs(str(tmp_path))
    assert refs == {mid(1): 1}


# -- entries acked before they are written are never written (seed 004) --------------------
def jsize(path) -> int:
    return os.path.getsize(path / "journal.jif")


def test_publish_deliver_ack_before_flush_writes_nothing(tmp_path):
    qi = new_index(tmp_path)
    qi.publish(0, pub(0, b"embedded"))
    qi.publish(1, pub(1))
    qi.deliver([0, 1])
    qi.ack([0, 1])
    qi.publish(2, pub(2))  # acked without a deliver (purge, drop)
    qi.ack([2])
    assert qi.journal_entries() == 0
    assert qi._journal_bytes == 0
    assert qi.read(0, 16) == []
    qi.sync()
    assert jsize(tmp_path) == 0
    qi.fold()
    assert sf.list_segments(str(tmp_path)) == []
    qi.terminate(0, 0, 3)
    again = QueueIndex(str(tmp_path), fsync=False)
    rec = again.recover()
    assert (rec.clean, rec.count, rec.next_seq_id) == (True, 0, 3)


def test_publish_flush_ack_writes_the_ack(tmp_path):
    qi = new_index(tmp_path)
    qi.publish(0, pub(0))
    qi.sync()
    written = jsize(tmp_path)
    assert written > 0
    qi.deliver([0])
    qi.ack([0])
    qi.flush()
    assert jsize(tmp_path) == written + 16  # deliver + ack headers
    entries, _end = jf.parse((tmp_path / "journal.jif").read_bytes())
    assert [(k, s) for k, s, _ in entries] == [(jf.PUB_PERSIST, 0), (jf.DEL, 0), (jf.ACK, 0)]
    assert qi.journal_entries() == 3


def test_publish_deliver_flush_ack_writes_the_ack(tmp_path):
    qi = new_index(tmp_path)
    qi.publish(0, pub(0))
    qi.deliver([0])
    qi.flush()
    qi.ack([0])
    qi.flush()
    entries, _end = jf.parse((tmp_path / "journal.jif").read_bytes())
    assert [(k, s) for k, s, _ in entries] == [(jf.PUB_PERSIST, 0), (jf.DEL, 0), (jf.ACK, 0)]
    qi.close_abruptly()
    rec = QueueIndex(str(tmp_path), fsync=False).recover(lambda m: True)
    assert (rec.clean, rec.count, rec.next_seq_id) == (False, 0, 1)


def test_unwritten_entries_keep_their_order_per_seq_id(tmp_path):
    qi = new_index(tmp_path)
    qi.publish(0, pub(0))
    qi.publish(1, pub(1))
    qi.flush()
    qi.publish(2, pub(2))
    qi.deliver([0, 2, 1])
    qi.publish(3, pub(3))
    qi.ack([1])
    qi.flush()
    entries, _end = jf.parse((tmp_path / "journal.jif").read_bytes())
    after = [(k, s) for k, s, _ in entries][2:]
    for seq, kinds in ((0, [jf.DEL]), (1, [jf.DEL, jf.ACK]), (2, [jf.PUB_PERSIST, jf.DEL]),
                       (3, [jf.PUB_PERSIST])):
        assert [k for k, s in after if s == seq] == kinds
    qi.close_abruptly()
    again = QueueIndex(str(tmp_path), fsync=False)
    rec = again.recover(lambda m: True)
    assert rec.count == 3
    assert [e.seq_id for e in again.read(0, 16)] == [0, 2, 3]


def reports():
    """(what on_sync reported, an Event set at each report, the on_sync callback)."""
    got: list[list[bytes]] = []
    done = threading.Event()

    def on_sync(ids):
        got.append(ids)
        done.set()

    return got, done, on_sync


def test_confirm_of_a_publish_acked_before_sync_is_dropped_not_waited_for(tmp_path):
    got, done, on_sync = reports()
    qi = new_index(tmp_path, fsync=True, on_sync=on_sync)
    qi.publish(0, pub(0), confirm=True)
    qi.publish(1, pub(1), confirm=True)
    qi.deliver([0])
    qi.ack([0])  # never written: the caller confirms it at ack time, the index never does
    assert qi.needs_sync()  # seq 1 still owes
    qi.sync()
    assert done.wait(5)
    qi.wait_for_sync()
    assert got == [[mid(1)]]
    qi.publish(2, pub(2), confirm=True)
    qi.ack([2])
    assert not qi.needs_sync()  # nothing waits for an fsync that will never include it
    qi.sync()
    qi.fold()
    qi.wait_for_sync()
    assert got == [[mid(1)]]
    qi.terminate(1, 10, 3)


def test_lazy_confirms_wait_for_a_sync_and_an_acked_one_is_never_written(tmp_path):
    """A lazy confirm (a delayed exchange's holder) does not ask for the next loop turn's
    fsync; the periodic sync still reports it; one acked first is dropped unwritten."""
    got, done, on_sync = reports()
    qi = new_index(tmp_path, fsync=True, on_sync=on_sync)
    qi.publish(0, pub(0), confirm=True, lazy=True)
    qi.publish(1, pub(1), confirm=True, lazy=True)
    assert not qi.needs_sync()
    qi.publish(2, pub(2), confirm=True)
    assert qi.needs_sync()  # an eager one still asks
    qi.deliver([2])
    qi.ack([2])
    assert not qi.needs_sync()
    qi.deliver([0])
    qi.ack([0])  # acked before any sync: dropped unwritten, never reported
    qi.sync()  # the queue's 200 ms tick
    assert done.wait(5)
    qi.wait_for_sync()
    assert got == [[mid(1)]]
    assert not qi.needs_sync()
    qi.terminate(1, 10, 3)
    qi = new_index(tmp_path)  # only seq 1 was ever kept
    assert [(e.seq_id, e.pub.msg_id) for e in qi.read(0, 16384)] == [(1, mid(1))]


def test_crash_after_unwritten_acks_recovers_every_unacked_publish(tmp_path):
    qi = new_index(tmp_path, max_journal_entries=40)
    survivors = []
    for s in range(100):
        qi.publish(s, pub(s, b"e%d" % s))
        if s % 3 == 0:
            qi.deliver([s])
            qi.ack([s])
        else:
            survivors.append(s)
        if s % 7 == 0:
            qi.flush()
    # some acks of already-written publishes too
    qi.deliver([1, 2])
    qi.ack([1, 2])
    survivors = [s for s in survivors if s not in (1, 2)]
    qi.flush()
    qi.close_abruptly()
    for _ in range(2):  # replay, then a crash right after it
        again = QueueIndex(str(tmp_path), fsync=False)
        rec = again.recover(lambda m: True)
        assert rec.count == len(survivors)
        assert [e.seq_id for e in again.read(0, 100)] == survivors
        assert [e.pub.embedded for e in again.read(0, 100)] == [b"e%d" % s for s in survivors]
        again.close_abruptly()


@pytest.mark.parametrize("op", ["ack", "deliver"])
def test_fold_in_the_middle_of_an_ack_or_deliver_batch(tmp_path, op):
    """An ack/deliver batch whose first entry fills the journal folds (and so flushes) in
    the middle of the loop: the rest of the batch must see the publishes as written
    (found by the VQ stateful test: KeyError in _drop_unwritten, then wrong counts)."""
    qi = new_index(tmp_path, max_journal_entries=6 if op == "ack" else 4)
    qi.publish(0, pub(0))
    qi.flush()
    qi.fold()
    qi.publish(1, pub(1))
    qi.publish(2, pub(2))
    qi.publish(3, pub(3))
    if op == "ack":
        qi.deliver([1, 2])  # still unwritten: kept with the publishes
    qi.deliver([0])  # the last entry that fits; the next one folds
    if op == "deliver":
        qi.deliver([1, 2])
    qi.ack([0, 1, 2])
    qi.flush()
    qi.close_abruptly()
    again = QueueIndex(str(tmp_path), fsync=False)
    rec = again.recover(lambda m: True)
    assert [e.seq_id for e in again.read(0, 16)] == [3]
    assert rec.count == 1


def test_fold_leaves_the_journal_truncation_to_the_worker_and_a_crash_before_it_replays_once(
        tmp_path):
    """With the fsync worker busy (both pool threads held here), fold returns at once: the
    segment holds the entries, the journal keeps them until the worker truncates it after
    the writes queued before the fold. A crash in between (a second index recovering a copy
    of the directory) finds every message once: replaying the journal over the segment adds
    nothing twice. Issue 36: the fold used to wait for the running journal fsync on the
    queue process's loop."""
    import shutil
    import time

    from broker.queue_index import index as qmod

    got: list[bytes] = []
    qi = new_index(tmp_path / "q", fsync=True, on_sync=got.extend)
    for s in range(10):
        qi.publish(s, pub(s, b"m%d" % s), confirm=True)
    qi.deliver([0, 1, 2])
    qi.ack([0])
    qi.flush()  # in the journal file, not fsynced: publish, deliver and ack of seq 0
    release = threading.Event()
    held = [qmod._pool().submit(release.wait, 30) for _ in range(2)]
    try:
        qi.sync()  # queued behind the held threads
        qi.ack([1])  # buffered: the fold queues it for the worker, ahead of the truncation
        t0 = time.monotonic()
        qi.fold()
        assert time.monotonic() - t0 < 2  # did not wait for the worker
        assert os.path.getsize(tmp_path / "q" / "journal.jif") > 0  # not truncated yet
        assert [e.seq_id for e in qi.read(0, 16384)] == list(range(2, 10))
        shutil.copytree(tmp_path / "q", tmp_path / "crash")
    finally:
        release.set()
        for f in held:
            f.result(10)
    qi.wait_for_sync()
    assert os.path.getsize(tmp_path / "q" / "journal.jif") == 0
    assert sorted(got) == [mid(s) for s in range(1, 10)]  # the sync's batch (0 was acked first)
    again = QueueIndex(str(tmp_path / "crash"), None, fsync=False)
    rec = again.recover()
    # seq 0 stays acked (its ack was in the file); seq 1's ack was not written yet when the
    # "crash" came, so it is delivered again, as an unsynced ack is in RabbitMQ
    assert rec.count == 9
    assert [e.seq_id for e in again.read(0, 16384)] == list(range(1, 10))  # each once
    qi.terminate(8, 80, 10)
    after = QueueIndex(str(tmp_path / "q"), None, fsync=False)
    assert after.recover().count == 8
