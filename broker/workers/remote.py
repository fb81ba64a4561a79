"""Proxies for a queue or a channel that lives in another worker process (issue 47,
docs/multicore.md "Links between workers").

Owns: `RemoteQueue`, what a worker holds in its vhost tables for a queue another worker
owns: channels and the router cast to it exactly as to a local queue process (PUBLISH,
PUBLISHES, ACK, REQUEUE, DISCARD, RUN; `channel_down`, `remove_consumer`), and it forwards
each cast to the owner as a record; `RemoteChannel`, what the owner's queue process holds
for a consuming or publishing channel of another worker: deliveries, confirms, credit and
cancel notifications go back as records. Both keep the contracts of broker/facades.py, so
the channel and queue processes do not know which side of a process boundary they are on.
Talks to: `WorkerPort` (the worker runtime's mesh). Must never: hold a message longer than
it takes to forward it, or answer a request itself.

Record kinds (the first item; the runtime dispatches them):
- to a queue's owner: ("q", vhost, queue, kind, channel ref | None, payload), where kind is
  the queue mailbox's PUBLISH / PUBLISHES / ACK / REQUEUE / DISCARD / RUN, or CHANNEL_DOWN,
  REMOVE_CONSUMER, TOUCH, FLOW (payload: the channel takes deliveries again, or not);
- to a channel's worker: ("ch", channel ref, op, vhost, queue, payload), op one of DELIVER,
  CONFIRM, REJECT, CREDIT, CANCELLED, QUEUE_GONE, HOLD, RELEASE (a busy queue's consumer
  bias holding the channel's publishes, and letting them go); DELIVER's payload is a list of
  (consumer tag, message, redelivered, ack tag): a queue's deliveries to the channel in one
  loop turn travel as one record (Mesh.send_grouped).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from broker.queue_delivery import RUN
from broker.queue_process import ACK, DISCARD, PUBLISH, PUBLISHES, REQUEUE
from broker.stats import MessageStats
from broker.workers.refs import ChannelRef

if TYPE_CHECKING:
    from broker.facades import ChannelFacade, LiteRef, QueueFacade
    from broker.message import Message

# queue-side operations beyond the mailbox kinds
CHANNEL_DOWN = "channel_down"
REMOVE_CONSUMER = "remove_consumer"
TOUCH = "touch"
FLOW = "flow"  # the channel's socket stopped (False) or started (True) taking deliveries
# channel-side operations
DELIVER, CONFIRM, REJECT, CREDIT, CANCELLED, QUEUE_GONE, HOLD, RELEASE = (
    "deliver", "confirm", "reject", "credit", "cancelled", "queue_gone", "hold", "release")

FORWARDED = frozenset({PUBLISH, PUBLISHES, ACK, REQUEUE, DISCARD, RUN})


class WorkerPort(Protocol):
    """The worker runtime as the proxies see it."""

    @property
    def index(self) -> int: ...  # this worker

    def send(self, worker: int, record: tuple) -> None: ...

    def send_grouped(self, worker: int, head: tuple, item: Any) -> None: ...  # Mesh's

    def channel_ref(self, channel: ChannelFacade | None) -> ChannelRef | None: ...

    def queue_deleted(self, queue: RemoteQueue) -> None: ...  # tell our consumers of it

    # a cluster leader's: run a callable once this worker's writes so far are replicated
    # (broker/workers/replication.py WorkerSink.after); None without a cluster
    @property
    def replicated_gate(self) -> Callable[[Callable[[], None]], None] | None: ...


class RemoteQueue:
    """Queue `name` of vhost `vhost_name`, owned by worker `worker`. The declare-time
    attributes are those the vhost's checks read (equivalence, exclusivity, durability);
    `lengths()` and `consumer_total` are the owner's last report (management)."""

    def __init__(self, port: WorkerPort, worker: int, vhost_name: str, name: str, *,
                 durable: bool, auto_delete: bool, exclusive_owner: Any, arguments: dict,
                 queue_type: str, policy: Any = None) -> None:
        self.port = port  # how records leave
        self.worker = worker  # the owner of the queue process
        self.vhost_name = vhost_name
        self.name = name
        self.durable = durable
        self.auto_delete = auto_delete
        self.exclusive_owner = exclusive_owner  # a Reader of ours or a ConnRef
        self.arguments = arguments
        self.queue_type = queue_type
        self.policy = policy
        self.operator_policy: Any = None
        self.deleted = False  # set when the queue's deletion reached this worker
        self.down = False  # its worker died and is not back yet
        # the owner's figures, as last reported (management): counters, backing queue,
        # consumers, the head message's age
        self.message_stats = MessageStats()
        self.bq = ReportedBackingQueue({
            "lengths": {"messages": 0, "messages_ready": 0, "messages_unacknowledged": 0},
            "bq_stats": {}, "ready_bytes": 0})
        self.consumers = ReportedConsumers()
        self.head_age: float | None = None
        self.wanted = False  # a federated queue: it wants messages, as its worker last said
        self._federation_watch: Any = None

    def __repr__(self) -> str:
        return f"RemoteQueue({self.vhost_name!r}, {self.name!r}, worker={self.worker})"

    # -- federation (worker 0's supervisor runs every link) ------------------------------------
    @property
    def federation_watch(self) -> Any:
        return self._federation_watch

    @federation_watch.setter
    def federation_watch(self, watch: Any) -> None:
        """A federated queue's link watches it: its worker is asked to tell whether it wants
        messages (QueueProcess.wants_messages) each time that changes ("wants" records,
        `wants_changed`), or to stop telling."""
        self._federation_watch = watch
        self.port.send(self.worker, ("fedwatch", self.vhost_name, self.name, watch is not None))

    def wants_messages(self) -> bool:
        return self.wanted

    def wants_changed(self, wanted: bool) -> None:
        self.wanted = wanted
        if self._federation_watch is not None:
            self._federation_watch(self)

    # -- QueueFacade --------------------------------------------------------------------------
    def cast(self, msg: tuple) -> None:
        kind = msg[0]
        if self.down:
            self._refuse(msg)
            return
        if kind == RUN:
            self.port.send(self.worker, ("q", self.vhost_name, self.name, RUN, None, None))
            return
        channel = msg[1]
        ref = self.port.channel_ref(channel)
        if kind == PUBLISH:
            payload: Any = ([msg[2]], None if msg[3] is None else [msg[3]])
            kind = PUBLISHES
        elif kind == PUBLISHES:
            payload = (msg[2], msg[3])
        else:  # ACK / REQUEUE / DISCARD: [(ack_tag, consumer_tag)]
            payload = msg[2]
        self.port.send(self.worker, ("q", self.vhost_name, self.name, kind, ref, payload))

    def _refuse(self, msg: tuple) -> None:
        """The owner is down (restarting): a publish is nacked at once (RabbitMQ nacks what a
        crashed queue process did not confirm) and its credit given back, so the publisher
        neither waits nor blocks; settlements of its old deliveries are dropped (the
        restarted queue has them back, ready)."""
        kind, channel = msg[0], msg[1] if len(msg) > 1 else None
        if kind not in (PUBLISH, PUBLISHES) or channel is None:
            return
        seqs = [msg[3]] if kind == PUBLISH else msg[3]
        n = 1 if kind == PUBLISH else len(msg[2])
        if seqs and seqs[0] is not None:
            channel.cast(("reject", self, list(seqs)))
        channel.grant_credit(self, n)

    def call(self, fn: Any, *args: Any) -> Any:
        """Only the proxy's own forwarding methods may be called (channel_down,
        remove_consumer): what needs an answer is a request (broker/workers/handlers.py)."""
        return fn(*args)

    def channel_down(self, channel: ChannelFacade, unacked: list[int]) -> None:
        self.port.send(self.worker, ("q", self.vhost_name, self.name, CHANNEL_DOWN,
                                     self.port.channel_ref(channel), unacked))

    def remove_consumer(self, channel: ChannelFacade, tag: str) -> bool:
        self.port.send(self.worker, ("q", self.vhost_name, self.name, REMOVE_CONSUMER,
                                     self.port.channel_ref(channel), tag))
        return True

    def touch(self) -> None:
        self.port.send(self.worker, ("q", self.vhost_name, self.name, TOUCH, None, None))

    def terminate(self, delete: bool) -> int:
        """The queue's deletion reached this worker: the owner deletes the process itself;
        this worker's consumers of it are told now (basic.cancel to those that asked),
        before anything that follows the deletion here, such as the close of their vhost's
        connections (the owner's own cancel, coming later, finds them gone)."""
        self.deleted = True
        if delete:
            self.port.queue_deleted(self)
        return 0

    def apply_policy(self, policy: Any, operator: Any = None) -> None:
        self.policy = policy
        self.operator_policy = operator

    def consumer_count(self) -> int:
        return len(self.consumers)

    def lengths(self) -> dict[str, int]:
        return dict(self.bq.lengths)

    def report(self, figures: dict[str, Any]) -> None:
        """The owner's periodic report (`queue_figures`): what the management API shows of
        the queue (its lengths, backing queue figures, consumers and counters)."""
        self.bq = ReportedBackingQueue(figures)
        self.consumers = ReportedConsumers(figures["consumers"], figures["single_active"])
        self.message_stats = MessageStats.from_dict(figures["message_stats"])
        self.head_age = figures["head_age"]


