"""Message serialisation for the message store and the queue index.

Owns: the byte form of a `broker.message.Message` on disk. Used by the variable queue when it
writes a message to the store (`.rdq` record body) or embeds it in the queue index. Never does
I/O itself.

Format (all integers big-endian), version 1:

    Version:u8 (=1) | ExchangeLen:u8 | Exchange:utf8 | RoutingKeyLen:u8 | RoutingKey:utf8
    | PropsLen:u32 | Props | Body

`Props` is the AMQP content-header property list exactly as on the wire (property-flags
words, then the present fields; AMQP 0-9-1 §4.2.6.1): the bytes the publisher sent, so field
tables keep their types (bytes arrays, decimals, timestamps) and values pamqp cannot represent
survive; `decode` reads them with the content-header decoder (`framing.decode_properties`). The
msg_id is not repeated: both the store record and the index entry already carry it, so
`decode` takes it as an argument.

`encoded_size` (body + encoded properties, in bytes) is what the variable queue compares with
`queue_index_embed_msgs_below` (RabbitMQ's `rabbit_variable_queue` compares the same sum).
"""

from __future__ import annotations

import struct

from broker.errors import FrameError
from broker.message import Message, Properties
from broker.protocol.framing import decode_properties
from broker.protocol.properties import scan_properties

VERSION = 1
_U32 = struct.Struct(">I")


class CodecError(ValueError):
    """The bytes are not a message in this format (unknown version or truncated)."""


def encode_properties(properties: Properties) -> bytes:
    """AMQP wire encoding of `properties` (flags word + fields), via pamqp."""
    return properties.marshal()


def properties_bytes(message: Message) -> bytes:
    """The message's encoded properties: the bytes it arrived with when there are any (the
    same flags + fields layout), else pamqp's encoding, kept on the message for later use.
    Reusing the wire bytes saves a pamqp marshal per message (variable queue publish+fetch+
    ack of a transient message: 17.8 → 15.1 µs, bench/micro/bq_transient.py)."""
    return message.wire_properties()


def encoded_size(message: Message, props_bytes: bytes | None = None) -> int:
    """Bytes compared with the embed threshold: len(body) + len(encoded properties)."""
    if props_bytes is None:
        props_bytes = properties_bytes(message)
    return len(message.body) + len(props_bytes)


def encode(message: Message, props_bytes: bytes | None = None) -> bytes:
    """Serialise `message` (without its msg_id) to the version-1 byte form above.

    props_bytes: the already encoded properties, when the caller computed them for
    `encoded_size` (saves a second pamqp marshal).
    """
    if props_bytes is None:
        props_bytes = properties_bytes(message)
    exchange = message.exchange.encode()
    routing_key = message.routing_key.encode()
    return b"".join(
        (
            bytes((VERSION, len(exchange))),
            exchange,
            bytes((len(routing_key),)),
            routing_key,
            _U32.pack(len(props_bytes)),
            props_bytes,
            message.body,
        )
    )


def _split(data: bytes) -> tuple[str, str, bytes, int]:
    """(exchange, routing key, encoded properties, where the body starts) of a version-1
    record; CodecError if malformed."""
    if len(data) < 7 or data[0] != VERSION:
        raise CodecError(f"not a version-{VERSION} message ({len(data)} bytes)")
    pos = 1
    ex_len = data[pos]
    exchange = data[pos + 1 : pos + 1 + ex_len].decode()
    pos += 1 + ex_len
    rk_len = data[pos]
    routing_key = data[pos + 1 : pos + 1 + rk_len].decode()
    pos += 1 + rk_len
    if pos + 4 > len(data):
        raise CodecError("truncated before the properties length")
    (props_len,) = _U32.unpack_from(data, pos)
    pos += 4
    if pos + props_len > len(data) or props_len < 2:
        raise CodecError("truncated properties")
    return exchange, routing_key, data[pos:pos + props_len], pos + props_len


def decode(msg_id: bytes, data: bytes | memoryview) -> Message:
    """Rebuild the `Message` stored as `data` under `msg_id`; CodecError if malformed."""
    data = bytes(data)
    exchange, routing_key, raw_properties, body_at = _split(data)
    try:
        # the content-header decoder, so a stored message decodes exactly as it did when
        # published (a timestamp pamqp cannot represent included, see protocol/properties.py)
        properties = decode_properties(raw_properties)
    except FrameError as err:
        raise CodecError(f"properties do not decode: {err}") from err
    return Message(exchange, routing_key, properties, data[body_at:], msg_id=msg_id,
                   raw_properties=raw_properties)


def decode_lazy(msg_id: bytes, data: bytes | memoryview) -> Message:
    """`decode`, but the properties stay encoded until something reads them (a message
    that is only routed by key and forwarded never decodes them: the delayed exchange's due
    messages, broker/delayed/). CodecError if malformed."""
    data = bytes(data)
    exchange, routing_key, raw, body_at = _split(data)
    try:
        hot = scan_properties(raw)
    except ValueError as err:
        raise CodecError(f"properties do not decode: {err}") from err
    if hot is None:  # CC/BCC or a deep table: decoded at once, as the wire path does
        return decode(msg_id, data)
    message = Message.from_wire(exchange, routing_key, raw, hot, data[body_at:])
    message.msg_id = msg_id
    return message
