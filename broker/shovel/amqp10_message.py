# Owns: turning a shovelled message into an AMQP 1.0 message (an AMQP 0-9-1 one's
# properties mapped as rabbit_amqp10_shovel maps them) and an AMQP 1.0 message's body into
# the bytes an AMQP 0-9-1 destination publishes.
# Talked to by: broker/shovel/amqp10.py (its destination and source).
# Must never: touch a connection or a thread: plain data in, a proton Message out.
"""AMQP 0-9-1 <-> AMQP 1.0 messages as RabbitMQ 3.10.8's shovel converts them
(rabbit_amqp10_shovel forward/new_message/set_message_properties, amqp10_msg:body_bin).

To AMQP 1.0 (`to_amqp10`), in RabbitMQ's order, later steps overriding earlier ones:
1. the body as one data section; `dest-properties` set by AMQP 1.0 field name (message_id,
   user_id, to, subject, reply_to, correlation_id, content_type, content_encoding,
   absolute_expiry_time, creation_time, group_id, group_sequence, reply_to_group_id; any
   other key is skipped: RabbitMQ's link crashes on it); `dest-message-annotations` (symbol
   keys); application properties from `dest-application-properties` and then what an AMQP
   0-9-1 source adds about itself (`src-queue`, or `src-exchange` and `src-exchange-key`).
2. `dest-add-forward-headers`: application properties shovelled-by, shovel-type,
   shovel-name.
3. the AMQP 0-9-1 properties, by name in alphabetical order: content_type,
   content_encoding, correlation_id, reply_to, message_id and user_id go to the AMQP 1.0
   properties; timestamp to creation_time as given (RabbitMQ passes the 0-9-1 seconds where
   1.0 counts milliseconds); delivery_mode 2 to header durable=true; each header whose
   value is a string, number or boolean, and app_id, cluster_id, delivery_mode (other than
   2), exchange, expiration, priority, routing_key and type become application properties
   (integers as uint when they fit, as amqp10_msg wraps them).
4. `dest-add-timestamp-header`: creation_time = now (milliseconds).

From AMQP 1.0 (`body_bytes`): a message with one data section gives its bytes; any other
body is the AMQP encoding of its body section (amqp-value or amqp-sequence), as
amqp10_msg:body_bin returns. Nothing else of the message crosses to AMQP 0-9-1.
"""

from __future__ import annotations

import datetime
from typing import Any

from proton import Data, Described, Message, symbol, uint, ulong

from broker.shovel.definition import ShovelDef
from broker.shovel.endpoint import ShovelMessage, source_headers

_AMQP_VALUE = ulong(0x77)  # section descriptors (AMQP 1.0 part 3.2)
_AMQP_SEQUENCE = ulong(0x76)
_STRING_PROPERTIES = {"message_id": "id", "to": "address", "subject": "subject",
                      "reply_to": "reply_to", "correlation_id": "correlation_id",
                      "content_type": "content_type", "content_encoding": "content_encoding",
                      "group_id": "group_id", "reply_to_group_id": "reply_to_group_id"}
_TIME_PROPERTIES = {"absolute_expiry_time": "expiry_time", "creation_time": "creation_time"}
# 0-9-1 property: (its bit in the property flags, pamqp attribute, RabbitMQ's props map
# name); AMQP 0-9-1 §4.2.6.1 gives the order, the first property in bit 15
_091_PROPERTIES = [(1 << (15 - i), attr, name) for i, (attr, name) in enumerate((
    ("content_type", "content_type"), ("content_encoding", "content_encoding"),
    ("headers", "headers"), ("delivery_mode", "delivery_mode"), ("priority", "priority"),
    ("correlation_id", "correlation_id"), ("reply_to", "reply_to"),
    ("expiration", "expiration"), ("message_id", "message_id"), ("timestamp", "timestamp"),
    ("message_type", "type"), ("user_id", "user_id"), ("app_id", "app_id"),
    ("cluster_id", "cluster_id")))]


