"""Policies (rabbitmq.com/parameters.html#policies): which policy applies to a queue or an
exchange, what its definition may hold, and how it merges with declared arguments.

Owns: `validate` (400-style ValueError texts), `match` (the highest-priority policy of the
vhost whose pattern matches the name and whose `apply-to` covers the kind), and
`effective_queue_arguments` / `effective_exchange_arguments`, which fold a policy's
definition into `x-` arguments with RabbitMQ's rule for each key
(rabbit_amqqueue_process `process_args_policy`): for `message-ttl`, `expires`,
`max-length` and `max-length-bytes` the lower of the argument and the policy wins; for
`dead-letter-exchange`, `dead-letter-routing-key`, `overflow`, `queue-mode`,
`confirm-on` (ours) and the exchanges' `alternate-exchange` the declared argument wins.
A quorum queue has its own table (QUORUM_RULES, rabbit_quorum_queue 3.10.8): the lower value
for the limits, `delivery-limit` and `message-ttl`, the policy's for `overflow` and
`expires`, the argument's for dead-lettering; every other key is ignored on it.
Operator policies (`validate_operator`, `merged_definition`) hold only numeric limits and
merge with both by the lower value, as rabbit_policy does.
Pure: no I/O; the vhost applies the result (broker/vhost.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from broker.definitions import PolicyDef
from broker.federation.upstream import POLICY_KEYS as FEDERATION_KEYS
from broker.federation.upstream import validate_policy as validate_federation
from broker.sharding import SHARDING_KEYS
from broker.sharding import validate as validate_sharding

APPLY_TO = ("all", "queues", "exchanges")
LOWER_WINS = ("message-ttl", "expires", "max-length", "max-length-bytes")
ARGUMENT_WINS = ("dead-letter-exchange", "dead-letter-routing-key", "overflow", "queue-mode",
                 "confirm-on")
EXCHANGE_KEYS = ("alternate-exchange", *SHARDING_KEYS)
FEDERATION = FEDERATION_KEYS  # federation-upstream, -set, -pattern (exchanges and queues)
# a quorum queue's keys (rabbit_quorum_queue:ra_machine_config/1 and dead_letter_handler/2 at
# 3.10.8): (the lower of argument and policy wins, the policy wins, the argument wins); every
# other key is ignored on a quorum queue (its unsupported_policies and the classic-only ones)
QUORUM_RULES = (("max-length", "max-length-bytes", "max-in-memory-length", "max-in-memory-bytes",
                 "delivery-limit", "message-ttl"),
                ("overflow", "expires"),
                ("dead-letter-exchange", "dead-letter-routing-key", "dead-letter-strategy"))
DEAD_LETTER_STRATEGIES = ("at-most-once", "at-least-once")
# what each queue type's capabilities() call unsupported_policies at 3.10.8: a policy whose
# definition holds one of these keys does not apply to a queue of that type at all, so a
# lower-priority policy may match instead (rabbit_queue_type:is_policy_applicable/2, used by
# rabbit_policy:matches/2 for policies and operator policies). `confirm-on` is this broker's
# and only a classic queue takes it.
_STREAM_KEYS = ("max-age", "stream-max-segment-size-bytes", "queue-leader-locator",
                "initial-cluster-size")
_MIRRORING_KEYS = ("ha-mode", "ha-params", "ha-sync-mode", "ha-promote-on-shutdown",
                   "ha-promote-on-failure", "queue-master-locator")
UNSUPPORTED_POLICIES: dict[str, frozenset[str]] = {
    "classic": frozenset((*_STREAM_KEYS, "delivery-limit", "dead-letter-strategy")),
    "quorum": frozenset(("max-priority", "queue-mode", "single-active-consumer",
                         *_MIRRORING_KEYS, "max-age", "stream-max-segment-size-bytes",
                         "initial-cluster-size", "confirm-on")),
    "stream": frozenset(("expires", "message-ttl", "dead-letter-exchange",
                         "dead-letter-routing-key", "max-length", "max-in-memory-length",
                         "max-in-memory-bytes", "max-priority", "overflow", "queue-mode",
                         "single-active-consumer", "delivery-limit", *_MIRRORING_KEYS,
                         "dead-letter-strategy", "confirm-on")),
}
# keys RabbitMQ 3.10 knows for features this broker does not have (mirroring, streams'
# segment size), accepted so definitions from a RabbitMQ import, and ignored; and the two
# locators, which choose a new queue's worker (broker/workers/placement.py `locator`)
IGNORED_KEYS = ("ha-mode", "ha-params", "ha-sync-mode", "ha-promote-on-shutdown",
                "ha-promote-on-failure", "ha-sync-batch-size", "queue-master-locator", "queue-leader-locator",
                "max-age", "stream-max-segment-size-bytes", "initial-cluster-size",
                "single-active-consumer")
# operator policies (rabbitmq.com/parameters.html#operator-policy): the keys rabbit_policies
# 3.10.8 registers as operator_policy_validator; each merges with a user policy's value and
# with a declare argument by taking the lower (policy_merge_strategy, merge_policy_value)
OPERATOR_KEYS = ("expires", "message-ttl", "max-length", "max-length-bytes",
                 "max-in-memory-length", "max-in-memory-bytes", "delivery-limit")
OPERATOR_COMPONENT = "operator_policy"  # the runtime-parameter component that stores them
# rabbit_queue_location:queue_leader_locators() (3.10: two names and their older aliases)
LEADER_LOCATORS = ("client-local", "balanced", "random", "least-leaders")
# the classic-queue locators RabbitMQ 3.10.8 registers (rabbit_queue_location_client_local,
# _min_masters, _random); x-queue-master-locator is not checked at declare: an unknown name
# is passed over when the queue is placed (rabbit_queue_master_location_misc)
MASTER_LOCATORS = ("client-local", "min-masters", "random")
_OVERFLOW = ("drop-head", "reject-publish", "reject-publish-dlx")
_CONFIRM = ("persist", "ack", "ack-lite")


def _erlang(value: Any) -> str:
    """`value` as Erlang's ~p prints a JSON value: a string as a binary, <<"x">>."""
    return f'<<"{value}">>' if isinstance(value, str) else json.dumps(value)


