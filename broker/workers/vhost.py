"""A vhost of one worker process of a multi-worker broker (issue 47, docs/multicore.md
"Definitions in one agreed order").

Owns: `WorkerVHost`, the VHost every worker holds: the same tables and checks, with three
differences. (1) A new queue owned by another worker is a `RemoteQueue` (`_new_queue`
asks the runtime where the queue lives). (2) In the metadata owner (worker 0) every change
made at the top level (a declare, delete, bind, unbind, policy, an exclusive owner's
close) is told to the runtime as an operation record (`ops`), which sends it to every other
worker in one agreed order. (3) In the other workers changes are made only when the runtime
replays the owner's records; the two that start in a queue or a connection of this worker
(a queue deleting itself: auto-delete, x-expires; an exclusive owner's connection closing)
are forwarded to the owner instead. Talks to: `VHostRuntime` (broker/workers/runtime.py).
Must never: decide where a queue lives, or send anything itself.

Operation records (replayed by `apply`, in every worker but the owner):
("xdecl", vhost, name, type, durable, auto_delete, internal, arguments, check_reserved),
("xdel", vhost, name), ("bind" | "unbind", vhost, kind, destination, source, routing_key,
arguments), ("qdecl", vhost, name, durable, exclusive, auto_delete, arguments, owner ref,
worker), ("qdel", vhost, name), ("closed", vhost, owner ref), ("policy", vhost, name,
pattern, definition, priority, apply_to), ("unpolicy", vhost, name), and the same two for
operator policies ("opolicy", "unopolicy"). The runtime sends each with the placements the
owner chose while making it (a sharding policy declares its shards inside the call).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from broker.vhost import VHost
from broker.workers.placement import LEAST_QUEUES, locator
from broker.workers.refs import ConnRef

if TYPE_CHECKING:
    from broker.facades import QueueFacade
    from broker.queue_process import QueueProcess
    from broker.workers.remote import RemoteQueue


class VHostRuntime(Protocol):
    """The worker runtime as its vhosts see it."""

    @property
    def index(self) -> int: ...

    @property
    def is_owner(self) -> bool: ...

    @property
    def replaying(self) -> bool: ...  # applying the owner's records now

    @property
    def started(self) -> bool: ...  # the broker is up

    def owner_ref(self, owner: Any) -> ConnRef | None: ...  # a connection, as records name it

    def placement(self, vhost: str, name: str, exclusive_owner: Any,
                  queue_type: str = "classic", how: str = LEAST_QUEUES) -> int: ...

    def remote_queue(self, vhost: str, name: str, worker: int, **attrs: Any) -> RemoteQueue: ...

    def changed(self, op: tuple) -> None: ...  # owner: a top-level change to replicate

    def forward(self, op: tuple) -> None: ...  # replica: ask the owner to make this change

    def settled(self, then: Callable[[], None]) -> None: ...  # every change so far applied


class WorkerVHost(VHost):
    """See the module docstring. `runtime` is set on the subclass `bind` makes."""

    runtime: VHostRuntime

    @property
    def live(self) -> bool:
        """The broker is up: changes are told (the owner) or forwarded (the others);
        before, recovery builds every worker's tables from the same definitions."""
        return self.runtime.started

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # the owner: other workers' channels' message counts here, as last reported
        # (worker -> MessageStats; broker/management/shapes.py vhost_stats adds them)
        self.remote_stats: dict[int, Any] = {}
        # nesting of the wrapped calls: only the outermost is told; what the constructor
        # declares (the default exchanges) every worker's add_vhost declares alike
        self._depth = 1
        super().__init__(*args, **kwargs)
        self._depth = 0

    # -- where queues live -------------------------------------------------------------------
    def _new_queue(self, name: str, queue_type: str, durable: bool, auto_delete: bool,
                   exclusive_owner: Any, arguments: dict) -> QueueProcess:
        policy = self.policy_for("queues", name, queue_type)
        how = locator(queue_type, arguments,
                      policy.definition if policy is not None else {},
                      self._config.queue_master_locator, self._config.queue_leader_locator)
        worker = self.runtime.placement(self.name, name, exclusive_owner, queue_type, how)
        if worker == self.runtime.index:
            return super()._new_queue(name, queue_type, durable, auto_delete,
                                      exclusive_owner, arguments)
        proxy = self.runtime.remote_queue(
            self.name, name, worker, durable=durable, auto_delete=auto_delete,
            exclusive_owner=exclusive_owner, arguments=arguments, queue_type=queue_type,
            policy=policy)
        return proxy  # type: ignore[return-value]  # a QueueFacade the vhost holds alike

    # -- telling changes ---------------------------------------------------------------------
    def _tell(self, call: Callable[[], Any], op: Callable[[Any], tuple | None]) -> Any:
        """Run `call`; in the owner, at the top level, tell the runtime `op(result)`."""
        self._depth += 1
        try:
            result = call()
        finally:
            self._depth -= 1
        if self._depth == 0 and self.live and self.runtime.is_owner:
            record = op(result)
            if record is not None:
                self.runtime.changed(record)
        return result

    def declare_exchange(self, name: str, type_: str, *, passive: bool = False,
                         durable: bool = False, auto_delete: bool = False,
                         internal: bool = False, arguments: dict | None = None,
                         method: Any = None, check_reserved: bool = False) -> Any:
        args = dict(arguments or {})
        return self._tell(
            lambda: super(WorkerVHost, self).declare_exchange(
                name, type_, passive=passive, durable=durable, auto_delete=auto_delete,
                internal=internal, arguments=args, method=method,
                check_reserved=check_reserved),
            lambda x: None if passive else ("xdecl", self.name, name, type_, durable,
                                            auto_delete, internal, args, check_reserved))

    def delete_exchange(self, name: str, if_unused: bool, method: Any = None) -> None:
        self._tell(lambda: super(WorkerVHost, self).delete_exchange(name, if_unused, method),
                   lambda _: ("xdel", self.name, name))

    def bind(self, kind: str, destination: str, source: str, routing_key: str,
             arguments: dict | None, owner: Any = None, method: Any = None) -> None:
        args = dict(arguments or {})
        self._tell(lambda: super(WorkerVHost, self).bind(kind, destination, source,
                                                         routing_key, args, owner, method),
                   lambda _: ("bind", self.name, kind, destination, source, routing_key,
                              args))

    def unbind(self, kind: str, destination: str, source: str, routing_key: str,
               arguments: dict | None, owner: Any = None, method: Any = None) -> None:
        args = dict(arguments or {})
        self._tell(lambda: super(WorkerVHost, self).unbind(kind, destination, source,
                                                           routing_key, args, owner, method),
                   lambda _: ("unbind", self.name, kind, destination, source, routing_key,
                              args))

    def declare_queue(self, name: str, **kwargs: Any) -> Any:
        def op(queue: Any) -> tuple | None:
            if kwargs.get("passive") or kwargs.get("recovering") or kwargs.get("replaying"):
                return None
            exclusive_owner = queue.exclusive_owner
            return ("qdecl", self.name, queue.name, queue.durable,
                    exclusive_owner is not None, queue.auto_delete, dict(queue.arguments),
                    self.runtime.owner_ref(exclusive_owner),
                    self.runtime.placement(self.name, queue.name, exclusive_owner))
        return self._tell(lambda: super(WorkerVHost, self).declare_queue(name, **kwargs), op)

    def delete_queue_now(self, queue: QueueFacade) -> int:
        runtime = self.runtime
        if self.live and not runtime.is_owner and not runtime.replaying:
            if self.queues.get(queue.name) is queue:  # a queue of ours deletes itself
                runtime.forward(("qdel", self.name, queue.name))
            return 0
        return self._tell(lambda: super(WorkerVHost, self).delete_queue_now(queue),
                          lambda _: ("qdel", self.name, queue.name))

    def connection_closed(self, owner: Any) -> None:
        runtime = self.runtime
        ref = runtime.owner_ref(owner)
        if self.live and not runtime.is_owner and not runtime.replaying:
            if any(q.exclusive_owner is owner for q in self.queues.values()):
                runtime.forward(("closed", self.name, ref))
            return
        self._tell(lambda: super(WorkerVHost, self).connection_closed(owner),
                   lambda _: ("closed", self.name, ref))

    def release_connection(self, owner: Any, then: Callable[[], None]) -> None:
        """connection_closed; `then()` once every worker has applied the deletion of
        `owner`'s exclusive queues (Runtime.settled), at once when it had none."""
        had = self.live and any(q.exclusive_owner is owner for q in self.queues.values())
        self.connection_closed(owner)
        if had:
            self.runtime.settled(then)
        else:
            then()

    def set_policy(self, name: str, pattern: str, definition: dict, priority: int = 0,
                   apply_to: str = "all") -> Any:
        return self._tell(
            lambda: super(WorkerVHost, self).set_policy(name, pattern, definition, priority,
                                                        apply_to),
            lambda _: ("policy", self.name, name, pattern, definition, priority, apply_to))

    def clear_policy(self, name: str) -> bool:
        return self._tell(lambda: super(WorkerVHost, self).clear_policy(name),
                          lambda found: ("unpolicy", self.name, name) if found else None)

    def set_operator_policy(self, name: str, pattern: str, definition: dict,
                            priority: int = 0, apply_to: str = "all") -> Any:
        return self._tell(
            lambda: super(WorkerVHost, self).set_operator_policy(name, pattern, definition,
                                                                 priority, apply_to),
            lambda _: ("opolicy", self.name, name, pattern, definition, priority, apply_to))

    def clear_operator_policy(self, name: str) -> bool:
        return self._tell(lambda: super(WorkerVHost, self).clear_operator_policy(name),
                          lambda found: ("unopolicy", self.name, name) if found else None)


