"""Behaviour every backing queue shares (run over memory, VQ embed 0, VQ embed 4096)."""

from __future__ import annotations

import pytest

from broker.backing_queue.base import MessageProps

from .conftest import PROPS, make_message


def bodies(fetched):
    return [f.message.body.split(b":")[0].decode() for f in fetched]


def fetch_all(bq, need_ack=True):
    out = []
    while (f := bq.fetch(need_ack)) is not None:
        out.append(f)
    return out


def test_publish_fetch_order_and_counts(harness):
    bq = harness.new()
    for i in range(10):
        bq.publish(make_message(i, persistent=i % 2 == 0), PROPS)
    assert (bq.len(), bq.depth(), bq.is_empty()) == (10, 10, False)
    got = fetch_all(bq)
    assert bodies(got) == [str(i) for i in range(10)]
    assert all(not f.redelivered for f in got)
    assert [f.message.routing_key for f in got][:2] == ["rk-0", "rk-1"]
    assert got[3].message.properties.message_id == "3"
    assert (bq.len(), bq.depth(), bq.is_empty()) == (0, 10, True)
    assert bq.fetch(True) is None


def test_ack_returns_msg_ids_and_forgets(harness):
    bq = harness.new()
    msgs = [make_message(i) for i in range(5)]
    for m in msgs:
        bq.publish(m, PROPS)
    got = fetch_all(bq)
    assert bq.ack([got[1].ack_tag, got[3].ack_tag, 999]) == [msgs[1].msg_id, msgs[3].msg_id]
    assert bq.depth() == 3
    assert bq.ack([got[1].ack_tag]) == []
    assert bq.stats()["bytes"] == 3 * 100


def test_requeue_keeps_order_and_sets_redelivered(harness):
    bq = harness.new()
    for i in range(6):
        bq.publish(make_message(i), PROPS)
    got = fetch_all(bq)
    bq.publish(make_message(6), PROPS)
    bq.requeue([got[4].ack_tag, got[1].ack_tag, got[2].ack_tag])
    again = fetch_all(bq)
    assert bodies(again) == ["1", "2", "4", "6"]
    assert [f.redelivered for f in again] == [True, True, True, False]
    assert bq.depth() == 7


def test_fetch_without_ack_is_gone(harness):
    bq = harness.new()
    bq.publish(make_message(1), PROPS)
    f = bq.fetch(False)
    assert f.ack_tag is None
    assert bq.depth() == 0
    assert bq.stats()["bytes"] == 0


def test_publish_delivered_is_only_a_pending_ack(harness):
    bq = harness.new()
    m = make_message(1)
    tag = bq.publish_delivered(m, PROPS)
    assert (bq.len(), bq.depth()) == (0, 1)
    bq.requeue([tag])
    f = bq.fetch(True)
    assert f.message.msg_id == m.msg_id
    assert f.redelivered


def test_purge_drops_ready_not_pending(harness):
    bq = harness.new()
    for i in range(8):
        bq.publish(make_message(i), PROPS)
    held = bq.fetch(True)
    assert bq.purge() == 7
    assert (bq.len(), bq.depth()) == (0, 1)
    bq.requeue([held.ack_tag])
    assert bodies(fetch_all(bq)) == ["0"]
    bq.purge_acks()
    assert bq.depth() == 0


def test_dropwhile_and_peek_props_follow_expiry(harness):
    bq = harness.new()
    for i in range(6):
        bq.publish(make_message(i), MessageProps(expiry=1000 + i))
    assert bq.peek_props().expiry == 1000
    dropped = bq.dropwhile(lambda p: p.expiry is not None and p.expiry < 1003)
    assert [m.body.split(b":")[0] for m, _p in dropped] == [b"0", b"1", b"2"]
    assert [p.expiry for _m, p in dropped] == [1000, 1001, 1002]
    assert bq.peek_props().expiry == 1003
    assert bq.len() == 3


