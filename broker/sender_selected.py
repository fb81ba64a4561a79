"""Sender-selected distribution (rabbitmq.com/sender-selected.html): the `CC` and `BCC`
headers of a publish name more routing keys; the message is routed with
`[routing_key | CC ++ BCC]` in one go, and `BCC` is removed before anyone sees the message.

Source: rabbit_basic `make_message` / `header_routes` and rabbit.hrl `ROUTING_HEADERS`,
`DELETED_HEADER` (RabbitMQ 3.10.8): only `longstr` elements of an array count; a `CC` or
`BCC` that is not an array is refused, and rabbit_channel closes the channel with 406
"invalid message: {unacceptable_type_in_header,\"CC\",longstr}".

Pure: no I/O. Only publishes whose headers table was decoded at once reach it (the
property scan decodes a table with a top-level CC or BCC key: broker/protocol/
table_check.py).
"""

from __future__ import annotations

import copy
from typing import Any

from broker import errors
from broker.message import Message

ROUTING_HEADERS = ("CC", "BCC")


def _amqp_type(value: Any) -> str:
    """The AMQP 0-9-1 field type RabbitMQ names a decoded value by (rabbit_binary_parser)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "long" if value > 2**31 - 1 or value < -2**31 else "signedint"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "longstr"
    if isinstance(value, (bytes, bytearray)):
        return "binary"
    if isinstance(value, dict):
        return "table"
    if value is None:
        return "void"
    return "timestamp"


def names_keys(headers: dict | None) -> bool:
    """The headers table holds a CC or BCC key."""
    return headers is not None and ("CC" in headers or "BCC" in headers)


def selected(message: Message) -> bool:
    """The message carries a CC or BCC header (cheap: only a table decoded at publish can,
    since the property scan decodes such tables at once)."""
    return names_keys(message.decoded_headers)


def extra_keys(headers: dict, method: Any = None) -> list[str]:
    """The routing keys in `headers`' CC then BCC arrays (longstr elements only). Raises
    406 PRECONDITION_FAILED "invalid message: ..." when either is not an array."""
    keys: list[str] = []
    for name in ROUTING_HEADERS:
        if name not in headers:
            continue
        value = headers[name]
        if not isinstance(value, list):
            raise errors.amqp_error(
                errors.PreconditionFailed,
                f'invalid message: {{unacceptable_type_in_header,"{name}",'
                f"{_amqp_type(value)}}}", method)
        keys.extend(v for v in value if isinstance(v, str))
    return keys


class BccStripped(Message):
    """A message whose BCC header `without_bcc` removed. `bcc` keeps the keys it named: they
    stay among the message's routing keys (rabbit_basic keeps `[RoutingKey | CC ++ BCC]` in
    `#basic_message.routing_keys` after stripping the header), which the firehose tracer
    shows (broker/trace.py). Not kept across a restart."""

    __slots__ = ("bcc",)

    def __init__(self, message: Message, properties: Any, bcc: list[str]) -> None:
        super().__init__(message.exchange, message.routing_key, properties, message.body,
                         msg_id=message.msg_id)
        self.bcc = bcc  # the BCC header's longstr elements, in order


def without_bcc(message: Message) -> Message:
    """The message as its consumers get it: the same message without its BCC header (its
    properties encoded anew; a `BccStripped`), or `message` itself when it has none."""
    props = message.properties
    if not props.headers or "BCC" not in props.headers:
        return message
    stripped = copy.copy(props)
    stripped.headers = {k: v for k, v in props.headers.items() if k != "BCC"}
    bcc = props.headers["BCC"]
    return BccStripped(message, stripped,
                       [v for v in bcc if isinstance(v, str)] if isinstance(bcc, list) else [])


def routing_keys(message: Message) -> list[str]:
    """Every routing key of a routed message, as rabbit_basic's `routing_keys`: its routing
    key, then its CC header's keys, then the keys of the BCC header it was stripped of.
    A CC that is not an array counts for nothing (publish refused those already)."""
    keys = [message.routing_key]
    headers = message.headers
    if headers:
        cc = headers.get("CC")
        if isinstance(cc, list):
            keys.extend(v for v in cc if isinstance(v, str))
        bcc = headers.get("BCC")  # only on a message that never went through without_bcc
        if isinstance(bcc, list):
            keys.extend(v for v in bcc if isinstance(v, str))
    if isinstance(message, BccStripped):
        keys.extend(message.bcc)
    return keys
