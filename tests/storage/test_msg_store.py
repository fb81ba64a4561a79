"""Message store: .rdq record format, ref counts, confirms, recovery, GC (rabbit_msg_store)."""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import threading

import pytest

from broker.msg_store import file_format as ff
from broker.msg_store.store import MessageStore
from broker.msg_store.vhost import VhostStores


def mid(n: int) -> bytes:
    return n.to_bytes(16, "big")


def open_store(path, **kw) -> MessageStore:
    kw.setdefault("fsync", False)
    store = MessageStore(str(path), **kw)
    store.recover()
    return store


# -- byte format ---------------------------------------------------------------------------
def test_record_bytes_are_size_id_body_ff():
    rec = ff.encode_record(mid(7), b"hello")
    assert rec == struct.pack(">Q", 21) + mid(7) + b"hello" + b"\xff"
    assert len(rec) == ff.record_total_size(5) == 21 + 9


def test_scan_round_trip_at_every_split_point():
    data = b"".join(ff.encode_record(mid(i), b"x" * i) for i in range(5))
    records, end = ff.scan_bytes(data)
    assert [r.msg_id for r in records] == [mid(i) for i in range(5)]
    assert end == len(data)
    boundaries = {r.offset for r in records} | {len(data)}
    for cut in range(len(data)):
        recs, end = ff.scan_bytes(data[:cut])
        assert end <= cut
        assert end in boundaries
        assert all(r.offset + r.total_size <= cut for r in recs)


def test_scan_stops_at_bad_trailer_and_zeroed_tail():
    good = ff.encode_record(mid(1), b"abc")
    bad = bytearray(ff.encode_record(mid(2), b"def"))
    bad[-1] = 0
    assert ff.scan_bytes(good + bytes(bad))[1] == len(good)
    assert ff.scan_bytes(good + bytes(64))[1] == len(good)


# -- store ---------------------------------------------------------------------------------
def test_write_read_remove_with_ref_counts(tmp_path):
    store = open_store(tmp_path)
    store.write(mid(1), b"body-1")
    assert store.read(mid(1)) == b"body-1"  # served from the write buffer
    store.write(mid(1), b"body-1")
    assert store.ref_count(mid(1)) == 2
    store.flush()
    assert store.read(mid(1)) == b"body-1"  # served from the file
    assert os.path.getsize(tmp_path / "0.rdq") == ff.record_total_size(6)
    store.remove([mid(1)])
    assert store.read(mid(1)) == b"body-1"
    store.remove([mid(1)])
    assert store.read(mid(1)) is None
    assert store.totals() == (ff.record_total_size(6), 0)
    store.close()


def test_files_roll_at_the_size_limit(tmp_path):
    store = open_store(tmp_path, file_size_limit=1000)
    for i in range(10):
        store.write(mid(i), bytes(200))
    store.flush()
    assert ff.list_files(str(tmp_path)) == [0, 1, 2]  # 4 records of 225 B per file
    assert all(store.read(mid(i)) == bytes(200) for i in range(10))
    store.close()


def test_on_disk_callback_after_fsync_on_worker_thread(tmp_path):
    store = open_store(tmp_path, fsync=True)
    got: list[tuple[list[bytes], str]] = []
    done = threading.Event()

    def on_disk(ids):
        got.append((ids, threading.current_thread().name))
        done.set()

    client = store.register_client(on_disk)
    store.write(mid(1), b"a", client)
    store.write(mid(2), b"b", client)
    store.write(mid(3), b"c")  # no client: nobody to tell
    assert store.needs_sync()
    store.sync()
    assert done.wait(5)
    assert got[0][0] == [mid(1), mid(2)]
    assert got[0][1].startswith("store-fsync")
    assert not store.needs_sync()
    store.close()


def test_running_loop_syncs_without_an_explicit_call(tmp_path):
    store = open_store(tmp_path, fsync=True)

    async def main():
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        client = store.register_client(
            lambda ids: loop.call_soon_threadsafe(fut.set_result, ids)
        )
        store.write(mid(9), b"z", client)
        return await asyncio.wait_for(fut, 5)

    assert asyncio.run(main()) == [mid(9)]
    store.close()


