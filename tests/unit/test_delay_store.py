"""The delayed exchange's timer index (broker/delayed/store.py) on real files: due order
across the memtable and sorted runs, what a restart keeps (everything not settled, nothing
settled), bounded memory, a torn journal, browsing, deleting."""

from __future__ import annotations

import os
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.delayed.store import ENTRY_OVERHEAD, JOURNAL, DelayStore, close_all
from broker.message import Message, Properties


def _msg(i: int, size: int = 10) -> Message:
    return Message("dx", "k", Properties(headers={"i": i}, delivery_mode=2), b"x" * size)


def _ids(items) -> list[int]:
    return [item[-1].properties.headers["i"] for item in items]


def _fill(store: DelayStore, n: int, seed: int = 1, flush_every: int = 50) -> dict[int, int]:
    rnd = random.Random(seed)
    dues = {}
    for i in range(n):
        due = 10_000 + rnd.randrange(5_000)
        store.add(due, _msg(i))
        dues[i] = due
        if i % flush_every == 0:
            store.flush()
    store.flush()
    return dues


def test_messages_come_out_in_due_order_across_runs_and_the_memtable(tmp_path) -> None:
    store = DelayStore(str(tmp_path / "x"), memtable_bytes=16_000, readahead=2048)
    dues = _fill(store, 2_000)
    assert store._runs, "a small memtable spills to sorted runs"
    assert len(store) == 2_000
    assert store.next_due() == min(dues.values())
    assert store.pop_due(min(dues.values()) - 1, 10) == []  # nothing before its time
    out = store.pop_due(10**12, 10**6)
    keys = [k for k, _f, _m in out]
    assert keys == sorted(keys)
    assert sorted(_ids(out)) == list(range(2_000))
    assert all(dues[i] == k[0] for i, (k, _f, _m) in zip(_ids(out), out, strict=True))
    assert len(store) == 0
    store.close()


def test_a_restart_keeps_what_was_not_settled_and_nothing_settled(tmp_path) -> None:
    path = str(tmp_path / "x")
    store = DelayStore(path, memtable_bytes=16_000, readahead=2048)
    _fill(store, 1_500)
    first = store.pop_due(12_000, 10**6)
    for key, _f, _m in first[:300]:
        store.settle(key)
    store.commit()
    # handed out but not settled (its targets did not confirm yet): kept
    unsettled = set(_ids(first[300:]))
    store.close()
    again = DelayStore(path, memtable_bytes=16_000, readahead=2048)
    assert len(again) == 1_500 - 300
    out = again.pop_due(10**12, 10**6)
    got = _ids(out)
    assert len(got) == len(set(got)) == 1_200  # none twice
    assert set(got) == set(range(1_500)) - set(_ids(first[:300]))  # none lost
    assert unsettled <= set(got)
    assert [k for k, _f, _m in out] == sorted(k for k, _f, _m in out)
    for key, _f, _m in out:
        again.settle(key)
    again.commit()
    assert not [n for n in os.listdir(path) if n.startswith("run-")]  # spent runs deleted
    again.close()
    assert len(DelayStore(path)) == 0


def test_a_new_message_never_sorts_before_one_handed_out(tmp_path) -> None:
    """A due time earlier than the last one handed out (a clock step back) is clamped to
    it, so the watermark alone says what is done."""
    store = DelayStore(str(tmp_path / "x"))
    store.add(5_000, _msg(1))
    store.flush()
    (key, _f, _m), = store.pop_due(6_000, 10)
    late = store.add(4_000, _msg(2))
    assert late > key and late[0] == 5_000
    store.close()


def test_the_memtable_stays_within_its_bound(tmp_path) -> None:
    bound = 64_000
    store = DelayStore(str(tmp_path / "x"), memtable_bytes=bound, readahead=4096)
    for i in range(20_000):
        store.add(10_000 + i % 977, _msg(i, 100))
        if i % 100 == 99:
            store.flush()
            assert store._mem_bytes <= bound
    store.flush()
    assert store._mem_bytes <= bound
    assert len(store) == 20_000
    assert len(store._runs) > 20_000 * (100 + ENTRY_OVERHEAD) // bound // 2
    store.close()


