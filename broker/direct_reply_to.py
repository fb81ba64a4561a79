"""Direct reply-to (rabbitmq.com/direct-reply-to.html): RPC replies straight to the
requester's channel, no queue.

Owns: the registry of channels that consume from the pseudo-queue `amq.rabbitmq.reply-to`
(token -> channel) and the name rules. A requester consumes (no-ack) from
`amq.rabbitmq.reply-to` and publishes requests with `reply_to = amq.rabbitmq.reply-to`; the
channel rewrites that to `amq.rabbitmq.reply-to.<token>`; a reply published to the default
exchange with that routing key is delivered to the requester's reply consumer, or dropped if
that channel is gone. The channel handlers (broker/channel_basic.py) call this module; it
never touches sockets.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from broker.message import Message


class ReplyChannel(Protocol):
    """A channel with a direct reply-to consumer, as the publishers' channels reach it
    (broker/channel.py's ChannelProcess satisfies it)."""

    def deliver_reply(self, message: Message) -> bool: ...


PSEUDO_QUEUE = "amq.rabbitmq.reply-to"
PREFIX = PSEUDO_QUEUE + "."


class ReplyRegistry:
    """token -> channel for the channels that have a reply consumer (one per broker
    process). In a worker process of a multi-worker broker, `worker` is set: tokens start
    with "<worker>-", and `elsewhere(worker, routing_key)` gives the ReplyChannel that
    carries a reply to the worker whose token it is (broker/workers/runtime.py)."""

    def __init__(self) -> None:
        self._channels: dict[str, ReplyChannel] = {}
        self.worker: int | None = None  # this process's worker index, when it is one
        self.elsewhere: Callable[[int, str], ReplyChannel] | None = None
        # told of each of our tokens that goes (the other workers keep a list of them, so a
        # reply to a gone requester there is returned or 404s as here)
        self.on_gone: Callable[[str], None] | None = None
        self._gone: dict[str, None] = {}  # other workers' tokens that went (insertion order)

    def register(self, channel: ReplyChannel) -> str:
        """A new reply consumer on `channel`; returns the full reply-to name for it."""
        token = secrets.token_urlsafe(18)
        if self.worker is not None:
            token = f"{self.worker}-{token}"
        self._channels[token] = channel
        return PREFIX + token

    def unregister(self, name: str) -> None:
        token = name[len(PREFIX):]
        if self._channels.pop(token, None) is not None and self.on_gone is not None:
            self.on_gone(token)

    def mark_gone(self, token: str) -> None:
        """Another worker's requester `token` is gone (the last 100 000 are kept)."""
        self._gone[token] = None
        if len(self._gone) > 100_000:
            del self._gone[next(iter(self._gone))]

    def channel_for(self, routing_key: str) -> ReplyChannel | None:
        """The channel a reply with this routing key goes to, or None (gone or unknown);
        a token of another worker process: the way there (whether its channel is still
        there is known only there: a reply to a gone requester is dropped)."""
        if not routing_key.startswith(PREFIX):
            return None
        token = routing_key[len(PREFIX):]
        local = self._channels.get(token)
        if local is not None or self.worker is None or self.elsewhere is None:
            return local
        head, sep, _ = token.partition("-")
        if not sep or not head.isdigit() or int(head) == self.worker or token in self._gone:
            return None
        return self.elsewhere(int(head), routing_key)


REGISTRY = ReplyRegistry()
