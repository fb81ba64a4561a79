# Owns: the contract between a shovel's link and its two ends: the message that crosses from
# a source to a destination, the Source and Destination protocols, and the error an end
# raises or resolves `closed` with.
# Talked to by: broker/shovel/link.py (drives a Source and a Destination),
# broker/shovel/amqp091.py and broker/shovel/amqp10.py (implement them).
# Must never: import an implementation (they import this module, never the reverse).
"""What a shovel's source and destination look like to its link (rabbit_shovel_behaviour in
RabbitMQ 3.10.8: connect_source / init_source / ack / nack on one side, connect_dest /
forward / handle_dest confirms on the other).

A source hands the link `ShovelMessage`s; the link forwards each to the destination, which
returns an id, and later reports the ids it confirmed (or refused); the link then acks (or
nacks) the message's `tag` at the source. Everything runs on the event loop: an end that
works in another thread (AMQP 1.0 over proton) hops back with `call_soon_threadsafe` before
it calls the link.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from broker.protocol.framing import ContentHeader
from broker.shovel.definition import ShovelDef


class EndpointError(Exception):
    """An end failed: refused or lost connection, a peer that closed the link, a missing
    library. `str()` is the reason /api/shovels shows."""


@dataclass(frozen=True, slots=True)
class ShovelMessage:
    """One message on its way (rabbit_shovel_behaviour:forward's Tag, Props, Payload).

    `header` is the AMQP 0-9-1 content header (raw properties kept, forwarded byte for byte
    to a 0-9-1 destination) or None when the source is AMQP 1.0: rabbit_amqp10_shovel
    forwards only the body then (`amqp10_msg:body_bin`), with empty properties."""

    tag: int  # the source's id for ack / nack
    body: bytes
    exchange: str = ""  # 0-9-1 source: where the message was published
    routing_key: str = ""
    header: ContentHeader | None = None


Deliver = Callable[[ShovelMessage], None]
# ids confirmed (True) or refused (False) by a destination
Confirm = Callable[[list[int], bool], None]


class Source(Protocol):
    """Where a shovel takes messages from."""

    uri: str | None  # the URI connected to (as given, password kept), None before
    # resolves with the EndpointError (or ClientError) that ended the connection
    closed: asyncio.Future[Exception]

    async def open(self) -> int:
        """Connect (URIs in order) and declare what the source needs. Returns the queue's
        depth for `queue-length` (0 when unknown). Raises EndpointError / ClientError."""
        ...

    async def consume(self, deliver: Deliver, prefetch: int, no_ack: bool,
                      limit: int | None) -> None:
        """Start delivering: at most `prefetch` unacked (credit for AMQP 1.0), pre-settled
        when `no_ack`; `limit` is what delete-after still allows (None: unbounded)."""
        ...

    def ack(self, tag: int) -> None:
        """The destination has it (or it was sent): settle it at the source."""
        ...

    def nack(self, tag: int) -> None:
        """The destination refused it: give it back (0-9-1: requeue; 1.0: rejected)."""
        ...

    async def close(self) -> None:
        """Close the connection (bounded wait); unsettled messages go back to the peer."""
        ...


class Destination(Protocol):
    """Where a shovel sends messages to."""

    uri: str | None
    closed: asyncio.Future[Exception]

    async def open(self, on_confirm: Confirm | None) -> None:
        """Connect and declare; with `on_confirm` (ack-mode on-confirm) every forwarded
        message is confirmed later through it. Raises EndpointError / ClientError."""
        ...

    def forward(self, msg: ShovelMessage, src_uri: str) -> int:
        """Send one message (properties changed as the definition says); its id for
        `on_confirm`. `src_uri` is the source's URI (for the forward headers)."""
        ...

    async def close(self) -> None:
        ...


def forward_table(d: ShovelDef, cluster_name: str) -> dict[str, Any]:
    """The start of the AMQP 0-9-1 `x-shovelled` table / the AMQP 1.0 forward application
    properties: shovelled-by, shovel-type, shovel-name (rabbit_shovel_parameters Table0))."""
    return {"shovelled-by": cluster_name, "shovel-type": "static" if d.static else "dynamic",
            "shovel-name": d.name}


def source_headers(d: ShovelDef) -> dict[str, str]:
    """What an AMQP 0-9-1 source adds about itself (rabbit_shovel_parameters parse_amqp091_
    source DestHeaders): src-queue, or src-exchange and src-exchange-key; nothing for an
    AMQP 1.0 source."""
    if d.src_protocol != "amqp091":
        return {}
    if d.src_queue is not None:
        return {"src-queue": d.src_queue}
    return {"src-exchange": d.src_exchange or "", "src-exchange-key": d.src_exchange_key}
