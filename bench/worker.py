# bench/worker.py — one worker OS process: its producer and consumer connections.
#
# Owns: the process's event loop (uvloop when installed), its connections, Publishers and
# Consumers, closing each producer connection right after its last publish (as PerfTest
# does: no linger, so a broker that loses what arrived just before connection.close shows
# up as missing messages), and the pipe protocol with the coordinator:
#   worker -> coordinator: ("ready",) ("stats", dict) ("producers_done", dict) ("error", str)
#                          ("final", dict)
#   coordinator -> worker: ("start",) ("start_consumers",) ("stop_producers",) ("stop",)
# Talks to: bench.coordinator (over a multiprocessing Pipe only), bench.amqp, bench.publisher,
# bench.consumer.
# Must never: print (the coordinator owns the terminal), or keep running once the coordinator
# is gone (a closed pipe ends the worker).
"""Worker process entry point: ``worker_main(scenario, producers, consumers, pipe)``."""

from __future__ import annotations

import asyncio
from multiprocessing.connection import Connection as Pipe
from typing import Any

from bench.amqp import URI, AMQPError, Connection
from bench.consumer import Consumer, Tally
from bench.options import Scenario
from bench.publisher import Publisher
from bench.topology import ConsumerConn, ProducerConn

REPORT_EVERY = 0.2  # s between ("stats", …) messages
CLOSE_TIMEOUT = 30.0  # s a finished producer waits for close-ok (the broker may first have a
# full socket buffer of publishes to read); a timeout is reported as an error
STOP_WAIT = 5.0  # s "stop" waits for producer closes still under way (< coordinator's 10 s)


