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
from broker.policies import LEADER_LOCATORS
from broker.ttl import MAX_EXPIRY

# x-overflow values (rabbitmq.com/maxlength.html); reject-publish-dlx behaves as
# reject-publish until dead-lettering exists
OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")


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



# the queue arguments each queue type takes (RabbitMQ 3.10.8: the `queue_arguments` of
# rabbit_classic_queue, rabbit_quorum_queue and rabbit_stream_queue capabilities/0), plus this
# broker's x-confirm-on, a classic queue's only (docs/architecture.md §6)
QUEUE_ARGUMENTS = {
    "classic": ("x-expires", "x-message-ttl", "x-dead-letter-exchange",
                "x-dead-letter-routing-key", "x-max-length", "x-max-length-bytes",
                "x-max-priority", "x-overflow", "x-queue-mode", "x-queue-version",
                "x-single-active-consumer", "x-queue-type", "x-queue-master-locator",
                "x-confirm-on"),
    "quorum": ("x-dead-letter-exchange", "x-dead-letter-routing-key", "x-dead-letter-strategy",
               "x-expires", "x-max-length", "x-max-length-bytes", "x-max-in-memory-length",
               "x-max-in-memory-bytes", "x-overflow", "x-single-active-consumer",
               "x-queue-type", "x-quorum-initial-group-size", "x-delivery-limit",
               "x-message-ttl", "x-queue-leader-locator"),
    "stream": ("x-max-length-bytes", "x-queue-type", "x-max-age",
               "x-stream-max-segment-size-bytes", "x-initial-cluster-size",
               "x-queue-leader-locator"),
}
_ANY_QUEUE_ARGUMENT = frozenset(k for keys in QUEUE_ARGUMENTS.values() for k in keys)
# the module each type's refusals name
QUEUE_TYPE_MODULES = {"classic": "rabbit_classic_queue", "quorum": "rabbit_quorum_queue",
                      "stream": "rabbit_stream_queue"}
DLX_STRATEGIES = ("at-most-once", "at-least-once")  # ?KNOWN_DLX_STRATEGIES


def _integer(value: Any) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return None
    return f'"expected integer, got {field_kind(value)}"'  # check_int_arg


def _non_negative(value: Any, _args: dict) -> str | None:  # check_non_neg_int_arg
    return _integer(value) or (f"{{value_negative,{value}}}" if value < 0 else None)


def _expiry(value: Any, _args: dict) -> str | None:  # check_message_ttl_arg, check_expiry
    return _non_negative(value, _args) or (
        f"{{value_too_large,{value}}}" if value > MAX_EXPIRY else None)


def _nonzero(check: Any) -> Any:
    """`check`, with an integer 0 refused first as {value_zero,0}."""
    def nonzero_check(value: Any, args: dict) -> str | None:
        if _integer(value) is None and value == 0:
            return "{value_zero,0}"
        return check(value, args)  # type: ignore[no-any-return]
    return nonzero_check


_expires = _nonzero(_expiry)  # check_expires_arg
_group_size = _nonzero(_non_negative)  # check_initial_cluster_size_arg


def _max_priority(value: Any, _args: dict) -> str | None:  # check_max_priority_arg
    return _non_negative(value, _args) or (
        f"{{max_value_exceeded,{value}}}" if value > MAX_SUPPORTED_PRIORITY else None)


def _text(value: Any) -> str | None:  # check_dlxname_arg
    return None if isinstance(value, str) else f"{{unacceptable_type,{field_kind(value)}}}"


def _dlx_routing_key(value: Any, args: dict) -> str | None:  # check_dlxrk_arg
    if _text(value) is not None:
        return _text(value)
    return None if "x-dead-letter-exchange" in args else "routing_key_but_no_dlx_defined"


def _one_of(known: tuple[str, ...], reason: str) -> Any:
    def check(value: Any, _args: dict) -> str | None:  # check_overflow and its kind
        if not isinstance(value, str):
            return f"{{unacceptable_type,{field_kind(value)}}}"
        return None if value in known else reason
    return check


