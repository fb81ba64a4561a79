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
  REMOVE_CONSUMER, TOUCH;
- to a channel's worker: ("ch", channel ref, op, vhost, queue, payload), op one of DELIVER,
  CONFIRM, REJECT, CREDIT, CANCELLED, QUEUE_GONE.
"""

from __future__ import annotations

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
# channel-side operations
DELIVER, CONFIRM, REJECT, CREDIT, CANCELLED, QUEUE_GONE = (
    "deliver", "confirm", "reject", "credit", "cancelled", "queue_gone")

FORWARDED = frozenset({PUBLISH, PUBLISHES, ACK, REQUEUE, DISCARD, RUN})


class WorkerPort(Protocol):
    """The worker runtime as the proxies see it."""

    @property
    def index(self) -> int: ...  # this worker

    def send(self, worker: int, record: tuple) -> None: ...

    def channel_ref(self, channel: ChannelFacade | None) -> ChannelRef | None: ...


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
        self.message_stats = MessageStats()  # the owner's counters, as last reported
        self.consumer_total = 0  # the owner's consumer count, as last reported
        self._lengths = {"messages": 0, "messages_ready": 0, "messages_unacknowledged": 0}

    def __repr__(self) -> str:
        return f"RemoteQueue({self.vhost_name!r}, {self.name!r}, worker={self.worker})"

    # -- QueueFacade --------------------------------------------------------------------------
    def cast(self, msg: tuple) -> None:
        kind = msg[0]
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
        """The queue's deletion reached this worker: the owner deletes the process itself."""
        self.deleted = True
        return 0

    def apply_policy(self, policy: Any, operator: Any = None) -> None:
        self.policy = policy
        self.operator_policy = operator

    def consumer_count(self) -> int:
        return self.consumer_total

    def lengths(self) -> dict[str, int]:
        return dict(self._lengths)

    def report(self, lengths: dict[str, int], consumers: int, stats: MessageStats) -> None:
        """The owner's periodic report (management figures)."""
        self._lengths = lengths
        self.consumer_total = consumers
        self.message_stats = stats


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

    def __repr__(self) -> str:
        return f"RemoteChannel{tuple(self.ref)}"

    def _send(self, op: str, queue: QueueFacade, payload: Any) -> None:
        vhost = getattr(queue, "vhost", None)
        self.port.send(self.ref.worker, ("ch", self.ref, op,
                                         vhost.name if vhost is not None else "",
                                         queue.name, payload))

    def cast(self, msg: tuple) -> None:
        kind = msg[0]
        op = {"confirm": CONFIRM, "reject": REJECT, "queue_gone": QUEUE_GONE}.get(kind)
        if op is None:
            raise ValueError(f"a remote channel takes no {kind!r}")
        self._send(op, msg[1], msg[2] if len(msg) > 2 else None)

    def can_deliver(self, no_ack: bool) -> bool:
        # per-consumer prefetch is counted by the queue; the channel's own limits (a paused
        # socket, global qos) are the channel's worker's (docs/multicore.md: a paused link
        # stops the owner's writes)
        return self.open

    def deliver(self, queue: QueueFacade, consumer_tag: str, message: Message,
                redelivered: bool, ack_tag: int | LiteRef | None) -> None:
        self._send(DELIVER, queue, (consumer_tag, message, redelivered, ack_tag))

    def grant_credit(self, queue: QueueFacade, n: int) -> None:
        self._send(CREDIT, queue, n)

    def consumer_cancelled(self, queue: QueueFacade, tag: str) -> None:
        self._send(CANCELLED, queue, tag)