def queue_figures(queue: Any, head_age: float | None) -> dict[str, Any]:
    """What a queue's owner reports of it to the worker that serves the management API
    (RemoteQueue.report): plain data, pickled across."""
    bq = queue.bq
    lengths_of = getattr(queue, "lengths", None)
    if lengths_of is not None:
        lengths = lengths_of()
    else:
        ready = bq.len()
        lengths = {"messages": bq.depth(), "messages_ready": ready,
                   "messages_unacknowledged": bq.depth() - ready}
    consumers = queue.consumers
    active = consumers.active() if consumers.single_active else None
    return {
        "lengths": lengths, "bq_stats": bq.stats(), "ready_bytes": bq.ready_bytes(),
        "single_active": consumers.single_active,
        "consumers": [(c.tag, c.exclusive, c.no_ack, c.prefetch, c.arguments,
                       c is active, c.channel.number, getattr(c.channel.conn, "peer", None),
                       getattr(c.channel.conn, "username", "")) for c in consumers],
        "message_stats": queue.message_stats.as_dict(),
        "head_age": head_age,
    }


class ReportedBackingQueue:
    """A remote queue's backing-queue figures, as last reported (read-only)."""

    def __init__(self, figures: dict[str, Any]) -> None:
        self.lengths: dict[str, int] = figures["lengths"]
        self._stats: dict[str, int] = figures["bq_stats"]
        self._ready_bytes: int = figures["ready_bytes"]

    def stats(self) -> dict[str, int]:
        return dict(self._stats)

    def ready_bytes(self) -> int:
        return self._ready_bytes

    def len(self) -> int:
        return self.lengths["messages_ready"]

    def depth(self) -> int:
        return self.lengths["messages"]

    def peek_props(self) -> None:
        return None  # the head's age comes with the report (RemoteQueue.head_age)