def _boolean(value: Any, _args: dict) -> str | None:  # check_single_active_consumer_arg
    return None if isinstance(value, bool) else f"{{unacceptable_type,{field_kind(value)}}}"


def _confirm_mode(value: Any, _args: dict) -> str | None:  # ours, checked as x-queue-mode is
    if value in CONFIRM_MODES:
        return None
    return (f"{{unsupported_confirm_mode,{describe(value)}}}; expected one of "
            f"{', '.join(CONFIRM_MODES)}")


# rabbit_amqqueue:declare_args/0's validators in its order (the first refusal is the one
# answered); a stream's own keys (x-max-age, segment size, initial cluster size) are checked
# by broker/stream/arguments.py, and x-queue-mode / x-queue-version are not checked here
_VALIDATORS: tuple[tuple[str, Any], ...] = (
    ("x-expires", _expires),
    ("x-message-ttl", _expiry),
    ("x-dead-letter-exchange", lambda v, _a: _text(v)),
    ("x-dead-letter-routing-key", _dlx_routing_key),
    ("x-dead-letter-strategy", _one_of(DLX_STRATEGIES, "invalid_dlx_strategy")),
    ("x-max-length", _non_negative),
    ("x-max-length-bytes", _non_negative),
    ("x-max-in-memory-length", _non_negative),
    ("x-max-in-memory-bytes", _non_negative),
    ("x-max-priority", _max_priority),
    ("x-overflow", _one_of(OVERFLOW_MODES, "invalid_overflow")),
    ("x-single-active-consumer", _boolean),
    ("x-quorum-initial-group-size", _group_size),
    ("x-queue-leader-locator", _one_of(LEADER_LOCATORS, "invalid_queue_locator_arg")),
    ("x-confirm-on", _confirm_mode),
)


def check_server_named(queue_type: str, method: Any) -> None:
    """A server-named (empty name) declare of a type that refuses it (quorum, stream:
    `server_named => false`): 406 "Cannot declare a server-named queue for type
    rabbit_..._queue", before any argument is looked at (rabbit_channel, RabbitMQ 3.10.8)."""
    if queue_type != "classic":
        raise errors.amqp_error(
            errors.PreconditionFailed,
            f"Cannot declare a server-named queue for type {QUEUE_TYPE_MODULES[queue_type]}",
            method)


def check_replicated_properties(queue_type: str, what: str, durable: bool, exclusive: bool,
                                auto_delete: bool, method: Any) -> None:
    """A new quorum queue or stream must be durable, not exclusive and not auto-delete:
    406 "invalid property 'auto-delete' | 'exclusive-owner' | 'non-durable' for `what`",
    checked in that order (rabbit_queue_type_util check_auto_delete, check_exclusive,
    check_non_durable, run by rabbit_quorum_queue:declare and rabbit_stream_queue:declare
    after the arguments). A classic queue: nothing to check."""
    if queue_type == "classic":
        return
    for flag, refused in ((auto_delete, "auto-delete"), (exclusive, "exclusive-owner"),
                          (not durable, "non-durable")):
        if flag:
            raise errors.amqp_error(errors.PreconditionFailed,
                                    f"invalid property '{refused}' for {what}", method)


def queue_type_of(arguments: dict) -> str:
    """"classic", "quorum" or "stream": the queue type `arguments` declare (x-queue-type;
    classic when absent)."""
    qtype = arguments.get("x-queue-type")
    return qtype if qtype in QUEUE_ARGUMENTS else "classic"


