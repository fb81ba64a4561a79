# Owns: what federated exchange and queue links share: their life (start, reconnect after
# reconnect-delay, stop), the two client connections (upstream and this broker), forwarding
# a delivery under the upstream's ack mode, and the /api/federation-links status.
# Talked to by: broker/federation/exchange_link.py, queue_link.py (subclasses), supervisor.py.
# Must never: ack an upstream message before this broker has it under on-confirm, block the
# loop, or raise out of its task.
"""A federation link (rabbit_federation_link_util in RabbitMQ 3.10.8 is the reference).

A link connects to this broker first (over loopback, as the configured default user: the
"downstream" connection RabbitMQ opens as a direct connection), with publisher confirms
under `on-confirm`, then to one of the upstream's URIs (picked at random, as RabbitMQ's
to_params). `_setup` (the subclass) declares what it needs upstream and consumes; every
delivery that passes the subclass's `_accept` is republished here with the headers
`_headers` gives, and the upstream delivery is acked when this broker confirms it
(`on-confirm`; a nack requeues it upstream), once it is published (`on-publish`), or never
(`no-ack`). A message `_accept` refuses is acked and dropped (the hop rule). Any failure
closes both connections and shows the link `error` with the reason; it starts again after
`reconnect-delay` seconds. Unacked upstream messages go back to their queue when the
upstream connection closes, so nothing confirmed upstream is lost and duplicates are bounded
by `prefetch-count`.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import hashlib
import logging
from collections.abc import Callable
from typing import Any

from pamqp import commands

from broker.federation.upstream import Upstream, safe_uri
from broker.shovel.client import (
    Client,
    ClientError,
    Delivery,
    Endpoint,
    cancel_task,
    close_clients,
)

log = logging.getLogger("broker.federation")
PRODUCT = "pybroker federation"


class Link:
    """One federation link of `kind` ("exchange" or "queue") `name` in `vhost` to
    `upstream`. `local_uri()` is an amqp:// URI of this broker's vhost; `cluster_name` is
    this broker's (used in headers and upstream names); `policy` the name of the policy
    that federates it (connection name)."""

    kind = "exchange"

    def __init__(self, vhost: str, name: str, upstream: Upstream, policy: str,
                 local_uri: Callable[[], str], cluster_name: str) -> None:
        self.vhost = vhost
        self.name = name
        self.upstream = upstream
        self.policy = policy
        self._local_uri = local_uri
        self.cluster_name = cluster_name
        self.status = "starting"  # starting | running | error (RabbitMQ's link states)
        self.error: str | None = None  # why it last failed
        self.timestamp = _now()  # when the status last changed
        self.uri: str | None = None  # the upstream URI in use (password kept; not shown)
        self.upstream_cluster: str | None = None  # the upstream's cluster_name, if it has one
        self.forwarded = 0  # messages republished here (acked upstream where acks apply)
        self.dropped = 0  # messages the hop rule stopped
        self._task: asyncio.Task[None] | None = None
        self._up: Client | None = None  # the upstream connection
        self._down: Client | None = None  # this broker
        self._pending: dict[int, int] = {}  # local publish seq -> upstream delivery tag

    # -- identity ----------------------------------------------------------------------------
    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.vhost, self.kind, self.name, self.upstream.name)

    @property
    def upstream_name(self) -> str:
        """The exchange or queue name upstream."""
        return self.upstream.exchange if self.kind == "exchange" else self.upstream.queue

    @property
    def id(self) -> str:
        """A stable 8-hex-digit id (RabbitMQ's is a hash of the same key)."""
        raw = "\0".join((self.vhost, self.kind, self.name, self.upstream.name,
                         self.upstream_name)).encode()
        return hashlib.sha1(raw).hexdigest()[:8]

    @property
    def local_connection(self) -> str | None:
        """The name /api/connections gives the link's connection to this broker
        ("client ip:port -> server ip:port"), as RabbitMQ's status shows its local
        connection's name."""
        down = self._down
        transport = down.transport if down is not None else None
        if transport is None:
            return None
        here, there = transport.get_extra_info("sockname"), transport.get_extra_info("peername")
        if not here or not there:
            return None
        return f"{here[0]}:{here[1]} -> {there[0]}:{there[1]}"

    @property
    def connection_name(self) -> str:
        """rabbit_federation_link_util connection_name."""
        return f"Federation link (upstream: {self.upstream.name}, policy: {self.policy})"

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self, cleanup: bool = True) -> None:
        """Stop and close both connections (unacked upstream messages are requeued there).
        `cleanup`: the link is removed for good (policy, upstream or exchange gone), so the
        subclass may delete what it made upstream; a broker shutdown passes False and keeps
        it, so what is published upstream meanwhile waits there (RabbitMQ deletes it on a
        node shutdown too; keeping it loses nothing)."""
        await cancel_task(self._task)
        self._task = None
        if cleanup:
            await self._cleanup()
        await self._close()

    def _set(self, status: str, error: str | None = None) -> None:
        self.status, self.error, self.timestamp = status, error, _now()

    async def _run(self) -> None:
        while True:
            try:
                await self._once()
            except (ClientError, OSError, ValueError) as exc:
                self._set("error", getattr(exc, "reason", None) or str(exc))
                log.warning("Federation %s '%s' in vhost '%s' (upstream '%s'): %s; "
                            "restarting in %s s", self.kind, self.name, self.vhost,
                            self.upstream.name, exc, self.upstream.reconnect_delay)
            except Exception as exc:  # noqa: BLE001 - a bug: keep the broker, retry later
                self._set("error", repr(exc))
                log.exception("Federation %s '%s' in vhost '%s' crashed", self.kind,
                              self.name, self.vhost)
            await self._close()
            await asyncio.sleep(self.upstream.reconnect_delay)
            self._set("starting")

    async def _close(self) -> None:
        await close_clients(self._up, self._down)
        self._up = self._down = None
        self._pending.clear()

    async def _once(self) -> None:
        """One life of the link: connect, set up, then serve until a connection fails."""
        self._down = await Client.connect(Endpoint.parse(self._local_uri()),
                                          self.connection_name, PRODUCT)
        if self.upstream.ack_mode == "on-confirm":
            await self._down.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
            self._down.on_confirm = self._confirmed
        self.uri = self.upstream.pick_uri()
        self._up = await Client.connect(Endpoint.parse(self.uri), self.connection_name,
                                        PRODUCT)
        name = self._up.server_properties.get("cluster_name")
        self.upstream_cluster = name if isinstance(name, str) else None
        self._up.on_delivery = self._forward
        await self._setup(self._up)
        self._set("running")
        log.info("Federation %s '%s' in vhost '%s' connected to %s", self.kind, self.name,
                 self.vhost, safe_uri(self.uri))
        await self._serve(self._up, self._down)

    async def _serve(self, up: Client, down: Client) -> None:
        """Wait until either connection closes (subclasses add their own work)."""
        done, _ = await asyncio.wait([up.closed, down.closed],
                                     return_when=asyncio.FIRST_COMPLETED)
        raise next(iter(done)).result()

    # -- for subclasses ----------------------------------------------------------------------
    async def _setup(self, up: Client) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    async def _cleanup(self) -> None:
        """On a deliberate stop, before the connections close (exchange links delete their
        upstream queue and exchange)."""

    def _accept(self, headers: dict[str, Any] | None) -> bool:
        return True

    def _target(self, exchange: str, routing_key: str) -> tuple[str, str]:  # pragma: no cover
        raise NotImplementedError

    def _headers(self, headers: dict[str, Any] | None, redelivered: bool, exchange: str,
                 routing_key: str) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- moving messages ---------------------------------------------------------------------
    def _forward(self, delivery: Delivery) -> None:
        tag, redelivered, exchange, routing_key, hdr, body = delivery
        up, down = self._up, self._down
        if up is None or down is None:
            return
        mode = self.upstream.ack_mode
        props = hdr.properties
        if not self._accept(props.headers):
            self.dropped += 1
            if mode != "no-ack":
                up.ack(tag)  # dropped, but acknowledged (rabbit_federation_link_util forward)
            return
        p = copy.copy(props)
        p.headers = self._headers(props.headers, redelivered, exchange, routing_key)
        if not self.upstream.trust_user_id:
            p.user_id = None
        x, key = self._target(exchange, routing_key)
        seq = down.publish(x, key, p.marshal(), body)
        if mode == "on-confirm":
            self._pending[seq] = tag
            return
        if mode == "on-publish":
            up.ack(tag)
        self.forwarded += 1

    def _confirmed(self, seq: int, multiple: bool, ack: bool) -> None:
        pending, up = self._pending, self._up
        seqs = [s for s in pending if s <= seq] if multiple else [seq]
        for s in seqs:
            tag = pending.pop(s, None)
            if tag is None or up is None:
                continue
            if ack:
                up.ack(tag)
                self.forwarded += 1
            else:  # this broker refused it: back to the upstream queue
                up.send(1, commands.Basic.Nack(delivery_tag=tag, requeue=True))

    # -- status ------------------------------------------------------------------------------
    def status_item(self, node: str) -> dict[str, Any]:
        """The /api/federation-links item (rabbit_federation_status format and
        rabbit_federation_mgmt)."""
        out: dict[str, Any] = {"node": node}
        if self.kind == "exchange":
            out.update(exchange=self.name, upstream_exchange=self.upstream.exchange)
        else:
            out.update(queue=self.name, upstream_queue=self.upstream.queue,
                       consumer_tag=self.upstream.consumer_tag)
        out.update(type=self.kind, vhost=self.vhost, upstream=self.upstream.name, id=self.id,
                   status=self.status)
        if self.status == "running":
            out["local_connection"] = self.local_connection or self.connection_name
        elif self.status == "error" and self.error:
            out["error"] = self.error
        out["uri"] = safe_uri(self.uri or self.upstream.uris[0])
        out["timestamp"] = self.timestamp
        return out


