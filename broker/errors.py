"""AMQP errors raised inside the broker, converted to close methods at exactly one place each.

Owns: building exceptions that carry `reply_code`, `reply_text` (RabbitMQ's wording:
"NOT_FOUND - no queue 'x' in vhost '/'") and the failing method's `class_id`/`method_id`.
Soft errors (pamqp `AMQPSoftError`: 403 404 405 406) become `channel.close` in the channel
loop; hard errors (`AMQPHardError`: 320 402 501 502 503 504 505 506 530 540 541) become
`connection.close` in the reader (AMQP 0-9-1 §1.2 / errata, RabbitMQ `rabbit_channel`).
"""

from __future__ import annotations

from typing import Any

from pamqp import exceptions as px

AccessRefused = px.AMQPAccessRefused  # 403 soft
NotFound = px.AMQPNotFound  # 404 soft
ResourceLocked = px.AMQPResourceLocked  # 405 soft
PreconditionFailed = px.AMQPPreconditionFailed  # 406 soft
ConnectionForced = px.AMQPConnectionForced  # 320 hard
InvalidPath = px.AMQPInvalidPath  # 402 hard
FrameError = px.AMQPFrameError  # 501 hard
SyntaxError_ = px.AMQPSyntaxError  # 502 hard
CommandInvalid = px.AMQPCommandInvalid  # 503 hard
ChannelError = px.AMQPChannelError  # 504 hard
UnexpectedFrame = px.AMQPUnexpectedFrame  # 505 hard
ResourceError = px.AMQPResourceError  # 506 hard
NotAllowed = px.AMQPNotAllowed  # 530 hard
NotImplemented_ = px.AMQPNotImplemented  # 540 hard
InternalError = px.AMQPInternalError  # 541 hard

SoftError = px.AMQPSoftError
HardError = px.AMQPHardError
AMQPError = px.AMQPError


def amqp_error(cls: type[px.AMQPError], text: str, method: Any = None) -> px.AMQPError:
    """Make an exception of pamqp class `cls` (e.g. `NotFound`) ready to become a close method.

    The result has `reply_code` (int), `reply_text` ("NOT_FOUND - <text>", at most 255 bytes
    as the shortstr field allows; surrogate-escaped bytes in `text` become U+FFFD) and `class_id`/`method_id` of `method` (a pamqp command
    instance or class, or None for 0/0).
    """
    exc = cls(text)
    exc.reply_code = cls.value  # type: ignore[attr-defined]
    full = f"{cls.name.replace('-', '_')} - {text}"  # type: ignore[attr-defined]
    # surrogateescape: a peer's non-UTF-8 shortstr decodes surrogate-escaped
    # (broker/protocol/properties.py); its bytes show as U+FFFD, the text stays valid UTF-8
    raw = full.encode("utf-8", "surrogateescape").decode("utf-8", "replace").encode()
    exc.reply_text = raw[:255].decode("utf-8", "ignore")  # type: ignore[attr-defined]
    if method is not None and hasattr(method, "index"):
        index = method.index  # pamqp: class_id << 16 | method_id
        exc.class_id, exc.method_id = index >> 16, index & 0xFFFF  # type: ignore[attr-defined]
    else:
        exc.class_id, exc.method_id = 0, 0  # type: ignore[attr-defined]
    return exc


def close_args(exc: px.AMQPError) -> tuple[int, str, int, int]:
    """(reply_code, reply_text, class_id, method_id) of any AMQP error, made by `amqp_error`
    or raised bare by pamqp (then the text is the class's name)."""
    code = getattr(exc, "reply_code", getattr(exc, "value", 541))
    text = getattr(exc, "reply_text", None)
    if text is None:
        name = getattr(exc, "name", "INTERNAL-ERROR").replace("-", "_")
        text = f"{name} - {exc}" if str(exc) else name
    return code, text, getattr(exc, "class_id", 0), getattr(exc, "method_id", 0)