def test_discard_pending_returns_messages_in_seq_order(harness):
    bq = harness.new()
    for i in range(4):
        bq.publish(make_message(i), PROPS)
    got = fetch_all(bq)
    out = bq.discard_pending([got[2].ack_tag, got[0].ack_tag])
    assert [m.body.split(b":")[0] for m, _p in out] == [b"0", b"2"]
    assert bq.depth() == 2


def test_stats_have_the_common_counters(harness):
    bq = harness.new()
    for i in range(3):
        bq.publish(make_message(i, persistent=i != 1), PROPS)
    bq.fetch(True)
    s = bq.stats()
    assert (s["len"], s["pending_acks"], s["persistent"], s["bytes"]) == (2, 1, 1, 300)
    if harness.is_vq:
        assert {"q1", "q2", "q3", "q4", "delta"} <= set(s)


# -- variable queue only -------------------------------------------------------------------
VQ_KINDS = ["vq-embed-0", "vq-embed-4096"]


@pytest.mark.parametrize("kind", VQ_KINDS)
@pytest.mark.parametrize("persistent", [True, False])
def test_paging_to_delta_and_back(vq_harness, kind, persistent):
    h = vq_harness(kind)
    bq = h.new(io_batch_size=4)
    for i in range(40):
        bq.publish(make_message(i, persistent=persistent), PROPS)
    held = [bq.fetch(True) for _ in range(5)]
    bq.set_target_ram_count(0)
    s = bq.stats()
    assert s["delta"] > 0
    assert s["q1"] + s["q4"] == 0
    assert s["ram_ack_count"] == 0
    for i in range(40, 50):
        bq.publish(make_message(i, persistent=persistent), PROPS)
    assert bq.stats()["q4"] == 0
    bq.requeue([f.ack_tag for f in held[1:3]])
    bq.set_target_ram_count(None)
    got = fetch_all(bq)
    assert bodies(got) == ["1", "2"] + [str(i) for i in range(5, 50)]
    assert [f.redelivered for f in got[:3]] == [True, True, False]
    assert bq.depth() == 50
    assert bq.ack([f.ack_tag for f in got] + [held[0].ack_tag, held[3].ack_tag, held[4].ack_tag])
    assert bq.depth() == 0
    assert bq.stats()["bytes"] == 0


@pytest.mark.parametrize("kind", VQ_KINDS)
def test_lazy_mode_keeps_nothing_in_ram(vq_harness, kind):
    h = vq_harness(kind)
    bq = h.new(mode="lazy")
    for i in range(30):
        bq.publish(make_message(i), PROPS)
    s = bq.stats()
    assert (s["delta"], s["q1"], s["q4"], s["ram_msgs"]) == (30, 0, 0, 0)
    got = fetch_all(bq)
    assert bodies(got) == [str(i) for i in range(30)]
    assert bq.stats()["ram_ack_count"] == 0
    bq.requeue([f.ack_tag for f in got[:3]])
    assert bodies(fetch_all(bq)) == ["0", "1", "2"]


def test_lazy_drain_reads_each_index_segment_once(vq_harness, monkeypatch):
    from broker.queue_index.index import QueueIndex
    from broker.queue_index.segment import SEGMENT_ENTRY_COUNT

    reads, folds = [], []
    real, real_fold = QueueIndex.read, QueueIndex.fold
    monkeypatch.setattr(QueueIndex, "read",
                        lambda self, start, end: reads.append(start) or real(self, start, end))
    monkeypatch.setattr(QueueIndex, "fold", lambda self: folds.append(1) or real_fold(self))
    h = vq_harness("vq-embed-4096")
    bq = h.new(mode="lazy", io_batch_size=4)
    n = SEGMENT_ENTRY_COUNT + 10
    for i in range(n):
        bq.publish(make_message(i, size=10), PROPS)
    got = []
    while (f := bq.fetch(True)) is not None:
        got.append(f.ack_tag)
        bq.ack([f.ack_tag])
    assert got == list(range(n))
    assert reads == [0, SEGMENT_ENTRY_COUNT]
    assert len(folds) <= 3  # journal full (32768 entries); never once per fetch


