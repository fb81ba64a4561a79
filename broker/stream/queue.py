"""A stream queue (x-queue-type=stream, rabbitmq.com/streams.html; rabbit_stream_queue in
RabbitMQ 3.10.8 is the reference for its AMQP 0-9-1 behaviour): the queue process of an
append-only log. Publishes are appended (one chunk per mailbox batch) and confirmed once
fsynced; consumers read from where their `x-stream-offset` says, each independently, and
acks only give them credit back: nothing is ever removed by consuming. Retention
(x-max-length-bytes, x-max-age) drops whole segments from the start.

Owns: its StreamLog (broker/stream/log.py) under
`<data_dir>/vhosts/<vhost dir>/streams/<md5 of the name>`, and each consumer's next offset.
Talked to by: the vhost (declare, delete, recovery) and channels, through the same façade as
a classic queue's process (cast PUBLISH / PUBLISHES / ACK, call add_consumer, ...).
Must never: delete a message because it was consumed, or confirm one not yet on disk.

Differences kept on purpose: a bad x-stream-offset is 406 (RabbitMQ crashes with 541); a
reject or nack gives the consumer its credit back (RabbitMQ closes the connection with
540); queue.purge leaves the stream as it is and answers 0. Each delivery carries the
header `x-stream-offset`, a long, as RabbitMQ's.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import os
import shutil
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from broker import errors, replication_hook
from broker.backing_queue.memory import MemoryBackingQueue
from broker.consumers import Consumer
from broker.message import Message
from broker.msg_store.vhost import vhost_dir_name
from broker.protocol.encoding import encode_properties
from broker.protocol.framing import decode_properties
from broker.protocol.header_edit import with_long_header
from broker.queue_delivery import RUN
from broker.queue_process import ACK, DISCARD, PUBLISH, PUBLISHES, REQUEUE, QueueProcess
from broker.stream import arguments as sa
from broker.stream import log_v1, message_record
from broker.stream import osiris_chunk as oc
from broker.stream.log import Chunk, StreamLog
from broker.stream.sac import ActiveConsumers, group_of
from broker.stream_protocol.core import PublishBlock, Published

if TYPE_CHECKING:
    import asyncio

    from broker.backing_queue.base import Fetched
    from broker.definitions import PolicyDef
    from broker.facades import ChannelFacade, QueueVHost

log = logging.getLogger("broker.queue")
DELIVERIES_PER_TURN = 256  # as a classic queue: one consumer cannot hold the loop
SYNCED = 100  # (SYNCED,) the worker's fsync ended: release the confirms it covered
# (STREAM_PUBLISH, client, publisher id, reference | None, [(publishing id, filter, message)]):
# a stream protocol publish (broker/stream_protocol/reader.py)
STREAM_PUBLISH = 101
# a chunk's entries, at least and at most: gen_batch_server's min and max batch size, which
# bound osiris's writer batches and so RabbitMQ's chunks
MIN_BATCH_SIZE = 32
MAX_BATCH_SIZE = 8192
WRITE_BUFFER_LIMIT = 1 << 20  # bytes queued to a stream client before its deliveries pause


MAX_CONFIRM_IDS = 8192  # publishing ids per merged publish_confirm (64 KiB, under any frame_max)


def merged_confirms(owed: list[tuple[StreamClient, int, list[int] | bytes]]
                    ) -> list[tuple[StreamClient, int, list[int] | bytes]]:
    """`owed` with each run of one client's publisher's confirms made one (ids packed as
    big-endian u64s, at most MAX_CONFIRM_IDS each unless one publish had more), in order:
    one publish_confirm frame and one socket write for what one fsync covered, not one per
    publish frame. RabbitMQ's reader likewise confirms every id osiris reports written in
    one frame (rabbit_stream_reader handle_osiris_event)."""
    out: list[tuple[StreamClient, int, list[int] | bytes]] = []
    run: list[list[int] | bytes] = []  # the current run's ids, one item per publish
    count = 0  # ids in the run
    client: Any = None
    publisher_id = -1

    def emit() -> None:
        if len(run) == 1:
            out.append((client, publisher_id, run[0]))
        elif run:
            out.append((client, publisher_id, b"".join(
                ids if ids.__class__ is bytes else struct.pack(f">{len(ids)}Q", *ids)
                for ids in run)))

    for c, pid, ids in owed:
        n = len(ids) // 8 if ids.__class__ is bytes else len(ids)
        if c is client and pid == publisher_id and count + n <= MAX_CONFIRM_IDS:
            run.append(ids)
            count += n
            continue
        emit()
        client, publisher_id, run, count = c, pid, [ids], n
    emit()
    return out


class StreamClient(Protocol):
    """A stream protocol connection as a stream queue sees it (the reader's
    StreamConnection)."""

    def publish_confirmed(self, publisher_id: int, ids: list[int] | bytes) -> None: ...

    def deliver_chunk(self, subscription_id: int, header: bytes, data: bytes | memoryview,
                      committed: int) -> None: ...

    def write_buffer_size(self) -> int: ...  # bytes queued on its socket

    def stream_gone(self, vhost: str, name: str) -> None: ...  # deleted or stopped

    def consumer_update(self, queue: Any, subscription_id: int, active: bool) -> None: ...


@dataclass
class Subscription:
    """A stream protocol consumer: `offset` is the next chunk's first offset to send,
    `credit` the chunks it may still receive (subscribe's initial credit, then credit
    commands)."""

    client: StreamClient
    subscription_id: int
    offset: int
    credit: int
    properties: dict = field(default_factory=dict)
    consumed: int = 0  # messages sent (records of the chunks delivered)
    active: bool = True  # False while single active consumer keeps it waiting
    partition_index: int = -1  # its stream's index in the super stream it consumes (SAC)
    queue: Any = None  # the stream queue it reads (set by subscribe)
    filters: list[str] = field(default_factory=list)  # its filter.N values (3.13 filtering)
    match_unfiltered: bool = False  # and match-unfiltered

    def __post_init__(self) -> None:
        """Filtering as rabbit_stream_utils:filter_spec/1 reads the properties."""
        self.filters = [v for k, v in self.properties.items() if k.startswith("filter.")]
        self.match_unfiltered = self.properties.get("match-unfiltered") == "true"

    def ask(self, active: bool) -> None:
        """consumer_update(active) to its client (broker/stream/sac.py)."""
        self.client.consumer_update(self.queue, self.subscription_id, active)
_POOL: concurrent.futures.ThreadPoolExecutor | None = None


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    """The streams' fsync thread (one for all streams: group commit per stream)."""
    global _POOL
    if _POOL is None:
        _POOL = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="stream-fsync")
    return _POOL


