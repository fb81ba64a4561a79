"""What a cluster member runs while it leads (broker/cluster/node.py): the broker, in one
process (`LocalLeader`) or in several worker processes (broker/workers/clustered.py
`WorkersLeader`), behind one typed façade, `Leading`.

Owns: the façade and the single-process leader: the Broker, started after the replication
server is installed as the writers' sink (so recovery's writes replicate too), and the Unix
sockets in `cluster/` through which the followers' clients (AMQP, management HTTP,
Prometheus) arrive with their PROXY line (broker/cluster/proxy.py). Talks to: the broker,
the replication server's `proxy_targets`. Must never: decide leadership.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from broker import replication_hook
from broker.cluster.files import LOCAL_DIR
from broker.cluster.proxy import ProxiedReader
from broker.definitions_ops import snapshot_ops

if TYPE_CHECKING:
    from broker.cluster.leader import ReplicationServer
    from broker.config import BrokerConfig
    from broker.server import Broker

Opener = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


class Leading(Protocol):
    """The broker a leader runs. `start()` recovers and serves (its durable writes go to
    the replication server it was made with); `stop()` closes its clients and stops;
    `definitions_snapshot()` is the definitions as operations (a joining follower's);
    `proxy_targets()` opens each service's end for a follower's client; `publish(state)`
    shows the cluster's state to the management API; `failed` is True when the broker
    ended on its own (a worker that holds the definitions died)."""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def definitions_snapshot(self) -> list[bytes]: ...
    async def proxy_targets(self) -> dict[str, Opener]: ...
    def publish(self, state: dict | None) -> None: ...

    @property
    def failed(self) -> bool: ...


class LocalLeader:
    """The single-process broker as a cluster leader (see the module docstring);
    `serving()` runs each time it has started (`python -m broker` re-freezes the GC's
    long-lived objects then)."""

    def __init__(self, config: BrokerConfig, server: ReplicationServer,
                 make_broker: type[Broker], serving: Callable[[], None] | None = None) -> None:
        self.config = config
        self.data_dir = os.path.abspath(config.data_dir)
        self.broker = make_broker(config)
        self._serving = serving
        self._servers: list[asyncio.AbstractServer] = []  # the Unix sockets

    @property
    def failed(self) -> bool:
        return False

    async def start(self) -> None:
        await self.broker.start()
        if self._serving is not None:
            self._serving()

    async def stop(self) -> None:
        for unix_server in self._servers:
            unix_server.close()
        self._servers = []
        await self.broker.stop()

    async def definitions_snapshot(self) -> list[bytes]:
        definitions = self.broker.definitions
        return [] if definitions is None else snapshot_ops(definitions)

    def publish(self, state: dict | None) -> None:
        replication_hook.cluster_state = state

    async def proxy_targets(self) -> dict[str, Opener]:
        """Clients the followers carry here: AMQP, management HTTP and Prometheus, each
        through a Unix socket in `cluster/` that reads their PROXY line first, so the
        broker and the HTTP servers see each client's real address."""
        from broker.reader import Reader

        broker = self.broker
        loop = asyncio.get_running_loop()
        targets: dict[str, Opener] = {}
        serving = broker.serving()
        path = self._socket("amqp")
        self._servers.append(await loop.create_unix_server(
            lambda: ProxiedReader(lambda: Reader(serving)), path))
        os.chmod(path, 0o600)
        targets["amqp"] = _unix_opener(path)
        management = broker.management
        for service in ("http", "prometheus"):
            factory = management.protocol_factory(service) if management is not None else None
            if factory is None:
                continue
            path = self._socket(service)
            self._servers.append(await loop.create_unix_server(
                functools.partial(ProxiedReader, factory, wrap=True), path))
            os.chmod(path, 0o600)
            targets[service] = _unix_opener(path)
        return targets

    def _socket(self, service: str) -> str:
        path = os.path.join(self.data_dir, LOCAL_DIR, f"{service}.sock")
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        return path


def _unix_opener(path: str) -> Opener:
    """How the leader opens one of its own services' Unix sockets for a proxied client."""

    async def open_service() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_unix_connection(path)

    return open_service
