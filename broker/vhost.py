"""A virtual host: its exchanges, queues and bindings (RabbitMQ `rabbit_vhost`,
`rabbit_exchange`, `rabbit_amqqueue`, `rabbit_binding`).

Owns: the name → Exchange and name → QueueProcess tables of one vhost and the declare/bind/delete
checks with RabbitMQ's reply codes and texts (the argument rules, which need no table, are
`broker/declare_checks.py`'s). Routing a publish to queue processes (and the
route cache) is `broker/vhost_routing.py`'s, which the VHost tells of every topology change;
storing, matching and applying policies is `broker/vhost_policies.py`'s.
Channels call it synchronously (it is metadata, like RabbitMQ's Mnesia tables); it never
touches sockets or a queue's messages (it asks the queue process).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from broker import errors, limits, replication_hook, sharding
from broker.declare_checks import (
    QUEUE_ARGUMENTS,
    bool_text,
    check_args,
    check_replicated_properties,
    check_server_named,
    queue_type_of,
    validate_queue_arguments,
)
from broker.dedup.cache import DedupCache
from broker.definitions import (
    BindingDef,
    Definitions,
    ExchangeDef,
    PolicyDef,
    QueueDef,
)
from broker.delayed.holder import DelayedMessages
from broker.exchange import Exchange, new_routing
from broker.exchange.dedup import TYPE as DEDUP_TYPE
from broker.exchange.delayed import TYPE as DELAYED_TYPE
from broker.msg_store.vhost import vhost_dir_name
from broker.queue_process import QueueProcess
from broker.stats import Churn, MessageStats
from broker.stream import arguments as stream_arguments
from broker.trace import TRACE_EXCHANGE
from broker.vhost_policies import VHostPolicies
from broker.vhost_routing import Routes

if TYPE_CHECKING:
    from broker.facades import QueueFacade
    from broker.queue_process import ExclusiveOwner
    from broker.trace import Tracer

log = logging.getLogger("broker.vhost")

# the exchanges every vhost has besides the default one: (name, type, internal), all durable
# (rabbit_vhost:do_add, RabbitMQ 3.10.8); amq.rabbitmq.trace is the firehose's (trace.py)
PREDECLARED = (
    ("amq.direct", "direct", False), ("amq.fanout", "fanout", False),
    ("amq.topic", "topic", False), ("amq.headers", "headers", False),
    ("amq.match", "headers", False), (TRACE_EXCHANGE, "topic", True),
)

class VHost:
    """One vhost. Errors raised carry RabbitMQ's codes: 403 ACCESS_REFUSED (reserved names,
    default exchange), 404 NOT_FOUND, 405 RESOURCE_LOCKED (exclusive queues), 406
    PRECONDITION_FAILED (inequivalent redeclare, in use), 503 COMMAND_INVALID (unknown exchange
    type, a hard error)."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop, config: Any,
                 bq_factory: Callable[..., Any], definitions: Definitions | None = None,
                 stores: Any = None, memory_monitor: Any = None,
                 loop_busy: Callable[[], bool] | None = None) -> None:
        self.name = name  # vhost name, e.g. "/"
        self.definitions = definitions  # durable metadata store (None: nothing persists)
        self.stores = stores  # the vhost's VhostStores (persistent + transient), or None
        self.closed_stats = MessageStats()  # message counts of this vhost's closed channels
        self.closed_octets = [0, 0]  # bytes its closed connections read, wrote (recv/send_oct)
        self.churn = Churn()  # queues declared, created, deleted (metrics)
        self._loop = loop  # handed to new queue processes
        self._config = config  # BrokerConfig (credit flow settings)
        self._bq_factory = bq_factory  # builds a queue's backing queue
        self._memory_monitor = memory_monitor  # ResourceMonitor queues report RAM use to
        self._loop_busy = loop_busy  # is the event loop saturated? (queues' consumer bias)
        self.exchanges: dict[str, Exchange] = {}  # name -> exchange ("" is the default)
        # bumped by every change that can change where a publish goes (exchanges, bindings,
        # queues, policies); channels compare it to reuse their checks of a publish
        self.topology_version = 0
        # told after every change of exchanges, queues, bindings or policies (federation
        # follows policies and propagates bindings); None when nothing listens
        self.topology_observer: Callable[[VHost], None] | None = None
        self.queues: dict[str, QueueProcess] = {}  # name -> queue process
        # where publishes go, with the route cache (broker/vhost_routing.py); reads the two
        # tables above, told of every topology change
        self.routes = Routes(self.exchanges, self.queues)
        self.limits: dict[str, int] = {}  # max-queues / max-connections (the Users' live dict)
        # policies and operator policies, stored and matched (broker/vhost_policies.py)
        self._policies = VHostPolicies(name, definitions)
        # name -> policy / operator policy: the same dicts as self._policies' (read by the
        # HTTP API and definitions export)
        self.policies: dict[str, PolicyDef] = self._policies.policies
        self.operator_policies: dict[str, PolicyDef] = self._policies.operator_policies
        # the firehose tracer while tracing is on here (broker/trace.py), else None; channels
        # take it at channel.open and are told when it changes
        self.trace: Tracer | None = None
        self.declare_exchange("", "direct", durable=True)
        for ex_name, ex_type, internal in PREDECLARED:
            self.declare_exchange(ex_name, ex_type, durable=True, internal=internal)

    # -- naming helpers ---------------------------------------------------------------------
    def _ex(self, name: str) -> str:
        return f"exchange '{name}' in vhost '{self.name}'"

    def _q(self, name: str) -> str:
        return f"queue '{name}' in vhost '{self.name}'"

    # -- exchanges --------------------------------------------------------------------------
    def declare_exchange(self, name: str, type_: str, *, passive: bool = False,
                         durable: bool = False, auto_delete: bool = False,
                         internal: bool = False, arguments: dict | None = None,
                         method: Any = None, check_reserved: bool = False) -> Exchange:
        """exchange.declare (AMQP 0-9-1 §1.6.2.1, RabbitMQ rabbit_channel)."""
        arguments = arguments or {}
        existing = self.exchanges.get(name)
        if check_reserved and name == "":
            raise errors.amqp_error(
                errors.AccessRefused, "operation not permitted on the default exchange", method)
        if passive:
            if existing is None:
                raise errors.amqp_error(errors.NotFound, f"no {self._ex(name)}", method)
            return existing
        if check_reserved and (name.startswith("amq.") or name == ""):
            if name == "":
                raise errors.amqp_error(
                    errors.AccessRefused, "operation not permitted on the default exchange",
                    method)
            if existing is None or existing.type != type_:
                raise errors.amqp_error(
                    errors.AccessRefused,
                    f"exchange name '{name}' contains reserved prefix 'amq.*'", method)
        if existing is not None:
            for field, new, old in (("type", type_, existing.type),
                                    ("durable", durable, existing.durable),
                                    ("auto_delete", auto_delete, existing.auto_delete),
                                    ("internal", internal, existing.internal)):
                if new != old:
                    shown = (new, old) if field == "type" else (bool_text(new), bool_text(old))
                    raise errors.amqp_error(
                        errors.PreconditionFailed,
                        f"inequivalent arg '{field}' for {self._ex(name)}: "
                        f"received '{shown[0]}' but current is '{shown[1]}'", method)
            # rabbit_exchange compares only alternate-exchange among the arguments
            check_args(("alternate-exchange",), arguments, existing.arguments,
                             self._ex(name), method)
            return existing
        routing = new_routing(type_, arguments)  # 503 for an unknown type, 406 bad args
        exchange = Exchange(name=name, type=type_, durable=durable, auto_delete=auto_delete,
                            internal=internal, arguments=arguments, routing=routing,
                            policy=self.policy_for("exchanges", name))
        self.exchanges[name] = exchange
        if not routing.key_only:
            self.routes.property_routed += 1
        if type_ == DELAYED_TYPE:
            self._start_holder(exchange, fresh=True)
        elif type_ == DEDUP_TYPE:
            self._start_cache(exchange, fresh=True)
        self._topology_changed()
        if durable and self.definitions is not None and check_reserved:
            self.definitions.add_exchange(ExchangeDef(
                self.name, name, type_, True, auto_delete, internal, arguments))
        spn_key = sharding.settings(exchange.policy)
        if spn_key is not None:  # a sharding policy was there first (rabbitmq_sharding)
            sharding.ensure(self, exchange, spn_key, self._config.resolved_node_name())
        return exchange

    def delete_exchange(self, name: str, if_unused: bool, method: Any = None) -> None:
        """exchange.delete; deleting a missing exchange succeeds (RabbitMQ ≥ 3.2)."""
        if name == "" or name.startswith("amq."):
            raise errors.amqp_error(
                errors.AccessRefused,
                "operation not permitted on the default exchange" if name == ""
                else f"deletion of system {self._ex(name)} not allowed", method)
        exchange = self.exchanges.get(name)
        if exchange is None:
            return
        if if_unused and len(exchange.routing):
            raise errors.amqp_error(errors.PreconditionFailed, f"{self._ex(name)} in use", method)
        self._remove_exchange(name)

    def _remove_exchange(self, name: str) -> None:
        exchange = self.exchanges.pop(name, None)
        if exchange is not None and exchange.type == DELAYED_TYPE:
            self._stop_holder(exchange, delete=True)
        elif exchange is not None and exchange.type == DEDUP_TYPE:
            self._stop_cache(exchange, delete=True)
        self._topology_changed()
        if exchange is not None and not exchange.routing.key_only:
            self.routes.property_routed -= 1
        if exchange is not None and exchange.durable and self.definitions is not None:
            self.definitions.remove_exchange(self.name, name)
        dest = ("exchange", name)
        for other in list(self.exchanges.values()):
            if len(other.routing):
                other.routing.remove_destination(dest)
                self._maybe_auto_delete_exchange(other)

    # -- delayed exchanges (broker/delayed/) -------------------------------------------------
    def _delayed_dir(self, name: str | None = None) -> str | None:
        """Where the delayed exchange `name` keeps its messages (None: the parent of every
        one of this vhost's; None without storage): `<vhost dir>/delayed/<md5 of name>`."""
        if self.stores is None:
            return None
        root = os.path.join(self.stores.root, "delayed")
        return root if name is None else os.path.join(root, vhost_dir_name(name))

    def _start_holder(self, exchange: Exchange, fresh: bool) -> None:
        """Give delayed exchange `exchange` its holder; `fresh`: a new exchange, whose
        directory may only hold a deleted namesake's leftovers."""
        if getattr(exchange.routing, "holder", None) is not None:
            return  # it has one
        directory = self._delayed_dir(exchange.name)
        if fresh and directory is not None and os.path.isdir(directory):
            shutil.rmtree(directory, ignore_errors=True)
        holder = DelayedMessages(
            self._loop, self, exchange.name, directory,
            fsync=bool(getattr(self._config, "fsync", True)),
            credit_initial=getattr(self._config, "credit_flow_initial", 400),
            credit_more_after=getattr(self._config, "credit_flow_more_after", 200))
        exchange.routing.holder = holder  # type: ignore[attr-defined]  # a DelayedRouting

    def _stop_holder(self, exchange: Exchange, delete: bool) -> None:
        holder = getattr(exchange.routing, "holder", None)
        if holder is not None:
            exchange.routing.holder = None  # type: ignore[attr-defined]  # a DelayedRouting
            holder.terminate(delete)

    # -- deduplicating exchanges (broker/dedup/) ---------------------------------------------
    def _dedup_dir(self, name: str | None = None) -> str | None:
        """Where deduplicating exchange `name` keeps its cache with x-cache-persistence disk
        (None: the parent of every one; None without storage)."""
        if self.stores is None:
            return None
        root = os.path.join(self.stores.root, "dedup")
        return root if name is None else os.path.join(root, vhost_dir_name(name))

    def _start_cache(self, exchange: Exchange, fresh: bool) -> None:
        routing: Any = exchange.routing  # a DedupRouting
        if routing.cache is not None:
            return  # it has one
        directory = self._dedup_dir(exchange.name) if routing.persistence == "disk" else None
        if fresh and directory is not None and os.path.isdir(directory):
            shutil.rmtree(directory, ignore_errors=True)  # a deleted namesake's
        if directory is not None:
            os.makedirs(directory, exist_ok=True)
        routing.cache = DedupCache(routing.size, routing.ttl_ms, directory)
        routing.names = (self.name, exchange.name)  # what other workers know it by

    def _stop_cache(self, exchange: Exchange, delete: bool) -> None:
        routing: Any = exchange.routing
        cache, routing.cache = routing.cache, None
        if cache is not None:
            cache.close()
        directory = self._dedup_dir(exchange.name)
        if delete and directory is not None and os.path.isdir(directory):
            shutil.rmtree(directory, ignore_errors=True)
            replication_hook.deleted(directory)

    def dedup_exchanges(self) -> list[Exchange]:
        """This vhost's x-message-deduplication exchanges."""
        return [x for x in self.exchanges.values() if x.type == DEDUP_TYPE]

    def delayed_holders(self) -> list[DelayedMessages]:
        """The holders of this vhost's delayed exchanges."""
        return [x.routing.holder for x in self.exchanges.values()  # type: ignore[attr-defined]
                if x.type == DELAYED_TYPE and x.routing.holder is not None]  # type: ignore[attr-defined]

    def _maybe_auto_delete_exchange(self, exchange: Exchange) -> None:
        if exchange.auto_delete and not len(exchange.routing) and exchange.name in self.exchanges:
            self._remove_exchange(exchange.name)

    def get_exchange(self, name: str, method: Any = None) -> Exchange:
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise errors.amqp_error(errors.NotFound, f"no {self._ex(name)}", method)
        return exchange

    # -- bindings ---------------------------------------------------------------------------
    def _destination(self, kind: str, name: str, owner: ExclusiveOwner | None, method: Any) -> Any:
        if kind == "queue":
            self.get_queue(name, owner, method)
            return name
        self.get_exchange(name, method)
        return ("exchange", name)

    def bind(self, kind: str, destination: str, source: str, routing_key: str,
             arguments: dict | None, owner: ExclusiveOwner | None = None, method: Any = None) -> None:
        """queue.bind / exchange.bind. Binding to or from the default exchange → 403."""
        arguments = arguments or {}
        if source == "" or (kind == "exchange" and destination == ""):
            raise errors.amqp_error(
                errors.AccessRefused, "operation not permitted on the default exchange", method)
        dest = self._destination(kind, destination, owner, method)
        exchange = self.get_exchange(source, method)
        exchange.routing.validate_binding(routing_key, arguments)
        if exchange.routing.add_binding(dest, routing_key, arguments):
            self._topology_changed()
            if self._durable_binding(exchange, kind, destination):
                self.definitions.add_binding(BindingDef(  # type: ignore[union-attr]
                    self.name, source, destination, kind, routing_key, arguments))

    def _durable_binding(self, exchange: Exchange, kind: str, destination: str) -> bool:
        """A binding is durable when both ends are (RabbitMQ rabbit_binding)."""
        if self.definitions is None or not exchange.durable:
            return False
        if kind == "queue":
            q = self.queues.get(destination)
            return q is not None and q.durable and q.exclusive_owner is None
        x = self.exchanges.get(destination)
        return x is not None and x.durable

    def unbind(self, kind: str, destination: str, source: str, routing_key: str,
               arguments: dict | None, owner: ExclusiveOwner | None = None, method: Any = None) -> None:
        """queue.unbind / exchange.unbind; a missing binding, queue or exchange is not an
        error (RabbitMQ 3.10)."""
        arguments = arguments or {}
        if source == "" or (kind == "exchange" and destination == ""):
            raise errors.amqp_error(
                errors.AccessRefused, "operation not permitted on the default exchange", method)
        exchange = self.exchanges.get(source)
        known = self.queues if kind == "queue" else self.exchanges
        if exchange is None or destination not in known:
            return
        dest = self._destination(kind, destination, owner, method)
        if exchange.routing.remove_binding(dest, routing_key, arguments):
            self._topology_changed()
            if self._durable_binding(exchange, kind, destination):
                self.definitions.remove_binding(BindingDef(  # type: ignore[union-attr]
                    self.name, source, destination, kind, routing_key, arguments))
            self._maybe_auto_delete_exchange(exchange)

    # -- queues -----------------------------------------------------------------------------
    def get_queue(self, name: str, owner: ExclusiveOwner | None = None, method: Any = None) -> QueueProcess:
        """The queue `name`, checking exclusivity: 404 if missing, 405 if another connection
        owns it."""
        queue = self.queues.get(name)
        if queue is None:
            raise errors.amqp_error(errors.NotFound, f"no {self._q(name)}", method)
        if queue.exclusive_owner is not None and queue.exclusive_owner is not owner:
            raise self.locked_error(name, method)
        return queue

    def locked_error(self, name: str, method: Any = None) -> Exception:
        """405 RESOURCE_LOCKED for queue `name`, RabbitMQ's text (str() is the text
        without the reply code name)."""
        return errors.amqp_error(
            errors.ResourceLocked,
            f"cannot obtain exclusive access to locked {self._q(name)}. It could be "
            "originally declared on another connection or the exclusive property value "
            "does not match that of the original declaration.", method)

    def declare_queue(self, name: str, *, passive: bool = False, durable: bool = False,
                      exclusive: bool = False, auto_delete: bool = False,
                      arguments: dict | None = None, owner: ExclusiveOwner | None = None,
                      method: Any = None, recovering: bool = False,
                      authorize: Callable[[str, bool], None] | None = None,
                      replaying: bool = False) -> QueueProcess:
        """queue.declare (AMQP 0-9-1 §1.7.2.1); "" → a server-named `amq.gen-…` queue.
        `recovering` (a durable queue at boot) and `replaying` (another worker process's
        declare, broker/workers/) take a server-made `amq.` name as it is.

        `authorize(name, exists)`, when given, runs once the name is known and may raise
        (the channel's permission checks, 403). A new queue beyond the vhost's `max-queues`
        limit → 406 "cannot declare queue 'q': queue limit in vhost '/' (N) is reached"."""
        arguments = arguments or {}
        if not name:
            if passive:
                raise errors.amqp_error(errors.NotFound, f"no {self._q(name)}", method)
            check_server_named(queue_type_of(arguments), method)
            name = "amq.gen-" + uuid.uuid4().hex[:22]
        elif name.startswith("amq.") and not passive and not (recovering or replaying):
            raise errors.amqp_error(
                errors.AccessRefused, f"queue name '{name}' contains reserved prefix 'amq.*'",
                method)
        if passive:
            queue = self.get_queue(name, owner, method)
            queue.touch()  # a declare renews x-expires' lease (rabbit_amqqueue_process stat)
            return queue
        existing = self.queues.get(name)
        if authorize is not None:
            authorize(name, existing is not None)
        self.churn.queues_declared += 1
        queue_type = queue_type_of(arguments)
        try:
            validate_queue_arguments(arguments, self._q(name), method)
            if existing is None and queue_type != "classic":
                if queue_type == "stream":
                    stream_arguments.check_declare(self._q(name), arguments, method)
                check_replicated_properties(queue_type, self._q(name), durable, exclusive,
                                            auto_delete, method)
        except errors.AMQPError as exc:
            if not recovering:
                raise
            # stored by an earlier version whose declare allowed it: kept as it was stored,
            # messages and all, rather than lost at boot
            log.warning("%s was stored with what a declare now refuses (%s); recovered as "
                        "stored", self._q(name), errors.close_args(exc)[1])
        durable = durable and not exclusive  # rabbit_channel: an exclusive queue never is
        if existing is not None:
            self.get_queue(name, owner, method)  # 405 if locked
            self._check_equivalent(existing, durable, exclusive, auto_delete, arguments, method)
            existing.touch()
            return existing
        max_queues = self.limits.get("max-queues")
        if not recovering and max_queues is not None and limits.over(max_queues,
                                                                     len(self.queues)):
            raise errors.amqp_error(
                errors.PreconditionFailed,
                limits.vhost_queues_text(name, self.name, max_queues), method)
        queue = self._new_queue(name, queue_type, durable, auto_delete,
                                owner if exclusive else None, arguments)
        operator = self.operator_policy_for("queues", name, queue_type)
        if operator is not None:
            queue.apply_policy(queue.policy, operator)
        self.queues[name] = queue  # the default exchange routes by name: no binding needed
        self._topology_changed()
        self.churn.queues_created += 1
        if durable and not exclusive and self.definitions is not None and not recovering:
            self.definitions.add_queue(QueueDef(self.name, name, True, auto_delete, arguments))
        return queue

    def _new_queue(self, name: str, queue_type: str, durable: bool, auto_delete: bool,
                   exclusive_owner: ExclusiveOwner | None, arguments: dict) -> QueueProcess:
        """The process of a new queue of `queue_type` (classic, quorum or stream). A vhost
        of a multi-worker broker (broker/workers/vhost.py) overrides it to hold a queue
        another worker owns."""
        if queue_type == "stream":
            from broker.stream.queue import StreamQueue  # streams only when declared

            return StreamQueue(
                self._loop, self, name, arguments=arguments,
                data_dir=self._config.data_dir, fsync=self._config.fsync,
                credit_initial=self._config.credit_flow_initial,
                credit_more_after=self._config.credit_flow_more_after,
                policy=self.policy_for("queues", name, queue_type))
        cls: type[QueueProcess] = QueueProcess
        extra: dict[str, Any] = {}
        if queue_type == "quorum":
            from broker.quorum.queue import QuorumQueue  # quorum only when declared

            cls = QuorumQueue
            extra["settle_timeout"] = (
                self._config.dead_letter_worker_publisher_confirm_timeout)
        return cls(
            self._loop, self, name, durable=durable, auto_delete=auto_delete,
            exclusive_owner=exclusive_owner, arguments=arguments,
            bq_factory=self._bq_factory,
            credit_initial=self._config.credit_flow_initial,
            credit_more_after=self._config.credit_flow_more_after,
            confirm_on=self._config.confirm_on,
            policy=self.policy_for("queues", name, queue_type),
            memory_monitor=self._memory_monitor, loop_busy=self._loop_busy, **extra)

    def _check_equivalent(self, q: QueueProcess, durable: bool, exclusive: bool,
                          auto_delete: bool, arguments: dict, method: Any) -> None:
        if exclusive != (q.exclusive_owner is not None):
            raise self.locked_error(q.name, method)
        for field, new, old in (("durable", durable, q.durable),
                                ("auto_delete", auto_delete, q.auto_delete)):
            if new != old:
                raise errors.amqp_error(
                    errors.PreconditionFailed,
                    f"inequivalent arg '{field}' for {self._q(q.name)}: "
                    f"received '{bool_text(new)}' but current is '{bool_text(old)}'", method)
        # the existing queue's type's arguments, in its list's order (rabbit_amqqueue:
        # assert_args_equivalence); a classic queue is classic with or without x-queue-type
        new_args, old_args = arguments, q.arguments
        if q.queue_type == "classic":
            new_args = {"x-queue-type": "classic", **arguments}
            old_args = {"x-queue-type": "classic", **q.arguments}
        check_args(QUEUE_ARGUMENTS[q.queue_type], new_args, old_args, self._q(q.name), method)

    def delete_queue(self, name: str, if_unused: bool, if_empty: bool, owner: ExclusiveOwner | None = None,
                     method: Any = None) -> int:
        """queue.delete; returns the ready message count; a missing queue → 0 (RabbitMQ).
        A quorum queue refuses if-unused and if-empty with 540 (rabbit_quorum_queue:delete/4,
        RabbitMQ 3.10.8's texts)."""
        if name not in self.queues:
            return 0
        queue = self.get_queue(name, owner, method)
        if queue.queue_type == "quorum" and (if_unused or if_empty):
            flag = "if-unused" if if_unused else "if-empty"
            raise errors.amqp_error(
                errors.NotImplemented_,
                f"cannot delete {self._q(name)}. queue.delete operations with {flag} flag set "
                "are not supported by quorum queues", method)
        queue.call(queue.check_delete, if_unused, if_empty)  # drains its mailbox first
        return self.delete_queue_now(queue)

    def delete_queue_now(self, queue: QueueFacade) -> int:
        """Remove `queue` and its bindings, cancel its consumers and delete its messages
        (0 if it is no longer this vhost's queue of that name)."""
        q = self.queues.get(queue.name)
        if q is None or q is not queue:
            return 0
        del self.queues[q.name]
        self._topology_changed()
        self.churn.queues_deleted += 1
        if q.durable and self.definitions is not None:
            self.definitions.remove_queue(self.name, q.name)
        for exchange in list(self.exchanges.values()):
            if len(exchange.routing):
                exchange.routing.remove_destination(q.name)
                if exchange.name:
                    self._maybe_auto_delete_exchange(exchange)
        return q.terminate(delete=True)

    def connection_closed(self, owner: ExclusiveOwner | None) -> None:
        """Delete the exclusive queues `owner` declared (AMQP 0-9-1 §1.7.2.1 exclusive)."""
        for queue in list(self.queues.values()):
            if queue.exclusive_owner is owner:
                self.delete_queue_now(queue)

    def release_connection(self, owner: ExclusiveOwner, then: Callable[[], None]) -> None:
        """connection_closed, then `then()` once every process of the broker sees those
        queues gone; in one process that is at once. The reader sends connection.close-ok
        from `then`, so a client that has its close-ok finds the queues gone from any other
        connection, whichever worker serves it (tests/workers: the integration suite's
        exclusive-queue test against two workers)."""
        self.connection_closed(owner)
        then()

    # -- routing (broker/vhost_routing.py) -------------------------------------------------
    def route_message(self, exchange_name: str, routing_key: str,
                      message: Any) -> Sequence[QueueProcess]:
        """Queue processes a broker.message.Message published to `exchange_name` reaches
        (`Routes.route_message`: its headers are decoded only when they can matter)."""
        return self.routes.route_message(exchange_name, routing_key, message)

    def routes_by_key_only(self) -> bool:
        """Where a publish goes depends on its exchange and routing key alone
        (`Routes.routes_by_key_only`)."""
        return self.routes.routes_by_key_only()

    def route(self, exchange_name: str, routing_key: str, headers: dict | None,
              message: Any = None) -> Sequence[QueueProcess]:
        """Queue processes a publish to `exchange_name` reaches; cached per (exchange,
        routing key) when there are no headers (`Routes.route`). Do not mutate the result."""
        return self.routes.route(exchange_name, routing_key, headers, message)

    def route_due(self, exchange_name: str, routing_key: str,
                  message: Any) -> Sequence[QueueProcess]:
        """Queue processes a delayed exchange's due message reaches (`Routes.route_due`)."""
        return self.routes.route_due(exchange_name, routing_key, message)

    def route_keys(self, exchange_name: str, keys: list[str], headers: dict | None,
                   message: Any = None) -> list[QueueProcess]:
        """Queue processes a message sent to `exchange_name` with several routing keys
        reaches, each once (dead-lettering; `Routes.route_keys`)."""
        return self.routes.route_keys(exchange_name, keys, headers, message)

    def _topology_changed(self) -> None:
        """Exchanges, bindings, queues or policies changed: cached routes are stale."""
        self.topology_version += 1
        self.routes.topology_changed()
        if self.topology_observer is not None:
            self.topology_observer(self)

    def recover(self) -> int:
        """Boot: recreate durable exchanges, queues (their backing queues recover their
        messages) and bindings from the definitions. Returns the number of queues."""
        defs = self.definitions
        if defs is None:
            return 0
        for x in defs.list_exchanges(self.name):
            if x.name not in self.exchanges:
                self.exchanges[x.name] = Exchange(
                    name=x.name, type=x.type, durable=True, auto_delete=x.auto_delete,
                    internal=x.internal, arguments=x.arguments,
                    routing=new_routing(x.type, x.arguments),  # e.g. x-consistent-hash's
                    policy=self.policy_for("exchanges", x.name))  # hash-header, an AE policy
        for kind, root, start in ((DELAYED_TYPE, self._delayed_dir(), self._start_holder),
                                  (DEDUP_TYPE, self._dedup_dir(), self._start_cache)):
            mine = [ex for ex in self.exchanges.values() if ex.type == kind]
            if root is not None and os.path.isdir(root):
                keep = {vhost_dir_name(ex.name) for ex in mine}
                for entry in os.listdir(root):  # deleted or non-durable exchanges' files
                    if entry not in keep:
                        shutil.rmtree(os.path.join(root, entry), ignore_errors=True)
            for ex in mine:  # the delayed messages or the cache each one had
                start(ex, fresh=False)
        queues = defs.list_queues(self.name)
        for q in queues:
            self.declare_queue(q.name, durable=True, auto_delete=q.auto_delete,
                               arguments=q.arguments, recovering=True)
        for b in defs.list_bindings(self.name):
            exchange = self.exchanges.get(b.source)
            dest: Any = b.destination if b.destination_kind == "queue" else (
                "exchange", b.destination)
            if exchange is not None:
                exchange.routing.add_binding(dest, b.routing_key, b.arguments)
        self.routes.property_routed = sum(1 for x in self.exchanges.values() if not x.routing.key_only)
        node = self._config.resolved_node_name() if self._config is not None else ""
        for ex in list(self.exchanges.values()):  # shards of a new node name (boot step)
            spn_key = sharding.settings(ex.policy)
            if spn_key is not None:
                sharding.ensure(self, ex, spn_key, node)
        self._topology_changed()
        return len(queues)

    # -- policies (broker/vhost_policies.py) -----------------------------------------------
    def policy_for(self, kind: str, name: str, queue_type: str | None = None
                   ) -> PolicyDef | None:
        """The policy that applies to queue or exchange `name` (`kind` "queues" or
        "exchanges"; for a queue, of `queue_type`), see broker/policies.py."""
        return self._policies.policy_for(kind, name, queue_type)

    def set_policy(self, name: str, pattern: str, definition: dict, priority: int = 0,
                   apply_to: str = "all") -> PolicyDef:
        """Create or replace policy `name` (durable) and apply it to every matching queue
        and exchange at once (rabbitmqctl set_policy). Raises ValueError for an invalid
        policy (HTTP 400)."""
        p = self._policies.set_policy(name, pattern, definition, priority, apply_to)
        self.apply_policies()
        return p

    def clear_policy(self, name: str) -> bool:
        """Delete policy `name` and re-apply (another may match now); False if unknown."""
        if not self._policies.clear_policy(name):
            return False
        self.apply_policies()
        return True

    def operator_policy_for(self, kind: str, name: str, queue_type: str | None = None
                            ) -> PolicyDef | None:
        """The operator policy that applies to queue or exchange `name` (matched as
        policies are)."""
        return self._policies.operator_policy_for(kind, name, queue_type)

    def set_operator_policy(self, name: str, pattern: str, definition: dict,
                            priority: int = 0, apply_to: str = "all") -> PolicyDef:
        """Create or replace operator policy `name` (durable) and apply it at once
        (rabbitmqctl set_operator_policy). Raises ValueError for an invalid one (HTTP 400):
        only numeric limits (policies.OPERATOR_KEYS)."""
        p = self._policies.set_operator_policy(name, pattern, definition, priority, apply_to)
        self.apply_policies()
        return p

    def clear_operator_policy(self, name: str) -> bool:
        """Delete operator policy `name` and re-apply; False if unknown."""
        if not self._policies.clear_operator_policy(name):
            return False
        self.apply_policies()
        return True

    def apply_policies(self) -> None:
        """Give every queue and exchange the policy (and operator policy) that matches it
        now."""
        self._policies.apply(self.queues, self.exchanges, self._resharding)
        self._topology_changed()  # a policy's alternate-exchange changes routing

    def _resharding(self, exchange: Exchange, old: PolicyDef | None) -> None:
        """`exchange`'s sharding policy changed from `old` (rabbitmq_sharding)."""
        sharding.apply(self, exchange, old, exchange.policy, self._config.resolved_node_name())

    def shutdown(self) -> None:
        """Clean stop: terminate every queue without deleting durable state, then close the
        message stores (after the queues, as VhostStores requires)."""
        for exchange in list(self.exchanges.values()):
            if exchange.type == DELAYED_TYPE:
                self._stop_holder(exchange, delete=not exchange.durable)
            elif exchange.type == DEDUP_TYPE:
                self._stop_cache(exchange, delete=not exchange.durable)
        for queue in list(self.queues.values()):
            queue.terminate(delete=not queue.durable)
        self.queues.clear()
        if self.stores is not None:
            self.stores.close()