def _non_negative(key: str, value: Any, positive: bool = False) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < (1 if positive else 0):
        raise ValueError(f"{key}: {'positive' if positive else 'non-negative'} integer "
                         f"expected, got {value!r}")


def validate(pattern: str, definition: Any, priority: Any, apply_to: str) -> None:
    """Raise ValueError (the HTTP API's 400 reason) unless the policy is valid: a regex
    pattern, a non-empty object definition with known keys and well-typed values, an
    integer priority and apply-to all|queues|exchanges."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"pattern is not a valid regular expression: {exc}") from None
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise ValueError(f"priority must be an integer, got {priority!r}")
    if apply_to not in APPLY_TO:
        raise ValueError(f"apply-to must be one of {', '.join(APPLY_TO)}")
    if not isinstance(definition, dict) or not definition:
        raise ValueError("definition must be a non-empty object")
    known = (set(LOWER_WINS) | set(ARGUMENT_WINS) | set(EXCHANGE_KEYS) | set(IGNORED_KEYS)
             | set(FEDERATION) | {key for keys in QUORUM_RULES for key in keys})
    unknown = sorted(k for k in definition if k not in known)
    if unknown:
        raise ValueError(f"Validation failed\n\n{unknown} are not recognised policy settings")
    for key, value in definition.items():
        if key in ("message-ttl", "max-length", "max-length-bytes", "delivery-limit",
                   "max-in-memory-length", "max-in-memory-bytes"):
            _non_negative(key, value)
        elif key == "dead-letter-strategy" and value not in DEAD_LETTER_STRATEGIES:
            raise ValueError(f"dead-letter-strategy: one of "
                             f"{', '.join(DEAD_LETTER_STRATEGIES)} expected")
        elif key == "expires":
            _non_negative(key, value, positive=True)
        elif key in ("dead-letter-exchange", "dead-letter-routing-key", "alternate-exchange"):
            if not isinstance(value, str):
                raise ValueError(f"{key}: a string expected, got {value!r}")
        elif key == "overflow" and value not in _OVERFLOW:
            raise ValueError(f"overflow: one of {', '.join(_OVERFLOW)} expected")
        elif key == "queue-mode" and value not in ("default", "lazy"):
            raise ValueError("queue-mode: default or lazy expected")
        elif key == "confirm-on" and value not in _CONFIRM:
            raise ValueError(f"confirm-on: one of {', '.join(_CONFIRM)} expected")
        elif key == "queue-master-locator" and value not in MASTER_LOCATORS:
            # rabbit_queue_location_validator:validate_strategy/1
            raise ValueError(f"Validation failed\n\n{_erlang(value)} invalid "
                             "queue-master-locator value\n")
        elif key == "queue-leader-locator" and value not in LEADER_LOCATORS:
            # rabbit_policies:validate_policy0/2
            raise ValueError(f"Validation failed\n\n{_erlang(value)} is not a valid queue "
                             "leader locator value\n")
    validate_sharding(definition)  # shards-per-node, routing-key (rabbitmq_sharding)
    err = validate_federation(definition)  # rabbitmq_federation's policy validator
    if err is not None:
        raise ValueError(f"Validation failed\n\n{err}\n")


def validate_operator(pattern: str, definition: Any, priority: Any, apply_to: str) -> None:
    """`validate` for an operator policy: only OPERATOR_KEYS, each a non-negative integer
    (`expires` positive); ValueError with the 400 reason otherwise (rabbit_policy
    operator_policy_validation)."""
    if not isinstance(definition, dict) or not definition:
        raise ValueError("definition must be a non-empty object")
    unknown = sorted(k for k in definition if k not in OPERATOR_KEYS)
    if unknown:
        raise ValueError(f"Validation failed\n\n{unknown} are not recognised policy settings")
    for key, value in definition.items():
        _non_negative(key, value, positive=key == "expires")
    validate(pattern, definition, priority, apply_to)


def merged_definition(policy: PolicyDef | None, operator: PolicyDef | None) -> dict[str, Any]:
    """The definition in force for an object with `policy` and `operator` policy
    (rabbit_policy merge_operator_definitions): every key of either; a key in both takes the
    lower value. {} when neither applies."""
    if operator is None:
        return dict(policy.definition) if policy is not None else {}
    out = dict(policy.definition) if policy is not None else {}
    for key, value in operator.definition.items():
        current = out.get(key)
        out[key] = value if not isinstance(current, int) else min(current, value)
    return out


def match(policies: Iterable[PolicyDef], vhost: str, name: str, kind: str,
          queue_type: str | None = None) -> PolicyDef | None:
    """The policy of `vhost` for the queue or exchange `name` (`kind` "queues" or
    "exchanges"): the highest priority among those whose apply-to covers the kind and whose
    pattern matches the name (re.search, as RabbitMQ's re:run); ties go to the policy name
    that sorts first; for a queue of `queue_type`, only policies with no key in that type's
    UNSUPPORTED_POLICIES. None if no policy applies. The predeclared `amq.*` exchanges get
    policies as any other (RabbitMQ 3.10.8: a policy for ^amq[.]direct$ shows on it, and
    rabbit-hole's spec federates amq.topic by one); the default exchange "" gets none here
    (RabbitMQ lists a matching policy on it, but routes by it without one: no alternate
    exchange, no federation)."""
    if kind == "exchanges" and not name:
        return None
    unsupported = UNSUPPORTED_POLICIES.get(queue_type or "", frozenset())
    best: PolicyDef | None = None
    for p in policies:
        if p.vhost != vhost or p.apply_to not in ("all", kind):
            continue
        if unsupported and not unsupported.isdisjoint(p.definition):
            continue  # a key this queue type does not support: not for it
        if not re.search(p.pattern, name):
            continue
        if best is None or (p.priority, _neg(p.name)) > (best.priority, _neg(best.name)):
            best = p
    return best


def _neg(name: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in name)


def effective_queue_arguments(arguments: dict[str, Any], policy: PolicyDef | None,
                              operator: PolicyDef | None = None,
                              queue_type: str = "classic") -> dict[str, Any]:
    """The queue's `x-` arguments with the policy and the operator policy folded in (see
    the module docstring; an operator policy's value only ever lowers a limit). A quorum
    queue (`queue_type` "quorum") takes its own keys by its own rules (QUORUM_RULES) and
    ignores the rest."""
    if policy is None and operator is None:
        return arguments
    lower, policy_wins, argument_wins = (
        QUORUM_RULES if queue_type == "quorum" else (LOWER_WINS, (), ARGUMENT_WINS))
    out = dict(arguments)
    for key, value in merged_definition(policy, operator).items():
        arg = f"x-{key}"
        if key in lower:
            current = out.get(arg)
            out[arg] = value if current is None else min(current, value)
        elif key in policy_wins:
            out[arg] = value
        elif key in argument_wins and arg not in out:
            out[arg] = value
    return out


def effective_exchange_arguments(arguments: dict[str, Any], policy: PolicyDef | None
                                 ) -> dict[str, Any]:
    """The exchange's arguments with the policy's `alternate-exchange` when the exchange
    declared none."""
    if policy is None or "alternate-exchange" not in policy.definition:
        return arguments
    if "alternate-exchange" in arguments:
        return arguments
    return {**arguments, "alternate-exchange": policy.definition["alternate-exchange"]}
