"""Paging under memory pressure (docs/architecture.md §7): passes of at most `page_pass_limit`
messages that ask the queue process to resume, and credit flow on the queue -> message store
hop (msg_store_credit_disc_bound): a store that has not synced leaves the queue blocked, its
sync gives the credit back. Driven by hand, without an event loop: `sync()` is the store's
"work done"."""

from __future__ import annotations

from broker.backing_queue.variable_queue import VariableQueue
from broker.msg_store.vhost import VhostStores

from .conftest import PROPS, make_message
from .test_backing_queue import bodies, fetch_all


def _stores(tmp_path) -> VhostStores:
    stores = VhostStores(str(tmp_path), "/", fsync=False)
    stores.recover()
    return stores


def test_paging_runs_in_passes_and_asks_to_resume(tmp_path):
    stores = _stores(tmp_path)
    wakes = []
    bq = VariableQueue(("/", "p"), False, lambda: wakes.append(1), stores=stores,
                       queue_index_embed_msgs_below=0, io_batch_size=4, page_pass_limit=10)
    for i in range(35):
        bq.publish(make_message(i, persistent=False), PROPS)
    bq.set_target_ram_count(0)
    assert bq.stats()["ram_msgs"] == 25  # one pass: 10 alphas became betas
    assert bq.needs_resume() and wakes == [1]  # woken once to continue on the next turn
    bq.publish(make_message(35, persistent=False), PROPS)  # the pass's budget is spent
    assert bq.stats()["ram_msgs"] == 26 and wakes == [1]
    passes = 1
    while bq.needs_resume():
        bq.resume()
        passes += 1
    assert passes == 4  # 36 alphas -> betas and betas -> delta: 10 of each per pass
    s = bq.stats()
    assert (s["ram_msgs"], s["q1"] + s["q4"]) == (0, 0)
    assert s["delta"] > 0
    bq.set_target_ram_count(None)
    assert bodies(fetch_all(bq, need_ack=False)) == [str(i) for i in range(36)]
    bq.delete_and_terminate()
    stores.close()


def test_store_credit_blocks_paging_until_the_store_syncs(tmp_path):
    stores = _stores(tmp_path)
    wakes = []
    bq = VariableQueue(("/", "c"), False, lambda: wakes.append(1), stores=stores,
                       queue_index_embed_msgs_below=0, io_batch_size=1000,
                       msg_store_credit_disc_bound=(4, 2))
    for i in range(10):
        bq.publish(make_message(i, persistent=False), PROPS)
    bq.set_target_ram_count(0)
    assert bq.flow_blocked()  # 4 writes to the transient store spent the credit
    assert bq.stats()["ram_msgs"] == 6  # paging stopped there
    assert not bq.needs_resume() and wakes == []  # waits for credit, not for a turn
    stores.transient.sync()  # the store's work is done: 4 credits back
    assert bq.needs_resume() and wakes == [1]
    bq.resume()
    assert bq.stats()["ram_msgs"] == 2 and bq.flow_blocked()
    stores.transient.sync()
    bq.resume()
    assert bq.stats()["ram_msgs"] == 0 and not bq.flow_blocked()
    bq.set_target_ram_count(None)
    assert bodies(fetch_all(bq, need_ack=False)) == [str(i) for i in range(10)]
    bq.delete_and_terminate()
    stores.close()


def test_persistent_publishes_spend_store_credit(tmp_path):
    """A durable queue writes persistent bodies at publish: with the store not syncing, the
    queue reports flow_blocked (its queue process then holds back channels' credit)."""
    stores = _stores(tmp_path)
    bq = VariableQueue(("/", "d"), True, stores=stores, queue_index_embed_msgs_below=0,
                       msg_store_credit_disc_bound=(3, 1))
    for i in range(3):
        assert not bq.flow_blocked()
        bq.publish(make_message(i, persistent=True), PROPS)
    assert bq.flow_blocked()
    stores.persistent.sync()
    bq.resume()
    assert not bq.flow_blocked()
    assert bodies(fetch_all(bq, need_ack=False)) == ["0", "1", "2"]
    bq.delete_and_terminate()
    stores.close()


def test_pending_acks_are_paged_newest_first(tmp_path):
    stores = _stores(tmp_path)
    bq = VariableQueue(("/", "a"), False, stores=stores, queue_index_embed_msgs_below=0)
    for i in range(6):
        bq.publish(make_message(i, persistent=False), PROPS)
    held = [bq.fetch(True) for _ in range(6)]
    bq.set_target_ram_count(2)
    assert sorted(bq.ram_pending_ack) == [held[0].ack_tag, held[1].ack_tag]
    bq.requeue([f.ack_tag for f in held])
    bq.set_target_ram_count(None)
    assert bodies(fetch_all(bq, need_ack=False)) == [str(i) for i in range(6)]
    bq.delete_and_terminate()
    stores.close()


def test_a_chunk_of_betas_goes_to_delta_over_several_passes_with_one_fold(tmp_path):
    """A pass is bounded (page_pass_limit, so one queue cannot hold the event loop), but a
    chunk of betas started at io_batch_size still moves whole: the next passes go on with
    it, and the index is folded (segments fsynced) once, when the chunk is done."""
    stores = _stores(tmp_path)
    bq = VariableQueue(("/", "b"), False, stores=stores, queue_index_embed_msgs_below=0,
                       io_batch_size=30, page_pass_limit=10)
    folds = []
    fold = bq._qi.fold
    bq._qi.fold = lambda: (folds.append(1), fold())  # noqa: SLF001 - counting, not replacing
    for i in range(60):
        bq.publish(make_message(i, persistent=False), PROPS)
    bq.set_target_ram_count(0)
    deltas = [bq.stats()["delta"]]
    while bq.needs_resume():
        bq.resume()
        deltas.append(bq.stats()["delta"])
    assert all(b - a <= 10 for a, b in zip(deltas, deltas[1:], strict=False))  # 10 per pass
    assert deltas[-1] == 30  # the whole chunk: 60 betas less the q3 working set of 30
    assert folds == [1]
    bq.set_target_ram_count(None)
    assert bodies(fetch_all(bq, need_ack=False)) == [str(i) for i in range(60)]
    bq.delete_and_terminate()
    stores.close()