def test_clean_shutdown_snapshot_is_used_at_boot(tmp_path):
    store = open_store(tmp_path)
    for i in range(20):
        store.write(mid(i), b"m%d" % i)
    store.write(mid(3), b"m3")
    store.remove([mid(5)])
    store.close()
    assert (tmp_path / "clean.dot").exists()
    again = MessageStore(str(tmp_path), fsync=False)
    assert again.recover(lambda: pytest.fail("ref counts must not be needed"))
    assert not (tmp_path / "clean.dot").exists()
    assert again.ref_count(mid(3)) == 2
    assert again.read(mid(5)) is None
    assert again.read(mid(19)) == b"m19"
    again.close()


def test_corrupt_snapshot_falls_back_to_scan(tmp_path):
    store = open_store(tmp_path)
    store.write(mid(1), b"one")
    store.close()
    snap = tmp_path / "clean.dot"
    snap.write_bytes(snap.read_bytes()[:-1] + b"\x00")
    again = MessageStore(str(tmp_path), fsync=False)
    assert not again.recover({mid(1): 4})
    assert again.ref_count(mid(1)) == 4
    again.close()


def test_unclean_boot_scans_and_uses_ref_counts_from_indexes(tmp_path):
    store = open_store(tmp_path)
    for i in range(4):
        store.write(mid(i), b"v%d" % i)
    store.flush()
    store.abandon()
    again = MessageStore(str(tmp_path), fsync=False)
    assert not again.recover({mid(0): 1, mid(2): 3})
    assert again.read(mid(0)) == b"v0"
    assert again.read(mid(1)) is None  # no queue refers to it: garbage
    assert again.ref_count(mid(2)) == 3
    again.close()


def test_unclean_boot_asks_for_ref_counts_only_when_a_record_is_found(tmp_path):
    calls = []

    def counts():
        calls.append(1)
        return {mid(1): 2}

    store = open_store(tmp_path)  # every message embedded in the indexes: empty .rdq files
    store.flush()
    store.abandon()
    empty = MessageStore(str(tmp_path), fsync=False)
    assert not empty.recover(counts)
    assert calls == []
    empty.write(mid(1), b"v1")
    empty.write(mid(2), b"v2")
    empty.flush()
    empty.abandon()
    again = MessageStore(str(tmp_path), fsync=False)
    assert not again.recover(counts)
    assert calls == [1]
    assert (again.ref_count(mid(1)), again.ref_count(mid(2))) == (2, 0)
    again.close()