async def disposable(client: Client, method: Any, reply: type) -> Any:
    """One synchronous method on a channel of its own (rabbit_federation_link_util
    disposable_channel_call): a channel error closes only that channel and is raised as a
    ClientError with its reply code."""
    await client.rpc(3, commands.Channel.Open(), commands.Channel.OpenOk)
    ok = await client.rpc(3, method, reply)
    await client.rpc(3, commands.Channel.Close(reply_code=200, reply_text="ok", class_id=0,
                                               method_id=0), commands.Channel.CloseOk)
    return ok


async def declare_unless_there(client: Client, channel: int, declare: Any, reply: type) -> None:
    """A passive declare of what `declare` names on a disposable channel; only when that is
    404, `declare` itself on `channel` (rabbit_federation's "declare it upstream like the
    local one if missing": the upstream's own definition wins when there is one)."""
    passive = copy.copy(declare)
    passive.passive = True
    try:
        await disposable(client, passive, reply)
    except ClientError as exc:
        if exc.reply_code != 404:
            raise
        await client.rpc(channel, declare, reply)


def _now() -> str:
    """RabbitMQ's status timestamp ("2026-11-25 9:03:50": the hour not zero-padded)."""
    now = datetime.datetime.now()
    return f"{now:%Y-%m-%d} {now.hour}:{now:%M:%S}"
