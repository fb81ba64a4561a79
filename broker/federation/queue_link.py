# Owns: one federated queue's link to one upstream: consuming from the upstream queue only
# while the local queue wants messages, and republishing them into the local queue.
# Talked to by: broker/federation/supervisor.py (start, stop, set_wanted, status).
# Must never: consume upstream while the local queue has messages ready or no consumer with
# spare capacity.
"""A federated queue's link (rabbit_federation_queue_link and rabbit_federation_queue in
RabbitMQ 3.10.8).

The link checks that the upstream announces the `consumer_priorities` capability, makes sure
the upstream queue (the upstream's `queue`, default the local name) exists (a passive
declare; if missing it is declared like the local queue: durable, auto-delete, arguments),
and sets `basic.qos` to prefetch-count. It consumes (nowait, consumer tag from the upstream,
`x-priority: -1`, so upstream consumers of its own go first) only while the supervisor says
the local queue wants messages: it has nothing ready and a consumer of priority ≥ 0 with
spare capacity (consumer_state_changed / active_unfederated); otherwise it cancels. Each
message is published to the local queue through the default exchange with `x-received-from`
updated (see broker/federation/headers.py queue_hop). Queues may federate each other in a
cycle: a message only moves towards a queue whose consumers can take it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pamqp import commands

from broker.federation import headers as fh
from broker.federation.link import Link, declare_unless_there
from broker.federation.upstream import Upstream, safe_uri
from broker.protocol.encoding import build_method
from broker.shovel.client import Client, ClientError

# (durable, auto_delete, arguments) of the local queue
QueueShape = tuple[bool, bool, dict[str, Any]]


class QueueLink(Link):
    """The link of local queue `name`; `shape()` is the local queue's QueueShape (None
    once it is gone)."""

    kind = "queue"

    def __init__(self, vhost: str, name: str, upstream: Upstream, policy: str,
                 local_uri: Callable[[], str], cluster_name: str,
                 shape: Callable[[], QueueShape | None]) -> None:
        super().__init__(vhost, name, upstream, policy, local_uri, cluster_name)
        self._shape = shape
        self.wanted = False  # the local queue wants messages (the supervisor's verdict)
        self._consuming = False  # a basic.consume is active upstream

    def set_wanted(self, wanted: bool) -> None:
        """run / pause (rabbit_federation_queue_link): consume or cancel upstream."""
        self.wanted = wanted
        up = self._up
        if up is None or self.status != "running" or wanted == self._consuming:
            return
        if wanted:
            self._consume(up)
        else:
            up.send(1, build_method(commands.Basic.Cancel, consumer_tag=self.upstream.consumer_tag,
                                             nowait=True))
            self._consuming = False

    def _consume(self, up: Client) -> None:
        up.send(1, build_method(commands.Basic.Consume,
            queue=self.upstream.queue, consumer_tag=self.upstream.consumer_tag,
            no_ack=self.upstream.ack_mode == "no-ack", nowait=True,
            arguments={"x-priority": -1}))
        self._consuming = True

    async def _setup(self, up: Client) -> None:
        caps = up.server_properties.get("capabilities")
        if not (isinstance(caps, dict) and caps.get("consumer_priorities") is True):
            raise ClientError(0, "upstream_lacks_consumer_priorities")
        shape = self._shape()
        if shape is None:
            raise ClientError(0, f"queue '{self.name}' in vhost '{self.vhost}' is gone")
        durable, auto_delete, arguments = shape
        await declare_unless_there(up, 1, build_method(
            commands.Queue.Declare, queue=self.upstream.queue, durable=durable,
            auto_delete=auto_delete, arguments=arguments or None), commands.Queue.DeclareOk)
        if self.upstream.ack_mode != "no-ack":
            await up.rpc(1, commands.Basic.Qos(
                prefetch_count=min(self.upstream.prefetch_count, 65535)),
                commands.Basic.QosOk)
        self._consuming = False
        if self.wanted:
            self._consume(up)

    def _target(self, exchange: str, routing_key: str) -> tuple[str, str]:
        return "", self.name

    def _headers(self, headers: dict[str, Any] | None, redelivered: bool, exchange: str,
                 routing_key: str) -> dict[str, Any]:
        return fh.queue_hop(headers, safe_uri(self.uri or ""), self.upstream.queue,
                            redelivered, exchange, routing_key)
