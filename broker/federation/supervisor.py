# Owns: the broker's federation: the federation-upstream(-set) runtime parameters (cached
# here, stored in the definitions database) and one running link per federated exchange or
# queue and upstream, started and stopped as policies, parameters and objects change.
# Talked to by: broker/server.py (start, stop, vhost observers), the management API
# (/api/parameters/federation-upstream*, /api/federation-links), brokerctl.
# Must never: block the loop, or let a link's failure reach the broker.
"""Federation (rabbitmq.com/federation.html): which links run follows from the state, as
RabbitMQ's rabbit_federation_exchange_link_sup_sup / queue_link_sup_sup adjust it.

After any change of a vhost's topology (the vhost's `topology_observer`, coalesced to one
pass per loop turn) and of the federation parameters, every exchange and queue whose policy
has `federation-upstream`, `federation-upstream-set` or `federation-upstream-pattern` gets a
link per upstream the policy names (broker/federation/upstream.py for_policy); links whose
exchange, queue, policy or upstream definition went away stop (deleting what they made
upstream), links whose upstream definition changed restart, and running exchange links are
told to resync their bindings. Exchanges and queues with an `x-internal-purpose` argument
(federation's own) are never federated.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from broker.definitions import ParameterDef
from broker.federation import upstream as fu
from broker.federation.exchange_link import ExchangeLink
from broker.federation.link import Link
from broker.federation.queue_link import QueueLink

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.definitions import Definitions
    from broker.queue_process import QueueProcess
    from broker.vhost import VHost


class BrokerView(Protocol):
    """What federation reads of the broker (broker.server.Broker, which imports this
    module, so it is described here rather than imported)."""

    @property
    def vhosts(self) -> dict[str, VHost]: ...  # name -> vhost

    @property
    def definitions(self) -> Definitions: ...  # parameters are stored there

    @property
    def config(self) -> BrokerConfig: ...  # default_user / default_pass

    @property
    def port(self) -> int: ...  # the AMQP port links reach this broker on

    def node_name(self) -> str: ...

    def cluster_name(self) -> str: ...

log = logging.getLogger("broker.federation")
COMPONENTS = (fu.UPSTREAM, fu.UPSTREAM_SET)


class Federation:
    """The federation of `broker` (its vhosts, definitions, config, port, names)."""

    def __init__(self, broker: BrokerView) -> None:
        self.broker = broker
        self.links: dict[tuple[str, str, str, str], Link] = {}  # (vhost, kind, name, upstream)
        self._params: dict[tuple[str, str, str], Any] = {}  # (vhost, component, name) -> value
        self._dirty: set[str] = set()  # vhosts to reconcile on the next loop turn
        self._scheduled = False
        self._stopping: set[asyncio.Task[None]] = set()
        self._closed = False

    # -- parameters --------------------------------------------------------------------------
    def start_all(self) -> None:
        """Boot: read the stored parameters, watch every vhost, start the links."""
        for p in self.broker.definitions.list_parameters():
            if p.component in COMPONENTS and not fu.validate(p.component, p.name, p.value):
                self._params[(p.vhost, p.component, p.name)] = p.value
        for vhost in self.broker.vhosts.values():
            self.watch(vhost)

    def watch(self, vhost: VHost) -> None:
        """Follow `vhost`'s topology (a new vhost, or at boot)."""
        vhost.topology_observer = self._changed
        self._changed(vhost)

    def set(self, vhost: str, component: str, name: str, value: Any) -> list[str]:
        """Validate and store a federation parameter; the validation errors (nothing
        changed then)."""
        errs = fu.validate(component, name, value)
        if errs:
            return errs
        self.broker.definitions.set_parameter(ParameterDef(vhost, component, name, value))
        self._params[(vhost, component, name)] = value
        self._mark(vhost)
        return []

    def clear(self, vhost: str, component: str, name: str) -> bool:
        """Delete a federation parameter (its links stop); False when there was none."""
        self._params.pop((vhost, component, name), None)
        self._mark(vhost)
        return self.broker.definitions.clear_parameter(vhost, component, name)

    def clear_vhost(self, vhost: str) -> None:
        """The vhost is being deleted: stop its links (its parameters go with it)."""
        for param in [k for k in self._params if k[0] == vhost]:
            del self._params[param]
        for key in [k for k in self.links if k[0] == vhost]:
            self._stop_soon(key, cleanup=False)

    def _lookup(self, vhost: str) -> Callable[[str, str], Any]:
        return lambda component, name: self._params.get((vhost, component, name))

    def _upstream_names(self, vhost: str) -> Callable[[], list[str]]:
        return lambda: sorted(n for (v, c, n) in self._params if v == vhost and c == fu.UPSTREAM)

    # -- reconciling -------------------------------------------------------------------------
    def _changed(self, vhost: VHost) -> None:
        self._mark(vhost.name)

    def _mark(self, vhost: str) -> None:
        if self._closed:
            return
        self._dirty.add(vhost)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._reconcile)

    def _reconcile(self) -> None:
        self._scheduled = False
        dirty, self._dirty = self._dirty, set()
        for name in dirty:
            vhost = self.broker.vhosts.get(name)
            if vhost is None:
                for key in [k for k in self.links if k[0] == name]:
                    self._stop_soon(key, cleanup=False)
                continue
            try:
                self._reconcile_vhost(vhost)
            except Exception:  # noqa: BLE001 - federation must never take the broker down
                log.exception("federation: reconciling vhost '%s' failed", name)

    def _wanted(self, vhost: VHost) -> dict[tuple[str, str, str, str], tuple[fu.Upstream, str]]:
        out: dict[tuple[str, str, str, str], tuple[fu.Upstream, str]] = {}
        lookup, names = self._lookup(vhost.name), self._upstream_names(vhost.name)
        for kind, objects in (("exchange", vhost.exchanges), ("queue", vhost.queues)):
            for name, obj in objects.items():
                policy = obj.policy
                if policy is None or not fu.federates(policy.definition):
                    continue
                if fu.INTERNAL_PURPOSE_ARG in (obj.arguments or {}):
                    continue
                # kind == "queue": obj is a QueueProcess (mypy cannot tie kind to the table)
                if kind == "queue" and obj.exclusive_owner is not None:  # type: ignore[union-attr]
                    continue
                for up in fu.for_policy(policy.definition, name, lookup, names):
                    out[(vhost.name, kind, name, up.name)] = (up, policy.name)
        return out

    def _reconcile_vhost(self, vhost: VHost) -> None:
        wanted = self._wanted(vhost)
        link: Link | None
        for key in [k for k in self.links if k[0] == vhost.name]:
            link = self.links[key]
            want = wanted.get(key)
            if want is None or want[0] != link.upstream or want[1] != link.policy:
                self._stop_soon(key, cleanup=want is None)
        for key, (up, policy) in wanted.items():
            link = self.links.get(key)
            if link is None:
                self._start(vhost, key, up, policy)
            elif isinstance(link, ExchangeLink):
                link.bindings_changed()
            elif isinstance(link, QueueLink):
                q = vhost.queues.get(key[2])
                if q is not None and q.federation_watch is None:
                    q.federation_watch = self._queue_watch(link)
                    link.set_wanted(q.wants_messages())

    def _start(self, vhost: VHost, key: tuple[str, str, str, str], up: fu.Upstream,
               policy: str) -> None:
        vname, kind, name, _u = key
        local = lambda: self._local_uri(vname)  # noqa: E731 - a small closure
        cluster = self.broker.cluster_name()
        link: Link
        if kind == "exchange":
            link = ExchangeLink(vname, name, up, policy, local, cluster,
                                lambda: _exchange_shape(vhost, name),
                                lambda: _bindings(vhost, name))
        else:
            queue_link = QueueLink(vname, name, up, policy, local, cluster,
                                   lambda: _queue_shape(vhost, name))
            q = vhost.queues[name]
            q.federation_watch = self._queue_watch(queue_link)
            queue_link.wanted = q.wants_messages()
            link = queue_link
        self.links[key] = link
        link.start()

    @staticmethod
    def _queue_watch(link: QueueLink) -> Callable[[QueueProcess], None]:
        def watch(queue: QueueProcess) -> None:
            wanted = queue.wants_messages()
            if wanted != link.wanted:
                link.set_wanted(wanted)
        return watch

    def _stop_soon(self, key: tuple[str, str, str, str], cleanup: bool) -> None:
        link = self.links.pop(key, None)
        if link is None:
            return
        if isinstance(link, QueueLink):
            vhost = self.broker.vhosts.get(key[0])
            q = vhost.queues.get(key[2]) if vhost is not None else None
            if q is not None:
                q.federation_watch = None
        task = asyncio.get_running_loop().create_task(link.stop(cleanup))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    # -- operations --------------------------------------------------------------------------
    def status(self, vhost: str | None = None) -> list[dict[str, Any]]:
        """/api/federation-links items (rabbit_federation_status + rabbit_federation_mgmt)."""
        node = self.broker.node_name()
        return [link.status_item(node) for key, link in sorted(self.links.items())
                if vhost is None or key[0] == vhost]

    async def restart(self, link_id: str) -> bool:
        """Restart the link with this id (its connections close and open again); False
        when there is none (rabbit_federation_link_sup restart)."""
        for key, link in list(self.links.items()):
            if link.id == link_id:
                del self.links[key]
                await link.stop(cleanup=False)
                vhost = self.broker.vhosts.get(key[0])
                if vhost is not None:
                    self._mark(vhost.name)
                return True
        return False

    async def stop_all(self) -> None:
        """Broker shutdown: stop every link, keeping what they made upstream."""
        self._closed = True
        links = list(self.links.values())
        self.links.clear()
        await asyncio.gather(*(link.stop(cleanup=False) for link in links), *self._stopping,
                             return_exceptions=True)

    def _local_uri(self, vhost: str) -> str:
        """This broker over loopback as the configured default user (RabbitMQ uses an
        internal direct connection)."""
        cfg = self.broker.config
        user = urllib.parse.quote(cfg.default_user, safe="")
        password = urllib.parse.quote(cfg.default_pass, safe="")
        return (f"amqp://{user}:{password}@127.0.0.1:{self.broker.port}/"
                f"{urllib.parse.quote(vhost, safe='')}")


def _exchange_shape(vhost: VHost, name: str) -> tuple[str, bool, bool, bool, dict] | None:
    x = vhost.exchanges.get(name)
    if x is None:
        return None
    return x.type, x.durable, x.auto_delete, x.internal, dict(x.arguments or {})


def _queue_shape(vhost: VHost, name: str) -> tuple[bool, bool, dict] | None:
    q = vhost.queues.get(name)
    if q is None:
        return None
    return q.durable, q.auto_delete, dict(q.arguments or {})


def _bindings(vhost: VHost, name: str) -> list[tuple[str, dict[str, Any]]]:
    x = vhost.exchanges.get(name)
    if x is None:
        return []
    return [(key, args) for _dest, key, args in x.routing.bindings()]