def stream_dir(data_dir: str, vhost: str, name: str) -> str:
    digest = hashlib.md5(name.encode()).hexdigest()
    return os.path.join(data_dir, "vhosts", vhost_dir_name(vhost), "streams", digest)


def entry_bytes(message: Message) -> bytes:
    """A log entry: the message as AMQP 1.0, with its exchange and routing key as the
    annotations x-exchange and x-routing-key (rabbit_stream_queue:msg_to_iodata/1)."""
    return message_record.encode_message(message.exchange, message.routing_key,
                                         message.properties, message.body)


def convert_v1_entry(entry: bytes) -> bytes:
    """An entry of the previous release's format (0-9-1 properties as received) as this
    release's AMQP 1.0 entry: streams on disk are converted once, at first start."""
    exchange, routing_key, raw, body = log_v1.entry_parts(entry)
    return message_record.encode_message(exchange, routing_key, decode_properties(raw), body)


def with_offset_header(raw: bytes, offset: int) -> bytes:
    """Encoded properties `raw` with `x-stream-offset` (a long) added to the headers table,
    without decoding them (broker/protocol/header_edit.py)."""
    return with_long_header(raw, "x-stream-offset", offset)


def entry_fields(entry: bytes, offset: int, stream: str = "") -> tuple[str, str, bytes, bytes]:
    """(exchange, routing key, encoded properties with `x-stream-offset`, body) of a log
    entry (rabbit_stream_queue:binary_to_msg/2). An entry without x-exchange /
    x-routing-key (written over the stream protocol) comes from the default exchange with
    the stream's name."""
    fast = message_record.fast_wire(entry, stream)
    if fast is not None:  # most entries an AMQP 0-9-1 publisher left: no pamqp objects
        exchange, routing_key, raw, body = fast
        return exchange, routing_key, with_offset_header(raw, offset), body
    exchange, routing_key, props, body = message_record.decode_message(entry, stream)
    return exchange, routing_key, with_offset_header(encode_properties(props), offset), body