def test_a_torn_journal_record_loses_only_itself(tmp_path) -> None:
    path = str(tmp_path / "x")
    store = DelayStore(path)
    for i in range(10):
        store.add(10_000 + i, _msg(i))
    store.flush()
    store.sync()
    store._journal.close()  # as a killed process leaves it (no clean close)
    journal, = (os.path.join(path, n) for n in os.listdir(path) if n.startswith(JOURNAL))
    with open(journal, "r+b") as f:
        f.truncate(os.path.getsize(journal) - 3)
    again = DelayStore(path)
    assert _ids(again.pop_due(10**12, 100)) == list(range(9))
    again.close()


def test_browse_shows_waiting_messages_in_order_without_taking_them(tmp_path) -> None:
    store = DelayStore(str(tmp_path / "x"), memtable_bytes=8_000, readahead=1024)
    dues = _fill(store, 500)
    seen = list(store.peek(20))
    assert [k[0] for k, _m in seen] == sorted(dues.values())[:20]
    assert len(store) == 500
    store.pop_due(sorted(dues.values())[99], 10**6)
    assert [k[0] for k, _m in store.peek(5)] == sorted(dues.values())[100:105]
    store.close()


def test_delete_removes_the_directory(tmp_path) -> None:
    path = str(tmp_path / "x")
    store = DelayStore(path, memtable_bytes=4_000)
    _fill(store, 300)
    store.delete()
    assert not os.path.exists(path)


def test_memory_only_without_a_directory() -> None:
    store = DelayStore(None)
    store.add(2, _msg(2))
    store.add(1, _msg(1))
    store.flush()
    store.sync()
    assert _ids(store.pop_due(10, 10)) == [1, 2]


def test_a_torn_watermark_slot_leaves_the_other(tmp_path) -> None:
    """The watermark is written in place, in two slots in turn: a torn write of one (a
    crash mid-write) falls back to the other, the one before it."""
    from broker.delayed.store import FIRED

    path = str(tmp_path / "x")
    store = DelayStore(path)
    for i in range(4):
        store.add(10_000 + i, _msg(i))
    store.flush()
    for key, _f, _m in store.pop_due(10**12, 10):
        store.settle(key)
        store.commit()  # one watermark write per message: slots 1, 0, 1, 0
    store.close()
    fired = os.path.join(path, FIRED)
    with open(fired, "r+b") as f:
        f.seek(0)  # the last write went to slot 0: tear it
        f.write(b"\xff" * 10)
    again = DelayStore(path)
    assert again.watermark == (10_002, 3)  # the third message's key, from slot 1
    assert _ids(again.pop_due(10**12, 10)) == [3]
    again.close()


def _fill_until_spill(store: DelayStore, start: int = 0) -> tuple[object, int]:
    """Add messages until flush(background=True) hands out a SpillJob."""
    i = start
    while True:
        store.add(10_000 + (i * 7919) % 5_000, _msg(i))
        i += 1
        job = store.flush(background=True)
        if job is not None:
            return job, i


def test_a_background_spill_hands_out_in_order_meanwhile_and_after(tmp_path) -> None:
    store = DelayStore(str(tmp_path / "x"), memtable_bytes=20_000, readahead=2048)
    job, n = _fill_until_spill(store)
    assert store.spilling()
    for i in range(n, n + 50):  # taken while the run is written: a new memtable
        store.add(10_000 + (i * 7919) % 5_000, _msg(i))
    store.flush(background=True)
    first = store.pop_due(12_000, 10**6)  # handed out of the spilling memtable meanwhile
    job.write()  # the thread's part
    store.finish_spill(job)
    assert not store.spilling() and len(store._runs) == 1
    rest = store.pop_due(10**12, 10**6)
    keys = [k for k, _f, _m in first + rest]
    assert keys == sorted(keys)
    assert sorted(_ids(first + rest)) == list(range(n + 50))
    store.close()


def test_a_crash_during_a_spill_loses_nothing_and_repeats_nothing(tmp_path) -> None:
    path = str(tmp_path / "x")
    store = DelayStore(path, memtable_bytes=20_000)
    job, n = _fill_until_spill(store)
    store.add(20_000, _msg(n))
    store.flush(background=True)
    store.sync()  # the crash: the job never ran, no clean close
    again = DelayStore(path, memtable_bytes=20_000)
    assert sorted(_ids(again.pop_due(10**12, 10**6))) == list(range(n + 1))
    again.close()


