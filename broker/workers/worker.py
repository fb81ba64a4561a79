"""`python -m broker.workers.worker FD`: one worker process of a multi-worker broker
(issue 47, docs/multicore.md "Processes").

Owns: a worker's life: read its `WorkerSpec` from the pipe FD, run a `Broker` that binds no
AMQP listener (`start(listen=False)`) and serves the connections the node hands over
(`HandOffReceiver` → `Broker.adopt`), report ready on its control link, and stop on SIGTERM
or when the node process is gone (its control link or hand-off socket closes). Talks to: the
node process. Must never: accept connections itself.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

from broker import listeners
from broker.channel_handlers import HANDLERS
from broker.cluster.proxy import ProxiedReader
from broker.definitions_ops import snapshot_ops
from broker.gc_pacing import BUSY_WITHIN_S, GcPacer
from broker.reader import Reader
from broker.server import Broker
from broker.workers.handlers import install
from broker.workers.handoff import HandOffReceiver
from broker.workers.link import open_link
from broker.workers.mesh import NODE, Mesh
from broker.workers.replication import install_worker_sink
from broker.workers.runtime import OWNER, WorkerRuntime
from broker.workers.spec import WorkerSpec

log = logging.getLogger("broker.workers")


async def serve(spec: WorkerSpec) -> None:
    """Run worker `spec.index` until SIGTERM or until the node process is gone."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    mesh = Mesh(spec.index)
    runtime = WorkerRuntime(spec.index, spec.count, mesh)  # its handlers before any record
    for peer, fd in spec.peer_fds.items():
        mesh.opened(peer, await open_link(socket.socket(fileno=fd), mesh.link_for(peer)))
    control = await open_link(socket.socket(fileno=spec.control_fd), mesh.link_for(NODE))
    mesh.opened(NODE, control)
    broker = Broker(spec.config)
    runtime.broker = runtime.tracking.broker = broker
    broker.vhost_class = runtime.vhost_class()
    broker.runs_links = spec.is_metadata_owner  # shovels and federation: worker 0's
    broker.process_tree = os.getppid()  # the node: its tree's memory and CPU are ours
    # a cluster leader's worker: writes replicate (the node's records for it are taken
    # from now on: the control link is open)
    if spec.config.clustering_enabled:
        sink = install_worker_sink(loop, mesh, NODE, spec.is_metadata_owner)
        runtime.replicated_gate = sink.after
        if spec.is_metadata_owner:  # a joining follower's definitions, as operations
            mesh.on_request("defs_snapshot", lambda peer, payload, answer: answer.reply(
                snapshot_ops(broker.definitions) if broker.definitions is not None else []))
    install(runtime, HANDLERS)
    if spec.is_metadata_owner:
        runtime.load_placement(spec.config.data_dir)
    else:  # start from the owner's tables, then follow its changes
        got: asyncio.Future[Any] = loop.create_future()
        mesh.request(OWNER, "snapshot", None,
                     lambda ok, value: got.set_result((ok, value)))
        ok, value = await got
        if not ok:
            raise RuntimeError(f"worker {spec.index}: no snapshot from the owner: {value}")
        broker.definitions_snapshot, placed, seq = value
        runtime.start_from(placed, seq)
    await broker.start(listen=False)
    runtime.mark_started()
    listener_of: dict[Reader, str] = {}  # connection -> the listener it came from

    def adopt(sock: socket.socket, listener: str) -> None:
        if listener in (listeners.STREAM, listeners.STREAM_TLS):  # uncounted by the node
            loop.create_task(broker.adopt_stream(sock, listener))
            return
        if listener in PROXIED:
            loop.create_task(adopt_proxied(sock, listener))
            return

        async def run() -> None:
            reader = await broker.adopt(sock, listener)
            if reader is None:
                receiver.closed(listener)
            else:
                listener_of[reader] = listener
        loop.create_task(run())

    async def adopt_proxied(sock: socket.socket, listener: str) -> None:
        """A client a cluster follower carried to this leader: its PROXY line first, then
        AMQP (counted by the node, so its close is reported) or the management API's or
        Prometheus's HTTP (worker 0's, uncounted)."""
        if listener == listeners.PROXIED_AMQP:
            serving = broker.serving()

            def make() -> asyncio.Protocol:
                reader = Reader(serving)
                listener_of[reader] = listener
                return reader
            protocol: Callable[[], asyncio.Protocol] = lambda: _Proxied(  # noqa: E731
                make, lambda: receiver.closed(listener))
        else:
            factory = (broker.management.protocol_factory(PROXIED[listener])
                       if broker.management is not None else None)
            if factory is None:
                sock.close()
                return
            protocol = lambda: ProxiedReader(factory, wrap=True)  # noqa: E731
        try:
            await loop.connect_accepted_socket(protocol, sock)
        except OSError as exc:
            log.info("proxied connection failed: %s", exc)
            sock.close()

    def gone(reader: Reader) -> None:
        runtime.connection_gone(reader)
        listener = listener_of.pop(reader, None)
        if listener is not None:
            receiver.closed(listener)

    broker.on_connection_gone = gone
    broker.on_connection_opened = runtime.tracking.opened
    broker.count_elsewhere = runtime.tracking.count_elsewhere
    broker.user_channels_elsewhere = runtime.tracking.channels_elsewhere
    broker.on_user_channels = runtime.tracking.user_channels
    mesh.on_peer_lost = _stop_on_node_loss(mesh.on_peer_lost, stop)
    def new_link(peer: int, sock: socket.socket) -> None:
        """A restarted worker's new link: records flow to and from it again."""
        async def run() -> None:
            mesh.opened(peer, await open_link(sock, mesh.link_for(peer)))
        loop.create_task(run())

    receiver = HandOffReceiver(loop, socket.socket(fileno=spec.handoff_fd), adopt, stop.set,
                               new_link)
    pacer = GcPacer(busy=lambda: broker.loop_lag.was_active_within(BUSY_WITHIN_S)) if spec.config.gc_pacing else None
    if pacer is not None:
        pacer.start(loop)
    control.send(("ready",))
    await stop.wait()
    log.info("worker %d shutting down", spec.index)
    if pacer is not None:
        pacer.stop()
    receiver.close()
    await broker.stop()
    mesh.close()


