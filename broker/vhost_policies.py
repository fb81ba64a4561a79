"""One vhost's policies and operator policies (rabbitmq.com/parameters.html#policies): which
ones there are, which one applies to a queue or an exchange, storing them, and giving every
queue and exchange the ones that match it now.

Owns: the vhost's name → PolicyDef tables (policies, and operator policies as RabbitMQ
stores them: runtime parameters of the `operator_policy` component), loaded from the
definitions database and written back to it on every change.
Talks to: `broker/policies.py` (validation, matching), the definitions database, the
vhost's queue processes (`apply_policy`, through their mailbox) and exchanges (their
`policy` field). Called by `broker/vhost.py`'s VHost, whose public policy methods delegate
here and which re-shards and invalidates routes after `apply`.
Must never: declare or delete a queue or exchange (sharding's reaction to a policy change
is the vhost's, through the `resharding` callback).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker import policies, sharding
from broker.definitions import Definitions, ParameterDef, PolicyDef

if TYPE_CHECKING:
    from broker.exchange import Exchange
    from broker.queue_process import QueueProcess


class VHostPolicies:
    """The policies of vhost `vhost`, persisted in `definitions` (None: nothing persists).
    `set_*` raise ValueError for an invalid policy (the HTTP API's 400); `set_*` and
    `clear_*` change the tables only: the vhost then calls `apply`."""

    def __init__(self, vhost: str, definitions: Definitions | None) -> None:
        self._vhost = vhost  # vhost name, stored with every policy
        self._definitions = definitions  # durable metadata store, or None
        # policies of this vhost by name (rabbitmq.com/parameters.html#policies), durable
        self.policies: dict[str, PolicyDef] = {
            p.name: p for p in (definitions.list_policies(vhost) if definitions else [])}
        # operator policies by name, stored as RabbitMQ stores them: runtime parameters of
        # the `operator_policy` component (value: pattern, definition, priority, apply-to)
        self.operator_policies: dict[str, PolicyDef] = {
            p.name: _operator_policy(vhost, p.name, p.value)
            for p in (definitions.list_parameters(vhost) if definitions else [])
            if p.component == policies.OPERATOR_COMPONENT}

    def policy_for(self, kind: str, name: str, queue_type: str | None = None
                   ) -> PolicyDef | None:
        """The policy that applies to queue or exchange `name` (`kind` "queues" or
        "exchanges"; a queue's `queue_type` filters out policies it does not support),
        see broker/policies.py."""
        if not self.policies:
            return None
        return policies.match(self.policies.values(), self._vhost, name, kind, queue_type)

    def operator_policy_for(self, kind: str, name: str, queue_type: str | None = None
                            ) -> PolicyDef | None:
        """The operator policy that applies to queue or exchange `name` (matched as
        policies are)."""
        if not self.operator_policies:
            return None
        return policies.match(self.operator_policies.values(), self._vhost, name, kind,
                              queue_type)

    def set_policy(self, name: str, pattern: str, definition: dict, priority: int = 0,
                   apply_to: str = "all") -> PolicyDef:
        """Validate, store (durable) and keep policy `name`."""
        policies.validate(pattern, definition, priority, apply_to)
        p = PolicyDef(self._vhost, name, pattern, dict(definition), priority, apply_to)
        if self._definitions is not None:
            self._definitions.set_policy(p)
        self.policies[name] = p
        return p

    def clear_policy(self, name: str) -> bool:
        """Forget policy `name` (and its stored copy); False if unknown."""
        if self.policies.pop(name, None) is None:
            return False
        if self._definitions is not None:
            self._definitions.clear_policy(self._vhost, name)
        return True

    def set_operator_policy(self, name: str, pattern: str, definition: dict,
                            priority: int = 0, apply_to: str = "all") -> PolicyDef:
        """Validate (only numeric limits, policies.OPERATOR_KEYS), store (durable, as a
        runtime parameter) and keep operator policy `name`."""
        policies.validate_operator(pattern, definition, priority, apply_to)
        p = PolicyDef(self._vhost, name, pattern, dict(definition), priority, apply_to)
        if self._definitions is not None:
            self._definitions.set_parameter(ParameterDef(
                self._vhost, policies.OPERATOR_COMPONENT, name,
                {"pattern": pattern, "definition": dict(definition), "priority": priority,
                 "apply-to": apply_to}))
        self.operator_policies[name] = p
        return p

    def clear_operator_policy(self, name: str) -> bool:
        """Forget operator policy `name` (and its stored parameter); False if unknown."""
        if self.operator_policies.pop(name, None) is None:
            return False
        if self._definitions is not None:
            self._definitions.clear_parameter(self._vhost, policies.OPERATOR_COMPONENT, name)
        return True

    def apply(self, queues: dict[str, QueueProcess], exchanges: dict[str, Exchange],
              resharding: Callable[[Exchange, PolicyDef | None], None]) -> None:
        """Give every queue and exchange (the vhost's tables) the policy and operator policy
        that match it now; `resharding(exchange, old_policy)` for each exchange whose
        change adds, drops or alters a sharding policy, as it happens."""
        for q in list(queues.values()):
            p = self.policy_for("queues", q.name, q.queue_type)
            op = self.operator_policy_for("queues", q.name, q.queue_type)
            if p != q.policy or op != q.operator_policy:
                q.call(q.apply_policy, p, op)
        for x in list(exchanges.values()):
            old, x.policy = x.policy, self.policy_for("exchanges", x.name)
            if old != x.policy and (sharding.settings(old) or sharding.settings(x.policy)):
                resharding(x, old)


def _operator_policy(vhost: str, name: str, value: Any) -> PolicyDef:
    """An operator policy from its stored runtime-parameter value."""
    return PolicyDef(vhost, name, str(value.get("pattern", "")),
                     dict(value.get("definition") or {}), int(value.get("priority", 0)),
                     str(value.get("apply-to", "all")))
