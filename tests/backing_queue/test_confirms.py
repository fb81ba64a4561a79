"""`persist` confirm mode through the variable queue: confirms only after fsync, at once for
what needs no disk, and at ack time for what was acked before it was synced."""

from __future__ import annotations

import os
import threading

import pytest

from broker.backing_queue.base import MessageProps
from broker.backing_queue.variable_queue import VariableQueue
from broker.msg_store.vhost import VhostStores

from .conftest import make_message

CONFIRM = MessageProps(needs_confirming=True)


class Waker:
    """A thread-safe notify: records which thread called."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.threads: list[str] = []

    def __call__(self) -> None:
        self.threads.append(threading.current_thread().name)
        self.event.set()


@pytest.fixture
def stores(tmp_path):
    s = VhostStores(str(tmp_path), "/", fsync=True)
    s.recover()
    yield s
    s.close()


def drain_until(bq, want: set[bytes], waker: Waker) -> set[bytes]:
    got: set[bytes] = set()
    for _ in range(50):
        got.update(bq.drain_confirmed())
        if got >= want:
            return got
        waker.event.wait(0.1)
        waker.event.clear()
    return got


@pytest.mark.parametrize("embed_below", [0, 4096])
def test_persistent_confirm_waits_for_fsync(stores, embed_below):
    waker = Waker()
    bq = VariableQueue(("/", "c"), True, waker, stores=stores,
                       queue_index_embed_msgs_below=embed_below)
    msgs = [make_message(i) for i in range(5)]
    for m in msgs:
        bq.publish(m, CONFIRM)
    assert bq.drain_confirmed() == []  # written, not fsynced
    assert bq.needs_sync()
    bq.sync()
    want = {m.msg_id for m in msgs}
    assert drain_until(bq, want, waker) == want
    assert not bq.needs_sync()
    assert any(t.startswith(("qi-fsync", "store-fsync")) for t in waker.threads)
    assert bq.drain_confirmed() == []  # each id once
    bq.terminate()


def test_transient_and_non_durable_confirm_on_enqueue(stores):
    durable = VariableQueue(("/", "d"), True, stores=stores)
    transient = make_message(1, persistent=False)
    durable.publish(transient, CONFIRM)
    assert durable.drain_confirmed() == [transient.msg_id]
    plain = VariableQueue(("/", "n"), False, stores=stores)
    persistent = make_message(2)
    plain.publish(persistent, CONFIRM)
    assert plain.drain_confirmed() == [persistent.msg_id]
    assert not plain.needs_sync()
    durable.terminate()
    plain.terminate()


@pytest.mark.parametrize("embed_below", [0, 4096])
def test_acked_before_sync_is_confirmed_at_ack(stores, embed_below):
    bq = VariableQueue(("/", "a"), True, stores=stores, queue_index_embed_msgs_below=embed_below)
    m = make_message(1)
    bq.publish(m, CONFIRM)
    f = bq.fetch(True)
    assert bq.drain_confirmed() == []
    bq.ack([f.ack_tag])
    assert bq.drain_confirmed() == [m.msg_id]
    bq.sync()  # the late fsync must not confirm it twice
    bq._qi.wait_for_sync()
    stores.persistent.wait_for_sync()
    assert bq.drain_confirmed() == []
    bq.terminate()


@pytest.mark.parametrize("embed_below", [0, 4096])
def test_acked_before_sync_never_reaches_the_index_journal(stores, embed_below):
    bq = VariableQueue(("/", "j"), True, stores=stores, queue_index_embed_msgs_below=embed_below)
    msgs = [make_message(i) for i in range(3)]
    for m in msgs:
        bq.publish(m, CONFIRM)
    tags = [bq.fetch(True).ack_tag for _ in msgs]
    bq.ack(tags)
    assert sorted(bq.drain_confirmed()) == sorted(m.msg_id for m in msgs)
    assert not bq._qi.needs_sync()  # no index fsync is owed for them
    bq.sync()
    bq._qi.wait_for_sync()
    stores.persistent.wait_for_sync()
    assert os.path.getsize(os.path.join(bq._qi.directory, "journal.jif")) == 0
    assert bq.drain_confirmed() == []
    bq.terminate()


def test_confirm_survives_paging_to_delta(stores):
    waker = Waker()
    bq = VariableQueue(("/", "p"), True, waker, stores=stores, io_batch_size=1,
                       queue_index_embed_msgs_below=0)
    msgs = [make_message(i) for i in range(10)]
    for m in msgs:
        bq.publish(m, CONFIRM)
    bq.set_target_ram_count(0)
    assert bq.stats()["delta"] > 0
    bq.sync()
    want = {m.msg_id for m in msgs}
    assert drain_until(bq, want, waker) == want
    bq.set_target_ram_count(None)
    assert [bq.fetch(False).message.msg_id for _ in msgs] == [m.msg_id for m in msgs]
    bq.terminate()
