# Owns: one running dynamic or static shovel: its source and destination ends, moving
# messages between them under its ack mode, delete-after, reconnecting after
# reconnect-delay, and its status.
# Talked to by: broker/shovel/supervisor.py (start, stop, status).
# Must never: ack a source message before the destination has it under on-confirm, forward
# more than a delete-after count, or raise out of its task.
"""A shovel's link (rabbit_shovel_worker and rabbit_shovel_behaviour in RabbitMQ 3.10.8 are
the reference): the protocol-free half. Each end is an AMQP 0-9-1 one
(broker/shovel/amqp091.py) or an AMQP 1.0 one (broker/shovel/amqp10.py), chosen by
`src-protocol` / `dest-protocol`; the four combinations run through the same loop.

On start the link opens the source (connect, declare), then the destination, then consumes
with the prefetch. Each message is forwarded to the destination. The source message is
acked when the destination confirms it (`on-confirm`; a refusal gives it back to the
source), once it is sent (`on-publish`), or never (`no-ack`: consumed pre-settled). With
`src-delete-after` (a count, or `queue-length`: the queue's depth when the link starts; an
AMQP 1.0 source has no depth, so it never ends there) the shovel deletes itself once that
many were moved. Any failure closes both ends, shows `terminated` with the reason, and the
link starts again after `reconnect-delay` seconds; unsettled source messages go back to
their queue, so nothing confirmed is lost and duplicates are bounded by the prefetch (by
the link credit for an AMQP 1.0 source).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable
from typing import Any

from broker.shovel.amqp091 import Amqp091Destination, Amqp091Source
from broker.shovel.client import cancel_task, redact
from broker.shovel.definition import ShovelDef
from broker.shovel.endpoint import Destination, EndpointError, ShovelMessage, Source

log = logging.getLogger("broker.shovel")


def _ends(d: ShovelDef, resolve: Callable[[str], str],
          cluster_name: str) -> tuple[Source, Destination]:
    """A new source and destination for one life of the link."""
    src: Source
    dest: Destination
    if d.src_protocol == "amqp10" or d.dest_protocol == "amqp10":
        try:  # python-qpid-proton is optional (the `amqp10` extra): only these need it
            from broker.shovel import amqp10
        except ImportError as exc:
            raise EndpointError(f"AMQP 1.0 needs python-qpid-proton, which is not installed "
                                f"(pip install 'pybroker-amqp[amqp10]'): {exc}") from None
    if d.src_protocol == "amqp10":
        src = amqp10.Amqp10Source(d)
    else:
        src = Amqp091Source(d, resolve)
    if d.dest_protocol == "amqp10":
        dest = amqp10.Amqp10Destination(d, cluster_name)
    else:
        dest = Amqp091Destination(d, resolve, cluster_name)
    return src, dest


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
        self._src: Source | None = None
        self._dest: Destination | None = None
        self._pending: dict[int, int] = {}  # destination message id -> source tag
        self._left: int | None = None  # messages still to move before delete-after
        self._to_forward: int | None = None  # messages still to forward (same bound)
        self._done: asyncio.Future[None] | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop the link and close its ends (unsettled source messages go back to the
        source)."""
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
            except (EndpointError, OSError, ValueError) as exc:
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
        src, dest = self._src, self._dest
        self._src = self._dest = None
        self._pending.clear()
        for end in (src, dest):
            if end is not None:
                await end.close()

    async def _once(self) -> bool:
        """One life of the link: True when delete-after was reached, else raises."""
        d = self.d
        self._src, self._dest = src, dest = _ends(d, self._resolve, self._cluster_name)
        depth = await src.open()
        self.src_uri = src.uri
        on_confirm = self._confirmed if d.ack_mode == "on-confirm" else None
        await dest.open(on_confirm)
        self.dest_uri = dest.uri
        after = d.delete_after
        if after == "queue-length":
            self._left = depth if d.src_protocol == "amqp091" else None
        else:
            self._left = after if isinstance(after, int) else None
        self._to_forward = self._left
        if self._left == 0:
            return True
        self._done = asyncio.get_running_loop().create_future()
        await src.consume(self._forward, d.prefetch, d.ack_mode == "no-ack", self._left)
        self._set_state("running")
        log.info("shovel '%s' in vhost '%s' running: %s -> %s", d.name, d.vhost,
                 redact(self.src_uri or ""), redact(self.dest_uri or ""))
        waiters: list[asyncio.Future[Any]] = [self._done, src.closed, dest.closed]
        finished, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if self._done in finished:
            return True
        first = next(iter(finished))
        raise first.result()  # the error that closed an end

    # -- moving messages ---------------------------------------------------------------------
    def _forward(self, msg: ShovelMessage) -> None:
        if self._to_forward is not None:
            if self._to_forward <= 0:
                return  # beyond delete-after: left unsettled, back to the source on close
            self._to_forward -= 1
        dest, src = self._dest, self._src
        if dest is None or src is None:
            return  # closing
        out = dest.forward(msg, self.src_uri or "")
        mode = self.d.ack_mode
        if mode == "on-confirm":
            self._pending[out] = msg.tag
        else:
            if mode == "on-publish":
                src.ack(msg.tag)
            self._count(1)

    def _confirmed(self, ids: list[int], ack: bool) -> None:
        pending = self._pending
        src = self._src
        n = 0
        for out in ids:
            tag = pending.pop(out, None)
            if tag is None or src is None:
                continue
            if ack:
                src.ack(tag)
                n += 1
            else:  # the destination refused it: back to the source
                src.nack(tag)
                if self._to_forward is not None:
                    self._to_forward += 1
        self._count(n)

    def _count(self, n: int) -> None:
        self.moved += n
        if self._left is not None and n:
            self._left -= n
            if self._left <= 0 and self._done is not None and not self._done.done():
                self._done.set_result(None)

    # -- status ------------------------------------------------------------------------------
    def status(self, node: str) -> dict[str, Any]:
        """The /api/shovels item (rabbit_shovel_mgmt's fields)."""
        d = self.d
        out: dict[str, Any] = {
            "node": node, "timestamp": self.timestamp, "name": d.name, "vhost": d.vhost,
            "type": "static" if d.static else "dynamic", "state": self.state,
            "src_protocol": d.src_protocol, "dest_protocol": d.dest_protocol,
            "src_uri": redact(self.src_uri or d.src_uris[0]),
            "dest_uri": redact(self.dest_uri or d.dest_uris[0]),
            "messages_moved": self.moved,
        }
        for key, value in (("src_queue", d.src_queue), ("src_exchange", d.src_exchange),
                           ("dest_queue", d.dest_queue), ("dest_exchange", d.dest_exchange),
                           ("dest_exchange_key", d.dest_exchange_key),
                           ("src_address", d.src_address), ("dest_address", d.dest_address)):
            if value is not None:
                out[key] = value
        if d.src_exchange is not None:
            out["src_exchange_key"] = d.src_exchange_key
        if self.state == "terminated" and self.reason:
            out["reason"] = self.reason
        return out


def _now() -> str:
    """RabbitMQ's status timestamp format (rabbit_shovel_mgmt_util format_ts: the hour is
    not zero-padded): "2026-11-25 9:03:50"."""
    now = datetime.datetime.now()
    return f"{now:%Y-%m-%d} {now.hour}:{now:%M:%S}"