def bind(runtime: VHostRuntime) -> type[WorkerVHost]:
    """A WorkerVHost subclass whose vhosts talk to `runtime` (Broker.vhost_class)."""
    return type("WorkerVHost", (WorkerVHost,), {"runtime": runtime})


def apply(vhost: VHost, op: tuple, resolve: Callable[[Any], Any]) -> None:
    """Replay the owner's operation record `op` on this worker's `vhost` (its checks pass:
    the owner made the same call on the same tables). `resolve` turns a ConnRef into this
    worker's connection when it is one of ours."""
    kind = op[0]
    if kind == "xdecl":
        _, _, name, type_, durable, auto_delete, internal, arguments, check_reserved = op
        vhost.declare_exchange(name, type_, durable=durable, auto_delete=auto_delete,
                               internal=internal, arguments=arguments,
                               check_reserved=check_reserved)
    elif kind == "xdel":
        vhost.delete_exchange(op[2], False)
    elif kind in ("bind", "unbind"):
        _, _, dkind, destination, source, routing_key, arguments = op
        queue = vhost.queues.get(destination) if dkind == "queue" else None
        owner = queue.exclusive_owner if queue is not None else None
        getattr(vhost, kind)(dkind, destination, source, routing_key, arguments, owner)
    elif kind == "qdecl":
        _, _, name, durable, exclusive, auto_delete, arguments, owner_ref, _worker = op
        vhost.declare_queue(name, durable=durable, exclusive=exclusive,
                            auto_delete=auto_delete, arguments=arguments,
                            owner=resolve(owner_ref), replaying=True)
    elif kind == "qdel":
        queue = vhost.queues.get(op[2])
        if queue is not None:
            vhost.delete_queue_now(queue)
    elif kind == "closed":
        vhost.connection_closed(resolve(op[2]))
    elif kind == "policy":
        _, _, name, pattern, definition, priority, apply_to = op
        vhost.set_policy(name, pattern, definition, priority, apply_to)
    elif kind == "unpolicy":
        vhost.clear_policy(op[2])
    elif kind == "opolicy":
        _, _, name, pattern, definition, priority, apply_to = op
        vhost.set_operator_policy(name, pattern, definition, priority, apply_to)
    elif kind == "unopolicy":
        vhost.clear_operator_policy(op[2])
    else:
        raise ValueError(f"unknown operation record {kind!r}")
