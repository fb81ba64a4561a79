"""Messages in and out of the HTTP API: a message as JSON (POST .../get, GET .../messages)
and a JSON publish request as a Message (POST /api/exchanges/{vhost}/{name}/publish), in
RabbitMQ's shapes: `payload` with `payload_encoding` "string" or "base64", `properties`
with AMQP's basic property names (`type`, not pamqp's `message_type`), timestamps in
seconds since the epoch."""

from __future__ import annotations

import base64
import datetime
from typing import Any

from broker.management.http import bad_request
from broker.message import Message, Properties

_NAMES = {"message_type": "type"}  # pamqp attribute -> AMQP / RabbitMQ JSON name
FIELDS = ("content_type", "content_encoding", "headers", "delivery_mode", "priority",
          "correlation_id", "reply_to", "expiration", "message_id", "timestamp",
          "message_type", "user_id", "app_id", "cluster_id")


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        return int(value.replace(tzinfo=value.tzinfo or datetime.UTC).timestamp())
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def properties_json(props: Properties) -> dict[str, Any]:
    """The set properties of a message, RabbitMQ's JSON names."""
    out: dict[str, Any] = {}
    for name in FIELDS:
        value = getattr(props, name, None)
        if value is not None and not (name == "cluster_id" and value == ""):
            out[_NAMES.get(name, name)] = _jsonable(value)
    return out


def payload_json(body: bytes, encoding: str = "auto", truncate: int | None = None) -> dict:
    """{"payload", "payload_bytes", "payload_encoding"}: a UTF-8 body as a string under
    encoding "auto", anything else base64; `truncate` cuts the body to that many bytes."""
    size = len(body)
    if truncate is not None:
        body = body[:truncate]
    if encoding == "auto":
        try:
            return {"payload": body.decode("utf-8"), "payload_bytes": size,
                    "payload_encoding": "string"}
        except UnicodeDecodeError:
            pass
    return {"payload": base64.b64encode(body).decode(), "payload_bytes": size,
            "payload_encoding": "base64"}


def message_json(message: Message, redelivered: bool, left: int, encoding: str = "auto",
                 truncate: int | None = None) -> dict:
    """One message as POST /api/queues/{vhost}/{name}/get returns it."""
    return {"payload_bytes": len(message.body), "redelivered": redelivered,
            "exchange": message.exchange, "routing_key": message.routing_key,
            "message_count": left, "properties": properties_json(message.properties),
            **payload_json(message.body, encoding, truncate)}


def message_from_json(exchange: str, data: dict) -> Message:
    """The Message a publish request describes. 400 for a bad payload encoding or
    property."""
    payload = data.get("payload", "")
    encoding = data.get("payload_encoding", "string")
    if not isinstance(payload, str):
        raise bad_request("payload must be a string")
    if encoding == "string":
        body = payload.encode("utf-8")
    elif encoding == "base64":
        try:
            body = base64.b64decode(payload, validate=True)
        except ValueError:
            raise bad_request("payload is not valid base64") from None
    else:
        raise bad_request(f"unknown payload_encoding '{encoding}'")
    raw = data.get("properties") or {}
    if not isinstance(raw, dict):
        raise bad_request("properties must be an object")
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        name = "message_type" if key == "type" else key
        if name not in FIELDS:  # RabbitMQ ignores properties it does not know
            continue
        if name == "timestamp" and isinstance(value, (int, float)):
            value = datetime.datetime.fromtimestamp(value, datetime.UTC)
        if name in ("delivery_mode", "priority"):
            if not isinstance(value, int) or not 0 <= value <= 255:
                raise bad_request(f"property '{key}' must be an integer 0..255")
        if name == "expiration":
            value = str(value)
        kwargs[name] = value
    routing_key = data.get("routing_key", "")
    if not isinstance(routing_key, str):
        raise bad_request("routing_key must be a string")
    return Message(exchange, routing_key, Properties(**kwargs), body)