@pytest.mark.parametrize("tail", ["half_record", "zeroed", "bad_trailer"])
def test_torn_tail_is_truncated_and_logged(tmp_path, caplog, tail):
    store = open_store(tmp_path)
    store.write(mid(1), b"keep")
    store.close()
    path = tmp_path / "0.rdq"
    good = path.stat().st_size
    torn = ff.encode_record(mid(2), b"lost" * 10)
    extra = {
        "half_record": torn[: len(torn) // 2],
        "zeroed": bytes(4096),
        "bad_trailer": torn[:-1] + b"\x00",
    }[tail]
    with open(path, "ab") as f:
        f.write(extra)
    (tmp_path / "clean.dot").unlink()
    caplog.set_level(logging.WARNING, logger="broker.store")
    again = MessageStore(str(tmp_path), fsync=False)
    again.recover({mid(1): 1, mid(2): 1})
    assert path.stat().st_size == good
    assert f"torn record at offset {good}" in caplog.text
    assert again.read(mid(1)) == b"keep"
    assert again.read(mid(2)) is None
    again.write(mid(3), b"after")
    again.flush()
    assert again.read(mid(3)) == b"after"
    again.close()


def test_missing_file_loses_only_its_messages(tmp_path):
    store = open_store(tmp_path, file_size_limit=200)
    for i in range(6):
        store.write(mid(i), bytes(100))
    store.close()
    before = ff.list_files(str(tmp_path))
    assert len(before) >= 3
    os.unlink(tmp_path / ff.file_name(before[1]))
    again = MessageStore(str(tmp_path), fsync=False)
    assert not again.recover({mid(i): 1 for i in range(6)})  # snapshot no longer matches
    present = [i for i in range(6) if again.contains(mid(i))]
    assert 0 < len(present) < 6
    assert all(again.read(mid(i)) == bytes(100) for i in present)
    again.close()


def test_gc_combines_files_and_everything_live_reads_back(tmp_path):
    store = open_store(tmp_path, file_size_limit=4096)
    bodies = {i: os.urandom(300) for i in range(120)}
    for i, body in bodies.items():
        store.write(mid(i), body)
    store.flush()
    files_before = len(ff.list_files(str(tmp_path)))
    keep = {i for i in bodies if i % 7 == 0}
    store.remove([mid(i) for i in bodies if i not in keep])
    store.wait_for_gc()
    files_after = len(ff.list_files(str(tmp_path)))
    total, valid = store.totals()
    assert files_after < files_before
    # GC stops once the trigger (all > 2 x limit and garbage > 50 %) no longer holds
    assert total <= 2 * 4096 or (total - valid) <= total / 2
    assert total == sum(os.path.getsize(tmp_path / ff.file_name(n)) for n in ff.list_files(str(tmp_path)))
    assert valid == len(keep) * ff.record_total_size(300)
    for i in keep:
        assert store.read(mid(i)) == bodies[i]
    store.close()
    again = MessageStore(str(tmp_path), fsync=False)
    again.recover({mid(i): 1 for i in keep})
    assert all(again.read(mid(i)) == bodies[i] for i in keep)
    again.close()


def test_vhost_stores_wipe_transient_and_recover_persistent(tmp_path):
    pair = VhostStores(str(tmp_path), "/", fsync=False)
    pair.recover()
    pair.persistent.write(mid(1), b"p")
    pair.transient.write(mid(2), b"t")
    pair.close()
    again = VhostStores(str(tmp_path), "/", fsync=False)
    assert again.recover()
    assert again.persistent.read(mid(1)) == b"p"
    assert again.transient.read(mid(2)) is None
    again.close()


def test_vhost_recover_drops_queue_dirs_not_kept(tmp_path):
    from broker.queue_index.files import queue_dir_name

    pair = VhostStores(str(tmp_path), "/", fsync=False)
    for q in ("keep", "gone"):
        os.makedirs(os.path.join(pair.queues_dir, queue_dir_name("/", q)))
    pair.recover(keep_queues=["keep"])
    assert os.listdir(pair.queues_dir) == [queue_dir_name("/", "keep")]
    pair.close()


def test_reads_stay_right_while_gc_runs_on_its_thread(tmp_path, caplog):
    import random

    caplog.set_level(logging.INFO, logger="broker.store")
    rng = random.Random(7)
    store = open_store(tmp_path, file_size_limit=2048)
    live: dict[int, bytes] = {}
    n = 0
    for _round in range(60):
        for _ in range(rng.randint(1, 12)):
            body = os.urandom(rng.randint(10, 400))
            store.write(mid(n), body)
            live[n] = body
            n += 1
        if rng.random() < 0.3:
            store.flush()
        drop = rng.sample(sorted(live), k=len(live) // 2)
        store.remove([mid(i) for i in drop])  # may start or overlap a GC pass
        for i in drop:
            del live[i]
        for i, body in live.items():
            assert store.read(mid(i)) == body
    store.wait_for_gc()
    assert "combined" in caplog.text
    for i, body in live.items():
        assert store.read(mid(i)) == body
    total, valid = store.totals()
    assert valid == sum(ff.record_total_size(len(b)) for b in live.values())
    store.close()
    again = MessageStore(str(tmp_path), fsync=False)
    assert again.recover()
    assert all(again.read(mid(i)) == b for i, b in live.items())
    again.close()
