"""Hypothesis stateful test: PriorityBackingQueue (one VariableQueue per priority) against a
small independent model of a priority queue, with requeues, rejects, TTL drops, purges, RAM
targets, clean restarts and crashes of a durable queue.

The model: ready messages keyed by (-priority, publish number), so `fetch` takes the highest
priority first and FIFO within one; a requeued message keeps its key (its original place).
"""

from __future__ import annotations

import shutil
import tempfile

import hypothesis.strategies as st
from hypothesis import Phase, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from broker.backing_queue.base import MessageProps
from broker.backing_queue.priority import PriorityBackingQueue
from broker.backing_queue.variable_queue import VariableQueue
from broker.message import Message
from broker.msg_store.vhost import VhostStores

from .conftest import make_message

MAX = 3  # x-max-priority of the queue under test


class Model:
    """What a priority queue must do, written as plainly as possible."""

    def __init__(self) -> None:
        # key -> (message, expiry, delivered); key = (-effective priority, publish number)
        self.ready: dict[tuple[int, int], tuple[Message, int | None, bool]] = {}
        self.pending: dict[bytes, tuple[tuple[int, int], Message, int | None]] = {}

    def head_key(self) -> tuple[int, int] | None:
        return min(self.ready) if self.ready else None

    def ready_bytes(self) -> int:
        return sum(len(m.body) for m, _e, _d in self.ready.values())


def effective(priority: int | None) -> int:
    return min(priority or 0, MAX)


class PriorityVsModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="pq-stateful-")
        self.model = Model()
        self.tags: dict[bytes, int] = {}  # msg_id -> ack tag of the queue under test
        self.counter = 0
        self.options: dict[str, object] = {}
        self.stores: VhostStores | None = None
        self.pq: PriorityBackingQueue | None = None

    @initialize(embed=st.sampled_from([0, 4096]), lazy=st.booleans())
    def start(self, embed, lazy):
        self.options = dict(queue_index_embed_msgs_below=embed, io_batch_size=2,
                            mode="lazy" if lazy else "default", fsync=False)
        self._open()

    def _open(self) -> None:
        self.stores = VhostStores(self.dir, "/", fsync=False, file_size_limit=8192)
        self.stores.recover()
        stores, options = self.stores, self.options

        def inner(name, durable, notify):
            return VariableQueue(name, durable, notify, stores=stores, **options)

        self.pq = PriorityBackingQueue(("/", "pq"), True, None, max_priority=MAX,
                                       make_inner=inner)

    @rule(priority=st.one_of(st.none(), st.integers(0, 6)), persistent=st.booleans(),
          big=st.booleans(), ttl=st.one_of(st.none(), st.integers(1, 9)))
    def publish(self, priority, persistent, big, ttl):
        self.counter += 1
        msg = make_message(self.counter, size=5000 if big else 50, persistent=persistent,
                           priority=priority)
        self.pq.publish(msg, MessageProps(expiry=ttl))
        self.model.ready[(-effective(priority), self.counter)] = (msg, ttl, False)

    @rule(priority=st.one_of(st.none(), st.integers(0, 6)), persistent=st.booleans())
    def publish_delivered(self, priority, persistent):
        self.counter += 1
        msg = make_message(self.counter, persistent=persistent, priority=priority)
        self.tags[msg.msg_id] = self.pq.publish_delivered(msg, MessageProps())
        self.model.pending[msg.msg_id] = ((-effective(priority), self.counter), msg, None)

    @rule(need_ack=st.booleans())
    def fetch(self, need_ack):
        got = self.pq.fetch(need_ack)
        key = self.model.head_key()
        if key is None:
            assert got is None
            return
        msg, expiry, delivered = self.model.ready.pop(key)
        assert got is not None
        assert got.message.msg_id == msg.msg_id
        assert got.message.body == msg.body
        assert got.message.properties.priority == msg.properties.priority
        assert got.redelivered == delivered
        assert got.props.expiry == expiry
        if need_ack:
            self.tags[msg.msg_id] = got.ack_tag
            self.model.pending[msg.msg_id] = (key, msg, expiry)

    def _pick(self, data) -> list[bytes]:
        ids = sorted(self.model.pending)
        return data.draw(st.lists(st.sampled_from(ids), unique=True)) if ids else []

    @precondition(lambda self: self.model.pending)
    @rule(data=st.data())
    def ack(self, data):
        ids = self._pick(data)
        got = self.pq.ack([self.tags.pop(i) for i in ids])
        for i in ids:
            del self.model.pending[i]
        assert sorted(got) == sorted(ids)

    @precondition(lambda self: self.model.pending)
    @rule(data=st.data())
    def requeue(self, data):
        ids = self._pick(data)
        self.pq.requeue([self.tags.pop(i) for i in ids])
        for i in ids:
            key, msg, expiry = self.model.pending.pop(i)
            self.model.ready[key] = (msg, expiry, True)

    @precondition(lambda self: self.model.pending)
    @rule(data=st.data())
    def discard_pending(self, data):
        ids = self._pick(data)
        got = self.pq.discard_pending([self.tags.pop(i) for i in ids])
        want = sorted(self.model.pending.pop(i) for i in ids)  # by key: priority, then age
        assert [m.msg_id for m, _p in got] == [msg.msg_id for _k, msg, _e in want]

    @rule(below=st.integers(0, 10))
    def dropwhile(self, below):
        def pred(p):
            return p.expiry is not None and p.expiry < below

        got = [m.msg_id for m, _p in self.pq.dropwhile(pred)]
        # the model: from the highest priority down, drop expired heads; stop at the first
        # priority whose head stays
        want = []
        for p in range(MAX, -1, -1):
            keys = sorted(k for k in self.model.ready if k[0] == -p)
            for k in keys:
                msg, expiry, _d = self.model.ready[k]
                if expiry is None or expiry >= below:
                    break
                del self.model.ready[k]
                want.append(msg.msg_id)
            if any(k[0] == -p for k in self.model.ready):
                break
        assert got == want

    @rule()
    def peek(self):
        got = self.pq.peek_props()
        key = self.model.head_key()
        assert (got is None) == (key is None)
        if key is not None:
            assert got.expiry == self.model.ready[key][1]

    @rule(offset=st.integers(0, 8), count=st.integers(0, 8))
    def peek_range(self, offset, count):
        want = [(self.model.ready[k][0].msg_id, self.model.ready[k][2])
                for k in sorted(self.model.ready)][offset:offset + count]
        assert [(m.msg_id, d) for m, d in self.pq.peek(offset, count)] == want

    @rule()
    def purge(self):
        assert self.pq.purge() == len(self.model.ready)
        self.model.ready.clear()

    @rule(count=st.one_of(st.none(), st.integers(0, 10)))
    def set_target(self, count):
        for bq in self.pq.inner:
            bq.set_target_ram_count(count)

    def _rebuild(self, all_redelivered: bool) -> None:
        """After a restart only persistent messages remain; pending acks come back ready
        and redelivered, each in its own priority at its original place."""
        ready = {k: (m, e, d or all_redelivered) for k, (m, e, d) in self.model.ready.items()}
        ready.update({k: (m, e, True) for k, m, e in self.model.pending.values()})
        self.model = Model()
        self.model.ready = {k: v for k, v in ready.items() if v[0].persistent}
        self.tags.clear()
        self._open()

    @rule()
    def restart(self):
        self.pq.terminate()
        self.stores.close()
        self._rebuild(all_redelivered=False)

    @rule()
    def crash(self):
        for bq in self.pq.inner:
            bq._qi.flush()
            bq._qi.close_abruptly()
        self.stores.persistent.flush()
        self.stores.persistent.abandon()
        self.stores.transient.abandon()
        self._rebuild(all_redelivered=True)

    @invariant()
    def same_counts(self):
        if self.pq is None:
            return
        assert self.pq.len() == len(self.model.ready)
        assert self.pq.depth() == len(self.model.ready) + len(self.model.pending)
        assert self.pq.is_empty() == (not self.model.ready)
        assert self.pq.ready_bytes() == self.model.ready_bytes()
        stats = self.pq.stats()
        assert stats["len"] == len(self.model.ready)
        assert stats["max_priority"] == MAX

    def teardown(self):
        if self.pq is not None:
            self.pq.terminate()
            self.stores.close()
        shutil.rmtree(self.dir, ignore_errors=True)


PriorityVsModel.TestCase.settings = settings(
    max_examples=50,
    stateful_step_count=40,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
)
TestPriorityVsModel = PriorityVsModel.TestCase
