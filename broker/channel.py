"""The channel process: one per open AMQP channel (RabbitMQ `rabbit_channel.erl`).

Owns: the channel's state (open/closing), its consumers, unacked deliveries (delivery_tag →
queue, ack tag), basic.qos limiter, publisher-confirm tracker, tx buffer, and credit towards
queue processes. The reader casts it commands; queue processes use its façade (`deliver`,
`can_deliver`, `grant_credit`, `consumer_cancelled`, cast `confirm`). Method handlers live in
`channel_basic.py` (basic.*, confirm.*, tx.*) and `channel_entities.py` (exchange.*, queue.*),
which import this module; `channel_handlers.py` joins them into the dispatch table the reader
hands each channel (`Handlers`), so this module never imports them back. It keeps the loop,
dispatch through that table, and the error boundary: soft errors become `channel.close` here,
hard errors are handed to the connection (`ChannelConnection`, the reader's side of the
contract). Never reads the socket.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from pamqp import commands

from broker import errors, replication_hook
from broker.access import ChannelAccess
from broker.confirms import QUEUE_GONE, ConfirmTracker
from broker.credit_flow import CreditFlow, flow_state
from broker.direct_reply_to import REGISTRY as REPLY_REGISTRY
from broker.facades import ConnectionFacade, LiteRef
from broker.limiter import Limiter
from broker.mailbox import Process
from broker.message import Message
from broker.protocol.encoding import encode_deliver, encode_method
from broker.queue_delivery import RUN
from broker.queue_process import ACK, REQUEUE
from broker.stats import MessageStats
from broker.tx import TxState

if TYPE_CHECKING:
    import asyncio

    from broker.access import AccessControl
    from broker.config import BrokerConfig
    from broker.facades import ContentCommand, QueueFacade
    from broker.protocol.framing import Command
    from broker.trace import Tracer
    from broker.vhost import VHost
    from broker.writer import Writer

log = logging.getLogger("broker.channel")

OPEN, CLOSING, CLOSED = "open", "closing", "closed"

# mailbox message kinds from the reader / queues
CMD = "cmd"  # ("cmd", Command)
CONFIRM = "confirm"  # ("confirm", queue, [msg_seq_no])
REJECT = "reject"  # ("reject", queue, [msg_seq_no])
FAIL = "fail"  # ("fail", soft error) the reader's assembler refused a frame on this channel
PUBLISHES = "publishes"  # ("publishes", [Command]) a run of basic.publish read in one go
SHUTDOWN = "shutdown"  # ("shutdown",) the connection is closing: clean up after the mailbox


class NodeNamed(Protocol):
    def node_name(self) -> str: ...  # rabbit@host (sharding names a node's shards by it)


class ChannelConnection(ConnectionFacade, Protocol):
    """The connection (broker/reader.py's Reader) as its channels see it: what a channel
    is opened with, and the calls it makes back (credit for the reader, errors, its own
    close). The contract sits here, below the reader that satisfies it."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def writer(self) -> Writer | None: ...  # set once the socket is up

    @property
    def vhost(self) -> VHost | None: ...  # set by connection.open

    @property
    def access_control(self) -> AccessControl | None: ...  # set by connection.open

    @property
    def frame_max(self) -> int: ...

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def capabilities(self) -> dict[str, Any]: ...  # the client's, from connection.start-ok

    @property
    def broker(self) -> NodeNamed: ...

    def grant_credit(self, channel: ChannelProcess, n: int) -> None: ...

    def connection_error(self, exc: errors.AMQPError) -> None: ...

    def crashed(self, exc: BaseException) -> None: ...

    def channel_closed(self, channel: ChannelProcess) -> None: ...



class Handlers(NamedTuple):
    """The channel's method handlers (built by broker/channel_handlers.py from
    channel_basic and channel_entities, handed to every channel by the reader)."""

    methods: Mapping[type, Callable[[ChannelProcess, Any], None]]  # method class -> handler
    publish: Callable[[ChannelProcess, ContentCommand], None]  # one basic.publish
    # basic.publishes run[start:stop] sharing one method object -> how many were handled
    publish_alike: Callable[[ChannelProcess, list, int, int], int]


class ChannelProcess(Process):
    """Channel `number` of connection `conn` (a `ChannelConnection`), dispatching its
    methods through `handlers`."""

    # a client waits on the wire for its confirms: a queue fsyncs for them at the end of
    # its turn (PersistConfirms reads this; a delayed exchange's holder says True)
    lazy_confirms = False

    def __init__(self, conn: ChannelConnection, number: int, handlers: Handlers) -> None:
        super().__init__(conn.loop)
        writer, vhost, access_control = conn.writer, conn.vhost, conn.access_control
        # channel.open is only accepted after connection.open: all three are set by then
        assert writer is not None and vhost is not None and access_control is not None
        self.conn = conn  # the connection (reader) this channel belongs to
        # the dispatch table's three entries, read per method or per publish run
        self._methods = handlers.methods
        self._publish = handlers.publish
        self._publish_alike = handlers.publish_alike
        self.number = number  # channel number on the wire
        self.writer = writer  # outbound frames of the connection
        self.vhost = vhost  # where exchanges and queues are looked up
        # permission checks of this channel's user (cache dropped whenever permissions change)
        self.access = ChannelAccess(access_control, conn.username, vhost.name)
        self.frame_max = conn.frame_max  # negotiated, for splitting bodies
        self.state = OPEN  # open / closing (we sent channel.close) / closed
        self.limiter = Limiter()  # basic.qos state
        cfg = conn.config
        self.credit = CreditFlow(cfg.credit_flow_initial, cfg.credit_flow_more_after)  # → queues
        self.reader_credit = CreditFlow(cfg.credit_flow_initial, cfg.credit_flow_more_after)
        self.next_delivery_tag = 1  # delivery tags count from 1 per channel
        self.message_stats = MessageStats()  # publish/deliver/ack/confirm counts (management)
        # when deliveries went out, for the management API's unacked ages: (first delivery
        # tag of a loop turn, monotonic s), stamped once per turn with deliveries
        self._tag_times: list[tuple[int, float]] = []
        self._stamped_below = 1  # tags below this have a stamp
        self._stamping = False  # a stamp is scheduled for this loop turn
        # tag -> (queue, ack tag (a LiteRef in ack-lite mode, None once its queue is gone), ctag)
        self.unacked: dict[int, tuple[QueueFacade, int | LiteRef | None, str | None]] = {}
        self.consumers: dict[str, QueueFacade] = {}  # consumer_tag -> queue process
        # direct reply-to: (consumer tag, amq.rabbitmq.reply-to.<token>) of our reply consumer
        self.reply_consumer: tuple[str, str] | None = None
        self.confirm: ConfirmTracker | None = None  # set by confirm.select
        # a cluster leader's confirms waiting for the followers: (stream position, frames)
        self._gated: deque[tuple[int, list[bytes]]] = deque()
        self._gate_task: asyncio.Task[None] | None = None
        # (method, vhost topology version, permission generation) of the last basic.publish
        # whose method passed its checks (channel_basic.publish)
        self.publish_checked: tuple[Any, int, int] = (None, -1, -1)
        self.tx: TxState | None = None  # set by tx.select
        # the vhost's firehose tracer while tracing is on (RabbitMQ's trace_state; refreshed
        # by broker/trace.py when tracing is turned on or off), else None
        self.trace: Tracer | None = vhost.trace
        self._poke_pending = False  # a resume callback is registered with the writer
        # capacity came back (poke_queues): a multi-worker broker grants the channel-wide
        # limit's room to queues of other workers (broker/workers/global_qos.py)
        self.on_capacity: Callable[[], None] | None = None
        self.opened = False  # channel.open-ok sent
        self.last_queue: str | None = None  # last queue declared here ("" in queue.bind etc.)
        self.shutting_down = False  # the connection is closing: no more deliveries
        self._holding = False  # a method handler runs: notifications wait for its reply
        self._held: list[bytes] = []  # frames (basic.cancel) held back until the reply is out

    # -- mailbox ----------------------------------------------------------------------------
    def handle(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == CMD:
            cmd = msg[1]
            if self.state != OPEN:
                self._while_closing(cmd)
            else:
                self._dispatch(cmd)
            if cmd.method.__class__ is commands.Basic.Publish:
                grant = self.reader_credit.ack("reader")
                if grant:
                    self.conn.grant_credit(self, grant)
        elif kind == PUBLISHES:
            self._publish_run(msg[1])
        elif kind == CONFIRM:
            if self.confirm is not None:
                self.confirm.release(msg[1], msg[2])
        elif kind == REJECT:
            if self.confirm is not None:
                self.confirm.reject(msg[1], msg[2])
        elif kind == QUEUE_GONE:
            self._queue_gone(msg[1])
        elif kind == FAIL:
            if self.state == OPEN:
                self.close_with_error(msg[1])
        elif kind == SHUTDOWN:
            try:
                self.cleanup()
            finally:
                self.state = CLOSED
                self.conn.channel_closed(self)

    def after_batch(self) -> None:
        confirm = self.confirm
        if confirm is not None and confirm.has_output() and self.state == OPEN:
            n = self.number
            before = confirm.acked_total
            sink = replication_hook.sink
            frames: list[bytes] = []
            # no cluster: each frame straight to the writer; a cluster leader's wait for the
            # in-sync followers first
            send = self.writer.send if sink is None else frames.append
            for is_ack, tag, multiple in confirm.take():
                if is_ack:
                    send(encode_method(n, commands.Basic.Ack(tag, multiple)))
                else:
                    send(encode_method(n, commands.Basic.Nack(tag, multiple, False)))
            self.message_stats.confirm += confirm.acked_total - before
            if sink is not None:
                self._gated.append((sink.position, frames))
                if self._gate_task is None:
                    self._gate_task = self.conn.loop.create_task(self._release(sink))

    async def _release(self, sink: replication_hook.Sink) -> None:
        """Send held confirms, in order, once the followers in sync have every write made
        before them (docs/high-availability.md); a deposed leader sends none."""
        try:
            while self._gated:
                position, frames = self._gated[0]
                if not await sink.wait_replicated(position):
                    self._gated.clear()
                    return
                self._gated.popleft()
                if self.state == OPEN:
                    send = self.writer.send
                    for frame in frames:
                        send(frame)
        finally:
            self._gate_task = None

    def _dispatch(self, cmd: Command) -> None:
        """Run the method's handler. Notifications it causes on this channel (basic.cancel
        when queue.delete removes our own consumer) go out after its reply, as in RabbitMQ
        where the queue's cancel reaches the channel process after it has replied."""
        method = cmd.method
        handler = self._methods.get(method.__class__)
        self._holding = True
        try:
            if handler is None:
                raise errors.amqp_error(
                    errors.CommandInvalid,
                    "unimplemented method", method)
            handler(self, cmd)
        except errors.SoftError as exc:
            self.close_with_error(exc)
        except errors.HardError as exc:
            self.state = CLOSED  # nothing more runs on this channel; shutdown cleans up
            self.conn.connection_error(exc)
        finally:
            self._holding = False
            if self._held and not self._waits:
                self.flush_held()

    def flush_held(self) -> None:
        """Send the notifications held back while a method's reply was pending (the reply
        is out now: a handler returned, or the answer from another worker process came)."""
        held, self._held = self._held, []
        if self.state == OPEN:
            for frame in held:
                self.writer.send(frame)

    def _publish_run(self, run: list) -> None:
        """A run of basic.publish commands, handled as if each had been its own mailbox
        message: when credit flow suspends this channel part-way, the rest goes back to the
        front of the mailbox; the reader's credit is given back for those handled."""
        handled = 0
        total = len(run)
        while handled < total:
            if handled and (self._suspended or self._dead):
                self._mailbox.appendleft((PUBLISHES, run[handled:]))
                break
            cmd = run[handled]
            if self.state != OPEN:
                handled += 1
                self._while_closing(cmd)
                continue
            # the publishes that follow with the same method object go together
            method = cmd.method
            stop = handled + 1
            while stop < total and run[stop].method is method:
                stop += 1
            try:
                if stop - handled == 1:
                    self._publish(self, cmd)
                    handled += 1
                else:
                    handled += self._publish_alike(self, run, handled, stop)
            except errors.SoftError as exc:
                handled += 1
                self.close_with_error(exc)
            except errors.HardError as exc:
                handled += 1
                self.state = CLOSED
                self.conn.connection_error(exc)
        grant = self.reader_credit.ack("reader", handled)
        if grant:
            self.conn.grant_credit(self, grant)

    def _queue_gone(self, queue: QueueFacade) -> None:
        """An ack-lite queue was deleted: nack the confirms our unacked deliveries from it
        still carry (as the ack mode's queue nacks its pending ones); a later ack of those
        deliveries is accepted and does nothing."""
        refs: list[LiteRef] = []
        for tag, (q, ack_tag, ctag) in self.unacked.items():
            if q is queue and ack_tag.__class__ is LiteRef:
                refs.append(ack_tag)
                self.unacked[tag] = (q, None, ctag)
        if refs:
            _cast_lite(REJECT, refs)

    def crashed(self, exc: BaseException) -> None:
        """An unexpected exception in a handler: the connection closes with 541 (RabbitMQ
        closes the connection when a channel process dies of a non-AMQP error)."""
        self.state = CLOSED
        self.conn.crashed(exc)

    def _while_closing(self, cmd: Command) -> None:
        """After we sent channel.close only close/close-ok matter (AMQP 0-9-1 §1.5.2.5).
        A client's channel.close that crossed ours is answered with close-ok and we keep
        waiting for the close-ok to ours (RabbitMQ rabbit_reader: closing channels)."""
        if self.state != CLOSING:
            return
        method = cmd.method
        if isinstance(method, commands.Channel.CloseOk):
            self.state = CLOSED
            self.conn.channel_closed(self)
        elif isinstance(method, commands.Channel.Close):
            self.send_method(commands.Channel.CloseOk())

    # -- output helpers ---------------------------------------------------------------------
    def send_method(self, method: Any) -> None:
        self.writer.send(encode_method(self.number, method))

    # -- closing ----------------------------------------------------------------------------
    def close_with_error(self, exc: errors.AMQPError) -> None:
        """Soft error: send channel.close with the error and release everything."""
        code, text, class_id, method_id = errors.close_args(exc)
        log.info("closing channel %d: %s", self.number, text)
        self.send_method(commands.Channel.Close(code, text, class_id, method_id))
        self.state = CLOSING
        self.cleanup()

    def cleanup(self) -> None:
        """Requeue unacked deliveries and drop consumers (channel or connection closed)."""
        if self.reply_consumer is not None:  # replies to us are dropped from now on
            REPLY_REGISTRY.unregister(self.reply_consumer[1])
            self.reply_consumer = None
        if self.state == CLOSED and not self.unacked and not self.consumers:
            return
        by_queue: dict[QueueFacade, list[int]] = {}
        lite: list[LiteRef] = []  # ack-lite deliveries cannot be requeued: their publishers
        # get basic.nack (docs/architecture.md §6)
        entries = list(self.unacked.values())
        if self.tx is not None:
            for _kind, settled in self.tx.settles:
                entries.extend(settled.values())
            self.tx = None
        for queue, ack_tag, _ctag in entries:
            if ack_tag.__class__ is LiteRef:
                lite.append(ack_tag)
                by_queue.setdefault(queue, [])
            elif ack_tag is not None:  # None: a delivery of a deleted ack-lite queue
                # an int here: mypy does not narrow on `x.__class__ is C` (the LiteRef test)
                by_queue.setdefault(queue, []).append(ack_tag)  # type: ignore[arg-type]
        if lite:
            _cast_lite(REJECT, lite)
        for queue in self.consumers.values():
            by_queue.setdefault(queue, [])
        self.unacked.clear()
        self.consumers.clear()
        for queue, tags in by_queue.items():
            if not queue.deleted:
                queue.call(queue.channel_down, self, sorted(tags))
        self.confirm = None

    def shutdown(self) -> None:
        """The connection is closing or gone: handle what is already in the mailbox (publishes
        the client sent before closing are routed), then requeue unacked deliveries, drop
        consumers and report `channel_closed` (RabbitMQ rabbit_channel:shutdown)."""
        if not self.shutting_down:
            self.shutting_down = True
            self.cast((SHUTDOWN,))
            # what is left is bounded by the reader's credit: drain it even if a queue is slow
            # to grant credit back, so the close can never wait on another process
            self.resume()

    def flow_state(self) -> str:
        """RabbitMQ's channel state for operations tooling: "flow" while out of credit
        towards a queue and for 5 s after (credit_flow:state/0), "running", or "closing"."""
        if self.state != OPEN or self.shutting_down:
            return "closing"
        return flow_state(self.credit.blocked, self.credit.blocked_at, time.monotonic())

    # -- façade for the reader --------------------------------------------------------------
    def spend_reader_credit(self, n: int = 1) -> bool:
        """The reader sent `n` publishes; True if the reader is now blocked on this channel."""
        return self.reader_credit.send("reader", n)

    # -- façade for queue processes ---------------------------------------------------------
    def can_deliver(self, no_ack: bool) -> bool:
        """May a queue send this channel one more delivery now? (limiter, channel state,
        socket backpressure)."""
        if self.state != OPEN or self.shutting_down:
            return False
        if self.writer.paused:
            if not self._poke_pending:
                self._poke_pending = True
                self.writer.add_resume_callback(self.poke_queues)
            return False
        return no_ack or self.limiter.can_send()

    def deliver(self, queue: QueueFacade, consumer_tag: str, message: Message,
                redelivered: bool, ack_tag: int | LiteRef | None) -> None:
        """Send basic.deliver for `message` to consumer `consumer_tag` (AMQP 0-9-1
        §1.8.3.9)."""
        tag = self.next_delivery_tag
        self.next_delivery_tag = tag + 1
        stats = self.message_stats
        if not self._stamping:
            self.stamp_soon()
        if ack_tag is not None:
            self.unacked[tag] = (queue, ack_tag, consumer_tag)
            self.limiter.unacked += 1
            stats.deliver += 1
        else:
            stats.deliver_no_ack += 1
        if redelivered:
            stats.redeliver += 1
        trace = self.trace
        if trace is not None:
            trace.tap_out(self, queue.name, message, redelivered)
        self.writer.send(encode_deliver(self.number, consumer_tag, tag, redelivered,
                                        message.exchange, message.routing_key,
                                        message.wire_properties(),
                                        message.body, self.frame_max))

    def stamp_soon(self) -> None:
        """Record, at the end of this loop turn, when the deliveries made in it went out
        (one call per turn, not per message)."""
        self._stamping = True
        self._loop.call_soon(self._stamp)

    def _stamp(self) -> None:
        self._stamping = False
        first = self._stamped_below
        if first < self.next_delivery_tag:
            times = self._tag_times
            if len(times) > 64 and self.unacked:  # forget stamps below the oldest unacked
                oldest = next(iter(self.unacked))
                keep = max(0, bisect.bisect_right(times, (oldest, float("inf"))) - 1)
                del times[:keep]
            times.append((first, time.monotonic()))
            self._stamped_below = self.next_delivery_tag

    def delivered_at(self, tag: int) -> float:
        """Monotonic time (s) delivery `tag` went out, to within one loop turn."""
        i = bisect.bisect_right(self._tag_times, (tag, float("inf"))) - 1
        return self._tag_times[i][1] if i >= 0 else time.monotonic()

    def deliver_reply(self, message: Message) -> bool:
        """Direct reply-to: send `message` (published to "" with our reply-to name) to our
        reply consumer as basic.deliver, no ack expected. False when we can no longer take
        it (closing, or the reply consumer was cancelled): the reply is dropped."""
        if self.reply_consumer is None or self.state != OPEN or self.shutting_down:
            return False
        tag = self.next_delivery_tag
        self.next_delivery_tag = tag + 1
        self.writer.send(encode_deliver(self.number, self.reply_consumer[0], tag, False,
                                        message.exchange, message.routing_key,
                                        message.wire_properties(),
                                        message.body, self.frame_max))
        return True

    def grant_credit(self, queue: QueueFacade, n: int) -> None:
        """A queue handled `n` more of our publishes."""
        if self.credit.grant(queue, n):
            self.resume()

    def hold_publishes(self, queue: QueueFacade) -> bool:
        """A busy queue serves its consumers first (broker/consumer_bias.py): stop handling
        our mailbox until `release_publishes(queue)`. Refused (False) for a channel that
        consumes, whose acks must go on, and for one that is closing."""
        if self.consumers or self.shutting_down or self.state != OPEN:
            return False
        if self.credit.block(queue):
            self.suspend()
        return True

    def release_publishes(self, queue: QueueFacade) -> None:
        if self.credit.unblock(queue):
            self.resume()

    def spend_queue_credit(self, queue: QueueFacade) -> None:
        if self.credit.send(queue) and not self.shutting_down:
            self.suspend()

    def consumer_cancelled(self, queue: QueueFacade, tag: str) -> None:
        """The queue went away under a consumer: send basic.cancel if the client supports
        it (rabbitmq.com/consumer-cancel.html)."""
        if self.consumers.pop(tag, None) is None or self.state != OPEN:
            return
        self.credit.peer_down(queue)
        if self.conn.capabilities.get("consumer_cancel_notify") and not self.shutting_down:
            frame = encode_method(self.number, commands.Basic.Cancel(consumer_tag=tag,
                                                                     nowait=True))
            if self._holding or self._waits:  # after the reply of the method under way
                self._held.append(frame)
            else:
                self.writer.send(frame)

    def poke_queues(self) -> None:
        """Ask every queue we consume from to try delivering again (capacity came back)."""
        self._poke_pending = False
        if self.on_capacity is not None:
            self.on_capacity()
        for queue in set(self.consumers.values()):
            queue.cast((RUN,))

    # -- settlement (used by basic.ack/nack/reject/recover and tx) ---------------------------
    def collect(self, delivery_tag: int, multiple: bool, method: Any) -> dict[int, tuple]:
        """Remove and return the unacked entries a settle method names, as RabbitMQ's
        collect_acks: 406 "unknown delivery tag N" when the tag is not outstanding
        (multiple with tag 0 means all)."""
        unacked = self.unacked
        if multiple:
            if delivery_tag == 0:
                out = dict(unacked)
                unacked.clear()
                return out
            if delivery_tag not in unacked:
                raise errors.amqp_error(
                    errors.PreconditionFailed, f"unknown delivery tag {delivery_tag}", method)
            out = {}
            for tag in list(unacked):
                if tag > delivery_tag:
                    break
                out[tag] = unacked.pop(tag)
            return out
        entry = unacked.pop(delivery_tag, None)
        if entry is None:
            raise errors.amqp_error(
                errors.PreconditionFailed, f"unknown delivery tag {delivery_tag}", method)
        return {delivery_tag: entry}

    def settle(self, kind: int, entries: dict[int, tuple]) -> None:
        """Send ACK/REQUEUE/DISCARD for `entries` to their queues, free prefetch capacity."""
        if not entries:
            return
        by_queue: dict[QueueFacade, list[tuple[int | None, str | None]]] = {}
        lite: list[LiteRef] | None = None
        counted = 0
        for queue, ack_tag, ctag in entries.values():
            if ack_tag.__class__ is LiteRef:  # ack-lite: the confirm goes straight to the
                if lite is None:              # publisher; the queue only frees prefetch
                    lite = []
                lite.append(ack_tag)
                ack_tag = None
            lst = by_queue.get(queue)
            if lst is None:
                lst = by_queue[queue] = []
            lst.append((ack_tag, ctag))
            counted += 1
        if lite is not None:
            if kind == REQUEUE:
                self.unacked.update(entries)  # kept: they are nacked when the channel closes
                self.unacked = dict(sorted(self.unacked.items()))
                raise errors.amqp_error(
                    errors.NotImplemented_,
                    "requeue of a message in an 'ack-lite' confirm mode queue", None)
            _cast_lite(CONFIRM if kind == ACK else REJECT, lite)
        limiter = self.limiter
        was_blocked = limiter.full()
        limiter.unacked -= counted
        if kind == ACK:
            self.message_stats.ack += counted
        for queue, lst in by_queue.items():
            if kind == REQUEUE:
                lst.sort()
            queue.cast((kind, self, lst))
        if was_blocked:
            self.poke_queues()


def _cast_lite(kind: str, refs: list[LiteRef]) -> None:
    """Release (CONFIRM) or nack (REJECT) ack-lite confirms at their publishers' channels,
    one cast per (channel, queue)."""
    groups: dict[tuple[Any, Any], list[int]] = {}
    for ref in refs:
        groups.setdefault((ref.channel, ref.queue), []).append(ref.seq)
    for (channel, queue), seqs in groups.items():
        channel.cast((kind, queue, seqs))
