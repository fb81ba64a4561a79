"""Worker 0's management API and Prometheus endpoint into the other worker processes (issue
47 item 4, docs/multicore.md "One broker to operators").

Owns: the periodic report every other worker sends worker 0 (`report_loop`, what
broker/workers/reports.py builds) and its reception (queue figures onto their proxies,
message counts per vhost, connections to connection_tracking); the API's actions on a queue
another worker owns (`remote_queue_call`: purge, get, move, browse, delete) and its unacked
list across workers (`remote_unacked`, answered in each worker by "unacked" requests).
Talks to: the worker runtime (`BridgeRuntime`). Must never: change a definition itself (a
delete goes through the runtime's `submit`, as a channel's would).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from broker import errors
from broker.management.queues import unacked_rows
from broker.stats import MessageStats
from broker.workers import reports
from broker.workers.mesh import Answer, Mesh
from broker.workers.remote import RemoteQueue

if TYPE_CHECKING:
    from broker.message import Message
    from broker.server import Broker
    from broker.workers.connection_tracking import ConnectionTracking

OWNER = 0  # the worker that serves the management API
OnReply = Callable[[bool, Any], None]


class BridgeRuntime(Protocol):
    """The worker runtime as the bridge sees it."""

    index: int
    count: int
    mesh: Mesh
    broker: Broker | None
    tracking: ConnectionTracking
    proxies: dict[tuple[str, str], RemoteQueue]

    def serial(self, reader: Any) -> int: ...

    def submit(self, op: str, payload: tuple, on_reply: OnReply) -> None: ...

    def ask_queue(self, worker: int, kind: str, payload: tuple, on_reply: OnReply) -> None: ...

    def vhost_or_404(self, name: str, method: Any) -> Any: ...


class ApiBridge:
    """See the module docstring; registers its records and requests on the runtime's mesh."""

    def __init__(self, runtime: BridgeRuntime) -> None:
        self.rt = runtime
        self._timer: asyncio.TimerHandle | None = None  # the next report to the owner
        runtime.mesh.on("report", self._on_report)
        runtime.mesh.on_request("unacked", self._on_unacked)
        runtime.mesh.on_request("delayed", self._on_delayed)

    async def remote_queue_call(self, vhost: str, kind: str, payload: tuple) -> Any:
        """The management API (worker 0) on a queue of another worker: purge, get_n,
        move, browse (asked of the queue's worker), delete (a definition change, its checks
        made by the queue's worker). After a purge, get or move the queue's figures are
        asked for too, so the API shows what it changed at once (not at the next report).
        AMQP errors are raised here."""
        assert self.rt.broker is not None and self.rt.broker.loop is not None
        loop = self.rt.broker.loop

        def ask(send: Callable[[OnReply], None]) -> asyncio.Future[Any]:
            done: asyncio.Future[Any] = loop.create_future()

            def on_reply(ok: bool, value: Any) -> None:
                if not done.done():
                    if ok:
                        done.set_result(value)
                    else:
                        done.set_exception(value)
            send(on_reply)
            return done
        if kind == "delete":
            name, if_unused, if_empty = payload
            return await ask(lambda on_reply: self.rt.submit(
                "qdel", (vhost, name, if_unused, if_empty, None, None), on_reply))
        queue = self.rt.vhost_or_404(vhost, None).queues.get(payload[0])
        if not isinstance(queue, RemoteQueue):
            raise errors.amqp_error(errors.NotFound,
                                    f"no queue '{payload[0]}' in vhost '{vhost}'")
        value = await ask(lambda on_reply: self.rt.ask_queue(queue.worker, kind,
                                                          (vhost, *payload), on_reply))
        if kind in ("purge", "get_n", "move"):
            queue.report(await ask(lambda on_reply: self.rt.ask_queue(
                queue.worker, "figures", (vhost, payload[0]), on_reply)))
        return value

    def _on_unacked(self, peer: int, payload: Any, answer: Answer) -> None:
        """What our channels hold unacked from queue (vhost, name), for worker 0's API."""
        assert self.rt.broker is not None
        vhost, name = payload

        def of_queue(queue: Any) -> bool:
            v = getattr(queue, "vhost", None)
            return queue.name == name and v is not None and v.name == vhost
        answer.reply(unacked_rows(self.rt.broker.connections, of_queue))

    async def remote_unacked(self, vhost: str, name: str) -> list[dict[str, Any]]:
        """Worker 0: every other live worker's unacked rows for queue (vhost, name)."""
        return await self._gather("unacked", (vhost, name))

    async def _gather(self, kind: str, payload: tuple) -> list[Any]:
        """Worker 0: request `kind` of every other worker at once and join the lists they
        answer (a worker that died meanwhile answers none)."""
        assert self.rt.broker is not None and self.rt.broker.loop is not None
        loop = self.rt.broker.loop

        def ask(peer: int) -> asyncio.Future[list[Any]]:
            done: asyncio.Future[list[Any]] = loop.create_future()

            def on_reply(ok: bool, value: Any) -> None:
                if not done.done():
                    done.set_result(value if ok else [])
            self.rt.mesh.request(peer, kind, payload, on_reply)
            return done
        asked = [ask(peer) for peer in range(self.rt.count) if peer != self.rt.index]
        out: list[Any] = []
        for done in asked:
            out += await done
        return out

    def _on_delayed(self, peer: int, payload: Any, answer: Answer) -> None:
        """Up to `count` of what our holder of delayed exchange (vhost, name) holds, due
        order, as (due ms, Message), for worker 0's browse; none when we hold none."""
        assert self.rt.broker is not None
        vhost, name, count = payload
        found = self.rt.broker.vhosts.get(vhost)
        exchange = found.exchanges.get(name) if found is not None else None
        holder = getattr(getattr(exchange, "routing", None), "holder", None)
        answer.reply(holder.call(holder.browse, count) if holder is not None else [])

    async def remote_delayed(self, vhost: str, name: str, count: int
                             ) -> list[tuple[int, Message]]:
        """Worker 0: up to `count` waiting messages of delayed exchange (vhost, name) from
        every other live worker's holder (each holds what its own connections published),
        merged in due order."""
        items = await self._gather("delayed", (vhost, name, count))
        items.sort(key=lambda item: item[0])
        return items[:count]

    def _on_report(self, peer: int, record: tuple) -> None:
        """A worker's figures for the management API (the owner serves it): its queues'
        (onto their proxies) and its channels' message counts per vhost (whose totals
        never fall: a worker folds closed channels into them first)."""
        _, queues, vhost_stats, conns, view, delayed = record
        self.rt.tracking.report(peer, conns, view)
        for vhost, name, figures in queues:
            proxy = self.rt.proxies.get((vhost, name))
            if proxy is not None and proxy.worker == peer:
                proxy.report(figures)
        assert self.rt.broker is not None
        for vhost, fields in vhost_stats.items():
            v: Any = self.rt.broker.vhosts.get(vhost)  # a WorkerVHost
            if v is not None:
                v.remote_stats[peer] = MessageStats.from_dict(fields)
        for vhost, name, stats in delayed:  # its delayed and deduplicating exchanges'
            v = self.rt.broker.vhosts.get(vhost)
            x = v.exchanges.get(name) if v is not None else None
            if x is None:
                continue
            holder = getattr(x.routing, "holder", None)
            if holder is not None:
                holder.remote_stats[peer] = stats
            elif "duplicates" in stats and hasattr(x.routing, "remote_duplicates"):
                x.routing.remote_duplicates[peer] = stats["duplicates"]

    def _send_report(self) -> None:
        """Every collect_statistics_interval: our figures to the owner (not the owner)."""
        assert self.rt.broker is not None
        self.rt.mesh.send(OWNER, ("report", *reports.build(self.rt.broker, self.rt.serial,
                                                            self.rt.index)))

    def report_loop(self) -> None:
        assert self.rt.broker is not None and self.rt.broker.loop is not None
        if self.rt.broker.definitions is None:  # stopping: its tables are being closed
            return
        try:
            self._send_report()
        finally:
            interval = max(self.rt.broker.config.collect_statistics_interval, 100) / 1000
            self._timer = self.rt.broker.loop.call_later(interval, self.report_loop)
