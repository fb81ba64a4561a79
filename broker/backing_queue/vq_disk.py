"""Disk side of the variable queue: everything that moves a message between RAM and disk.
Writing messages to the store and the index, reading them back (also for browsing:
`peek`), forgetting them, and paging between alpha, beta and delta. The queue discipline
(the order of q1..q4 and delta, fetch, ack, requeue, purge, the counters) is
`variable_queue.py`'s; which confirms are owed is `vq_confirms.ConfirmBook`'s.

`VqDisk` is a mixin of `variable_queue.VariableQueue` and works on its fields (q1..q4,
delta, pending-ack maps, counters): the two halves share one message structure, as in
rabbit_variable_queue.erl, whose names these follow (`maybe_write_to_disk`,
`push_alphas_to_betas`, `push_betas_to_deltas`, `maybe_deltas_to_betas`, `limit_ram_acks`).
Paging cost is proportional to what is paged: a pass moves at most `_budget` messages and
never walks a whole queue or pending-ack map.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from itertools import islice
from typing import TYPE_CHECKING, Any

from broker import storage_codec
from broker.backing_queue.base import MessageProps
from broker.backing_queue.vq_confirms import ConfirmBook
from broker.backing_queue.vq_status import MSG_STORE, QUEUE_INDEX, Delta, MsgStatus
from broker.credit_flow import CreditFlow
from broker.message import Message
from broker.queue_index.journal import PubRecord
from broker.queue_index.segment import SEGMENT_ENTRY_COUNT, next_segment_boundary

if TYPE_CHECKING:
    from broker.msg_store.vhost import VhostStores
    from broker.queue_index.index import QueueIndex

log = logging.getLogger("broker.queue")


class VqDisk:
    """Mixin: the store/index side of VariableQueue (see module docstring)."""

    # fields set by VariableQueue.__init__ (declared for readers and type checkers)
    _qi: QueueIndex
    _stores: VhostStores
    _pclient: int
    _tclient: int
    q1: deque[MsgStatus]
    q2: deque[MsgStatus]
    q3: deque[MsgStatus]
    q4: deque[MsgStatus]
    delta: Delta
    ram_pending_ack: dict[int, MsgStatus]
    disk_pending_ack: dict[int, MsgStatus]
    qi_pending_ack: dict[int, MsgStatus]
    _ram_msgs: int
    _len: int
    _ready_bytes: int
    _persistent: int
    _bytes: int
    target_ram_count: int | None
    io_batch_size: int
    _q3_segment: int | None
    _notify: Callable[[], None]
    _confirms: ConfirmBook
    _credit_lock: threading.Lock
    _budget: int
    _b2d_budget: int
    _b2d_chunk: int
    _resume_wanted: bool
    _store_credit: CreditFlow | None
    _credit_back: dict[object, int]

    # -- writing ---------------------------------------------------------------------------
    def _write_msg(self, ms: MsgStatus, msg: Message) -> None:
        """Body to the message store (persistent store iff is_persistent)."""
        if ms.msg_in_store:
            return
        if ms.is_persistent:
            store, client = self._stores.persistent, self._pclient
        else:
            store, client = self._stores.transient, self._tclient
        wants = self._confirms.needs_store(ms.msg_id)
        credit = self._store_credit
        if credit is None:
            store.write(ms.msg_id, storage_codec.encode(msg), client if wants else None)
        else:  # msg_store_write with flow: one credit per write (rabbit_msg_store write_flow)
            store.write(ms.msg_id, storage_codec.encode(msg), client if wants else None, client)
            if credit.send(store):
                self._take_store_credit()  # credit the store returned meanwhile
        ms.msg_in_store = True

    def _write_index(self, ms: MsgStatus, msg: Message | None) -> None:
        """Publish (and deliver, if delivered) entry in the queue index."""
        if ms.index_on_disk:
            return
        if ms.persist_to == QUEUE_INDEX:
            assert msg is not None, "an embedded message is in RAM until its index entry exists"
            embedded = storage_codec.encode(msg)
        else:
            embedded = b""
        expiry = ms.props.expiry
        confirm = ms.msg_id in self._confirms.unconfirmed
        self._qi.publish(
            ms.seq_id,
            PubRecord(ms.msg_id, ms.is_persistent, expiry * 1000 if expiry else 0, ms.size, embedded),
            confirm, ms.is_delivered, ms.props.lazy_confirm,
        )
        ms.index_on_disk = True

    def _write_to_disk(self, ms: MsgStatus, force_msg: bool, force_index: bool) -> None:
        """RabbitMQ `maybe_write_to_disk`: persistent messages always, others when forced."""
        msg = ms.msg
        if (force_msg or ms.is_persistent) and ms.persist_to == MSG_STORE and msg is not None:
            self._write_msg(ms, msg)
        if force_index or ms.is_persistent:
            self._write_index(ms, msg)

    # -- reading ---------------------------------------------------------------------------
    def _read_msg(self, ms: MsgStatus) -> Message | None:
        """The message of `ms`, from RAM or its store; None if the store lost the body."""
        if ms.msg is not None:
            return ms.msg
        store = self._stores.persistent if ms.is_persistent else self._stores.transient
        data = store.read(ms.msg_id)
        if data is None:
            log.warning(
                "queue %r: body of %s (seq_id %d) missing from the message store; dropped",
                self.name, ms.msg_id.hex(), ms.seq_id,  # type: ignore[attr-defined]
            )
            return None
        return storage_codec.decode(ms.msg_id, data)

    # -- forgetting ------------------------------------------------------------------------
    def _forget(self, mss: list[MsgStatus]) -> None:
        """Messages leave the queue for good (acked, auto-acked, purged, dropped): index
        deliver+ack entries, store references dropped, owed confirms released now."""
        deliver = [ms.seq_id for ms in mss if ms.index_on_disk and not ms.is_delivered]
        acks = [ms.seq_id for ms in mss if ms.index_on_disk]
        if deliver:
            self._qi.deliver(deliver)
        if acks:
            self._qi.ack(acks)
        persistent = [ms.msg_id for ms in mss if ms.msg_in_store and ms.is_persistent]
        transient = [ms.msg_id for ms in mss if ms.msg_in_store and not ms.is_persistent]
        if persistent:
            self._stores.persistent.remove(persistent)
        if transient:
            self._stores.transient.remove(transient)
        for ms in mss:
            self._bytes -= ms.size
        owed = self._confirms.unconfirmed
        if owed:
            self._confirms.confirm([ms.msg_id for ms in mss if ms.msg_id in owed])

    # -- confirms (fsync worker threads: a post to the ConfirmBook, and a wake-up) ---------
    def _on_store_disk(self, msg_ids: list[bytes]) -> None:
        """Persistent store fsynced these bodies (fsync thread)."""
        self._confirms.store_synced(msg_ids)
        self._notify()

    def _on_index_sync(self, msg_ids: list[bytes]) -> None:
        """The queue index made these publishes durable (fsync thread, or a fold)."""
        self._confirms.index_synced(msg_ids)
        self._notify()

    # -- store credit (callbacks may run on worker threads) ----------------------------------
    def _on_store_credit_persistent(self, n: int) -> None:
        self._store_credit_back(self._stores.persistent, n)

    def _on_store_credit_transient(self, n: int) -> None:
        self._store_credit_back(self._stores.transient, n)

    def _store_credit_back(self, store: object, n: int) -> None:
        """`store` synced `n` of our flow writes (fsync thread, or inline): record the credit;
        wake the queue process if we are blocked on it."""
        with self._credit_lock:
            self._credit_back[store] = self._credit_back.get(store, 0) + n
        credit = self._store_credit
        if credit is not None and credit.blocked and not self._resume_wanted:
            self._resume_wanted = True
            self._notify()

    def _take_store_credit(self) -> None:
        """Grant ourselves the credit the stores returned (queue-process thread)."""
        credit = self._store_credit
        if credit is None or not self._credit_back:
            return
        with self._credit_lock:
            back, self._credit_back = self._credit_back, {}
        for store, n in back.items():
            credit.grant(store, n)

    # -- paging ----------------------------------------------------------------------------
    def _want_resume(self) -> None:
        """A pass stopped at its limit: ask the queue process for another on its next turn."""
        if not self._resume_wanted:
            self._resume_wanted = True
            self._notify()

    def _reduce_memory_use(self) -> None:
        """Page to meet target_ram_count: RAM pending acks and alphas (front of q1, back of
        q4) become betas in proportion, then betas go to delta in io_batch_size chunks; at
        most `_budget` messages per pass, and no store writes while out of store credit
        (rabbit_variable_queue reduce_memory_use: chunks of 2 x msg_store_credit_disc_bound)."""
        target = self.target_ram_count
        if target is None:
            return
        ram_acks = len(self.ram_pending_ack)
        alphas = len(self.q1) + len(self.q4)
        total = ram_acks + alphas
        more = False
        if total > target:
            quota = min(total - target, self._budget)
            ack_target = target * ram_acks // total
            done = self._limit_ram_acks(min(ram_acks - ack_target, quota))
            done += self._push_alphas_to_betas(min(alphas - (target - ack_target), quota - done))
            self._budget -= done
            # cut by the pass limit (out of credit instead: the credit's return resumes us)
            more = done < total - target and self._budget <= 0
            ram_acks = len(self.ram_pending_ack)
            alphas = len(self.q1) + len(self.q4)
        # betas count against the target too (embedded ones keep their message in RAM), so
        # RAM holds about `target` messages, not `target` alphas plus as many betas; at least
        # io_batch_size betas are permitted (q3's working set), so that delta is written in
        # io_batch_size chunks, not one message and one fold per publish
        if self._push_betas_to_deltas(max(self.io_batch_size, target - alphas - ram_acks)):
            more = True
        if more:
            self._want_resume()

    def _limit_ram_acks(self, n: int) -> int:
        """Page up to `n` of the newest RAM pending acks (RabbitMQ takes the largest seq ids;
        the map's insertion order is ours, so this costs O(n), not a scan). Returns how many
        were paged (fewer when out of store credit)."""
        if n <= 0:
            return 0
        credit = self._store_credit
        done = 0
        for seq_id in list(islice(reversed(self.ram_pending_ack), n)):
            ms = self.ram_pending_ack[seq_id]
            msg = ms.msg
            assert msg is not None
            if ms.persist_to == MSG_STORE:
                if credit is not None and credit.blocked:
                    break
                del self.ram_pending_ack[seq_id]
                self._write_msg(ms, msg)
                ms.msg = None
                self.disk_pending_ack[seq_id] = ms
            else:
                del self.ram_pending_ack[seq_id]
                self._write_index(ms, msg)
                self.qi_pending_ack[seq_id] = ms
            done += 1
        return done

    def _alpha_to_beta(self, ms: MsgStatus) -> None:
        msg = ms.msg
        assert msg is not None
        if ms.persist_to == MSG_STORE:
            self._write_msg(ms, msg)
            ms.msg = None
            self._ram_msgs -= 1
        else:  # embedded betas keep their (small) message, as RabbitMQ's trim_msg_status
            self._write_index(ms, msg)

    def _push_alphas_to_betas(self, n: int) -> int:
        """Turn up to `n` alphas into betas: the front of q1, then the back of q4. Stops when
        out of store credit; returns how many moved."""
        credit = self._store_credit
        done = 0
        while done < n and self.q1:
            if credit is not None and credit.blocked:
                return done
            ms = self.q1.popleft()
            self._alpha_to_beta(ms)
            (self.q2 if self.delta.count else self.q3).append(ms)
            done += 1
        while done < n and self.q4:
            if credit is not None and credit.blocked:
                return done
            ms = self.q4.pop()
            self._alpha_to_beta(ms)
            self.q3.appendleft(ms)
            done += 1
        return done

    def _to_delta(self, ms: MsgStatus) -> None:
        """A ready message leaves RAM entirely (body and index entry on disk)."""
        self._write_to_disk(ms, True, True)
        if ms.msg is not None:
            ms.msg = None
            self._ram_msgs -= 1
        self.delta.add(ms.seq_id, ms.is_persistent, ms.size)

    def _push_betas_to_deltas(self, permitted: int) -> bool:
        """Betas beyond `permitted` go to delta in chunks: once there are io_batch_size of
        them, a chunk of that excess starts and moves all of q2, then q3 from the back,
        keeping the first io_batch_size of q3 (its working set, so a segment just read is
        not pushed straight back). A pass moves at most `_b2d_budget` of the chunk (as
        RabbitMQ's B2DChunk); the rest moves on the next passes, and the index is folded
        once the chunk is done. Returns True when the budget stopped it mid-chunk."""
        excess = len(self.q2) + len(self.q3) - permitted
        if excess <= 0:
            self._b2d_chunk = 0
            return False
        if self._b2d_chunk <= 0:
            if excess < self.io_batch_size:
                return False
            self._b2d_chunk = excess
        if self._b2d_budget <= 0:
            return True
        excess = min(excess, self._b2d_chunk, self._b2d_budget)
        before = excess
        while excess > 0 and self.q2:
            self._to_delta(self.q2.popleft())
            excess -= 1
        keep = max(self.io_batch_size, permitted)
        q3 = self.q3
        limit = -1
        if q3 and self._q3_segment == q3[0].seq_id // SEGMENT_ENTRY_COUNT:
            # Betas just read from that index segment stay until fetched (RabbitMQ keeps q3
            # up to its head's segment boundary): pushed back, they made every io_batch_size
            # fetches re-read and re-parse the whole segment (lazy 1M drain: 39 % of the
            # broker's time in _deltas_to_betas).
            limit = next_segment_boundary(q3[0].seq_id)
        while excess > 0 and len(q3) > keep and q3[-1].seq_id >= limit:
            ms = q3.pop()
            self._to_delta(ms)
            excess -= 1
        moved = before - excess
        self._b2d_budget -= moved
        self._b2d_chunk = 0 if excess else self._b2d_chunk - moved  # stuck: chunk over
        if moved and self._b2d_chunk == 0:  # a fold (segment + journal fsyncs) per chunk
            self._qi.fold()
        return self._b2d_chunk > 0 and self._b2d_budget <= 0

    def _status_of(self, e: Any) -> MsgStatus:
        """The MsgStatus of index entry `e` read back from disk (embedded bodies decoded,
        others left in their store; props from the index: expiry, confirm owed)."""
        pub = e.pub
        embedded = bool(pub.embedded)
        msg = storage_codec.decode(pub.msg_id, pub.embedded) if embedded else None
        owed = pub.msg_id in self._confirms.unconfirmed
        props = MessageProps(pub.expiry_us // 1000 if pub.expiry_us else None, owed)
        return MsgStatus(e.seq_id, pub.msg_id, msg, pub.is_persistent, e.delivered,
                         QUEUE_INDEX if embedded else MSG_STORE, pub.size, props,
                         msg_in_store=not embedded, index_on_disk=True)

    def peek(self, offset: int, count: int) -> list[tuple[Message, bool]]:
        """Ready messages [offset, offset + count) in order (q4, q3, delta, q2, q1), read
        from RAM, the index or the store; nothing moves between q1..q4 and delta."""
        out: list[tuple[Message, bool]] = []
        skip = offset

        def take(items: Iterable[MsgStatus]) -> bool:
            nonlocal skip
            for ms in items:
                if skip:
                    skip -= 1
                    continue
                msg = self._read_msg(ms)
                if msg is not None:
                    out.append((msg, ms.is_delivered))
                if len(out) >= count:
                    return True
            return False

        if count <= 0 or take(self.q4) or take(self.q3):
            return out
        d = self.delta
        if d.count:
            if skip >= d.count:
                skip -= d.count
            elif take(self._delta_statuses()):
                return out
        take(self.q2) or take(self.q1)
        return out

    def _delta_statuses(self) -> Iterable[MsgStatus]:
        """Delta's messages in order, read segment by segment (bodies not loaded)."""
        pending = (self.ram_pending_ack, self.disk_pending_ack, self.qi_pending_ack)
        start, end = self.delta.start_seq_id, self.delta.end_seq_id
        while start < end:
            stop = min(next_segment_boundary(start), end)
            for e in self._qi.read(start, stop):
                if not any(e.seq_id in p for p in pending):
                    yield self._status_of(e)
            start = stop

    def _deltas_to_betas(self) -> None:
        """Refill an empty q3 from delta, one index segment per read (RabbitMQ
        `maybe_deltas_to_betas`); once delta is empty, q2 joins q3."""
        d = self.delta
        pending = (self.ram_pending_ack, self.disk_pending_ack, self.qi_pending_ack)
        while d.count > 0 and not self.q3:
            start = d.start_seq_id
            end = min(next_segment_boundary(start), d.end_seq_id)
            self._q3_segment = start // SEGMENT_ENTRY_COUNT
            loaded = 0
            for e in self._qi.read(start, end):
                if any(e.seq_id in p for p in pending):
                    continue
                ms = self._status_of(e)
                self.q3.append(ms)
                loaded += 1
                if ms.msg is not None:
                    self._ram_msgs += 1
                d.took(ms.is_persistent, ms.size)
            d.count -= loaded
            d.start_seq_id = end
            if d.count <= 0 or end >= d.end_seq_id:
                if d.count != 0:
                    log.warning(
                        "queue %r: delta expected %d more messages in the index",
                        self.name, d.count,  # type: ignore[attr-defined]
                    )
                    self._len -= d.count
                    self._ready_bytes -= d.bytes
                d.clear()
                self.q3.extend(self.q2)
                self.q2.clear()