def _ap_value(v: Any) -> Any:
    """amqp10_msg wrap_ap_value: uint for an integer that fits, strings as UTF-8; None for
    what AMQP 1.0 application properties cannot hold (RabbitMQ's is_amqp10_compat)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return uint(v) if 0 <= v < 2 ** 32 else v
    if isinstance(v, float):
        return v
    if isinstance(v, str):
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return None


def _set_property(m: Message, key: str, value: str) -> None:
    """One `dest-properties` entry (amqp10_msg set_properties)."""
    if key in _STRING_PROPERTIES:
        setattr(m, _STRING_PROPERTIES[key], value)
    elif key == "user_id":
        m.user_id = value.encode()
    elif key in _TIME_PROPERTIES:
        try:
            setattr(m, _TIME_PROPERTIES[key], int(value) / 1000.0)
        except ValueError:
            pass
    elif key == "group_sequence":
        try:
            m.group_sequence = int(value)
        except ValueError:
            pass


def amqp091_props(msg: ShovelMessage) -> dict[str, Any]:
    """RabbitMQ's props map of a 0-9-1 message (rabbit_amqp091_shovel map_from_props plus
    exchange and routing_key): only the properties that are set; empty for a message from
    an AMQP 1.0 source."""
    if msg.header is None:
        return {}
    raw = msg.header.raw_properties
    flags = int.from_bytes(raw[:2], "big") if len(raw) >= 2 else 0
    p = msg.header.properties
    out: dict[str, Any] = {"exchange": msg.exchange, "routing_key": msg.routing_key}
    for bit, attr, name in _091_PROPERTIES:
        if flags & bit:  # set in the message (pamqp fills unset ones with defaults)
            out[name] = getattr(p, attr)
    return out


def to_amqp10(msg: ShovelMessage, d: ShovelDef, forward: dict[str, Any] | None,
              now_ms: int) -> Message:
    """The AMQP 1.0 message for `msg` (see the module docstring); `forward` is the forward
    headers' table (None without dest-add-forward-headers); `now_ms` the time for
    dest-add-timestamp-header (milliseconds since the epoch)."""
    m = Message(body=msg.body, inferred=True)  # bytes + inferred: one data section
    for key, value in d.dest_properties.items():
        _set_property(m, key, value)
    if d.dest_message_annotations:
        m.annotations = {symbol(k): v for k, v in d.dest_message_annotations.items()}
    app: dict[str, Any] = dict(d.dest_application_properties)
    app.update(source_headers(d))
    if forward:
        app.update(forward)
    for key, value in sorted(amqp091_props(msg).items()):
        if key in ("content_type", "content_encoding", "correlation_id", "reply_to",
                   "message_id"):
            setattr(m, _STRING_PROPERTIES[key], value.decode() if isinstance(value, bytes)
                    else str(value))
        elif key == "delivery_mode" and value == 2:
            m.durable = True
        elif key == "timestamp":
            secs = value.timestamp() if isinstance(value, datetime.datetime) else value
            m.creation_time = int(secs) / 1000.0  # RabbitMQ: the seconds, read as ms
        elif key == "user_id":
            m.user_id = value.encode() if isinstance(value, str) else value
        elif key == "headers":
            for name, hv in (value or {}).items():
                wrapped = _ap_value(hv)
                if wrapped is not None:
                    app[name] = wrapped
        else:
            wrapped = _ap_value(value)
            if wrapped is not None:
                app[key] = wrapped
    if app:
        props: Any = {k: _ap_value(v) if not isinstance(v, uint) else v
                      for k, v in app.items()}
        m.properties = props  # proton's stub types the attribute after its default, None
    if d.add_timestamp_header:
        m.creation_time = now_ms / 1000.0
    return m


def body_bytes(m: Message) -> bytes:
    """amqp10_msg:body_bin: a data section's bytes, else the encoded body section."""
    body = m.body
    if m.inferred and isinstance(body, (bytes, memoryview)):
        return bytes(body)
    if body is None:
        return b""
    descriptor = _AMQP_SEQUENCE if m.inferred and isinstance(body, list) else _AMQP_VALUE
    data = Data()
    value: Any = body
    data.put_object(Described(descriptor, value))
    return bytes(data.encode())
