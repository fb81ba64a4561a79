"""The message as it travels from a channel to queues, and its identity.

Owns: the `Message` record (immutable once routed) and msg_id generation. Everything that holds a
message holds this object; storage layers serialise it themselves. It never touches I/O.
"""

from __future__ import annotations

import itertools
import os

from pamqp import commands

Properties = commands.Basic.Properties

# msg_id = 8 random bytes chosen at boot + a 64-bit counter: unique like RabbitMQ's rabbit_guid
# (16 bytes), without a syscall per message.
_GUID_PREFIX = os.urandom(8)
_guid_counter = itertools.count(1)


def new_msg_id() -> bytes:
    """A fresh 16-byte message id, unique across this broker's lifetime and restarts."""
    return _GUID_PREFIX + next(_guid_counter).to_bytes(8, "big")


class Message:
    """One published message: routing info, properties, body.

    Fields: `msg_id` (16 bytes, store key), `exchange` and `routing_key` (as published, str),
    `properties` (pamqp `Basic.Properties`), `body` (bytes), `raw_properties` (the encoded
    property flags + list as received, or None). `persistent` is
    delivery_mode == 2 (AMQP 0-9-1 §1.8.2 basic properties).
    """

    __slots__ = ("msg_id", "exchange", "routing_key", "properties", "body", "persistent",
                 "raw_properties")

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        properties: Properties,
        body: bytes,
        msg_id: bytes | None = None,
        raw_properties: bytes | None = None,
    ) -> None:
        self.msg_id = msg_id if msg_id is not None else new_msg_id()
        self.exchange = exchange
        self.routing_key = routing_key
        self.properties = properties
        self.body = body
        self.persistent = properties.delivery_mode == 2
        # the properties as received on the wire (flags + list), forwarded without re-encoding
        self.raw_properties = raw_properties

    def wire_properties(self) -> bytes:
        """The encoded properties (flags + list): the bytes received, or encoded once and kept
        so every later delivery, return or write reuses them."""
        raw = self.raw_properties
        if raw is None:
            from broker.protocol.framing import encode_properties

            raw = self.raw_properties = encode_properties(self.properties)
        return raw

    @property
    def size(self) -> int:
        """Body size in bytes (what RabbitMQ counts as message bytes)."""
        return len(self.body)

    def __repr__(self) -> str:
        return f"Message({self.msg_id.hex()}, {self.exchange!r}, {self.routing_key!r}, {len(self.body)} B)"
