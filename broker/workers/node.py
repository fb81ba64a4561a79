"""The node process of a broker that runs in several worker processes (`workers = N > 1`,
issue 47, docs/multicore.md "Processes").

Owns: the AMQP listeners (plain and TLS), the `Acceptor` that hands each accepted connection
to the worker with the fewest, the sockets between processes (a hand-off pair and a control
link per worker, one link per pair of workers), starting the workers (`python -m
broker.workers.worker`), waiting until every one is ready, and stopping them. It runs no
AMQP connection and holds no queue: its CPU is per connection, not per message.
Talks to: the workers (their control links), `python -m broker` (which runs it when
`workers > 1`). Must never: read from a client's socket, or touch vhosts and queues.

A worker that exits on its own ends the whole broker, as the death of an Erlang node's
top supervisor does (restarting one worker in place is the next step of issue 47).
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
from typing import Any

from broker import listeners, tls
from broker.config import BrokerConfig
from broker.workers.handoff import Acceptor, handoff_pair
from broker.workers.link import Link, open_link
from broker.workers.spec import WorkerSpec, worker_config

log = logging.getLogger("broker.workers")

READY_TIMEOUT = 120.0  # seconds every worker has to recover its queues and report ready
STOP_TIMEOUT = 30.0  # seconds a worker has to close its clients after SIGTERM


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
        self.procs: dict[int, subprocess.Popen[bytes]] = {}  # worker index -> its process
        self._links: dict[int, Link] = {}  # worker index -> its control link
        self._ready: dict[int, asyncio.Future[None]] = {}  # resolved by each worker's "ready"
        self._exited: asyncio.Event = asyncio.Event()  # a worker's control link closed
        self._acceptor: Acceptor | None = None
        self._stopping = False

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
            self._acceptor = Acceptor(loop)
            await self._spawn_all()
            await asyncio.wait_for(asyncio.gather(*self._ready.values()), READY_TIMEOUT)
        except BaseException:
            for sock, _ in listening:
                sock.close()
            await self.stop()
            raise
        for sock, name in listening:  # accept only once every worker serves
            self._acceptor.serve(sock, name)
        log.info("ready to accept connections on %s (%d workers)", ", ".join(where),
                 self.count)

    async def _spawn_all(self) -> None:
        """Make every socket pair, start each worker with its ends, keep the node's ends."""
        assert self._acceptor is not None
        loop = asyncio.get_running_loop()
        mesh: dict[tuple[int, int], tuple[socket.socket, socket.socket]] = {
            (i, j): socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            for i in range(self.count) for j in range(i + 1, self.count)}
        try:
            for index in range(self.count):
                handoff_node, handoff_worker = handoff_pair()
                control_node, control_worker = socket.socketpair(socket.AF_UNIX,
                                                                 socket.SOCK_STREAM)
                peers = {}
                for (i, j), (a, b) in mesh.items():
                    if i == index:
                        peers[j] = a.fileno()
                    elif j == index:
                        peers[i] = b.fileno()
                spec = WorkerSpec(index, self.count, worker_config(self.config, index,
                                                                  self.port),
                                  handoff_worker.fileno(), control_worker.fileno(), peers)
                self.procs[index] = self._start_process(
                    spec, [handoff_worker.fileno(), control_worker.fileno(), *peers.values()])
                handoff_worker.close()
                control_worker.close()
                self._acceptor.add_worker(index, handoff_node)
                self._ready[index] = loop.create_future()
                link = Link(self._on_batch(index), self._on_lost(index))
                self._links[index] = await open_link(control_node, link)
        finally:
            for a, b in mesh.values():
                a.close()
                b.close()

    def _start_process(self, spec: WorkerSpec, fds: list[int]) -> subprocess.Popen[bytes]:
        """`python -m broker.workers.worker FD`: the spec is pickled into a pipe (read end
        inherited as FD), so no argument or environment variable carries configuration."""
        read_end, write_end = os.pipe()
        try:
            proc = subprocess.Popen([sys.executable, "-m", "broker.workers.worker",
                                     str(read_end)], pass_fds=[read_end, *fds],
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
        return on_batch

    def _on_lost(self, index: int) -> Any:
        def on_lost(exc: BaseException | None) -> None:
            if self._acceptor is not None:
                self._acceptor.worker_gone(index)
            fut = self._ready.get(index)
            if fut is not None and not fut.done():
                fut.set_exception(RuntimeError(f"worker {index} exited before it was ready"))
            if not self._stopping:
                log.error("worker %d exited (its control link closed: %s); stopping the "
                          "broker", index, exc)
                self._exited.set()
        return on_lost

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
