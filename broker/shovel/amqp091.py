# Owns: a shovel's AMQP 0-9-1 ends: the source (declare, qos, consume, ack / nack) and the
# destination (declare, publish with the definition's properties and headers, confirms).
# Talked to by: broker/shovel/link.py (through the Source / Destination protocols of
# broker/shovel/endpoint.py).
# Must never: change a message's properties unless the definition says so (they are
# forwarded byte for byte), or block the event loop.
"""A shovel's AMQP 0-9-1 ends (rabbit_amqp091_shovel in RabbitMQ 3.10.8 is the reference).

The source connects to the first URI that answers (in list order) and declares what it
needs: a `src-queue` is checked passively and declared durable with `src-queue-args` if
missing; a `src-exchange` gets an exclusive server-named queue bound with
`src-exchange-key`; a static shovel runs its declarations. It sets `basic.qos` to the
prefetch and consumes. The destination declares `dest-queue` the same way and publishes
each message to `dest-queue` (default exchange), or `dest-exchange` with `dest-exchange-key`
or the message's own routing key, or, with neither, the message's own exchange and key. Its
properties are forwarded byte for byte unless `dest-publish-properties`,
`dest-add-forward-headers` (an `x-shovelled` table prepended) or `dest-add-timestamp-header`
(`x-shovelled-timestamp`, seconds) change them. A message from an AMQP 1.0 source arrives
with no properties (rabbit_amqp10_shovel forwards the body only).
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable
from typing import Any

from pamqp import commands

from broker.protocol.encoding import build_method
from broker.shovel.client import Client, ClientError, Delivery, Endpoint, redact
from broker.shovel.definition import ShovelDef
from broker.shovel.endpoint import (
    Confirm,
    Deliver,
    ShovelMessage,
    forward_table,
    source_headers,
)

_EMPTY_PROPERTIES = commands.Basic.Properties().marshal()


async def _connect(uris: tuple[str, ...], resolve: Callable[[str], str], name: str,
                   role: str) -> tuple[Client, str]:
    last: ClientError | None = None
    for uri in uris:
        try:
            return await Client.connect(Endpoint.parse(resolve(uri)),
                                        f"Shovel {name} ({role})"), uri
        except ClientError as exc:
            last = exc
    raise last or ClientError(0, f"no {role} URI")


class _End:
    """What both 0-9-1 ends share: the client, its URI and its `closed` future."""

    def __init__(self, d: ShovelDef, resolve: Callable[[str], str]) -> None:
        self.d = d
        self._resolve = resolve
        self.uri: str | None = None
        self.client: Client | None = None
        # resolved by the client when it closes; a placeholder until then
        self.closed: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()

    async def _open(self, uris: tuple[str, ...], role: str) -> Client:
        self.client, self.uri = await _connect(uris, self._resolve, self.d.name, role)
        self.client.closed.add_done_callback(self._client_closed)
        return self.client

    def _client_closed(self, fut: asyncio.Future[ClientError]) -> None:
        if not self.closed.done():
            self.closed.set_result(fut.result())

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
            self.client = None


class Amqp091Source(_End):
    """A 0-9-1 source (see the module docstring)."""

    async def open(self) -> int:
        d = self.d
        src = await self._open(d.src_uris, "source")
        last = await _declare_all(src, d.src_declarations)
        if d.static:  # consume what the configuration names ("": the last declared)
            queue = d.src_queue or last or ""
            ok = await src.rpc(1, build_method(commands.Queue.Declare, queue=queue,
                                               passive=True), commands.Queue.DeclareOk)
            depth = int(ok.message_count)
        elif d.src_queue is not None:
            depth = await _ensure_queue(src, d.src_queue, d.src_queue_args)
            queue = d.src_queue
        else:
            ok = await src.rpc(1, commands.Queue.Declare(exclusive=True),
                               commands.Queue.DeclareOk)
            queue, depth = ok.queue, 0
            await src.rpc(1, commands.Queue.Bind(queue=queue, exchange=d.src_exchange or "",
                                                 routing_key=d.src_exchange_key),
                          commands.Queue.BindOk)
        self._queue = queue
        return depth

    async def consume(self, deliver: Deliver, prefetch: int, no_ack: bool,
                      limit: int | None) -> None:
        src = self.client
        assert src is not None
        if not no_ack:
            if limit is not None:
                prefetch = min(prefetch, limit)
            await src.rpc(1, commands.Basic.Qos(prefetch_count=max(1, min(prefetch, 65535))),
                          commands.Basic.QosOk)

        def on_delivery(delivery: Delivery) -> None:
            tag, _redelivered, exchange, routing_key, hdr, body = delivery
            deliver(ShovelMessage(tag, body, exchange, routing_key, hdr))

        src.on_delivery = on_delivery
        await src.rpc(1, commands.Basic.Consume(queue=self._queue, no_ack=no_ack),
                      commands.Basic.ConsumeOk)

    def ack(self, tag: int) -> None:
        if self.client is not None:
            self.client.ack(tag)

    def nack(self, tag: int) -> None:
        if self.client is not None:
            self.client.send(1, commands.Basic.Nack(delivery_tag=tag, requeue=True))


class Amqp091Destination(_End):
    """A 0-9-1 destination (see the module docstring). `cluster_name` goes into the
    forward headers (shovelled-by)."""

    def __init__(self, d: ShovelDef, resolve: Callable[[str], str], cluster_name: str) -> None:
        super().__init__(d, resolve)
        self._cluster_name = cluster_name
        self._pending: set[int] | None = None  # sequence numbers not yet confirmed

    async def open(self, on_confirm: Confirm | None) -> None:
        d = self.d
        dest = await self._open(d.dest_uris, "destination")
        await _declare_all(dest, d.dest_declarations)
        if d.dest_queue is not None:
            await _ensure_queue(dest, d.dest_queue, d.dest_queue_args)
        if on_confirm is not None:
            await dest.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
            pending: set[int] = set()
            self._pending = pending

            def confirmed(seq: int, multiple: bool, ack: bool) -> None:
                seqs = sorted(s for s in pending if s <= seq) if multiple else [seq]
                pending.difference_update(seqs)
                on_confirm(seqs, ack)

            dest.on_confirm = confirmed
        else:
            self._pending = None

    def forward(self, msg: ShovelMessage, src_uri: str) -> int:
        d = self.d
        if d.dest_queue is not None:
            x, key = "", d.dest_queue
        elif d.dest_exchange is not None:
            x = d.dest_exchange
            key = d.dest_exchange_key if d.dest_exchange_key is not None else msg.routing_key
        else:  # the message's own exchange; dest-exchange-key / publish_fields may set the key
            x = msg.exchange
            key = d.dest_exchange_key if d.dest_exchange_key is not None else msg.routing_key
        hdr = msg.header
        raw = hdr.raw_properties if hdr is not None else _EMPTY_PROPERTIES
        if d.publish_properties or d.add_forward_headers or d.add_timestamp_header:
            props = hdr.properties if hdr is not None else commands.Basic.Properties()
            raw = self._changed_properties(props, src_uri)
        dest = self.client
        assert dest is not None
        seq = dest.publish(x, key, raw, msg.body)
        if self._pending is not None:
            self._pending.add(seq)
        return seq

    def _changed_properties(self, props: commands.Basic.Properties, src_uri: str) -> bytes:
        """The properties with dest-publish-properties set and the forward / timestamp
        headers added (rabbit_shovel_util update_headers, add_timestamp_header)."""
        d = self.d
        p = copy.copy(props)
        for key, value in d.publish_properties.items():
            setattr(p, "message_type" if key == "type" else key, value)
        if d.add_forward_headers or d.add_timestamp_header:
            headers: dict[str, Any] = dict(p.headers or {})
            if d.add_forward_headers:
                table = forward_table(d, self._cluster_name)
                table["shovel-vhost"] = d.vhost
                table["src-uri"] = redact(src_uri)
                table["dest-uri"] = redact(self.uri or "")
                table.update(source_headers(d))
                for key, value in (("dest-exchange", d.dest_exchange),
                                   ("dest-exchange-key", d.dest_exchange_key),
                                   ("dest-queue", d.dest_queue)):
                    if value is not None:
                        table[key] = value
                headers["x-shovelled"] = [table, *headers.get("x-shovelled", [])]
            if d.add_timestamp_header:
                headers["x-shovelled-timestamp"] = int(time.time())
            p.headers = headers
        return p.marshal()


async def _declare_all(client: Client, methods: tuple[Any, ...]) -> str | None:
    """Run a static shovel's declarations on channel 1, in order; a queue.declare or
    queue.bind with queue "" means the last queue declared (rabbit_shovel_config). Returns
    the name of the last declared queue."""
    last: str | None = None
    for method in methods:
        if isinstance(method, commands.Queue.Declare):
            ok = await client.rpc(1, method, commands.Queue.DeclareOk)
            last = ok.queue
        elif isinstance(method, commands.Queue.Bind):
            if not method.queue and last is not None:
                method = copy.copy(method)
                method.queue = last
            await client.rpc(1, method, commands.Queue.BindOk)
        elif isinstance(method, commands.Exchange.Declare):
            await client.rpc(1, method, commands.Exchange.DeclareOk)
        elif isinstance(method, commands.Exchange.Bind):
            await client.rpc(1, method, commands.Exchange.BindOk)
    return last


async def _ensure_queue(client: Client, queue: str, args: dict[str, Any]) -> int:
    """rabbit_shovel_parameters ensure_queue: a passive declare on a second channel; when
    it is missing (404), a durable declare with `args` on channel 1. The message count."""
    await client.rpc(2, commands.Channel.Open(), commands.Channel.OpenOk)
    try:
        ok = await client.rpc(2, commands.Queue.Declare(queue=queue, passive=True),
                              commands.Queue.DeclareOk)
    except ClientError as exc:
        if exc.reply_code != 404:
            raise
        ok = await client.rpc(1, commands.Queue.Declare(queue=queue, durable=True,
                                                        arguments=args or None),
                              commands.Queue.DeclareOk)
        return int(ok.message_count)
    await client.rpc(2, commands.Channel.Close(reply_code=200, reply_text="ok", class_id=0,
                                               method_id=0), commands.Channel.CloseOk)
    return int(ok.message_count)