class _ReportedConn:
    def __init__(self, peer: Any, username: str) -> None:
        self.peer = peer
        self.transport = None
        self.username = username


class _ReportedChannel:
    def __init__(self, number: int, conn: _ReportedConn) -> None:
        self.number = number
        self.conn = conn


class ReportedConsumer:
    """A consumer of a remote queue, as last reported."""

    def __init__(self, row: tuple) -> None:
        (self.tag, self.exclusive, self.no_ack, self.prefetch, self.arguments, self.active,
         number, peer, username) = row
        self.channel = _ReportedChannel(number, _ReportedConn(peer, username))


class ReportedConsumers:
    """A remote queue's consumers, as last reported: what ConsumerSet offers readers."""

    def __init__(self, rows: list[tuple] = (), single_active: bool = False) -> None:  # type: ignore[assignment]
        self._items = [ReportedConsumer(row) for row in rows]
        self.single_active = single_active

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Any:
        return iter(self._items)

    def active(self) -> ReportedConsumer | None:
        return next((c for c in self._items if c.active), None)


class RemoteConn:
    """The connection of a RemoteChannel, as the owner's queue sees it (consumer listings,
    exclusive checks compare by identity through ConnRef instead)."""

    def __init__(self, ref: ChannelRef, username: str = "") -> None:
        self.peer = None
        self.transport = None
        self.username = username
        self.worker = ref.worker