def test_a_crash_after_the_run_was_written_reads_the_run_not_the_journal(tmp_path) -> None:
    path = str(tmp_path / "x")
    store = DelayStore(path, memtable_bytes=20_000)
    job, n = _fill_until_spill(store)
    job.write()  # the run is whole, the covered journal not yet deleted: then the crash
    store.sync()
    again = DelayStore(path, memtable_bytes=20_000)
    got = _ids(again.pop_due(10**12, 10**6))
    assert len(got) == len(set(got)) == n
    again.close()


def _open_run_files(directory: str) -> int:
    """Descriptors of this process open on run files of `directory`."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(directory) and os.path.basename(target).startswith("run-"):
            n += 1
    return n


def test_at_most_open_runs_runs_hold_a_file_however_many_there_are(tmp_path) -> None:
    """Twenty runs whose due times interleave (every run is read at every step, the worst
    case for a cache of open files), three open at most: every message still comes out
    once, in due order, with never more than three run files open; the same after a
    restart."""
    path = str(tmp_path / "x")
    store = DelayStore(path, memtable_bytes=16_000, readahead=512, open_runs=3)
    dues = _fill(store, 3_000)
    store.sync()
    assert len(store._runs) >= 20
    assert _open_run_files(path) <= 3
    out = []
    while len(store):
        batch = store.pop_due(10**12, 37)
        assert _open_run_files(path) <= 3 and len(store.open_runs) <= 3
        for key, _f, _m in batch[:20]:
            store.settle(key)
        out += batch
    keys = [k for k, _f, _m in out]
    assert keys == sorted(keys)
    assert sorted(_ids(out)) == list(range(3_000))
    assert all(dues[i] == k[0] for i, (k, _f, _m) in zip(_ids(out), out, strict=True))
    store.commit()
    store.close()
    again = DelayStore(path, memtable_bytes=16_000, readahead=512, open_runs=3)
    assert _open_run_files(path) <= 3
    rest = again.pop_due(10**12, 10**6)
    assert [k for k, _f, _m in rest] == sorted(k for k, _f, _m in rest)
    # the watermark stopped at the first batch's first unsettled message: the rest again
    assert len(rest) == len({k for k, _f, _m in rest}) == 3_000 - 20
    assert [k for k, _f, _m in again.peek(5)] == []  # everything was handed out
    again.close()


def test_a_browse_of_many_runs_opens_at_most_open_runs_files(tmp_path) -> None:
    path = str(tmp_path / "x")
    store = DelayStore(path, memtable_bytes=16_000, readahead=512, open_runs=2)
    _fill(store, 2_000)
    seen = []
    for key, _message in store.peek(500):
        seen.append(key)
        assert _open_run_files(path) <= 4  # the store's two and the browse's two
    assert seen == sorted(seen) and len(seen) == 500
    assert len(store) == 2_000  # nothing handed out
    store.close()


def test_a_spill_writes_its_run_in_parts_and_restores_the_switch_interval(tmp_path):
    """SpillJob.write sorts in chunks, cuts them into key ranges and writes them part by
    part with short GIL turns (the event loop's wait for the GIL stays short); the run is
    whole and in key order, and the interpreter's switch interval is back afterwards."""
    import sys

    from broker.delayed.store import SpillJob, drop_gradually
    from broker.durable_io import write_parts_atomically

    before = sys.getswitchinterval()
    entries = [(1000 + (i * 7919) % 5000, i, b"r%05d" % i) for i in range(5000)]
    job = SpillJob(str(tmp_path), 1, 1, list(entries), 5000)
    job.write()
    assert sys.getswitchinterval() == before
    data = (tmp_path / job.name).read_bytes()
    assert data == b"".join(e[2] for e in sorted(entries))
    garbage = list(entries)
    drop_gradually(garbage)
    assert garbage == [] and sys.getswitchinterval() == before
    write_parts_atomically(str(tmp_path), "parts", [b"ab", b"", b"cd" * 1000], fsync=False)
    assert (tmp_path / "parts").read_bytes() == b"ab" + b"cd" * 1000


@settings(max_examples=60, deadline=None)
@given(dues=st.lists(st.integers(min_value=0, max_value=50), max_size=5000),
       chunk=st.sampled_from([1, 3, 64, 1024]))
def test_sorted_parts_joins_any_records_in_key_order(dues, chunk):
    """sorted_parts (the spill's sort: chunks, sampled key ranges, a sort per range) gives
    every record once, in (due, seq) order, whatever the order and the repeats of the due
    times and however small the chunks."""
    import broker.delayed.store as store_module

    entries = [(due, seq, b"%d.%d;" % (due, seq)) for seq, due in enumerate(dues)]
    saved = store_module.SPILL_CHUNK
    store_module.SPILL_CHUNK = chunk
    try:
        parts = store_module.sorted_parts(list(entries))
    finally:
        store_module.SPILL_CHUNK = saved
    assert b"".join(parts) == b"".join(e[2] for e in sorted(entries))


def test_sorted_parts_of_records_taken_in_order_keep_them_whole_and_in_order():
    """The fast path: records taken in key order (one delay for every message) come out as
    they went in, in parts of SPILL_CHUNK records; one record out of place sends them
    through the ranges instead, still in order."""
    from broker.delayed.store import SPILL_CHUNK, sorted_parts

    entries = [(1000 + i // 7, i, b"%06d" % i) for i in range(5 * SPILL_CHUNK + 3)]
    parts = sorted_parts(list(entries))
    assert len(parts) == 6 and b"".join(parts) == b"".join(e[2] for e in entries)
    swapped = list(entries)
    swapped[10], swapped[4000] = swapped[4000], swapped[10]
    assert b"".join(sorted_parts(swapped)) == b"".join(e[2] for e in entries)


def test_a_crash_during_a_spill_repeats_nothing_handed_out_and_not_settled(tmp_path) -> None:
    """Handed out and not settled when a spill starts: such a record is in the covered
    journal and in the new one that the spill starts; a crash before the run is whole
    leaves both, and recovery reads it once."""
    path = str(tmp_path / "x")
    store = DelayStore(path, memtable_bytes=20_000)
    for i in range(20):
        store.add(1_000 + i, _msg(i))
    store.flush()
    out = store.pop_due(1_019, 10)  # handed out, never settled
    assert _ids(out) == list(range(10))
    job, n = _fill_until_spill(store, start=20)
    store.sync()  # the crash: the job never ran, no clean close
    again = DelayStore(path, memtable_bytes=20_000)
    got = _ids(again.pop_due(10**12, 10**6))
    assert sorted(got) == list(range(n))
    again.close()


def test_starting_a_spill_fsyncs_nothing_on_the_loop_and_the_job_makes_it_durable(
        tmp_path, monkeypatch) -> None:
    """The new journal a spill starts is renamed in without an fsync on the event loop
    (two fsyncs stalled it at every spill); the job's thread fsyncs it before the run, and
    confirms of what is appended meanwhile wait for the directory too (sync_fds)."""
    path = str(tmp_path / "x")
    store = DelayStore(path, memtable_bytes=20_000)
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    job, n = _fill_until_spill(store)
    assert synced == []  # flush(background=True) started the spill: nothing fsynced
    for fd in store.sync_fds():  # what the holder's fsync thread does for a confirm
        os.fsync(fd)
        os.close(fd)
    assert path in synced and any(p.startswith(path + "/" + JOURNAL) for p in synced)
    synced.clear()
    job.write()
    journal = job.journal_path
    assert synced[0] == journal and synced[-1] == path  # the journal first, the entries last
    store.finish_spill(job)
    assert sorted(_ids(store.pop_due(10**12, 10**6))) == list(range(n))
    store.close()


def test_with_unlink_later_a_spent_file_loses_its_name_at_once_and_its_blocks_later(
        tmp_path) -> None:
    """The holder's mode: a covered journal and a spent run are unlinked on the spot (the
    name gone, so a namesake exchange declared next cannot lose a file to a late unlink),
    but kept open, so that the last close, which frees the blocks (3-4 ms for 8 MiB), runs
    in a thread (`take_garbage`, `close_all`)."""
    path = str(tmp_path / "x")
    store = DelayStore(path, memtable_bytes=20_000)
    store.unlink_later = True
    job, n = _fill_until_spill(store)
    job.write()
    store.finish_spill(job)  # the covered journal
    assert f"{JOURNAL}-{job.generation}" not in os.listdir(path)
    garbage = store.take_garbage()
    assert len(garbage) == 1 and os.fstat(garbage[0]).st_nlink == 0
    out = store.pop_due(10**12, 10**6)
    for key, _f, _m in out:
        store.settle(key)
    store.commit()  # every message of the run went out: the run is spent
    assert not [f for f in os.listdir(path) if f.startswith("run-")]
    garbage += store.take_garbage()
    assert len(garbage) == 2 and store.take_garbage() == []
    close_all(garbage)
    assert sorted(_ids(out)) == list(range(n))
    store.close()