def entry_message(entry: bytes, offset: int, stream: str = "") -> Message:
    """The 0-9-1 message of a log entry, with the `x-stream-offset` header added."""
    exchange, routing_key, raw, body = entry_fields(entry, offset, stream)
    return Message.from_wire(exchange, routing_key, raw, _HOT, body)


class ChunkCache:
    """The chunks read last for AMQP 0-9-1 consumers, up to `max_entries` entries, each
    entry decoded once (on first delivery) into what every consumer's delivery reuses: ten
    consumers reading one stream decode each entry once, not ten times (measured with
    `python -m bench.streams`, 10 consumers: 34 µs of broker CPU per delivery without it).
    Chunks are looked up by offset in a dict of every offset's chunk start."""

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._chunks: dict[int, tuple[Chunk, list]] = {}  # first offset -> (chunk, decoded)
        self._start: dict[int, int] = {}  # offset -> first offset of its chunk
        self._entries = 0

    def get(self, offset: int) -> tuple[Chunk, list] | None:
        first = self._start.get(offset)
        return None if first is None else self._chunks[first]

    def put(self, chunk: Chunk) -> tuple[Chunk, list]:
        n = len(chunk.entries)
        while self._chunks and self._entries + n > self.max_entries:
            first = next(iter(self._chunks))  # the oldest read
            old, _d = self._chunks.pop(first)
            self._entries -= len(old.entries)
            for o in range(first, first + len(old.entries)):
                self._start.pop(o, None)
        got = self._chunks[chunk.first] = (chunk, [None] * n)
        self._entries += n
        for o in range(chunk.first, chunk.first + n):
            self._start[o] = chunk.first
        return got


_HOT = (None, None, None, None, None)  # delivery needs none of the hot fields