class RemoteChannel:
    """Channel `ref` of another worker, as this worker's queue processes see it. Hashable by
    identity: the runtime keeps one per ref while the channel lives."""

    def __init__(self, port: WorkerPort, ref: ChannelRef) -> None:
        self.port = port
        self.ref = ref
        self.number = ref.number
        self.conn = RemoteConn(ref)
        self.open = True  # False once the channel's worker said it closed
        # its socket is not taking what was written (its worker said so, FLOW): deliveries
        # wait in the queue, as a local channel's paused writer makes them
        self.paused = False
        # queue -> ack tags delivered to this channel and not yet settled: what the queue
        # takes back when the channel's worker dies (RabbitMQ's queue requeues a dead
        # channel's unacked messages)
        self.outstanding: dict[Any, set[Any]] = {}
        self.queues: set[Any] = set()  # the queues it published to or consumed from
        self._deliver_heads: dict[Any, tuple] = {}  # queue -> its DELIVER records' head
        # the channel's channel-wide limit (basic.qos global): None when it has none, else
        # the ack-required deliveries its worker still allows (broker/workers/global_qos.py)
        self.global_credit: int | None = None
        self._asked = False  # we asked its worker for credit and wait for it

    def __repr__(self) -> str:
        return f"RemoteChannel{tuple(self.ref)}"

    def _head(self, op: str, queue: QueueFacade) -> tuple:
        """("ch", channel ref, op, vhost, queue): a record to the channel's worker, less
        its payload."""
        vhost = getattr(queue, "vhost", None)
        return ("ch", self.ref, op, vhost.name if vhost is not None else "", queue.name)

    def _send(self, op: str, queue: QueueFacade, payload: Any) -> None:
        self.port.send(self.ref.worker, (*self._head(op, queue), payload))

    def cast(self, msg: tuple) -> None:
        kind = msg[0]
        op = {"confirm": CONFIRM, "reject": REJECT, "queue_gone": QUEUE_GONE}.get(kind)
        if op is None:
            raise ValueError(f"a remote channel takes no {kind!r}")
        gate = self.port.replicated_gate
        if gate is None:
            self._send(op, msg[1], msg[2] if len(msg) > 2 else None)
        else:  # a cluster leader: what our queue wrote is on the followers first
            gate(lambda: self._send(op, msg[1], msg[2] if len(msg) > 2 else None))

    def can_deliver(self, no_ack: bool) -> bool:
        # per-consumer prefetch is counted by the queue; a paused socket is told (FLOW);
        # a channel-wide limit by the credit the channel's worker grants (GlobalQos)
        if not self.open or self.paused:
            return False
        credit = self.global_credit
        if no_ack or credit is None or credit > 0:
            return True
        if not self._asked:
            self._asked = True
            self.port.send(self.ref.worker, ("gq_want", self.ref))
        return False

    def add_global_credit(self, n: int) -> None:
        """The channel's worker grants `n` more ack-required deliveries."""
        self._asked = False
        if self.global_credit is not None:
            self.global_credit += n
            self._run_queues()

    def set_global_limited(self, limited: bool) -> None:
        """basic.qos on the channel: a channel-wide limit applies (credit starts at 0 and
        is asked for) or not (deliveries are not counted here)."""
        self._asked = False
        self.global_credit = 0 if limited else None
        if not limited:
            self._run_queues()

    def _run_queues(self) -> None:
        for queue in list(self.queues):
            queue.cast((RUN,))

    def deliver(self, queue: QueueFacade, consumer_tag: str, message: Message,
                redelivered: bool, ack_tag: int | LiteRef | None) -> None:
        if ack_tag is not None:
            self.outstanding.setdefault(queue, set()).add(ack_tag)
            if self.global_credit:
                self.global_credit -= 1
        head = self._deliver_heads.get(queue)  # per delivery: built once per queue
        if head is None:
            head = self._deliver_heads[queue] = self._head(DELIVER, queue)
        self.port.send_grouped(self.ref.worker, head,
                               (consumer_tag, message, redelivered, ack_tag))

    def settled(self, queue: Any, ack_tags: Any) -> None:
        """The channel acked, requeued or discarded these (or closed: all)."""
        held = self.outstanding.get(queue)
        if held is not None:
            held.difference_update(ack_tags)

    def grant_credit(self, queue: QueueFacade, n: int) -> None:
        self._send(CREDIT, queue, n)

    def hold_publishes(self, queue: QueueFacade) -> bool:
        """The queue's consumer bias (broker/consumer_bias.py) holds the channel: its worker
        does as the local `ChannelProcess.hold_publishes` (which may refuse: then the
        release that follows changes nothing)."""
        self._send(HOLD, queue, None)
        return True

    def release_publishes(self, queue: QueueFacade) -> None:
        self._send(RELEASE, queue, None)

    def consumer_cancelled(self, queue: QueueFacade, tag: str) -> None:
        self._send(CANCELLED, queue, tag)
