"""What a stream queue accepts at declare and consume, with RabbitMQ 3.10.8's checks and
texts (rabbit_stream_queue declare / consume / parse_offset_arg, rabbit_queue_type_util's
check_auto_delete / check_exclusive / check_non_durable, rabbit_amqqueue check_max_age).
Pure: raises the AMQP errors, touches nothing.
"""

from __future__ import annotations

import datetime
import re
import time
from typing import Any

from broker import errors

MAX_SEGMENT_SIZE = 3_000_000_000  # ?MAX_STREAM_MAX_SEGMENT_SIZE (bytes)
DEFAULT_SEGMENT_SIZE = 500_000_000  # x-stream-max-segment-size-bytes default
_AGE_UNITS_MS = {"Y": 365 * 86_400_000, "M": 30 * 86_400_000, "D": 86_400_000,
                 "h": 3_600_000, "m": 60_000, "s": 1000}
_AGE = re.compile(r"^([0-9]*)(.*)$")


def max_age_ms(value: Any) -> int | None:
    """rabbit_amqqueue:check_max_age: "<positive integer><Y|M|D|h|m|s>" in ms, else None."""
    if not isinstance(value, str):
        return None
    m = _AGE.match(value)
    if m is None or not m.group(1) or int(m.group(1)) <= 0 or m.group(2) not in _AGE_UNITS_MS:
        return None
    return int(m.group(1)) * _AGE_UNITS_MS[m.group(2)]


def check_declare(what: str, arguments: dict, method: Any = None) -> None:
    """406 PRECONDITION_FAILED as RabbitMQ 3.10.8 for a stream's own arguments: a bad
    x-max-age, a bad segment size or initial cluster size, a segment size over the maximum.
    `what` is "queue 'q' in vhost '/'". (Auto-delete, exclusive and non-durable streams are
    refused by broker/declare_checks.py's check_replicated_properties, after this.)"""
    if "x-max-age" in arguments and max_age_ms(arguments["x-max-age"]) is None:
        value = arguments["x-max-age"]
        reason = "invalid_max_age" if isinstance(value, str) else "{unacceptable_type,long}"
        raise errors.amqp_error(errors.PreconditionFailed,
                                f"invalid arg 'x-max-age' for {what}: {reason}", method)
    for key in ("x-stream-max-segment-size-bytes", "x-initial-cluster-size"):
        value = arguments.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < (1 if key == "x-initial-cluster-size" else 0)):
            raise errors.amqp_error(errors.PreconditionFailed,
                                    f"invalid arg '{key}' for {what}: {value!r}", method)
    if arguments.get("x-stream-max-segment-size-bytes", 0) > MAX_SEGMENT_SIZE:
        raise errors.amqp_error(errors.PreconditionFailed,
                                "Exceeded max value for x-stream-max-segment-size-bytes",
                                method)


def offset_spec(value: Any, what: str) -> str | int | tuple[str, int]:
    """x-stream-offset (rabbit_stream_queue parse_offset_arg): absent → "next"; "first",
    "last", "next"; a non-negative integer offset; an AMQP timestamp (seconds) → that time;
    an interval ("1h", "30m", x-max-age's units) → that long ago. Anything else is 406
    PRECONDITION_FAILED (RabbitMQ 3.10.8 crashes the channel with 541 there)."""
    if value is None:
        return "next"
    if value in ("first", "last", "next"):
        return value
    if isinstance(value, datetime.datetime):
        return ("timestamp", int(value.timestamp() * 1000))
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        ms = max_age_ms(value)
        if ms is not None:
            return ("timestamp", int(time.time() * 1000) - ms)
    raise errors.amqp_error(errors.PreconditionFailed,
                            f"invalid arg 'x-stream-offset' for {what}: {value!r}")
