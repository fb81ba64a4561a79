"""The node process of a broker that runs in several worker processes (`workers = N > 1`,
issue 47, docs/multicore.md "Processes").

Owns: the AMQP listeners (plain and TLS), the `Acceptor` that hands each accepted connection
to the worker with the fewest, the sockets between processes (a hand-off pair and a control
link per worker, one link per pair of workers), starting the workers (`python -m
broker.workers.worker`), waiting until every one is ready, and stopping them. It runs no
AMQP connection and holds no queue: its CPU is per connection, not per message.
Talks to: the workers (their control links), `python -m broker` (which runs it when
`workers > 1`). Must never: read from a client's socket, or touch vhosts and queues.

A worker other than worker 0 that exits on its own is started again: its clients lose
their connections, the other workers go on, and it recovers its durable queues from its own
directory (RabbitMQ's supervisors restart a crashed queue process from its index and store);
more than MAX_RESTARTS within RESTART_PERIOD seconds, or the death of worker 0 (the
definitions' owner), ends the broker, as an Erlang node's top supervisor gives up.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from broker import listeners, tls
from broker.config import BrokerConfig
from broker.workers.handoff import Acceptor, handoff_pair
from broker.workers.link import Link, open_link
from broker.workers.placement import OWNER
from broker.workers.spec import WorkerSpec, worker_config

log = logging.getLogger("broker.workers")

READY_TIMEOUT = 120.0  # seconds every worker has to recover its queues and report ready
STOP_TIMEOUT = 30.0  # seconds a worker has to close its clients after SIGTERM
MAX_RESTARTS, RESTART_PERIOD = 5, 60.0  # more restarts than this within the period: stop


def _bind(listener: str, host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: any); ListenerError when it cannot."""
    try:
        return socket.create_server((host, port), backlog=1024,
                                    family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as exc:
        raise listeners.ListenerError(listener, host, port, exc) from exc


class Node:
    """`await start()` binds the listeners, starts the workers and returns once all are
    ready (then `port` is the bound AMQP port); `await stop()` stops them;
    `await wait_worker_exit()` returns when any worker exits on its own."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.count = config.workers  # how many workers
        self.port = config.port  # the bound AMQP port, after start
        self.ssl_port: int | None = None  # the bound amqps port, when that listener is on
        # where the stream protocol's listeners are bound (plain, TLS; "" when off)
        self.stream_listeners: tuple[str, str] = ("", "")
        self.procs: dict[int, subprocess.Popen[bytes]] = {}  # worker index -> its process
        self._links: dict[int, Link] = {}  # worker index -> its control link
        self._ready: dict[int, asyncio.Future[None]] = {}  # resolved by each worker's "ready"
        self._exited: asyncio.Event = asyncio.Event()  # a worker's control link closed
        self._acceptor: Acceptor | None = None
        self._stopping = False
        self._restarts: list[float] = []  # loop times of recent worker restarts
        self._tasks: set[asyncio.Task[None]] = set()  # restarts under way
        # a cluster leader's (broker/workers/clustered.py): each worker's other control
        # records (index, record), and a worker about to be started (index)
        self.on_record: Callable[[int, Any], None] | None = None
        self.on_spawn: Callable[[int], None] | None = None

    async def start(self) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        os.makedirs(cfg.data_dir, exist_ok=True)
        listening: list[tuple[socket.socket, str]] = []
        where = []
        try:
            if cfg.listeners_tcp.strip().lower() != "none":
                sock = _bind(listeners.AMQP, cfg.host, cfg.port)
                self.port = sock.getsockname()[1]
                listening.append((sock, listeners.AMQP))
                where.append(f"{cfg.host}:{self.port}")
            if cfg.listeners_ssl_default:
                tls.server_context(cfg)  # a bad certificate stops the node, not each worker
                host, port = tls.parse_listener(cfg.listeners_ssl_default, cfg.host)
                sock = _bind(listeners.AMQPS, host, port)
                self.ssl_port = sock.getsockname()[1]
                listening.append((sock, listeners.AMQPS))
                where.append(f"{host}:{self.ssl_port} (amqps)")
            if not listening:
                raise ValueError("no listener: listeners.tcp = none and no "
                                 "listeners.ssl.default")
            pinned = self._bind_stream(listening, where)
            self._acceptor = Acceptor(loop)
            await self._spawn_all()
            await asyncio.wait_for(asyncio.gather(*self._ready.values()), READY_TIMEOUT)
        except BaseException:
            for sock, _ in listening:
                sock.close()
            await self.stop()
            raise
        for sock, name in listening:  # accept only once every worker serves
            self._acceptor.serve(sock, name, worker=OWNER if name in pinned else None)
        log.info("ready to accept connections on %s (%d workers)", ", ".join(where),
                 self.count)

    def _bind_stream(self, listening: list[tuple[socket.socket, str]],
                     where: list[str]) -> set[str]:
        """Bind the stream protocol's listeners, if configured; their connections all go
        to worker 0, where every stream lives (a stream protocol connection reads its
        streams' logs in place: docs/multicore.md). Returns the listener names pinned so."""
        cfg = self.config
        pinned = set()
        for spec, name in ((cfg.stream_listeners_tcp_default, listeners.STREAM),
                           (cfg.stream_listeners_ssl_default, listeners.STREAM_TLS)):
            if not spec:
                continue
            if name == listeners.STREAM_TLS:
                tls.server_context(cfg)
            host, port = tls.parse_listener(spec, cfg.host)
            sock = _bind(name, host, port)
            bound = sock.getsockname()[1]
            listening.append((sock, name))
            pinned.add(name)
            if name == listeners.STREAM:
                self.stream_listeners = (f"{host}:{bound}", self.stream_listeners[1])
                where.append(f"{host}:{bound} (stream)")
            else:
                self.stream_listeners = (self.stream_listeners[0], f"{host}:{bound}")
                where.append(f"{host}:{bound} (stream, TLS)")
        return pinned

    async def _spawn_all(self) -> None:
        """Make every socket pair, start each worker with its ends, keep the node's ends."""
        mesh: dict[tuple[int, int], tuple[socket.socket, socket.socket]] = {
            (i, j): socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            for i in range(self.count) for j in range(i + 1, self.count)}
        try:
            for index in range(self.count):
                peers = {}
                for (i, j), (a, b) in mesh.items():
                    if i == index:
                        peers[j] = a
                    elif j == index:
                        peers[i] = b
                await self._spawn(index, peers)
        finally:
            for a, b in mesh.values():
                a.close()
                b.close()

    async def _spawn(self, index: int, peers: dict[int, socket.socket]) -> None:
        """Start worker `index` with its ends of the links to `peers` (closed by the
        caller); its hand-off socket joins the acceptor once it is ready."""
        assert self._acceptor is not None
        loop = asyncio.get_running_loop()
        if self.on_spawn is not None:
            self.on_spawn(index)
        handoff_node, handoff_worker = handoff_pair()
        control_node, control_worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fds = {peer: sock.fileno() for peer, sock in peers.items()}
        spec = WorkerSpec(index, self.count,
                          worker_config(self.config, index, self.port, self.stream_listeners),
                          handoff_worker.fileno(), control_worker.fileno(), fds)
        self.procs[index] = self._start_process(
            spec, [handoff_worker.fileno(), control_worker.fileno(), *fds.values()])
        handoff_worker.close()
        control_worker.close()
        ready = self._ready[index] = loop.create_future()
        ready.add_done_callback(
            lambda f: None if f.cancelled() or f.exception() is not None
            or self._acceptor is None else self._acceptor.add_worker(index, handoff_node))
        link = Link(self._on_batch(index), self._on_lost(index))
        self._links[index] = await open_link(control_node, link)

    async def _restart(self, index: int) -> None:
        """Worker `index` died: wait for its process, give every live worker its end of a
        new link to it, start it again; it recovers its queues from its own directory and
        follows worker 0's definitions (a restart of worker 0 itself ends the broker)."""
        loop = asyncio.get_running_loop()
        proc = self.procs[index]
        if proc.poll() is None:
            proc.kill()
        await loop.run_in_executor(None, proc.wait)
        assert self._acceptor is not None
        peers: dict[int, socket.socket] = {}
        try:
            for other in sorted(self._acceptor.connections):
                if other == index:
                    continue
                mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
                if self._acceptor.send_link(other, index, theirs):
                    peers[other] = mine
                else:
                    mine.close()
                theirs.close()
            log.info("restarting worker %d (exit status %s)", index, proc.returncode)
            await self._spawn(index, peers)
            await asyncio.wait_for(self._ready[index], READY_TIMEOUT)
            log.info("worker %d restarted", index)
        except (OSError, RuntimeError, TimeoutError) as exc:
            log.error("worker %d could not be restarted (%s); stopping the broker", index, exc)
            self._exited.set()
        finally:
            for sock in peers.values():
                sock.close()

    def _start_process(self, spec: WorkerSpec, fds: list[int]) -> subprocess.Popen[bytes]:
        """`python -m broker.workers.worker FD`: the spec is pickled into a pipe (read end
        inherited as FD), so no argument or environment variable carries configuration."""
        read_end, write_end = os.pipe()
        try:
            proc = subprocess.Popen([sys.executable, "-m", "broker.workers.worker",
                                     str(read_end), str(spec.index)],  # the index: for ps
                                    pass_fds=[read_end, *fds],
                                    stdin=subprocess.DEVNULL)
        finally:
            os.close(read_end)
        with os.fdopen(write_end, "wb") as pipe:
            pickle.dump(spec, pipe)
        return proc

    def _on_batch(self, index: int) -> Any:
        def on_batch(items: list[Any]) -> None:
            for item in items:
                if item == ("ready",):
                    fut = self._ready.get(index)
                    if fut is not None and not fut.done():
                        fut.set_result(None)
                elif self.on_record is not None:
                    self.on_record(index, item)
        return on_batch

    def _on_lost(self, index: int) -> Any:
        def on_lost(exc: BaseException | None) -> None:
            if self._acceptor is not None:
                self._acceptor.worker_gone(index)
            fut = self._ready.get(index)
            was_ready = fut is not None and fut.done() and fut.exception() is None
            if fut is not None and not fut.done():
                fut.set_exception(RuntimeError(f"worker {index} exited before it was ready"))
            if self._stopping:
                return
            now = asyncio.get_running_loop().time()
            self._restarts = [t for t in self._restarts if now - t < RESTART_PERIOD]
            if index == 0 or not was_ready or len(self._restarts) >= MAX_RESTARTS:
                # worker 0 holds the definitions; a worker that cannot start, or restarts
                # too often (RabbitMQ's supervisor intensity), ends the broker
                log.error("worker %d exited (%s); stopping the broker", index, exc)
                self._exited.set()
                return
            self._restarts.append(now)
            log.error("worker %d exited (%s): its clients lose their connections; "
                      "restarting it", index, exc)
            task = asyncio.get_running_loop().create_task(self._restart(index))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return on_lost

    def send(self, index: int, record: tuple) -> None:
        """A record to worker `index` on its control link (dropped if it is gone)."""
        link = self._links.get(index)
        if link is not None and not link.closed:
            link.send(record)

    @property
    def live(self) -> list[int]:
        """The workers that are ready and not gone."""
        return sorted(self._acceptor.connections) if self._acceptor is not None else []

    def hand(self, sock: socket.socket, name: str, worker: int | None = None) -> bool:
        """Hand a connected socket to a worker as if accepted on listener `name` (to
        `worker`, uncounted, or to the one with the fewest connections); False when no
        worker took it (the caller still owns and closes `sock`)."""
        if self._acceptor is None:
            return False
        return self._acceptor.hand(sock, name.encode("ascii"), worker)

    async def wait_worker_exit(self) -> None:
        await self._exited.wait()

    async def stop(self) -> None:
        """SIGTERM every worker (each closes its clients with 320 CONNECTION_FORCED and
        stops its queues, as `Broker.stop` does), SIGKILL what is left after STOP_TIMEOUT."""
        self._stopping = True
        if self._acceptor is not None:
            self._acceptor.close()
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        loop = asyncio.get_running_loop()
        for index, proc in self.procs.items():
            try:
                await asyncio.wait_for(loop.run_in_executor(None, proc.wait), STOP_TIMEOUT)
            except TimeoutError:
                log.warning("worker %d did not stop in %.0f s: killed", index, STOP_TIMEOUT)
                proc.kill()
                await loop.run_in_executor(None, proc.wait)
        for link in self._links.values():
            link.close()
        log.info("stopped")
