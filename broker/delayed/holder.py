"""The process that holds a delayed exchange's messages until they are due (the plugin's
`rabbit_delayed_message` gen_server, one per exchange here).

Owns: one `x-delayed-message` exchange's DelayStore (broker/delayed/store.py), its timer,
the confirms it owes publishers and the credit it grants them, and the publishing of due
messages through the exchange.
Talked to by: channels, as a queue (the exchange's routing table returns this process for
a message to delay: `cast` PUBLISH / PUBLISHES, credit flow, confirms); the vhost (created
with the exchange, `terminate` when it is deleted or the broker stops); target queues (their
confirms of due messages, through a TargetPublisher); the management API (`stats`, `browse`).
Must never: confirm a publish before its record is durable (fsync in a thread, then the
confirm), hand out a message before it is due, or block the loop on the disk.

Semantics (rabbitmq-delayed-message-exchange, rabbit_delayed_message.erl, and its README):
a held message is published once due, through the exchange, with `x-delay` set to minus its
delay, so the underlying type's bindings at that time decide where it goes (exchange-to-
exchange bindings and the exchange's alternate exchange included); with no route it is
dropped. Beyond the plugin: a publisher confirm means the message is on disk; a due message
is forgotten only once every queue it went to confirmed it (a broker killed in between
publishes it again after the restart); waiting messages cost bounded memory. A classic
target confirms a due message lazily (TargetPublisher lazy_confirms): once its periodic
200 ms index sync covers it, or once a consumer acked it; a message acked before that sync
is never written by the queue at all, as a client's would be (the holder still has it).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import struct
import time
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, Protocol

from broker.credit_flow import CreditFlow
from broker.dead_letter import routing_keys
from broker.delayed.store import DelayStore, Key, SpillJob, close_all, drop_gradually
from broker.durable_io import fsync_and_close
from broker.exchange.delayed import delay_from, delay_of, swapped_delay
from broker.loop_lag import Histogram
from broker.mailbox import Process
from broker.message import Message, new_msg_id
from broker.protocol.encoding import LongLong, SignedInt, encode_properties
from broker.protocol.header_edit import find_header, header_value, replace_header
from broker.queue_process import PUBLISH, PUBLISHES, QueueProcess
from broker.quorum.dead_letters import TargetPublisher

if TYPE_CHECKING:
    from collections.abc import Sequence

    from broker.facades import ChannelFacade, QueueFacade

log = logging.getLogger("broker.delayed")

class DelayVHost(Protocol):
    """The vhost as a holder sees it: its name and the routing of due messages."""

    @property
    def name(self) -> str: ...

    def route_keys(self, exchange_name: str, keys: list[str], headers: dict[str, Any] | None,
                   message: Message | None = None) -> Sequence[QueueFacade]: ...

    def route_due(self, exchange_name: str, routing_key: str,
                  message: Message) -> Sequence[QueueFacade]: ...


FIRE = 100  # (FIRE,) the timer: publish what is due
SYNCED = 101  # (SYNCED, [(channel, seq)]) the fsync of those publishes' records finished
TARGET = 102  # (TARGET, "confirm" | "reject", queue, [fire seq]) a target queue's answer
SPILLED = 103  # (SPILLED, job, exception | None) a SpillJob's thread is done
FIRE_BATCH = 1024  # due messages published per loop turn (others wait a turn)
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
CC = 1  # a store flag: the message carries CC keys (sender-selected distribution)


class DelayedMessages(Process):
    """The held messages of delayed exchange `exchange` in `vhost`, stored in `directory`
    (None: memory only). `fsync`: confirm publishes only once fsynced (the broker's
    `fsync` setting). Looks like a queue to the channels that publish to it (QueueFacade):
    its `name` is the exchange's."""

    is_delay_holder = True

    def __init__(self, loop: asyncio.AbstractEventLoop, vhost: DelayVHost, exchange: str,
                 directory: str | None, *, fsync: bool = True, credit_initial: int = 400,
                 credit_more_after: int = 200) -> None:
        super().__init__(loop)
        self.vhost = vhost
        self.name = exchange  # the exchange's name (QueueFacade: channels log and key by it)
        self.deleted = False
        self.store = DelayStore(directory)
        self.store.unlink_later = True  # spent runs and covered journals: in a thread
        self._fsync = fsync and directory is not None
        self.credit = CreditFlow(credit_initial, credit_more_after)  # receiver side
        self._unsynced: list[tuple[ChannelFacade, int]] = []  # confirms waiting for a flush
        self._syncing: list[tuple[ChannelFacade, int]] | None = None  # in the fsync thread
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None  # ms since the epoch the timer is set for
        self._fire_scheduled = False
        self.publisher = TargetPublisher(self.cast, TARGET, lazy_confirms=True)
        self._next_fire = 0
        self._in_flight: dict[int, tuple[Key, set[Hashable]]] = {}  # fire seq -> key, targets
        # the other workers' holders of this exchange, as last reported: worker -> own_stats
        self.remote_stats: dict[int, dict[str, Any]] = {}
        # counts for the management API and Prometheus
        self.published = 0  # messages taken and held
        self.routed = 0  # due messages published to at least one queue
        self.unroutable = 0  # due messages no binding (nor alternate exchange) took
        # how late each due message went out (s: handed out minus due, 1 ms resolution)
        self.lateness = Histogram()
        if len(self.store):
            loop.call_soon(self.cast, (FIRE,))  # recovered: what is overdue goes at once

    # -- QueueFacade ---------------------------------------------------------------------------
    def remove_consumer(self, channel: ChannelFacade, tag: str) -> bool:
        return False  # never consumed from

    def channel_down(self, channel: ChannelFacade, unacked: list[int]) -> None:
        """Nothing is delivered from here: no unacked messages to give back."""

    # -- the mailbox ---------------------------------------------------------------------------
    def handle(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == PUBLISH:
            self._take(msg[1], msg[2], msg[3])
        elif kind == PUBLISHES:
            channel, messages, seqs = msg[1], msg[2], msg[3]
            for i, message in enumerate(messages):
                self._take(channel, message, None if seqs is None else seqs[i])
        elif kind == FIRE:
            self._fire_scheduled = False
            self._fire()
        elif kind == TARGET:
            self._target_answer(msg[2], msg[3])
        elif kind == SYNCED:
            self._release(msg[1])
        elif kind == SPILLED:
            self._spilled(msg[1], msg[2])

    def _take(self, channel: ChannelFacade | None, message: Message, seq: int | None) -> None:
        held, delay, flags = _to_hold(message)
        self.store.add(_now_ms() + delay, held, flags)
        self.published += 1
        if channel is None:
            return
        if seq is not None:
            self._unsynced.append((channel, seq))
        grant = self.credit.ack(channel)
        if grant:
            channel.grant_credit(self, grant)

    def after_batch(self) -> None:
        if self.deleted:
            return
        store = self.store
        job = store.flush(background=True)
        if job is not None:  # the memtable passed its bound: a sorted run, in a thread
            future = self._loop.run_in_executor(None, job.write)
            future.add_done_callback(lambda f: self.cast((SPILLED, job, f.exception())))
        store.commit()
        self._collect_garbage()
        if self._unsynced and self._syncing is None:
            self._sync()
        self._arm()

    # -- confirms after fsync ------------------------------------------------------------------
    def _sync(self) -> None:
        """Make the records written so far durable, then confirm their publishes: fsync in
        a thread (the loop goes on), or at once when fsync is off."""
        owed, self._unsynced = self._unsynced, []
        if not self._fsync:
            self._release(owed)
            return
        fds = self.store.sync_fds()
        self._syncing = owed
        future = self._loop.run_in_executor(None, fsync_and_close, fds)
        future.add_done_callback(lambda f: self.cast((SYNCED, owed)))

    def _release(self, owed: list[tuple[ChannelFacade, int]]) -> None:
        if owed is self._syncing:
            self._syncing = None
        by_channel: dict[ChannelFacade, list[int]] = {}
        for channel, seq in owed:
            by_channel.setdefault(channel, []).append(seq)
        for channel, seqs in by_channel.items():
            channel.cast(("confirm", self, seqs))
        if self._unsynced and self._syncing is None and not self.deleted:
            self._sync()

    def _spilled(self, job: SpillJob, error: BaseException | None) -> None:
        """A spill's thread is done: read its run from now on (or, after a disk error, keep
        its messages in memory and their journal on disk)."""
        if self.deleted:
            return
        if error is not None:
            log.error("delayed exchange '%s' in vhost '%s': writing a sorted run failed; "
                      "its messages stay in memory", self.name, self.vhost.name,
                      exc_info=error)
            self.store.abort_spill(job)
        else:
            spilled = self.store.finish_spill(job)
            self._loop.run_in_executor(None, drop_gradually, spilled)
            self._collect_garbage()

    def _collect_garbage(self) -> None:
        """Free the blocks of what the store unlinked (a covered journal, spent runs) in
        a thread."""
        garbage = self.store.take_garbage()
        if garbage:
            self._loop.run_in_executor(None, close_all, garbage)

    # -- due messages --------------------------------------------------------------------------
    def _arm(self) -> None:
        """Set the timer for the next due message (or publish at once when one is due)."""
        due = self.store.next_due()
        if due is None or self._fire_scheduled:
            return
        if self._timer is not None:
            if self._timer_at is not None and self._timer_at <= due:
                return
            self._timer.cancel()
        self._timer_at = due
        delay = (due - _now_ms()) / 1000.0
        self._timer = self._loop.call_later(max(0.0, delay), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        if not self._fire_scheduled:
            self._fire_scheduled = True
            self.cast((FIRE,))

    def _fire(self) -> None:
        """Publish up to FIRE_BATCH due messages through the exchange; more due ones wait
        one loop turn (a FIRE to ourselves), so other processes get theirs."""
        if self.deleted:
            return
        now = _now_ms()
        due = self.store.pop_due(now, FIRE_BATCH)
        observe = self.lateness.observe
        for key, flags, message in due:
            observe((now - key[0]) / 1000.0)
            self._publish_due(key, flags, message)
        if len(due) == FIRE_BATCH and not self._fire_scheduled:
            self._fire_scheduled = True
            self.cast((FIRE,))

    def _publish_due(self, key: Key, flags: int, message: Message) -> None:
        """Route a due message (its x-delay negated when it was taken) through the
        exchange as a new publish, and publish it to the queues it reaches."""
        message.msg_id = new_msg_id()  # a new publish: published again after a crash, too
        if flags & CC:  # sender-selected distribution: its CC keys route it too
            targets = self.vhost.route_keys(self.name, routing_keys(message), message.headers,
                                            message)
        else:  # by key, its properties still encoded: usually one cached route
            targets = self.vhost.route_due(self.name, message.routing_key, message)
        if not targets:
            self.unroutable += 1
            self.store.settle(key)
            return
        self.routed += 1
        local: set[Hashable] = set()
        fire = self._next_fire
        for queue in targets:
            if isinstance(queue, QueueProcess):
                local.add(queue)
                queue.cast((PUBLISH, self.publisher, message, fire))
            else:  # another worker's queue: published as a dead-lettered copy is, unconfirmed
                queue.cast((PUBLISH, None, message, None))
        if local:
            self._next_fire = fire + 1
            self._in_flight[fire] = (key, local)
        else:
            self.store.settle(key)

    def _target_answer(self, queue: Hashable, fires: list[int]) -> None:
        """A target queue confirmed (or, full, rejected) due messages: those all their
        targets answered are settled (the plugin publishes once; so does this holder)."""
        in_flight = self._in_flight
        for fire in fires:
            entry = in_flight.get(fire)
            if entry is None:
                continue
            entry[1].discard(queue)
            if not entry[1]:
                del in_flight[fire]
                self.store.settle(entry[0])

    # -- the management API ---------------------------------------------------------------------
    def own_stats(self) -> dict[str, Any]:
        """messages_delayed (waiting), the next due time (ms since the epoch, or None), and
        the counts of messages taken, routed when due, and unroutable when due, and
        `lateness` (a copy of the Histogram of how late due messages went out, s), of
        this worker's holder alone."""
        late = Histogram()
        late.merge(self.lateness)
        return {"messages_delayed": len(self.store),
                "next_due_ms": self.store.next_due(),
                "delayed_published": self.published, "delayed_routed": self.routed,
                "delayed_unroutable": self.unroutable,
                "lateness": late}

    def stats(self) -> dict[str, Any]:
        """`own_stats`, with those the other workers' holders of the same exchange last
        reported added (`remote_stats`, filled on worker 0 by broker/workers/api_bridge.py:
        with `--workers N` each worker holds what its own connections published)."""
        out = self.own_stats()
        for other in self.remote_stats.values():
            for key in ("messages_delayed", "delayed_published", "delayed_routed",
                        "delayed_unroutable"):
                out[key] += other[key]
            due = other["next_due_ms"]
            if due is not None and (out["next_due_ms"] is None or due < out["next_due_ms"]):
                out["next_due_ms"] = due
            out["lateness"].merge(other["lateness"])
        return out


    def browse(self, limit: int) -> list[tuple[int, Message]]:
        """Up to `limit` waiting messages in due order: (due ms since the epoch, message)."""
        self.store.flush()
        return [(key[0], message) for key, message in self.store.peek(limit)]

    # -- the end --------------------------------------------------------------------------------
    def terminate(self, delete: bool) -> None:
        """Stop: with `delete` (the exchange was deleted) forget every held message, else
        keep them on disk for the next start. Publishes taken are confirmed either way (a
        deleted exchange's publishes count as handled, as a deleted queue releases what it
        owed)."""
        self._drain_all()
        owed = self._unsynced + (self._syncing or [])
        self._unsynced = []
        self._syncing = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.deleted = True
        if delete:
            self.store.delete()
        else:
            self.store.close()
        self._release(owed)
        self.stop_process()

    def __repr__(self) -> str:
        return f"<delayed exchange '{self.name}' in vhost '{self.vhost.name}'>"


def _to_hold(message: Message) -> tuple[Message, int, int]:
    """(the message as it will go out when due, its delay in ms, its store flags). The
    encoded properties are edited in place where the header can be found without decoding
    them (about 2 µs against 25 for decoding, copying and encoding them again)."""
    raw = message.wire_properties()
    where = find_header(raw, "x-delay")
    delay = delay_from(header_value(raw, where)) if where is not None else None
    if where is None or delay is None:  # an unusual table: decoded, as `swapped` does
        headers = message.headers
        delay = delay_of(headers) or 0
        return swapped(message, headers, delay), delay, CC if headers and "CC" in headers else 0
    value = swapped_delay(delay)
    tag, packed = ((b"I", _I32.pack(value)) if value >= -(1 << 31)
                   else (b"l", _I64.pack(value)))
    held = Message.from_wire(message.exchange, message.routing_key,
                             replace_header(raw, where, tag, packed),
                             (2 if message.persistent else 1, message.priority,
                              message.expiration, None, None), message.body)
    held.msg_id = message.msg_id
    return held, delay, CC if find_header(raw, "CC") is not None else 0


def swapped(message: Message, headers: dict | None, delay: int) -> Message:
    """`message` as it will be published when due: its `x-delay` header set to minus the
    delay (the plugin's swap_delay_header, a `signedint`; a long past 32 bits), the rest
    of its properties as published. Done once, when the message is taken: the properties
    are decoded then already (routing read x-delay) and stay encoded through the store
    and the due publish."""
    props = copy.copy(message.properties)
    value = swapped_delay(delay)
    props.headers = {**(headers or {}),
                     "x-delay": SignedInt(value) if value >= -(1 << 31) else LongLong(value)}
    return Message(message.exchange, message.routing_key, props, message.body,
                   msg_id=message.msg_id, raw_properties=encode_properties(props))


def _now_ms() -> int:
    return int(time.time() * 1000)
