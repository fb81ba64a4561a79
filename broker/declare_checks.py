"""The checks a declaration passes before it creates or matches anything: a queue's
arguments validated (rabbit_amqqueue:declare_args and its check_* functions, RabbitMQ
3.10.8), and the arguments of a redeclared queue or exchange compared with the existing ones
(rabbit_misc:assert_args_equivalence), each refusal a 406 PRECONDITION_FAILED with RabbitMQ's
text.

Owns: the rules and their texts; pure functions of the arguments. The VHost calls them from
queue.declare and exchange.declare (it keeps the checks that need its tables: exclusive
ownership, durable and auto_delete of an existing queue). Streams' own rules are
`stream/arguments.py`'s. Must never: touch a queue or the vhost's tables.
"""

from __future__ import annotations

from typing import Any

from broker import errors
from broker.backing_queue.priority import MAX_SUPPORTED_PRIORITY
from broker.confirms import CONFIRM_MODES
from broker.ttl import MAX_EXPIRY

# x-overflow values (rabbitmq.com/maxlength.html); reject-publish-dlx behaves as
# reject-publish until dead-lettering exists
OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")
# queue arguments that must be non-negative integers (rabbit_amqqueue:declare_args)
_NON_NEGATIVE_INT_ARGS = ("x-max-length", "x-max-length-bytes", "x-message-ttl",
                          "x-max-priority")


# queue arguments compared on redeclare (rabbit_amqqueue:assert_equivalence / declare_args)
EQUIVALENCE_ARGS = (
    "x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
    "x-max-length", "x-max-length-bytes", "x-max-priority", "x-overflow", "x-queue-mode",
    "x-queue-type", "x-queue-version", "x-single-active-consumer", "x-confirm-on",
)


def bool_text(v: object) -> str:
    """RabbitMQ's rendering of a boolean in an inequivalence text."""
    return "true" if v else "false"




def check_args(keys: tuple[str, ...], new_args: dict, old_args: dict, what: str,
                method: Any) -> None:
    """406 "inequivalent arg" for the first of `keys` whose value differs between
    `new_args` and `old_args` (rabbit_misc:assert_args_equivalence, RabbitMQ 3.10.8's texts)."""
    for key in keys:
        new, old = new_args.get(key), old_args.get(key)
        if new != old:
            if new is not None and old is not None and field_kind(new) == field_kind(old):
                shown = f"received '{new}' but current is '{old}'"
            else:
                shown = f"received {describe(new)} but current is {describe(old)}"
            raise errors.amqp_error(
                errors.PreconditionFailed,
                f"inequivalent arg '{key}' for {what}: {shown}", method)



def validate_queue_arguments(arguments: dict, what: str, method: Any) -> None:
    """queue.declare's argument checks before anything is created: 406 "invalid arg 'KEY'
    for `what`: REASON" with rabbit_amqqueue:declare_args's reasons (ill-typed or negative
    numbers, an unknown x-queue-type or x-overflow, a dead-letter routing key without an
    exchange, a non-boolean x-single-active-consumer) and for an unknown x-confirm-on."""
    for key in _NON_NEGATIVE_INT_ARGS + ("x-expires",):
        if key not in arguments:
            continue
        value = arguments[key]
        if not isinstance(value, int) or isinstance(value, bool):
            why = f'"expected integer, got {field_kind(value)}"'
        elif value < 0:
            why = f"{{value_negative,{value}}}"
        elif key == "x-expires" and value == 0:
            why = "{value_zero,0}"
        elif key == "x-max-priority" and value > MAX_SUPPORTED_PRIORITY:
            why = f"{{max_value_exceeded,{value}}}"
        elif key in ("x-message-ttl", "x-expires") and value > MAX_EXPIRY:
            why = f"{{value_too_large,{value}}}"  # rabbit_misc:check_expiry
        else:
            continue
        raise errors.amqp_error(
            errors.PreconditionFailed, f"invalid arg '{key}' for {what}: {why}", method)
    for key in ("x-dead-letter-exchange", "x-dead-letter-routing-key"):
        value = arguments.get(key)
        if value is not None and not isinstance(value, str):
            raise errors.amqp_error(
                errors.PreconditionFailed,
                f"invalid arg '{key}' for {what}: {{unacceptable_type,{field_kind(value)}}}", method)
    qtype = arguments.get("x-queue-type")
    if qtype is not None and qtype not in ("classic", "quorum", "stream"):
        raise errors.amqp_error(  # rabbit_amqqueue check_queue_type
            errors.PreconditionFailed,
            f"invalid arg 'x-queue-type' for {what}: \"unsupported queue type '{qtype}'\"",
            method)
    if "x-dead-letter-routing-key" in arguments and "x-dead-letter-exchange" not in arguments:
        raise errors.amqp_error(  # rabbit_amqqueue check_dlxrk_arg
            errors.PreconditionFailed,
            f"invalid arg 'x-dead-letter-routing-key' for {what}: "
            "routing_key_but_no_dlx_defined", method)
    sac = arguments.get("x-single-active-consumer")
    if sac is not None and not isinstance(sac, bool):  # check_single_active_consumer_arg
        raise errors.amqp_error(
            errors.PreconditionFailed, f"invalid arg 'x-single-active-consumer' for {what}: "
            f"{{unacceptable_type,{field_kind(sac)}}}", method)
    overflow = arguments.get("x-overflow")
    if overflow is not None and overflow not in OVERFLOW_MODES:
        # rabbit_amqqueue check_overflow
        why = "invalid_overflow" if isinstance(overflow, str) else (
            f"{{unacceptable_type,{field_kind(overflow)}}}")
        raise errors.amqp_error(
            errors.PreconditionFailed, f"invalid arg 'x-overflow' for {what}: {why}", method)
    mode = arguments.get("x-confirm-on")
    if mode is not None and mode not in CONFIRM_MODES:
        # our extension (docs/architecture.md §6), checked like RabbitMQ checks x-queue-mode
        raise errors.amqp_error(
            errors.PreconditionFailed,
            f"invalid arg 'x-confirm-on' for {what}: {{unsupported_confirm_mode,"
            f"{describe(mode)}}}; expected one of {', '.join(CONFIRM_MODES)}", method)


