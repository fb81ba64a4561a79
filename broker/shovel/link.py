# Owns: one running dynamic shovel: its two client connections, moving messages from the
# source to the destination under its ack mode, delete-after, reconnecting after
# reconnect-delay, and its status.
# Talked to by: broker/shovel/supervisor.py (start, stop, status).
# Must never: ack a source message before the destination has it under on-confirm, forward
# more than a delete-after count, or raise out of its task.
"""A dynamic shovel's link (rabbit_amqp091_shovel in RabbitMQ 3.10.8 is the reference).

On start the link connects to the first source and destination URI that answer (in list
order), declares what it needs (a `src-queue`/`dest-queue` is checked passively and declared
durable with its `*-queue-args` if missing; a `src-exchange` gets an exclusive server-named
queue bound with `src-exchange-key`), sets `basic.qos` to `src-prefetch-count` and consumes.
Each delivery is published to `dest-queue` (default exchange), or `dest-exchange` with
`dest-exchange-key` or the message's own routing key, or, with neither, the message's own
exchange and key; its properties are forwarded byte for byte unless `dest-publish-properties`,
`dest-add-forward-headers` (an `x-shovelled` table prepended) or `dest-add-timestamp-header`
(`x-shovelled-timestamp`, seconds) change them. The source delivery is acked when the
destination confirms it (`on-confirm`; a nack requeues it at the source), once it is
published (`on-publish`), or never (`no-ack`). With `src-delete-after` (a count, or
`queue-length`: the queue's depth when the link starts) the shovel deletes itself once that
many were moved. Any failure closes both connections, shows `terminated` with the reason,
and the link starts again after `reconnect-delay` seconds; unacked source messages go back
to their queue (the broker requeues them), so nothing confirmed is lost and duplicates are
bounded by the prefetch.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import logging
import time
from collections.abc import Callable
from typing import Any

from pamqp import commands

from broker.protocol.encoding import build_method
from broker.shovel.client import (
    Client,
    ClientError,
    Delivery,
    Endpoint,
    cancel_task,
    close_clients,
    redact,
)
from broker.shovel.definition import ShovelDef

log = logging.getLogger("broker.shovel")


class ShovelLink:
    """One shovel's link; `start()` runs it in the event loop until `stop()`. `on_finished`
    is called once delete-after is reached (the supervisor then deletes the shovel).
    `resolve(uri)` turns a host-less URI into one of this broker's."""

    def __init__(self, d: ShovelDef, resolve: Callable[[str], str], cluster_name: str,
                 on_finished: Callable[[], None]) -> None:
        self.d = d
        self._resolve = resolve
        self._cluster_name = cluster_name
        self._on_finished = on_finished
        self.state = "starting"  # starting | running | terminated
        self.reason: str | None = None  # why it last terminated
        self.timestamp = _now()  # when the state last changed
        self.src_uri: str | None = None  # the URIs in use (as given, password kept)
        self.dest_uri: str | None = None
        self.moved = 0  # messages acked at the source (or sent, without acks), in all
        self._task: asyncio.Task[None] | None = None
        self._src: Client | None = None
        self._dest: Client | None = None
        self._pending: dict[int, int] = {}  # destination publish seq -> source delivery tag
        self._left: int | None = None  # messages still to move before delete-after
        self._to_forward: int | None = None  # deliveries still to forward (same bound)
        self._done: asyncio.Future[None] | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop the link and close its connections (unacked source messages are requeued
        by the source broker)."""
        await cancel_task(self._task)
        self._task = None
        await self._close()

    def _set_state(self, state: str, reason: str | None = None) -> None:
        self.state = state
        self.reason = reason
        self.timestamp = _now()

    async def _run(self) -> None:
        while True:
            try:
                finished = await self._once()
            except (ClientError, OSError, ValueError) as exc:
                self._set_state("terminated", str(exc))
                log.warning("shovel '%s' in vhost '%s' failed: %s; restarting in %s s",
                            self.d.name, self.d.vhost, exc, self.d.reconnect_delay)
                finished = False
            except Exception as exc:  # noqa: BLE001 - a bug: keep the broker, retry later
                self._set_state("terminated", repr(exc))
                log.exception("shovel '%s' in vhost '%s' crashed", self.d.name, self.d.vhost)
                finished = False
            await self._close()
            if finished:
                self._set_state("terminated", "delete-after reached")
                self._on_finished()
                return
            await asyncio.sleep(self.d.reconnect_delay)
            self._set_state("starting")

    async def _close(self) -> None:
        await close_clients(self._src, self._dest)
        self._src = self._dest = None
        self._pending.clear()

    async def _connect(self, uris: tuple[str, ...], role: str) -> tuple[Client, str]:
        last: ClientError | None = None
        for uri in uris:
            try:
                ep = Endpoint.parse(self._resolve(uri))
                name = f"Shovel {self.d.name} ({role})"
                return await Client.connect(ep, name), uri
            except ClientError as exc:
                last = exc
        raise last or ClientError(0, f"no {role} URI")

    async def _once(self) -> bool:
        """One life of the link: True when delete-after was reached, else raises."""
        d = self.d
        self._src, self.src_uri = await self._connect(d.src_uris, "source")
        self._dest, self.dest_uri = await self._connect(d.dest_uris, "destination")
        src, dest = self._src, self._dest
        await _declare_all(dest, d.dest_declarations)
        last = await _declare_all(src, d.src_declarations)
        if d.dest_queue is not None:
            await _ensure_queue(dest, d.dest_queue, d.dest_queue_args)
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
        after = d.delete_after
        self._left = depth if after == "queue-length" else (
            after if isinstance(after, int) else None)
        self._to_forward = self._left
        if self._left == 0:
            return True
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        if d.ack_mode == "on-confirm":
            await dest.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
            dest.on_confirm = self._confirmed
        no_ack = d.ack_mode == "no-ack"
        if not no_ack:
            prefetch = d.prefetch if self._left is None else min(d.prefetch, self._left)
            await src.rpc(1, commands.Basic.Qos(prefetch_count=max(1, min(prefetch, 65535))),
                          commands.Basic.QosOk)
        src.on_delivery = self._forward
        await src.rpc(1, commands.Basic.Consume(queue=queue, no_ack=no_ack),
                      commands.Basic.ConsumeOk)
        self._set_state("running")
        log.info("shovel '%s' in vhost '%s' running: %s -> %s", d.name, d.vhost,
                 redact(self.src_uri), redact(self.dest_uri))
        waiters: list[asyncio.Future[Any]] = [self._done, src.closed, dest.closed]
        finished, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if self._done in finished:
            return True
        first = next(iter(finished))
        raise first.result()  # the ClientError that closed a connection

    # -- moving messages ---------------------------------------------------------------------
    def _forward(self, delivery: Delivery) -> None:
        tag, _redelivered, exchange, routing_key, hdr, body = delivery
        if self._to_forward is not None:
            if self._to_forward <= 0:
                return  # beyond delete-after: left unacked, requeued when the link closes
            self._to_forward -= 1
        d = self.d
        if d.dest_queue is not None:
            x, key = "", d.dest_queue
        elif d.dest_exchange is not None:
            x = d.dest_exchange
            key = d.dest_exchange_key if d.dest_exchange_key is not None else routing_key
        else:  # the message's own exchange; dest-exchange-key / publish_fields may set the key
            x = exchange
            key = d.dest_exchange_key if d.dest_exchange_key is not None else routing_key
        raw = hdr.raw_properties
        if d.publish_properties or d.add_forward_headers or d.add_timestamp_header:
            raw = self._changed_properties(hdr.properties)
        dest, src = self._dest, self._src
        assert dest is not None and src is not None
        seq = dest.publish(x, key, raw, body)
        mode = d.ack_mode
        if mode == "on-confirm":
            self._pending[seq] = tag
        else:
            if mode == "on-publish":
                src.ack(tag)
            self._count(1)

    def _confirmed(self, seq: int, multiple: bool, ack: bool) -> None:
        pending = self._pending
        seqs = [s for s in pending if s <= seq] if multiple else [seq]
        src = self._src
        n = 0
        for s in seqs:
            tag = pending.pop(s, None)
            if tag is None or src is None:
                continue
            if ack:
                src.ack(tag)
                n += 1
            else:  # the destination refused it: back to the source queue
                src.send(1, commands.Basic.Nack(delivery_tag=tag, requeue=True))
                if self._to_forward is not None:
                    self._to_forward += 1
        self._count(n)

    def _count(self, n: int) -> None:
        self.moved += n
        if self._left is not None and n:
            self._left -= n
            if self._left <= 0 and self._done is not None and not self._done.done():
                self._done.set_result(None)

    def _changed_properties(self, props: commands.Basic.Properties) -> bytes:
        """The properties with dest-publish-properties set and the forward / timestamp
        headers added (rabbit_shovel_util update_headers, add_timestamp_header)."""
        d = self.d
        p = copy.copy(props)
        for key, value in d.publish_properties.items():
            setattr(p, "message_type" if key == "type" else key, value)
        if d.add_forward_headers or d.add_timestamp_header:
            headers: dict[str, Any] = dict(p.headers or {})
            if d.add_forward_headers:
                table: dict[str, Any] = {
                    "shovelled-by": self._cluster_name,
                    "shovel-type": "static" if d.static else "dynamic",
                    "shovel-name": d.name, "shovel-vhost": d.vhost,
                    "src-uri": redact(self.src_uri or ""),
                    "dest-uri": redact(self.dest_uri or "")}
                if d.src_queue is not None:
                    table["src-queue"] = d.src_queue
                else:
                    table["src-exchange"] = d.src_exchange or ""
                    table["src-exchange-key"] = d.src_exchange_key
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

    # -- status ------------------------------------------------------------------------------
    def status(self, node: str) -> dict[str, Any]:
        """The /api/shovels item (rabbit_shovel_mgmt's fields)."""
        d = self.d
        out: dict[str, Any] = {
            "node": node, "timestamp": self.timestamp, "name": d.name, "vhost": d.vhost,
            "type": "static" if d.static else "dynamic", "state": self.state,
            "src_protocol": "amqp091", "dest_protocol": "amqp091",
            "src_uri": redact(self.src_uri or d.src_uris[0]),
            "dest_uri": redact(self.dest_uri or d.dest_uris[0]),
            "messages_moved": self.moved,
        }
        for key, value in (("src_queue", d.src_queue), ("src_exchange", d.src_exchange),
                           ("dest_queue", d.dest_queue), ("dest_exchange", d.dest_exchange),
                           ("dest_exchange_key", d.dest_exchange_key)):
            if value is not None:
                out[key] = value
        if d.src_exchange is not None:
            out["src_exchange_key"] = d.src_exchange_key
        if self.state == "terminated" and self.reason:
            out["reason"] = self.reason
        return out


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


def _now() -> str:
    """RabbitMQ's status timestamp format (rabbit_shovel_mgmt_util format_ts: the hour is
    not zero-padded): "2026-11-25 9:03:50"."""
    now = datetime.datetime.now()
    return f"{now:%Y-%m-%d} {now.hour}:{now:%M:%S}"
