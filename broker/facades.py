"""What one process looks like to another: the contracts between the broker's processes,
as `typing.Protocol`s, and the plain data types that cross them (STYLE §10,
docs/architecture.md "Contracts").

Owns: the contracts only. A queue process holds publishing and consuming channels as
`ChannelFacade`s (confirms, credit, cancel notifications, deliveries) and its vhost as a
`QueueVHost`; a channel holds the queues it publishes to and consumes from as `QueueFacade`s
and gets a basic.publish from the reader as a `ContentCommand`; an exclusive queue knows its
owner as a `ConnectionFacade`; an ack-lite consumer's channel holds a `LiteRef`.
The concrete classes (`ChannelProcess`, `QueueProcess`, `StreamQueue`, `VHost`, `Reader`)
satisfy them structurally and are never named here: this module sits in the contracts layer,
below everything that implements it, and imports only the ground layer (the message and its
content header). A protocol refers to other protocols and to plain data types.
Must never: hold code; import a module above the ground layer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from broker.message import Message
    from broker.protocol.framing import ContentHeader


class ConnectionFacade(Hashable, Protocol):
    """A client connection as queues and the management API see it through a channel or
    as an exclusive queue's owner: compared by identity, named by its addresses
    (broker/connection_names.py) and its user."""

    @property
    def peer(self) -> tuple[Any, ...] | None: ...  # (host, port) of the client, None before connect

    @property
    def transport(self) -> asyncio.BaseTransport | None: ...  # its socket's transport

    @property
    def username(self) -> str: ...  # authenticated user ("" before connection.open)


class QueueFacade(Hashable, Protocol):
    """A queue process (classic or stream) as channels and the vhost's router see it
    (STYLE §5's QueueRef): its name, its mailbox (`cast` PUBLISH/ACK/REQUEUE/DISCARD/RUN,
    `call` one of its façade methods), and the calls a channel makes on its consumers.
    Hashable: channels key credit and unacked deliveries by it."""

    @property
    def name(self) -> str: ...

    @property
    def deleted(self) -> bool: ...  # terminated by delete: casts to it are dropped

    def cast(self, msg: Any) -> None:
        """Put `msg` in the queue's mailbox (broker/queue_process.py's message kinds)."""

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(*args)` once the mailbox has drained (a synchronous call)."""

    def remove_consumer(self, channel: ChannelFacade, tag: str) -> bool: ...

    def channel_down(self, channel: ChannelFacade, unacked: list[int]) -> None: ...


class LiteRef(NamedTuple):
    """What an `ack-lite` consumer's channel holds instead of an ack tag: the publisher's
    channel, its msg_seq_no and the queue (the tracker's key), so the consumer's ack releases
    the confirm straight to the publisher (a cast), bypassing the queue (the paper §3.2)."""

    channel: ChannelFacade
    seq: int
    queue: Hashable


class ChannelFacade(Hashable, Protocol):
    """A channel as queue processes and confirm strategies see it (broker/channel.py's
    "façade for queue processes"). Hashable: queues key per-channel credit and owed
    confirms by it."""

    @property
    def conn(self) -> ConnectionFacade: ...  # its connection (consumer listings name it)

    @property
    def number(self) -> int: ...  # channel number on the wire

    def cast(self, msg: Any) -> None:
        """Put `msg` in the channel's mailbox: ("confirm" | "reject", queue, [msg_seq_no]),
        or (QUEUE_GONE, queue) from an ack-lite queue being deleted."""

    def can_deliver(self, no_ack: bool) -> bool:
        """May a queue send one more delivery now (limiter, state, socket backpressure)?"""

    def deliver(self, queue: QueueFacade, consumer_tag: str, message: Message,
                redelivered: bool, ack_tag: int | LiteRef | None) -> None:
        """basic.deliver `message` to consumer `consumer_tag`; `ack_tag` None for a no-ack
        consumer."""

    def grant_credit(self, queue: QueueFacade, n: int) -> None:
        """`queue` handled `n` more of this channel's publishes (credit flow)."""

    def hold_publishes(self, queue: QueueFacade) -> bool:
        """A busy `queue` serves its consumers first (broker/consumer_bias.py): stop sending
        it publishes until `release_publishes`; False if this sender cannot be held."""

    def release_publishes(self, queue: QueueFacade) -> None:
        """End what `hold_publishes(queue)` started."""

    def consumer_cancelled(self, queue: QueueFacade, tag: str) -> None:
        """`queue` went away under consumer `tag` (basic.cancel if the client asked)."""


class QueueVHost(Protocol):
    """The vhost as its queue processes see it: its name (for log lines and errors),
    routing dead-lettered copies, and deleting a queue (auto-delete, x-expires)."""

    @property
    def name(self) -> str: ...

    def route_keys(self, exchange_name: str, keys: list[str], headers: dict[str, Any] | None,
                   message: Message | None = None) -> Sequence[QueueFacade]: ...

    def delete_queue_now(self, queue: QueueFacade) -> int: ...


class ContentCommand(Protocol):
    """A content method (basic.publish) as the reader hands it to its channel: the
    assembler's (or the decoder's) `Command`, whose header is always set for a content
    method (`Command.header` is None only for the others)."""

    @property
    def method(self) -> Any: ...  # the pamqp method (commands.Basic.Publish)

    @property
    def header(self) -> ContentHeader: ...

    @property
    def body(self) -> bytes | None: ...