class StreamQueue(QueueProcess):
    """A durable stream queue `name` of `vhost`; `data_dir` is the broker's."""

    def __init__(self, loop: asyncio.AbstractEventLoop, vhost: QueueVHost, name: str, *,
                 arguments: dict, data_dir: str,
                 fsync: bool = True, **kw: Any) -> None:
        super().__init__(loop, vhost, name, durable=True, auto_delete=False,
                         exclusive_owner=None, arguments=arguments,
                         bq_factory=lambda *a: MemoryBackingQueue(), **kw)
        policy_def = self.policy.definition if self.policy is not None else {}
        segment = (arguments.get("x-stream-max-segment-size-bytes")
                   or policy_def.get("stream-max-segment-size-bytes")
                   or sa.DEFAULT_SEGMENT_SIZE)
        self.directory = stream_dir(data_dir, vhost.name, name)
        self.log = StreamLog(self.directory, max_segment_size=int(segment), fsync=fsync,
                             convert_entry=convert_v1_entry)
        # entries of this batch ((filter, entry), or an EntryBlock of many), appended in
        # after_batch; _pending_count counts entries, _pending_blocks says a block is there
        self._pending: list[Any] = []
        self._pending_count = 0
        self._pending_blocks = False
        self._pending_seqs: dict[str, int] = {}  # reference -> last publishing id this batch
        # a deduplicating publish's entries in _pending: (start, end, reference, their ids)
        self._pending_marks: list[tuple[int, int, str, list[int]]] = []
        self._batch_size = MIN_BATCH_SIZE  # entries the next chunk may hold
        # (client, publisher id, [publishing ids]) of this batch, then after the append,
        # then those the running fsync covers: confirmed when it ends
        # (ids as ints, or a PublishBlock's packed u64s)
        self._stream_confirms: list[tuple[StreamClient, int, list[int] | bytes]] = []
        self._unsynced_stream: list[tuple[StreamClient, int, list[int] | bytes]] = []
        self._in_sync_stream: list[tuple[StreamClient, int, list[int] | bytes]] | None = None
        self.subscriptions: list[Subscription] = []
        self.sac = ActiveConsumers()  # single active consumer groups
        self.clients: set[StreamClient] = set()  # stream connections with publishers or consumers here
        self._pending_confirms: list[tuple[ChannelFacade, int]] = []  # (channel, seq) in this batch
        self._unsynced: list[tuple[ChannelFacade, int]] = []  # appended, confirmed after the fsync
        self._in_sync: list[tuple[ChannelFacade, int]] | None = None  # what the running fsync covers
        self._offsets: dict[tuple[int, str], int] = {}  # consumer key -> next offset
        self._chunks = ChunkCache()  # chunks read last, decoded once for every consumer
        self._max_bytes, self._max_age = self._retention(arguments)

    def apply_policy(self, policy: PolicyDef | None,
                     operator_policy: PolicyDef | None = None) -> None:
        """A policy came or went: the retention limits and the segment size follow
        (policy keys max-length-bytes, max-age, stream-max-segment-size-bytes; a declare
        argument wins)."""
        super().apply_policy(policy, operator_policy)
        self._max_bytes, self._max_age = self._retention(self.arguments)
        size = self.arguments.get("x-stream-max-segment-size-bytes") or (
            policy.definition.get("stream-max-segment-size-bytes") if policy else None)
        self.log.max_segment_size = int(size or sa.DEFAULT_SEGMENT_SIZE)

    def _retention(self, args: dict) -> tuple[int | None, int | None]:
        mb = args.get("x-max-length-bytes")
        policy = self.policy.definition if self.policy is not None else {}
        mb = mb if mb is not None else policy.get("max-length-bytes")
        age = sa.max_age_ms(args.get("x-max-age") or policy.get("max-age"))
        return (int(mb) if isinstance(mb, int) else None), age

    # -- publishing --------------------------------------------------------------------------
    def _publish(self, channel: ChannelFacade | None, message: Message, seq: int | None) -> None:
        self.message_stats.publish += 1
        self._pending.append((None, entry_bytes(message)))
        self._pending_count += 1
        if seq is not None:
            # a seq no comes with its channel: only dead-lettered copies have neither
            self._pending_confirms.append((channel, seq))  # type: ignore[arg-type]
        self._credit_back(channel)

    def handle(self, msg: tuple) -> None:
        kind = msg[0]
        if kind in (PUBLISH, PUBLISHES):
            super().handle(msg)
        elif kind in (ACK, REQUEUE, DISCARD):  # credit back; a stream never deletes
            self._settle(msg[1], msg[2])
            if kind == ACK:
                self.message_stats.ack += len(msg[2])
        elif kind == RUN:
            pass
        elif kind == SYNCED:
            self._synced()
        elif kind == STREAM_PUBLISH:
            self._stream_publish(msg[1], msg[2], msg[3], msg[4])
        else:
            super().handle(msg)

    def _stream_publish(self, client: StreamClient, publisher_id: int, reference: str | None,
                        messages: Published) -> None:
        """Messages of a stream protocol publisher: with a reference, one whose publishing
        id is not above the last stored (or earlier in this batch) for that reference is
        dropped and still confirmed (osiris's deduplication). A PublishBlock (one frame of
        equal-length messages) is stored as it came when nothing in it is a duplicate."""
        pending = self._pending
        n = len(messages)
        self.message_stats.publish += n
        if isinstance(messages, PublishBlock):
            if reference:
                ids = messages.id_list()
                last = max(self.log.sequences.get(reference, -1),
                           self._pending_seqs.get(reference, -1))
                if ids[0] <= last or ids != sorted(set(ids)):  # duplicates: message by message
                    self._stream_publish_each(client, publisher_id, reference,
                                              messages.messages())
                    return
                self._pending_seqs[reference] = ids[-1]
                self._pending_marks.append((self._pending_count, self._pending_count + n,
                                            reference, ids))
            pending.append(messages.entries)
            self._pending_count += n
            self._pending_blocks = True
            self._stream_confirms.append((client, publisher_id, messages.ids))
            return
        if not reference:  # nothing to deduplicate: this is per message, keep it in C loops
            pending += [(flt, body) for _pid, flt, body in messages]
            self._pending_count += n
            self._stream_confirms.append((client, publisher_id,
                                          [m[0] for m in messages]))
            return
        self._stream_publish_each(client, publisher_id, reference, messages)

    def _stream_publish_each(self, client: StreamClient, publisher_id: int, reference: str,
                             messages: list[tuple[int, str | None, Any]]) -> None:
        """A deduplicating publisher's messages, one by one (see _stream_publish)."""
        pending = self._pending
        ids = []
        last = max(self.log.sequences.get(reference, -1),
                   self._pending_seqs.get(reference, -1))
        start = self._pending_count
        stored: list[int] = []  # publishing ids of the entries appended, in order
        for pid, flt, body in messages:
            ids.append(pid)
            if pid <= last:
                continue  # a duplicate: confirmed with the others, not stored
            pending.append((flt, body))
            stored.append(pid)
            last = pid
        if stored:
            self._pending_count += len(stored)
            self._pending_seqs[reference] = last
            self._pending_marks.append((start, self._pending_count, reference, stored))
        self._stream_confirms.append((client, publisher_id, ids))

    def after_batch(self) -> None:
        if self._pending or self._stream_confirms:
            entries, self._pending = self._pending, []
            marks, self._pending_marks = self._pending_marks, []
            total, self._pending_count = self._pending_count, 0
            blocks, self._pending_blocks = self._pending_blocks, False
            self._pending_seqs = {}
            if entries:
                self._append_chunks(entries, marks, total if blocks else None)
            self._unsynced.extend(self._pending_confirms)
            self._pending_confirms = []
            self._unsynced_stream.extend(self._stream_confirms)
            self._stream_confirms = []
            if self._max_bytes is not None or self._max_age is not None:
                self.log.apply_retention(self._max_bytes, self._max_age)
        if not self.deleted:
            self._run_deliveries()
            if self.subscriptions:
                self._run_subscriptions()
        self._flush_confirms()

    def _append_chunks(self, entries: list[Any], marks: list[tuple[int, int, str, list[int]]],
                       total: int | None = None) -> None:
        """Append one batch's entries as chunks of at most `_batch_size` entries, the size
        adapting as gen_batch_server's does for osiris's writer (32 to 8192: doubled after a
        full chunk, halved after one that was not), so a burst is stored as RabbitMQ stores
        it. Each chunk's trailer holds, per publisher reference, the publishing id of its
        last entry in the chunk (`marks`: (start, end, reference, ids) of each publish, in
        entries), as osiris tracks every write: a chunk is complete on its own after a
        crash. `total`: the entries in all, when some items are EntryBlocks (a block counts
        its entries and is split where a chunk ends inside it)."""
        n = len(entries) if total is None else total
        start, m = 0, 0
        items = iter(entries)
        carry: Any = None  # the rest of a block a chunk ended inside
        while start < n:
            size = self._batch_size
            end = min(n, start + size)
            seqs: dict[str, int] = {}
            while m < len(marks) and marks[m][0] < end:
                mstart, mend, ref, ids = marks[m]
                if mend > end:  # goes on in the next chunk
                    seqs[ref] = ids[end - mstart - 1]
                    break
                seqs[ref] = ids[-1]
                m += 1
            if total is None:
                chunk = entries[start:end]
            else:
                chunk, want = [], end - start
                while want:
                    item = carry if carry is not None else next(items)
                    carry = None
                    if item.__class__ is not oc.EntryBlock:
                        chunk.append(item)
                        want -= 1
                    elif item.count <= want:
                        chunk.append(item)
                        want -= item.count
                    else:
                        chunk.append(item.head(want))
                        carry = item.tail(want)
                        want = 0
            self.log.append_chunk(chunk, sequences=seqs or None)
            self._batch_size = (min(MAX_BATCH_SIZE, size * 2) if end - start >= size
                                else max(MIN_BATCH_SIZE, size // 2))
            start = end

    def on_mailbox_empty(self) -> None:
        """Group commit: one fsync, on the fsync thread, for every chunk appended since the
        last one started; the confirms follow when it ends (SYNCED)."""
        if ((self._unsynced or self._unsynced_stream) and self._in_sync is None
                and not self.deleted):
            self._in_sync, self._unsynced = self._unsynced, []
            self._in_sync_stream, self._unsynced_stream = self._unsynced_stream, []
            future = self._loop.run_in_executor(_pool(), self.log.sync)
            future.add_done_callback(lambda _f: self.cast((SYNCED,)))

    def _synced(self) -> None:
        owed, self._in_sync = self._in_sync or [], None
        for channel, seq in owed:
            self._owe_confirm(channel, seq)
        self._flush_confirms()
        stream_owed, self._in_sync_stream = self._in_sync_stream or [], None
        for client, publisher_id, ids in merged_confirms(stream_owed):
            client.publish_confirmed(publisher_id, ids)
        if self._unsynced or self._unsynced_stream:
            self.on_mailbox_empty()  # what came during that fsync: the next one

    # -- stream protocol subscriptions ---------------------------------------------------------
    def subscribe(self, sub: Subscription) -> None:
        """A stream protocol consumer starts at `sub.offset`; chunks go out as credit
        allows (to a single active consumer group's member once it is active)."""
        sub.queue = self
        self.subscriptions.append(sub)
        if group_of(sub.properties) is not None:
            self.sac.join(sub)
        self.cast((RUN,))

    def unsubscribe(self, client: StreamClient, subscription_id: int) -> bool:
        gone = [s for s in self.subscriptions
                if s.client is client and s.subscription_id == subscription_id]
        for sub in gone:
            self.subscriptions.remove(sub)
            self.sac.leave(sub)
        return bool(gone)

    def consumer_update_answered(self, client: StreamClient, subscription_id: int,
                                 active: bool, spec: Any) -> None:
        """The client answered consumer_update: an activated member starts where its
        answer says (an offset specification; None keeps its own)."""
        for sub in self.subscriptions:
            if sub.client is client and sub.subscription_id == subscription_id:
                def start(m: Any) -> None:
                    if spec is not None:
                        m.offset = self.log.locate(spec)
                    self.cast((RUN,))
                self.sac.answered(sub, active, start)
                return

    def add_credit(self, client: StreamClient, subscription_id: int, credit: int) -> bool:
        for sub in self.subscriptions:
            if sub.client is client and sub.subscription_id == subscription_id:
                sub.credit += credit
                self.cast((RUN,))
                return True
        return False

    def client_down(self, client: StreamClient) -> None:
        """A stream protocol connection closed: its subscriptions go (a single active
        consumer group activates its next member)."""
        for sub in [s for s in self.subscriptions if s.client is client]:
            self.subscriptions.remove(sub)
            self.sac.leave(sub)
        self.clients.discard(client)

    def _run_subscriptions(self) -> None:
        """Send each subscription the chunks it has credit for, as stored (header and data
        unchanged), user chunks only; a client whose socket has WRITE_BUFFER_LIMIT bytes
        queued waits (its resume casts RUN)."""
        log_ = self.log
        budget = DELIVERIES_PER_TURN
        for sub in list(self.subscriptions):
            client = sub.client
            while (sub.active and sub.credit > 0 and sub.offset < log_.next_offset
                   and client.write_buffer_size() < WRITE_BUFFER_LIMIT):
                if budget == 0:
                    self.cast((RUN,))
                    return
                if sub.offset < log_.first_offset:
                    sub.offset = log_.first_offset  # removed by retention
                    continue
                got = log_.read_raw(sub.offset)
                if got is None:
                    break
                header, raw = got
                sub.offset = header.chunk_id + header.num_records
                if header.chunk_type != oc.CHNK_USER:
                    continue
                if sub.filters and not oc.bloom_may_contain(
                        raw[oc.HEADER_SIZE:header.data_start], sub.filters,
                        sub.match_unfiltered):
                    continue  # no entry of the chunk can match: skipped, no credit spent
                sub.credit -= 1
                sub.consumed += header.num_records
                budget -= 1
                self.message_stats.deliver += header.num_records
                # as osiris sends a chunk to a consumer: the header as stored, then the data
                # entries, without the bloom filter and the trailer (select_amount_to_send)
                start = header.data_start
                client.deliver_chunk(sub.subscription_id, raw[:oc.HEADER_SIZE],
                                     memoryview(raw)[start:start + header.data_length],
                                     log_.last_chunk)

    # -- consuming ---------------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        """basic.consume: a prefetch is required (406) and acks too (540), as RabbitMQ's;
        x-stream-offset says where to start."""
        what = f"queue '{self.name}' in vhost '{self.vhost.name}'"
        if consumer.prefetch == 0:
            raise errors.amqp_error(errors.PreconditionFailed,
                                    f"consumer prefetch count is not set for '{what}'")
        if consumer.no_ack:
            raise errors.amqp_error(
                errors.NotImplemented_,
                f"automatic acknowledgement not supported by stream queues {what}")
        spec = sa.offset_spec((consumer.arguments or {}).get("x-stream-offset"), what)
        self._offsets[(id(consumer.channel), consumer.tag)] = self.log.locate(spec)
        super().add_consumer(consumer)

    def remove_consumer(self, channel: ChannelFacade, tag: str) -> bool:
        self._offsets.pop((id(channel), tag), None)
        return super().remove_consumer(channel, tag)

    def channel_down(self, channel: ChannelFacade, unacked: list[int]) -> None:
        """The channel closed: its consumers go (nothing is requeued: nothing left)."""
        self._drain_all()
        for consumer in self.consumers.remove_channel(channel):
            self._offsets.pop((id(channel), consumer.tag), None)
        self.lease.touch()
        self.credit.peer_down(channel)
        self._confirm_out.pop(channel, None)

    def _run_deliveries(self) -> None:
        log_ = self.log
        budget = DELIVERIES_PER_TURN
        for consumer in list(self.consumers):
            key = (id(consumer.channel), consumer.tag)
            offset = self._offsets.get(key)
            while (offset is not None and offset < log_.next_offset
                   and consumer.has_capacity() and consumer.channel.can_deliver(False)):
                if budget == 0:
                    self._offsets[key] = offset
                    self.cast((RUN,))
                    return
                got = self._chunks.get(offset)
                if got is None:
                    chunk = log_.read_chunk(offset)
                    if chunk is None:  # removed by retention: skip to what is left
                        offset = max(offset, log_.first_offset)
                        if offset >= log_.next_offset:
                            break
                        continue
                    got = self._chunks.put(chunk)
                chunk, decoded = got
                i = offset - chunk.first
                fields = decoded[i]
                if fields is None:
                    entry = chunk.entries[i]
                    if entry is None:  # a tracking chunk, an unopenable sub-batch: none
                        offset += 1
                        continue
                    fields = decoded[i] = entry_fields(entry, offset, self.name)
                message = Message.from_wire(fields[0], fields[1], fields[2], _HOT, fields[3])
                consumer.unacked += 1
                self.message_stats.deliver += 1
                consumer.channel.deliver(self, consumer.tag, message, False, offset)
                offset += 1
                budget -= 1
            if offset is not None:
                self._offsets[key] = offset

    def basic_get(self, channel: ChannelFacade, no_ack: bool) -> tuple[Fetched, int] | None:
        raise errors.amqp_error(
            errors.NotImplemented_, "basic.get not supported by stream queues queue "
            f"'{self.name}' in vhost '{self.vhost.name}'")

    # -- the façade's other questions ----------------------------------------------------------
    queue_type = "stream"  # what the management API shows as the queue's type

    def message_count(self) -> int:
        return self.log.next_offset - self.log.first_offset

    def lengths(self) -> dict[str, int]:
        """messages (what the log holds), messages_ready (the same: every message stays
        readable), messages_unacknowledged (deliveries not acked yet), for the API."""
        n = self.message_count()
        return {"messages": n, "messages_ready": n,
                "messages_unacknowledged": sum(c.unacked for c in self.consumers)}

    def purge(self) -> int:
        return 0

    def browse(self, offset: int, count: int) -> list[tuple[Message, bool]]:
        return []

    def check_delete(self, if_unused: bool, if_empty: bool) -> None:
        """RabbitMQ 3.10.8 deletes a stream whatever if-unused and if-empty say
        (rabbit_stream_queue:delete ignores both): so does this."""

    def stats(self) -> dict[str, int]:
        unacked = sum(c.unacked for c in self.consumers)
        return {"len": self.message_count(), "pending_acks": unacked, "ram_msgs": 0,
                "persistent": self.message_count(), "bytes": self.log.total_bytes(),
                "consumers": len(self.consumers)}

    def terminate(self, delete: bool) -> int:
        """Stop: what was published is appended and fsynced (its confirms sent), consumers
        are cancelled, and the log is closed (deleted with `delete`)."""
        self._drain_all()
        self.after_batch()
        self.log.sync()  # waits for a running fsync too: everything appended is on disk
        owed = (self._in_sync or []) + self._unsynced
        self._in_sync, self._unsynced = None, []
        for channel, seq in owed:
            self._owe_confirm(channel, seq)
        self._flush_confirms()
        stream_owed = (self._in_sync_stream or []) + self._unsynced_stream
        self._in_sync_stream, self._unsynced_stream = None, []
        for client, publisher_id, ids in stream_owed:
            client.publish_confirmed(publisher_id, ids)
        self.subscriptions = []
        for client in list(self.clients):
            client.stream_gone(self.vhost.name, self.name)
        self.clients.clear()
        self.deleted = True
        count = self.message_count()
        for consumer in self.consumers:
            consumer.channel.consumer_cancelled(self, consumer.tag)
        self.lease.cancel()
        if self.ram is not None:
            self.ram.stop()
        self.log.close()
        if delete:
            shutil.rmtree(self.directory, ignore_errors=True)
            replication_hook.deleted(self.directory)
        self.stop_process()
        return count