def validate_queue_arguments(arguments: dict, what: str, method: Any) -> None:
    """queue.declare's argument checks before anything is created, as
    rabbit_amqqueue:check_declare_arguments/2 in RabbitMQ 3.10.8: first x-queue-type
    ("unsupported queue type"), then the values of the arguments the queue's type takes, in
    declare_args/0's order (ill-typed or negative numbers, an unknown x-overflow,
    x-dead-letter-strategy or x-queue-leader-locator, a dead-letter routing key without an
    exchange, a non-boolean x-single-active-consumer; this broker's x-confirm-on), then 406
    "invalid arg 'KEY' for `what` of queue type rabbit_..._queue" for an argument only
    another type takes (x-max-priority on a quorum queue, x-delivery-limit on a classic
    one). Arguments no type knows are ignored, as RabbitMQ ignores them. Each refusal is 406
    "invalid arg 'KEY' for `what`: REASON" with RabbitMQ's reason."""
    qtype = arguments.get("x-queue-type")
    if qtype is not None and qtype not in QUEUE_ARGUMENTS:
        raise errors.amqp_error(  # rabbit_amqqueue check_queue_type
            errors.PreconditionFailed,
            f"invalid arg 'x-queue-type' for {what}: \"unsupported queue type '{qtype}'\"",
            method)
    queue_type = queue_type_of(arguments)
    _check_arguments(arguments, QUEUE_ARGUMENTS[queue_type], _ANY_QUEUE_ARGUMENT, _VALIDATORS,
                     queue_type, what, method)


def _check_arguments(arguments: dict, allowed: tuple[str, ...], known: frozenset[str],
                     validators: tuple[tuple[str, Any], ...], queue_type: str, what: str,
                     method: Any) -> None:
    """RabbitMQ's two passes over declare or consume arguments (rabbit_amqqueue
    check_arguments_type_and_value, then check_arguments_key): the value of each argument
    the type takes, in `validators`' order; then 406 "... of queue type rabbit_X_queue" for
    the first argument of `known` (every type's) that this type does not take."""
    for key, check in validators:
        if key in arguments and key in allowed:
            why = check(arguments[key], arguments)
            if why is not None:
                raise errors.amqp_error(
                    errors.PreconditionFailed, f"invalid arg '{key}' for {what}: {why}", method)
    for key in arguments:
        if key in known and key not in allowed:
            raise errors.amqp_error(
                errors.PreconditionFailed,
                f"invalid arg '{key}' for {what} of queue type {QUEUE_TYPE_MODULES[queue_type]}",
                method)


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
# rabbit_classic_queue, rabbit_quorum_queue and rabbit_stream_queue capabilities/0)
CONSUMER_ARGUMENTS = {
    "classic": ("x-cancel-on-ha-failover", "x-priority", "x-credit"),
    "quorum": ("x-priority", "x-credit"),
    "stream": ("x-stream-offset", "x-credit"),
}
_ANY_CONSUMER_ARGUMENT = frozenset(k for keys in CONSUMER_ARGUMENTS.values() for k in keys)
# rabbit_amqqueue:consume_args/0 (a stream's x-stream-offset is the stream queue's to check)
_CONSUME_VALIDATORS: tuple[tuple[str, Any], ...] = (
    ("x-priority", lambda v, _a: _integer(v)),  # check_int_arg
    ("x-cancel-on-ha-failover", lambda v, _a: None if isinstance(v, bool)  # check_bool_arg
     else f'"expected boolean, got {field_kind(v)}"'),
)


def check_consume_arguments(queue_type: str, arguments: dict, what: str, method: Any) -> None:
    """basic.consume's arguments on a queue of `queue_type` ("classic", "quorum" or
    "stream"), as rabbit_amqqueue:check_consume_arguments/3 in RabbitMQ 3.10.8: first the
    values of the arguments the type takes (x-priority an integer, x-cancel-on-ha-failover a
    boolean; a stream's x-stream-offset is checked by the stream queue), then 406 "invalid
    arg 'KEY' for `what` of queue type rabbit_..._queue" for a consumer argument of another
    type (x-stream-offset on a classic queue, x-priority on a stream). Arguments no queue
    type knows are ignored, as RabbitMQ ignores them."""
    _check_arguments(arguments, CONSUMER_ARGUMENTS[queue_type], _ANY_CONSUMER_ARGUMENT,
                     _CONSUME_VALIDATORS, queue_type, what, method)
