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
    """token -> channel for the channels that have a reply consumer (one per broker)."""

    def __init__(self) -> None:
        self._channels: dict[str, ReplyChannel] = {}

    def register(self, channel: ReplyChannel) -> str:
        """A new reply consumer on `channel`; returns the full reply-to name for it."""
        token = secrets.token_urlsafe(18)
        self._channels[token] = channel
        return PREFIX + token

    def unregister(self, name: str) -> None:
        self._channels.pop(name[len(PREFIX):], None)

    def channel_for(self, routing_key: str) -> ReplyChannel | None:
        """The channel a reply with this routing key goes to, or None (gone or unknown)."""
        if not routing_key.startswith(PREFIX):
            return None
        return self._channels.get(routing_key[len(PREFIX):])


REGISTRY = ReplyRegistry()
