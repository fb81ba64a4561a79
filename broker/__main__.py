"""`python -m broker`: parse the configuration, install uvloop, serve until SIGINT/SIGTERM.

Owns: process-level concerns only (logging setup, signals, exit code). Exit codes
(sysexits.h): 0 after a signal, 78 for a bad configuration, 69 when a listener cannot bind
its address (one line on stderr naming the listener, the address and the setting), 75 when
a cluster leader can no longer prove it leads (start it again: it rejoins as a follower).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import TYPE_CHECKING

from broker.config import BrokerConfig, load_config
from broker.gc_pacing import BUSY_WITHIN_S, GcPacer
from broker.listeners import ListenerError
from broker.server import Broker
from broker.workers.spec import check_placements

if TYPE_CHECKING:
    from broker.cluster.leader import ReplicationServer
    from broker.cluster.leading import Leading

EX_UNAVAILABLE = 69  # sysexits.h: the port (or address) a listener needs is not available


async def _serve_cluster_member(config: BrokerConfig) -> int:
    """clustering.enabled: follow the leader until this member leads, then serve
    (broker/cluster/node.py); returns the exit status."""
    from broker.cluster.leading import LocalLeader
    from broker.cluster.node import ClusterNode  # etcd's client only when clustering

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    pacer = GcPacer() if config.gc_pacing else None
    if pacer is not None:
        pacer.start(loop)

    def make_leader(cfg: BrokerConfig, server: ReplicationServer) -> Leading:
        if cfg.workers > 1:  # the node process leads; the workers serve
            from broker.workers.clustered import WorkersLeader

            return WorkersLeader(cfg, server)
        return LocalLeader(cfg, server, Broker, pacer.refreeze if pacer is not None else None)

    try:
        return await ClusterNode(config, make_leader).run(stop)
    finally:
        if pacer is not None:
            pacer.stop()


async def _serve_workers(config: BrokerConfig) -> None:
    """workers > 1: the node process (broker/workers/node.py) until a signal, or until a
    worker exits on its own."""
    from broker.workers.node import Node

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    node = Node(config)
    await node.start()
    done, _ = await asyncio.wait([loop.create_task(stop.wait()),
                                  loop.create_task(node.wait_worker_exit())],
                                 return_when=asyncio.FIRST_COMPLETED)
    logging.getLogger("broker.server").info("shutting down")
    await node.stop()


async def _serve(broker: Broker) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await broker.start()
    pacer = GcPacer(busy=lambda: broker.loop_lag.was_active_within(BUSY_WITHIN_S)) if broker.config.gc_pacing else None
    if pacer is not None:
        pacer.start(loop)
    await stop.wait()
    logging.getLogger("broker.server").info("shutting down")
    if pacer is not None:
        pacer.stop()
    await broker.stop()


def main(argv: list[str] | None = None) -> int:
    try:
        config = load_config(sys.argv[1:] if argv is None else argv)
        check_placements(config)  # fewer workers than the data directory's queues need
    except (ValueError, OSError) as exc:  # a bad key, value or file: say which, exit 78
        sys.stderr.write(f"python -m broker: configuration error: {exc}\n")
        return 78  # EX_CONFIG (sysexits.h)
    logging.basicConfig(
        level=getattr(logging, config.log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        run = asyncio.run
    else:
        run = uvloop.run
    try:
        if config.clustering_enabled:  # with workers > 1 too: the node process is the member
            return run(_serve_cluster_member(config))
        if config.workers > 1:
            run(_serve_workers(config))
            return 0
        run(_serve(Broker(config)))
    except ListenerError as exc:  # a port in use: which listener, where, what moves it
        sys.stderr.write(f"python -m broker: {exc}\n")
        return EX_UNAVAILABLE
    return 0


if __name__ == "__main__":
    sys.exit(main())