PROXIED = {listeners.PROXIED_AMQP: "amqp", listeners.PROXIED_HTTP: "http",
           listeners.PROXIED_PROMETHEUS: "prometheus"}


class _Proxied(ProxiedReader):
    """A proxied AMQP client: if it goes before its PROXY line made a reader, `unused()`
    (the node's count of this worker's connections is told)."""

    def __init__(self, make_reader: Callable[[], asyncio.Protocol],
                 unused: Callable[[], None]) -> None:
        super().__init__(make_reader)
        self._unused = unused

    def connection_lost(self, exc: Exception | None) -> None:
        self._unused()  # called only while this protocol still holds the transport


def _stop_on_node_loss(inner: Callable[[int], None],
                       stop: asyncio.Event) -> Callable[[int], None]:
    """The node process gone (its control link closed): this worker stops too."""
    def on_peer_lost(peer: int) -> None:
        inner(peer)
        if peer == NODE:
            stop.set()
    return on_peer_lost


def main(argv: list[str]) -> int:
    with os.fdopen(int(argv[0]), "rb") as pipe:
        spec: WorkerSpec = pickle.load(pipe)  # the node process wrote it: never a client's
    logging.basicConfig(
        level=getattr(logging, spec.config.log_level.upper(), logging.INFO),
        format=f"%(asctime)s %(levelname)s %(name)s[w{spec.index}]: %(message)s")
    import uvloop

    uvloop.run(serve(spec))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
