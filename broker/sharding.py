"""Sharding (rabbitmq_sharding; its README and rabbit_sharding_shard.erl,
rabbit_sharding_interceptor.erl and rabbit_sharding_policy_validator.erl in RabbitMQ 3.10.8
are the reference): one logical queue spread over N queues.

A policy on an exchange X with `shards-per-node` N (and optionally `routing-key`, default
"") makes the broker declare N queues named `sharding: X - NODE - i` (i = 0..N-1; durable
as X is) and bind each to X with the routing key, when the policy appears, grows or changes
its key, and again at boot. Usually X is an `x-modulus-hash` exchange, so each routing key
lands on one shard. Removing the policy unbinds the shards and leaves them (and their
messages) in place. Clients use the exchange's name as a queue name: `basic.consume` and
`basic.get` on "X" go to the shard with the fewest consumers, `queue.declare` of "X" answers
for shard 0, and `queue.delete`, `queue.bind`, `queue.unbind` and `queue.purge` of "X" are
406 "Can't delete sharded queue: <<\"X\">>" (and bind, unbind, purge alike).

Pure but for the vhost calls it makes (declare, bind, unbind); the vhost calls `apply` when
an exchange's policy changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from broker import errors

if TYPE_CHECKING:
    from broker.definitions import PolicyDef
    from broker.exchange import Exchange


class ShardQueue(Protocol):
    """A shard as the redirect reads it (QueueProcess satisfies it)."""

    @property
    def name(self) -> str: ...

    def consumer_count(self) -> int: ...


class ShardedVHost(Protocol):
    """The vhost as sharding sees it (broker/vhost.py's VHost satisfies it): its queues
    and exchanges, and queue declare / bind / unbind."""

    @property
    def queues(self) -> Mapping[str, ShardQueue]: ...

    @property
    def exchanges(self) -> Mapping[str, Exchange]: ...

    def declare_queue(self, name: str, *, durable: bool = False) -> object: ...

    def bind(self, kind: str, destination: str, source: str, routing_key: str,
             arguments: dict[str, Any] | None) -> None: ...

    def unbind(self, kind: str, destination: str, source: str, routing_key: str,
               arguments: dict[str, Any] | None) -> None: ...

SHARDING_KEYS = ("shards-per-node", "routing-key")


def validate(definition: dict[str, Any]) -> None:
    """rabbit_sharding_policy_validator: ValueError with its texts."""
    spn = definition.get("shards-per-node")
    key = definition.get("routing-key")
    if spn is None and key is None:
        return
    if spn is None:
        raise ValueError("shards-per-node must be specified")
    if isinstance(spn, bool) or not isinstance(spn, (int, float)):
        raise ValueError(f"shards-per-node should be a number, actually was {spn!r}")
    if spn < 0:
        raise ValueError(f"shards-per-node should be greater than 0, actually was {spn!r}")
    if key is not None and not isinstance(key, str):
        raise ValueError(f"routing-key should be binary, actually was {key!r}")


def settings(policy: Any) -> tuple[int, str] | None:
    """(shards per node, routing key) of a policy, or None when it does not shard."""
    if policy is None:
        return None
    spn = policy.definition.get("shards-per-node")
    if spn is None:
        return None
    return int(spn), policy.definition.get("routing-key", "")


def shard_name(exchange: str, node: str, i: int) -> str:
    """rabbit_sharding_util:make_queue_name."""
    return f"sharding: {exchange} - {node} - {i}"


def apply(vhost: ShardedVHost, exchange: Exchange, old: PolicyDef | None, new: PolicyDef | None,
          node: str) -> None:
    """The policy of `exchange` went from `old` to `new` (PolicyDefs or None): declare and
    bind its shards, unbind them when the key changed or sharding stopped
    (rabbit_sharding_shard maybe_update_shards / stop_sharding)."""
    before, after = settings(old), settings(new)
    if before is not None and (after is None or after[1] != before[1]):
        for i in range(before[0]):
            name = shard_name(exchange.name, node, i)
            if name in vhost.queues:
                vhost.unbind("queue", name, exchange.name, before[1], {})
    if after is not None:
        ensure(vhost, exchange, after, node)


def ensure(vhost: ShardedVHost, exchange: Exchange, spn_key: tuple[int, str], node: str) -> None:
    """Declare and bind the shards of `exchange` (idempotent)."""
    spn, key = spn_key
    for i in range(spn):
        name = shard_name(exchange.name, node, i)
        if name not in vhost.queues:
            vhost.declare_queue(name, durable=exchange.durable)
        vhost.bind("queue", name, exchange.name, key, {})


def redirect(vhost: ShardedVHost, name: str, method_name: str, node: str, method: Any) -> str:
    """The queue a client's `method_name` on queue `name` really addresses: `name` itself
    unless it names a sharded exchange. basic.consume / basic.get: the shard with the
    fewest consumers (ties: the lowest number); queue.declare: shard 0; queue.delete /
    bind / unbind / purge: 406 as rabbit_sharding_interceptor."""
    exchange = vhost.exchanges.get(name) if name else None
    spn_key = settings(exchange.policy) if exchange is not None else None
    if spn_key is None:
        return name
    action = {"queue.delete": "delete", "queue.bind": "bind", "queue.unbind": "unbind",
              "queue.purge": "purge"}.get(method_name)
    if action is not None:
        raise errors.amqp_error(errors.PreconditionFailed,
                                f"Can't {action} sharded queue: <<\"{name}\">>", method)
    if method_name == "queue.declare":
        return shard_name(name, node, 0)
    return fewest_consumers(name, [(q.consumer_count(), q.name)
                                   for q in shards(vhost, name, node) or ()], method)


def shards(vhost: ShardedVHost, name: str, node: str) -> list[Any] | None:
    """The shard queues that exist of exchange `name`, by number, when it is sharded (None
    when it is not)."""
    exchange = vhost.exchanges.get(name) if name else None
    spn_key = settings(exchange.policy) if exchange is not None else None
    if spn_key is None:
        return None
    return [q for i in range(spn_key[0])
            if (q := vhost.queues.get(shard_name(name, node, i))) is not None]


def fewest_consumers(name: str, counted: list[tuple[int, str]], method: Any) -> str:
    """The shard basic.consume / basic.get on exchange `name` takes: of `counted`
    [(consumer count, shard name)] by shard number, the one with the fewest consumers (ties:
    the lowest number). 406 when no shard exists."""
    if not counted:
        raise errors.amqp_error(errors.PreconditionFailed,
                                f"Error finding sharded queue for: <<\"{name}\">>", method)
    return min((n, i, q) for i, (n, q) in enumerate(counted))[2]