def field_kind(value: Any) -> str:
    """The AMQP field type RabbitMQ names for a decoded value (ints as the client most
    likely sent them: signedint when they fit in 32 bits)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -(2**31) <= value < 2**31 else "long"
    return {float: "double", str: "longstr", bytes: "longstr"}.get(type(value), "table")


def describe(value: Any) -> str:
    if value is None:
        return "none"
    return f"the value '{value}' of type '{field_kind(value)}'"


# consumer arguments each queue type takes (RabbitMQ 3.10.8: the `consumer_arguments` of
# rabbit_classic_queue, rabbit_quorum_queue and rabbit_stream_queue capabilities/0), and the
# module name RabbitMQ's refusal names
CONSUMER_ARGUMENTS = {
    "classic": ("x-cancel-on-ha-failover", "x-priority", "x-credit"),
    "quorum": ("x-priority", "x-credit"),
    "stream": ("x-stream-offset", "x-credit"),
}
QUEUE_TYPE_MODULES = {"classic": "rabbit_classic_queue", "quorum": "rabbit_quorum_queue",
                      "stream": "rabbit_stream_queue"}
_ANY_CONSUMER_ARGUMENT = frozenset(k for keys in CONSUMER_ARGUMENTS.values() for k in keys)


def check_consume_arguments(queue_type: str, arguments: dict, what: str, method: Any) -> None:
    """basic.consume's arguments on a queue of `queue_type` ("classic", "quorum" or
    "stream"), as rabbit_amqqueue:check_consume_arguments/3 in RabbitMQ 3.10.8: first the
    values of the arguments the type takes (x-priority an integer, x-cancel-on-ha-failover a
    boolean; a stream's x-stream-offset is checked by the stream queue), then 406 "invalid
    arg 'KEY' for `what` of queue type rabbit_..._queue" for a consumer argument of another
    type (x-stream-offset on a classic queue, x-priority on a stream). Arguments no queue
    type knows are ignored, as RabbitMQ ignores them."""
    allowed = CONSUMER_ARGUMENTS.get(queue_type, CONSUMER_ARGUMENTS["classic"])
    for key, expected in (("x-priority", "integer"), ("x-cancel-on-ha-failover", "boolean")):
        if key not in allowed or key not in arguments:
            continue
        value = arguments[key]
        is_int = isinstance(value, int) and not isinstance(value, bool)
        if (expected == "integer" and not is_int) or (
                expected == "boolean" and not isinstance(value, bool)):
            raise errors.amqp_error(
                errors.PreconditionFailed,
                f"invalid arg '{key}' for {what}: \"expected {expected}, got "
                f"{field_kind(value)}\"", method)
    for key in arguments:
        if key in _ANY_CONSUMER_ARGUMENT and key not in allowed:
            module = QUEUE_TYPE_MODULES.get(queue_type, "rabbit_classic_queue")
            raise errors.amqp_error(
                errors.PreconditionFailed,
                f"invalid arg '{key}' for {what} of queue type {module}", method)
