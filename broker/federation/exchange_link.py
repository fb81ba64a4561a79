# Owns: one federated exchange's link to one upstream: the upstream queue and internal
# exchange, the bindings propagated upstream, and republishing what arrives into the local
# exchange.
# Talked to by: broker/federation/supervisor.py (start, stop, bindings_changed, status).
# Must never: bind upstream a binding that came from that upstream (loops), or forward a
# message past max-hops.
"""A federated exchange's link (rabbit_federation_exchange_link in RabbitMQ 3.10.8).

On the upstream, for local exchange X in vhost V federating from upstream exchange UX (the
upstream's `exchange`, default X) in upstream vhost UV, this broker's cluster name C:
- queue `federation: UX -> C` (plus `:X` when X differs from UX, or `:V:X` when V differs
  from UV), durable, with `x-expires`, `x-message-ttl`, `x-ha-policy` from the upstream and
  `x-internal-purpose: federation`; consumed with `basic.qos` = prefetch-count;
- UX itself, declared like X (type, durable, auto-delete, internal, arguments) if the
  passive check says it is missing;
- the internal exchange `<queue name> A` or `… B` (the two alternate at each start, so the
  new one is bound before the old one is deleted and nothing published meanwhile is lost):
  durable, internal, auto-delete, of type `x-federation-upstream` with `x-max-hops`,
  `x-downstream-name` (C), `x-downstream-vhost` (V); an upstream without that type answers
  503 and gets a `fanout` instead (the hop rule is then applied here, before republishing).
  The queue is bound to it, and it to UX once per distinct (routing key, arguments) of X's
  local bindings, with `x-bound-from` prepended to the arguments (cluster-name C, vhost V,
  exchange `V:X A|B`, hops); a local binding that itself came from that upstream, or has no
  hops left, is not propagated. Bindings follow as they come and go.
Messages arrive with `x-received-from` prepended ({uri without credentials, exchange UX,
redelivered, cluster-name and vhost of the upstream}) and are published to X with their
routing key. On a deliberate stop (policy or upstream removed) the upstream queue and
internal exchange are deleted, unless `resource-cleanup-mode` is `never`.
Not done: the periodic check of the internal exchange (internal_exchange_check_interval).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from pamqp import commands

from broker.federation import headers as fh
from broker.federation.link import Link, declare_unless_there, disposable, log
from broker.federation.upstream import Upstream, safe_uri
from broker.protocol.encoding import LongLong, build_method
from broker.shovel.client import Client, ClientError, Endpoint

# (type, durable, auto_delete, internal, arguments) of the local exchange
ExchangeShape = tuple[str, bool, bool, bool, dict[str, Any]]


def upstream_queue_name(upstream_exchange: str, upstream_vhost: str, cluster_name: str,
                        vhost: str, exchange: str) -> str:
    """rabbit_federation_exchange_link upstream_queue_name."""
    if vhost == upstream_vhost:
        down = "" if exchange == upstream_exchange else f":{exchange}"
    else:
        down = f":{vhost}:{exchange}"
    return f"federation: {upstream_exchange} -> {cluster_name}{down}"


class ExchangeLink(Link):
    """The link of local exchange `name`. `shape()` is the local exchange's
    ExchangeShape (None once it is gone); `bindings()` its bindings as (routing key,
    arguments)."""

    kind = "exchange"

    def __init__(self, vhost: str, name: str, upstream: Upstream, policy: str,
                 local_uri: Callable[[], str], cluster_name: str,
                 shape: Callable[[], ExchangeShape | None],
                 bindings: Callable[[], list[tuple[str, dict[str, Any]]]]) -> None:
        super().__init__(vhost, name, upstream, policy, local_uri, cluster_name)
        self._shape = shape
        self._bindings = bindings
        self.queue: str | None = None  # the upstream queue
        self.internal_exchange: str | None = None  # `<queue> A` or `<queue> B`
        self._suffix = "A"
        self._bound: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}  # key -> bound
        self._changed = asyncio.Event()  # local bindings changed: sync them upstream
        self._upstream_vhost = "/"
        self._consumer_tag = ""  # the link's consumer on the upstream queue

    def bindings_changed(self) -> None:
        """The local exchange's bindings may have changed: resync on the link's task."""
        self._changed.set()

    # -- setup -------------------------------------------------------------------------------
    async def _setup(self, up: Client) -> None:
        u = self.upstream
        self._upstream_vhost = Endpoint.parse(self.uri or u.uris[0]).vhost
        q = self.queue = upstream_queue_name(u.exchange, self._upstream_vhost,
                                             self.cluster_name, self.vhost, self.name)
        args: dict[str, Any] = {}
        if u.expires is not None:
            args["x-expires"] = u.expires
        if u.message_ttl is not None:
            args["x-message-ttl"] = u.message_ttl
        if u.ha_policy is not None:
            args["x-ha-policy"] = u.ha_policy
        args[fh.INTERNAL_PURPOSE[0]] = fh.INTERNAL_PURPOSE[1]
        await up.rpc(1, build_method(commands.Queue.Declare, queue=q, durable=True, arguments=args),
                     commands.Queue.DeclareOk)
        no_ack = u.ack_mode == "no-ack"
        if not no_ack:
            await up.rpc(1, commands.Basic.Qos(prefetch_count=min(u.prefetch_count, 65535)),
                         commands.Basic.QosOk)
        ok = await up.rpc(1, build_method(commands.Basic.Consume, queue=q, no_ack=no_ack),
                          commands.Basic.ConsumeOk)
        self._consumer_tag = ok.consumer_tag
        await up.rpc(2, commands.Channel.Open(), commands.Channel.OpenOk)  # commands
        old = await self._old_suffix(up, q)
        self._suffix = "B" if old == "A" else "A"
        new_x = self.internal_exchange = f"{q} {self._suffix}"
        await self._ensure_upstream_exchange(up)
        await self._ensure_internal_exchange(up, new_x)
        await up.rpc(2, build_method(commands.Queue.Bind, queue=q, exchange=new_x),
                     commands.Queue.BindOk)
        self._bound.clear()
        await self._sync_bindings(up)
        try:
            await disposable(up, build_method(commands.Exchange.Delete, exchange=f"{q} {old}"),
                             commands.Exchange.DeleteOk)
        except ClientError:
            pass

    async def _old_suffix(self, up: Client, q: str) -> str:
        """The suffix of the internal exchange a previous start left (RabbitMQ stores it;
        here the upstream is asked): "B" if `<q> B` exists, else "A"."""
        try:
            await disposable(up, build_method(commands.Exchange.Declare, exchange=f"{q} B",
                                              passive=True), commands.Exchange.DeclareOk)
        except ClientError as exc:
            if exc.reply_code != 404:
                raise
            return "A"
        return "B"

    async def _ensure_upstream_exchange(self, up: Client) -> None:
        shape = self._shape()
        if shape is None:
            raise ClientError(0, f"exchange '{self.name}' in vhost '{self.vhost}' is gone")
        type_, durable, auto_delete, internal, arguments = shape
        await declare_unless_there(up, 2, build_method(
            commands.Exchange.Declare, exchange=self.upstream.exchange, exchange_type=type_,
            durable=durable, auto_delete=auto_delete, internal=internal,
            arguments=arguments or None), commands.Exchange.DeclareOk)

    async def _ensure_internal_exchange(self, up: Client, name: str) -> None:
        """Delete, then declare the internal exchange: `x-federation-upstream` on a
        connection of its own (an upstream without the type closes the connection with
        503), else a `fanout` (ensure_internal_exchange)."""
        try:
            await disposable(up, build_method(commands.Exchange.Delete, exchange=name),
                             commands.Exchange.DeleteOk)
        except ClientError:
            pass
        purpose = dict([fh.INTERNAL_PURPOSE])
        xfu_args = {fh.MAX_HOPS_ARG: LongLong(self.upstream.max_hops),
                    fh.DOWNSTREAM_NAME_ARG: self.cluster_name,
                    fh.DOWNSTREAM_VHOST_ARG: self.vhost, **purpose}
        assert self.uri is not None
        once = await Client.connect(Endpoint.parse(self.uri),
                                    "Disposable exchange federation link connection")
        try:
            await once.rpc(1, build_method(commands.Exchange.Declare,
                exchange=name, exchange_type="x-federation-upstream", durable=True,
                internal=True, auto_delete=True, arguments=xfu_args),
                commands.Exchange.DeclareOk)
        except ClientError as exc:
            if exc.reply_code != 503:
                raise
            await up.rpc(2, build_method(commands.Exchange.Declare,
                exchange=name, exchange_type="fanout", durable=True, internal=True,
                auto_delete=True, arguments=purpose), commands.Exchange.DeclareOk)
        finally:
            await once.close()

    # -- bindings ----------------------------------------------------------------------------
    async def _serve(self, up: Client, down: Client) -> None:
        closed: list[asyncio.Future[Any]] = [up.closed, down.closed]
        while True:
            changed = asyncio.ensure_future(self._changed.wait())
            try:
                done, _ = await asyncio.wait([changed, *closed],
                                             return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()
            if changed not in done:
                raise next(f for f in done if f is not changed).result()
            self._changed.clear()
            await self._sync_bindings(up)

    def _wanted(self) -> dict[tuple[str, str], tuple[str, dict[str, Any]]]:
        """Distinct local (routing key, arguments) → the upstream binding's arguments
        (record_binding / update_binding: one upstream binding per key and arguments)."""
        out = {}
        for key, args in self._bindings():
            upstream_args = fh.binding_arguments(
                args, self.upstream.max_hops, self.upstream_cluster, self._upstream_vhost,
                self.cluster_name, self.vhost, self.name, self._suffix)
            if upstream_args is not None:
                out[(key, repr(sorted(args.items())))] = (key, upstream_args)
        return out

    async def _sync_bindings(self, up: Client) -> None:
        wanted = self._wanted()
        source, dest = self.upstream.exchange, self.internal_exchange
        for k in [k for k in self._bound if k not in wanted]:
            key, args = self._bound.pop(k)
            await up.rpc(2, build_method(commands.Exchange.Unbind, destination=dest,
                                         source=source, routing_key=key, arguments=args),
                         commands.Exchange.UnbindOk)
        for k, (key, args) in wanted.items():
            if k not in self._bound:
                await up.rpc(2, build_method(commands.Exchange.Bind, destination=dest,
                                             source=source, routing_key=key, arguments=args),
                             commands.Exchange.BindOk)
                self._bound[k] = (key, args)

    # -- messages ----------------------------------------------------------------------------
    def _accept(self, headers: dict[str, Any] | None) -> bool:
        """The hop rule here too, for an upstream that gave us a fanout."""
        return fh.should_forward(headers, self.upstream.max_hops, self.cluster_name,
                                 self.vhost)

    def _target(self, exchange: str, routing_key: str) -> tuple[str, str]:
        return self.name, routing_key

    def _headers(self, headers: dict[str, Any] | None, redelivered: bool, exchange: str,
                 routing_key: str) -> dict[str, Any]:
        return fh.exchange_hop(headers, safe_uri(self.uri or ""), self.upstream.exchange,
                               redelivered, self.upstream_cluster, self._upstream_vhost)

    async def _cleanup(self) -> None:
        """A deliberate stop: delete the upstream queue and internal exchange (unless
        resource-cleanup-mode is never)."""
        up = self._up
        if up is None or self.upstream.resource_cleanup_mode == "never" or self.queue is None:
            return
        try:
            async with asyncio.timeout(5):
                up.on_delivery = None  # what still arrives is requeued when the link closes
                await up.rpc(1, commands.Basic.Cancel(consumer_tag=self._consumer_tag),
                             commands.Basic.CancelOk)
                await disposable(up, build_method(commands.Queue.Delete, queue=self.queue),
                                 commands.Queue.DeleteOk)
                if self.internal_exchange is not None:
                    await disposable(up, build_method(commands.Exchange.Delete,
                        exchange=self.internal_exchange), commands.Exchange.DeleteOk)
        except (ClientError, TimeoutError) as exc:
            log.info("Federation exchange '%s': upstream cleanup failed: %s", self.name, exc)