@pytest.mark.parametrize("kind", VQ_KINDS)
def test_clean_restart_keeps_persistent_and_redelivers_unacked(vq_harness, kind):
    h = vq_harness(kind)
    bq = h.new()
    for i in range(6):
        bq.publish(make_message(i, persistent=i != 2), PROPS)
    got = [bq.fetch(True) for _ in range(2)]
    bq.ack([got[0].ack_tag])
    bq.set_target_ram_count(0)  # some transient ones reach the index too
    bq = h.restart(bq)
    assert bq.len() == 4
    again = fetch_all(bq)
    assert bodies(again) == ["1", "3", "4", "5"]
    assert [f.redelivered for f in again] == [True, False, False, False]


@pytest.mark.parametrize("kind", VQ_KINDS)
def test_unclean_restart_marks_everything_redelivered(vq_harness, kind):
    h = vq_harness(kind)
    bq = h.new()
    for i in range(5):
        bq.publish(make_message(i, persistent=i != 4), PROPS)
    bq.ack([bq.fetch(True).ack_tag])
    bq = h.restart(bq, clean=False)
    again = fetch_all(bq)
    assert bodies(again) == ["1", "2", "3"]
    assert all(f.redelivered for f in again)


def test_restart_drops_messages_whose_body_is_gone(vq_harness, caplog):
    import os

    from broker.msg_store import file_format as ff

    h = vq_harness("vq-embed-0")
    bq = h.new()
    for i in range(3):
        bq.publish(make_message(i), PROPS)
    store_dir = bq._stores.persistent.directory

    def lose_tail():  # the crash came before the store's last records reached the disk
        path = os.path.join(store_dir, "0.rdq")
        records, _end, _size = ff.scan_file(path)
        os.truncate(path, records[1].offset)

    bq = h.restart(bq, clean=False, before_recover=lose_tail)
    assert bodies(fetch_all(bq)) == ["0"]
    assert "body missing from the message store" in caplog.text


def test_non_durable_queue_forgets_everything(vq_harness):
    h = vq_harness("vq-embed-0")
    bq = h.new(durable=False)
    bq.publish(make_message(1), PROPS)
    bq = h.restart(bq)
    assert bq.len() == 0


def test_delete_and_terminate_removes_the_index_dir(vq_harness):
    import os

    h = vq_harness("vq-embed-0")
    bq = h.new()
    for i in range(5):
        bq.publish(make_message(i), PROPS)
    qdir = bq._qi.directory
    assert os.path.isdir(qdir)
    h.open.remove(bq)
    bq.delete_and_terminate()
    assert not os.path.exists(qdir)
    assert len(h.stores.persistent) == 0


def test_acking_most_messages_lets_gc_shrink_the_store(vq_harness):
    from broker.msg_store import file_format as ff

    h = vq_harness("vq-embed-0")
    bq = h.new()  # the harness' stores roll files at 64 KiB
    store = h.stores.persistent
    for i in range(400):
        bq.publish(make_message(i, size=1000), PROPS)
    store.flush()
    before = len(ff.list_files(store.directory))
    assert before >= 6
    got = fetch_all(bq)
    bq.set_target_ram_count(0)  # pending acks drop their bodies: requeue must read the store
    assert bq.stats()["disk_ack_count"] == 400
    bq.ack([f.ack_tag for f in got if int(bodies([f])[0]) % 10])
    store.wait_for_gc()
    assert len(ff.list_files(store.directory)) < before
    bq.requeue([f.ack_tag for f in got if int(bodies([f])[0]) % 10 == 0])
    bq.set_target_ram_count(None)
    assert bodies(fetch_all(bq)) == [str(i) for i in range(0, 400, 10)]