class Worker:
    """The coroutine side of a worker process (see the module comment for the pipe protocol)."""

    def __init__(self, sc: Scenario, producers: list[ProducerConn],
                 consumers: list[ConsumerConn], pipe: Pipe, name: str) -> None:
        self.sc = sc
        self.producer_specs = producers
        self.consumer_specs = consumers
        self.pipe = pipe
        self.name = name
        self.conns: list[Connection] = []
        self.publishers: list[Publisher] = []
        self.producer_conns: list[tuple[Connection, list[Publisher]]] = []  # publishers by conn
        self.closing: list[asyncio.Task[None]] = []  # finish_producer tasks
        self.closed_conns: set[Connection] = set()  # closed by us: their errors are not errors
        self.consumers: list[Consumer] = []
        self.tally = Tally()
        self.control: asyncio.Queue[tuple[str, ...]] = asyncio.Queue()
        self.tasks: list[asyncio.Task[None]] = []
        self.error_sent = False

    def send(self, *msg: Any) -> None:
        try:
            self.pipe.send(msg)
        except (BrokenPipeError, OSError):
            self.control.put_nowait(("stop",))

    def _on_pipe(self) -> None:
        try:
            msg = self.pipe.recv()
        except (EOFError, OSError):
            msg = ("stop",)
            asyncio.get_running_loop().remove_reader(self.pipe.fileno())
        self.control.put_nowait(msg)

    async def connect(self) -> None:
        uri = URI.parse(self.sc.uri)
        for spec in self.producer_specs:
            conn = await Connection.open(uri, f"bench-{self.name}-producer-{spec.index}")
            self.conns.append(conn)
            pubs = []
            for pid, ex, rk in spec.channels:
                pub = Publisher(await conn.channel(), pid, ex, rk, self.sc)
                await pub.setup()
                pubs.append(pub)
            self.publishers.extend(pubs)
            self.producer_conns.append((conn, pubs))
        for cspec in self.consumer_specs:
            conn = await Connection.open(uri, f"bench-{self.name}-consumer-{cspec.index}")
            self.conns.append(conn)
            for queue in cspec.channels:
                cons = Consumer(await conn.channel(), queue, self.tally,
                                auto_ack=self.sc.auto_ack, prefetch=self.sc.prefetch,
                                ack_every=self.sc.multi_ack_every)
                await cons.setup()
                self.consumers.append(cons)
        if not self.sc.consume_after_publish:
            await self.start_consumers()

    async def start_consumers(self) -> None:
        for cons in self.consumers:
            await cons.consume()

    def stats(self) -> dict[str, Any]:
        """Cumulative counters plus latency histogram deltas since the previous report."""
        pubs = self.publishers
        t = self.tally
        conf = {}
        conf_max = 0
        for p in pubs:
            for i, c in p.confirm_hist.take_sparse().items():
                conf[i] = conf.get(i, 0) + c
            conf_max = max(conf_max, p.confirm_hist.max_us)
            p.confirm_hist.max_us = 0
        lat_max = t.latency.max_us
        t.latency.max_us = 0
        return {
            "published": sum(p.published for p in pubs),
            "published_bytes": sum(p.published for p in pubs) * self.sc.size,
            "confirmed": sum(p.confirmed for p in pubs),
            "nacked": sum(p.nacked for p in pubs),
            "returned": sum(p.returned for p in pubs),
            "resent": sum(p.resent for p in pubs),
            "timed_out": sum(p.timed_out for p in pubs),
            "consumed": t.consumed,
            "consumed_bytes": t.consumed_bytes,
            "blocked": any(c.blocked for c in self.conns),
            "blocked_seconds": sum(c.blocked_seconds for c in self.conns),
            "latency": t.latency.take_sparse(),
            "latency_max_us": lat_max,
            "confirm_latency": conf,
            "confirm_latency_max_us": conf_max,
        }

    def published_by_producer(self) -> dict[int, dict[str, int]]:
        """{producer_id: {"count": distinct messages sent, "checksum": sum of their seqs,
        "nacked": ..., "timed_out": ...}} — the producer side of the exactly-once check."""
        return {
            p.producer_id: {
                "count": p.next_seq,
                "checksum": p.next_seq * (p.next_seq - 1) // 2,
                "nacked": p.nacked,
                "timed_out": p.timed_out,
                "resent": p.resent,
            }
            for p in self.publishers
        }

    async def reporter(self) -> None:
        while True:
            await asyncio.sleep(REPORT_EVERY)
            self.send("stats", self.stats())
            channels = [p.ch for p in self.publishers] + [c.ch for c in self.consumers]
            conns = [c for c in self.conns if c not in self.closed_conns]
            channels = [ch for ch in channels if not ch.closed and ch.conn in conns]
            for err in [c.error for c in conns] + [ch.error for ch in channels]:
                if err is not None and not self.error_sent:
                    self.error_sent = True
                    self.send("error", f"{self.name}: {err}")

    async def run_publishers(self) -> None:
        try:
            await asyncio.gather(*(self.run_producer(c, pubs) for c, pubs in self.producer_conns))
        except AMQPError as exc:
            if not self.error_sent:
                self.error_sent = True
                self.send("error", f"{self.name}: {exc}")
            return
        self.send("stats", self.stats())
        self.send("producers_done", self.published_by_producer())

    async def run_producer(self, conn: Connection, pubs: list[Publisher]) -> None:
        """Run one producer connection's publishers (until -C, -z / stop_producers; with
        confirms they then wait for outstanding confirms up to --confirm-timeout), then start
        closing it at once, without waiting for the other producers."""
        await asyncio.gather(*(p.run() for p in pubs))
        shared = any(c.ch.conn is conn for c in self.consumers)
        if not shared:
            self.closed_conns.add(conn)
            conn.send_close()  # now, in the same loop step as the last publish's write
        self.closing.append(asyncio.create_task(self.finish_producer(conn, pubs, shared)))

    async def finish_producer(self, conn: Connection, pubs: list[Publisher],
                              shared: bool) -> None:
        """Await the close-ok of a finished producer's connection.close; when the connection
        also carries consumers (``shared``: they must keep consuming), channel.close on the
        producer's channels only. No close-ok within CLOSE_TIMEOUT is reported as an error."""
        if shared:
            for p in pubs:
                try:
                    await p.ch.close(CLOSE_TIMEOUT)
                except (AMQPError, TimeoutError) as exc:
                    self._error(f"closing producer channel {p.ch.id}: {exc!r}")
            return
        if not await conn.close(CLOSE_TIMEOUT):
            why = conn.error or f"no close-ok within {CLOSE_TIMEOUT} s"
            self._error(f"closing producer connection: {why}")

    def _error(self, text: str) -> None:
        if not self.error_sent:
            self.error_sent = True
            self.send("error", f"{self.name}: {text}")

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_reader(self.pipe.fileno(), self._on_pipe)
        try:
            await self.connect()
        except (AMQPError, OSError, TimeoutError) as exc:
            self.send("error", f"{self.name}: setup failed: {exc!r}")
            await self.close()
            self.send("final", self.final())
            return
        self.send("ready")
        reporter = asyncio.create_task(self.reporter())
        while True:
            msg = await self.control.get()
            if msg[0] == "start":
                if self.publishers:
                    self.tasks.append(asyncio.create_task(self.run_publishers()))
                else:
                    self.send("producers_done", {})
            elif msg[0] == "start_consumers" and self.sc.consume_after_publish:
                try:
                    await self.start_consumers()
                except AMQPError as exc:
                    self.send("error", f"{self.name}: {exc}")
            elif msg[0] == "stop_producers":
                for p in self.publishers:
                    p.stopping = True
            elif msg[0] == "stop":
                break
        for p in self.publishers:
            p.stopping = True
        for c in self.consumers:
            c.flush_acks()
        reporter.cancel()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(reporter, *self.tasks, return_exceptions=True)
        if self.closing:  # producers' closes still under way: let them finish (bounded)
            _, pending = await asyncio.wait(self.closing, timeout=STOP_WAIT)
            if pending:
                self._error(f"{len(pending)} producer close(s) unanswered at stop")
            for task in pending:
                task.cancel()
            await asyncio.gather(*self.closing, return_exceptions=True)
        final = self.final()
        await self.close()
        self.send("final", final)
        loop.remove_reader(self.pipe.fileno())

    def final(self) -> dict[str, Any]:
        return {
            "stats": self.stats(),
            "published_by_producer": self.published_by_producer(),
            "consumed_by_producer": {k: list(v) for k, v in self.tally.per_producer.items()},
        }

    async def close(self) -> None:
        await asyncio.gather(*(c.close(within=2.0) for c in self.conns),
                             return_exceptions=True)


def worker_main(sc: Scenario, producers: list[ProducerConn], consumers: list[ConsumerConn],
                pipe: Pipe, name: str) -> None:
    """Process entry point (multiprocessing target)."""
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency
        runner = asyncio.run
    runner(Worker(sc, producers, consumers, pipe, name).run())
