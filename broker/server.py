"""The broker: listeners, vhosts, users, connections, startup and graceful shutdown
(RabbitMQ `rabbit_networking`, `rabbit_vhost`).

Owns: the plain and amqps listeners (`broker/tls.py` builds the TLS context), the vhost table,
`users` (the internal auth backend and the façade for users, permissions and limits,
`broker/users.py`), the set of live connections, the server properties sent in
connection.start, the global runtime parameters (`cluster_name`, `internal_cluster_id`,
rabbit_runtime_parameters' global scope, kept in the definitions database), and the resource monitor and alarms (`broker/alarms.py`) whose changes it
passes to every connection. It never parses frames (the reader does) and never touches a queue's
messages.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import logging
import os
import platform
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

from broker import __version__, listeners, tls, trace
from broker.alarms import Alarms, ResourceMonitor
from broker.backing_queue.priority import PriorityBackingQueue, index_queue_names, max_priority
from broker.backing_queue.variable_queue import VariableQueue
from broker.config import BrokerConfig
from broker.dedup.queue import DedupBackingQueue
from broker.definitions import Definitions
from broker.federation.supervisor import Federation
from broker.loop_lag import LoopLagProbe
from broker.memory_monitor import MemorySource
from broker.msg_store.vhost import DISCARDED, VhostStores, remove_discarded
from broker.reader import Reader
from broker.shovel.supervisor import Shovels
from broker.stats import AuthAttempts, Churn, MessageStats
from broker.users import Users
from broker.vhost import VHost

if TYPE_CHECKING:
    from broker.backing_queue.base import BackingQueue
    from broker.management.app import ManagementServer
    from broker.message import Message
    from broker.serving import ServingBroker
    from broker.started import ReportedConnection, StartedBroker

log = logging.getLogger("broker.server")

SHUTDOWN_GRACE = 5.0  # seconds clients get to answer connection.close at shutdown
SHUTDOWN_TEXT = "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"


class Broker:
    """A running broker. `await start()` binds the listener (then `port` is the real port,
    useful with port 0) and logs one "ready" line; `await stop()` sends every client
    connection.close 320 CONNECTION_FORCED and closes the listener."""

    def __init__(self, config: BrokerConfig | None = None) -> None:
        self.config = config or BrokerConfig()  # every tunable
        self.loop: asyncio.AbstractEventLoop | None = None  # set by start()
        self.vhosts: dict[str, VHost] = {}  # name -> vhost
        # what add_vhost builds: a worker of a multi-worker broker sets its replicating
        # subclass (broker/workers/vhost.py) before start()
        self.vhost_class: type[VHost] = VHost
        # the metadata owner's definitions as bytes: a worker other than the owner starts
        # from them (an in-memory replica) instead of its own definitions.db
        self.definitions_snapshot: bytes | None = None
        self.definitions: Definitions | None = None  # durable metadata (opened by start)
        self.users: Users | None = None  # users, permissions, limits (after start)
        self.connections: set[Reader] = set()  # live connections
        # a multi-worker broker's worker 0: awaited after each management API request that
        # changed something, until every other worker has the change (broker/workers/)
        self.on_api_change: Callable[[], Awaitable[None]] | None = None
        # ... and how its management API acts on a queue another worker owns (purge, get,
        # browse, delete): `await remote_queue_call(vhost, kind, payload)`
        self.remote_queue_call: Callable[[str, str, tuple], Awaitable[Any]] | None = None
        # ... and the connections the other workers serve, as they last reported them
        self.remote_connections: Callable[[], list[ReportedConnection]] | None = None
        # ... the deliveries their channels hold unacked from a queue: (vhost, queue) ->
        # rows of GET /api/queues/{vhost}/{name}/unacked
        self.remote_unacked: Callable[[str, str], Awaitable[list[dict[str, Any]]]] | None = None
        # ... what the other workers' holders of a delayed exchange hold: (vhost, exchange,
        # count) -> up to count (due ms, Message) from each, due order
        self.remote_delayed: \
            Callable[[str, str, int], Awaitable[list[tuple[int, Message]]]] | None = None
        # ... and its workers' own figures (pid, memory, connections, queues), by index
        self.worker_views: Callable[[], list[dict[str, Any]]] | None = None
        # a worker process: the node process, whose tree (it and every worker) is the
        # broker whose memory the monitor judges and whose CPU Prometheus counts
        self.process_tree: int | None = None
        # ... and how many connections the other workers serve (all, in a vhost, of a user)
        self.count_elsewhere: Callable[[str, str], tuple[int, int, int]] | None = None
        # ... the channels of a user they serve, and whom to tell of ours (both only for
        # users with a max-channels limit)
        self.user_channels_elsewhere: Callable[[str], int] | None = None
        self.on_user_channels: Callable[[str, int], None] | None = None
        # shovels and federation links run here (a multi-worker broker: in worker 0 only,
        # which serves the management API that sets their parameters)
        self.runs_links = True
        # told of each connection once it is open (connection.open-ok sent; a worker
        # process tells worker 0's management API at once, as RabbitMQ's connection_created)
        self.on_connection_opened: Callable[[Reader], None] | None = None
        # told of each connection that closes (a worker process tells the node's acceptor)
        self.on_connection_gone: Callable[[Reader], None] | None = None
        self.port: int = self.config.port  # bound port (after start)
        self.ssl_port: int | None = None  # bound amqps port, when listeners.ssl.default is set
        self.stream_port: int | None = None  # bound stream protocol port, when it listens
        self.stream_ssl_port: int | None = None  # its TLS port, when that listens
        self.stream: Any = None  # broker.stream_protocol.reader.StreamListener, when on
        self.management: ManagementServer | None = None  # the ManagementServer (HTTP API, UI, Prometheus) if on
        # loop lag, GC pauses and how busy the loop is (broker/loop_lag.py)
        self.loop_lag = LoopLagProbe(busy_load=self.config.consumer_bias_load)
        self.shovels: Shovels | None = None  # dynamic shovels (runtime parameters), once up
        self.federation: Federation | None = None  # federated exchanges and queues, once up
        self.churn = Churn()  # connections/channels opened and closed (metrics)
        # message counts of deleted vhosts, kept in the overview's totals (rabbit_mgmt_db's
        # overview never falls when a vhost goes; issue 46 point 7)
        self.deleted_vhosts_stats = MessageStats()
        self.auth_attempts = AuthAttempts()  # per protocol (GET /api/auth/attempts/{node})
        self._servers: list[asyncio.AbstractServer] = []  # the plain and the amqps listener
        self.ready = asyncio.Event()  # set once accepting connections
        self._all_closed: asyncio.Event | None = None  # set when the last connection is gone
        # deleted vhosts' directories being removed by worker threads (stop() waits for them)
        self._removing: set[asyncio.Future[None]] = set()
        self.alarms = Alarms()  # resource alarms in effect (memory, disk)
        self.alarms.subscribe(self._alarms_changed)
        self.resources: ResourceMonitor | None = None  # memory/disk checks (after start)
        self.global_parameters: dict[str, Any] = {}  # name -> JSON value (after start)
        # vhosts with the firehose on (broker/trace.py; RabbitMQ's trace_vhosts application
        # env): in memory only, so every vhost starts with tracing off
        self.trace_vhosts: set[str] = set()

    def _bq_factory(self, name: tuple[str, str], durable: bool,
                    notify: Callable[[], None] | None, arguments: dict) -> BackingQueue:
        """Every queue gets a variable queue over its vhost's stores; `x-queue-mode=lazy`
        pins its RAM target at 0 (RabbitMQ 3.6–3.11 lazy queues); a quorum queue's keeps
        every message as persistent."""
        cfg = self.config
        mode = "lazy" if arguments.get("x-queue-mode") == "lazy" else "default"
        persist_all = arguments.get("x-queue-type") == "quorum"
        stores = self.vhosts[name[0]].stores

        def variable_queue(vq_name: tuple[str, str], vq_durable: bool,
                           vq_notify: Callable[[], None] | None) -> VariableQueue:
            return VariableQueue(
                vq_name, vq_durable, vq_notify, stores=stores,
                queue_index_embed_msgs_below=cfg.queue_index_embed_msgs_below,
                queue_index_max_journal_entries=cfg.queue_index_max_journal_entries,
                mode=mode, fsync=cfg.fsync, persist_all=persist_all,
                msg_store_credit_disc_bound=(cfg.msg_store_credit_disc_bound_initial,
                                             cfg.msg_store_credit_disc_bound_more_after))

        top = max_priority(arguments)
        bq: BackingQueue
        if top is not None:  # x-max-priority: one variable queue per priority
            bq = PriorityBackingQueue(name, durable, notify, max_priority=top,
                                      make_inner=variable_queue)
        else:
            bq = variable_queue(name, durable, notify)
        if arguments.get("x-message-deduplication") is True:  # broker/dedup/queue.py
            ttl = arguments.get("x-message-ttl")
            return DedupBackingQueue(bq, ttl if isinstance(ttl, int) else None)  # type: ignore[return-value]
        return bq

    def add_vhost(self, name: str) -> VHost:
        """Create (or recover) vhost `name`: its message stores are recovered first, then its
        durable exchanges, queues and bindings (idempotent)."""
        if name in self.vhosts:
            return self.vhosts[name]
        assert self.loop is not None and self.definitions is not None
        if name not in {v.name for v in self.definitions.list_vhosts()}:
            self.definitions.add_vhost(name)
        stores = VhostStores(self.config.data_dir, name,
                             file_size_limit=self.config.msg_store_file_size_limit,
                             fsync=self.config.fsync)
        durable_queues = [index_name for q in self.definitions.list_queues(name)
                          for index_name in index_queue_names(q.name, q.arguments)]
        clean = stores.recover(keep_queues=durable_queues)
        vhost = self.vhost_class(name, self.loop, self.config, self._bq_factory,
                      definitions=self.definitions, stores=stores,
                      memory_monitor=self.resources, loop_busy=self.loop_lag.is_busy)
        if self.users is not None:
            vhost.limits = self.users.limits_of_vhost(name)  # live: set_vhost_limits applies
        trace.init(self, vhost)  # tracing may have been turned on for the name already
        self.vhosts[name] = vhost
        recovered = vhost.recover()
        log.info("vhost '%s': %d durable queues recovered (message store %s)", name,
                 recovered, "clean" if clean else "rebuilt by scan")
        if self.federation is not None and self.runs_links:
            self.federation.watch(vhost)
        return vhost

    def delete_vhost(self, name: str) -> None:
        """Delete vhost `name` and everything in it, as `rabbitmqctl delete_vhost` and
        `DELETE /api/vhosts/{vhost}` do in RabbitMQ 3.10.8 (rabbit_vhost:delete/2), without
        waiting on any client: every queue is deleted first (its consumers get basic.cancel
        where they asked for consumer_cancel_notify), then the vhost's connections get
        connection.close 320 "CONNECTION_FORCED - vhost 'NAME' is deleted" and return at once
        (rabbit_connection_tracking closes them asynchronously on the vhost_deleted event; a
        client that never answers close-ok is dropped by its reader after
        `connection_close.CLOSE_OK_TIMEOUT` s). The message stores are abandoned (nothing left to
        flush for a deleted vhost), their directory is moved aside at once, so the name can
        be created again straight away, and removed by a worker thread, off the event loop
        (`stop()` waits for it; a crash leaves it for the next start to remove). The
        definitions (exchanges, queues, bindings, policies, permissions, limits) are
        dropped. Raises KeyError if there is no such vhost."""
        vhost = self.vhosts.pop(name)  # KeyError; new connections to it are refused now
        self._retire_stats(vhost)
        if self.shovels is not None:
            self.shovels.clear_vhost(name)  # its shovel parameters go with the vhost
        if self.federation is not None:
            self.federation.clear_vhost(name)
        for holder in vhost.delayed_holders():  # their files go with the vhost's directory
            holder.terminate(delete=True)
        for queue in list(vhost.queues.values()):
            queue.terminate(delete=True)
        vhost.queues.clear()
        for conn in [c for c in self.connections if c.vhost is vhost]:
            conn.close(320, f"CONNECTION_FORCED - vhost '{name}' is deleted")
        if vhost.stores is not None:
            self._remove_off_loop(vhost.stores.discard(self.config.data_dir))
        if self.definitions is not None:
            self.definitions.remove_vhost(name)
        if self.users is not None:
            self.users.forget_vhost(name)
        log.info("vhost '%s' deleted", name)

    def vhost_message_stats(self, vhost: VHost) -> MessageStats:
        """A vhost's message counts in this process: its closed channels' totals plus its
        open channels' (a new object; the management API adds other workers' reports)."""
        out = MessageStats()
        out.add(vhost.closed_stats)
        for conn in self.connections:
            if conn.vhost is vhost:
                for ch in conn.channels.values():
                    out.add(ch.message_stats)
        return out

    def _retire_stats(self, vhost: VHost) -> None:
        """Keep a deleted vhost's message counts (its closed channels' and its open
        channels' as they are now) in `deleted_vhosts_stats`, so that the overview's totals
        and rates never fall when a vhost that carried messages is deleted."""
        self.deleted_vhosts_stats.add(self.vhost_message_stats(vhost))

    def delete_user(self, name: str) -> bool:
        """Delete user `name` with its permissions and limits (`Users.delete_user`) and close
        its connections with connection.close 320 "CONNECTION_FORCED - user 'NAME' is
        deleted", without waiting on them, as RabbitMQ 3.10.8 does on the user_deleted event
        (rabbit_connection_tracking). False (nothing closed) if there is no such user."""
        assert self.users is not None
        if not self.users.delete_user(name):
            return False
        self.close_user_connections(name)
        return True

    def close_user_connections(self, name: str) -> None:
        """connection.close 320 "CONNECTION_FORCED - user 'NAME' is deleted" to each of this
        process's connections of user `name` (a worker process: when the user's deletion
        reaches it), without waiting on them."""
        for conn in [c for c in self.connections if c.username == name]:
            conn.close(320, f"CONNECTION_FORCED - user '{name}' is deleted")

    def _remove_off_loop(self, path: str) -> None:
        """Remove directory `path` on a worker thread (a deleted vhost's files can take
        seconds to unlink; the loop serves everyone else meanwhile)."""
        assert self.loop is not None
        future = self.loop.run_in_executor(None, remove_discarded, path)
        self._removing.add(future)
        future.add_done_callback(self._removing.discard)

    def check_user(self, username: str, password: str, peer: Any) -> bool:
        """Internal auth backend (`broker.users`): the password matches the user's salted
        hash and a loopback-only user (guest by default, rabbitmq.com/access-control.html)
        connects from a loopback address."""
        assert self.users is not None
        if self.users.authenticate(username, password) is None:
            return False
        return self.loopback_allowed(username, peer)

    def loopback_allowed(self, username: str, peer: Any) -> bool:
        """False if `username` is in `loopback_users` and `peer` is not a loopback address
        (RabbitMQ `loopback_users`)."""
        if username in self.config.loopback_users:
            host = peer[0] if isinstance(peer, tuple) and peer else None
            if host is None:
                return True  # unix socket / socketpair
            try:
                return ipaddress.ip_address(host.split("%")[0]).is_loopback
            except ValueError:
                return False
        return True

    def node_name(self) -> str:
        """`rabbit@<short hostname>` unless `node_name` is configured (RabbitMQ's default)."""
        return self.config.resolved_node_name()

    def cluster_name(self) -> str:
        """The `cluster_name` global parameter, else this node's name (rabbit_nodes:
        cluster_name/0), as /api/cluster-name and connection.start report it."""
        name = self.global_parameters.get("cluster_name")
        return str(name) if name else self.node_name()

    def set_global_parameter(self, name: str, value: Any) -> None:
        """Store a global runtime parameter durably (PUT /api/global-parameters/{name};
        `cluster_name` renames the cluster)."""
        assert self.definitions is not None  # opened by start(); the API runs after it
        self.definitions.set_global_parameter(name, value)
        self.global_parameters[name] = value

    def clear_global_parameter(self, name: str) -> bool:
        """Delete a global parameter; False when there was none."""
        self.global_parameters.pop(name, None)
        assert self.definitions is not None  # opened by start(); the API runs after it
        return self.definitions.clear_global_parameter(name)

    def _load_global_parameters(self) -> None:
        """Read them; on first boot make `internal_cluster_id` as RabbitMQ does
        ("rabbitmq-cluster-id-" + 16 random bytes in unpadded base64url)."""
        assert self.definitions is not None  # start() opened it just before
        self.global_parameters = self.definitions.list_global_parameters()
        if "internal_cluster_id" not in self.global_parameters:
            rand = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
            self.set_global_parameter("internal_cluster_id", f"rabbitmq-cluster-id-{rand}")

    def server_properties(self) -> dict:
        """connection.start server-properties (docs/architecture.md §3)."""
        return {
            "product": self.config.product,
            "version": __version__,
            "platform": f"Python {platform.python_version()}",
            "copyright": "pybroker-amqp authors",
            "information": "AMQP 0-9-1 broker in Python, https://www.rabbitmq.com/ semantics",
            "capabilities": {
                "publisher_confirms": True,
                "exchange_exchange_bindings": True,
                "basic.nack": True,
                "consumer_cancel_notify": True,
                "connection.blocked": True,
                "consumer_priorities": True,
                "authentication_failure_close": True,
                "per_consumer_qos": True,
                "direct_reply_to": True,
            },
            "cluster_name": self.cluster_name(),  # federation links read it (loop detection)
        }

    async def start(self, listen: bool = True) -> None:
        """Recover, then bind the listeners and serve. With `listen` False (a worker process
        of a multi-worker broker, broker/workers/worker.py) no AMQP listener is bound: the
        node process accepts and hands connections over (`adopt`)."""
        t0 = time.monotonic()
        self.loop = asyncio.get_running_loop()
        self.loop_lag.start()
        for warning in self.config.warnings:  # rabbitmq.conf keys not acted on
            log.warning("%s", warning)
        os.makedirs(self.config.data_dir, exist_ok=True)
        # vhosts deleted before a crash: their files were moved aside, not yet removed
        self._remove_off_loop(os.path.join(self.config.data_dir, DISCARDED))
        if self.definitions_snapshot is not None:  # a worker's replica (broker/workers/)
            self.definitions = Definitions.from_snapshot(self.definitions_snapshot)
        else:
            self.definitions = Definitions(os.path.join(self.config.data_dir,
                                                        "definitions.db"))
        if not self.definitions.list_vhosts():
            self.definitions.add_vhost(self.config.default_vhost)
        if not self.definitions.list_users():
            # RabbitMQ's first boot: default_user with default_user_tags (administrator)
            self.definitions.add_user(self.config.default_user, self.config.default_pass,
                                      tags=["administrator"])
            self.definitions.set_permissions(
                self.config.default_user, self.config.default_vhost, ".*", ".*", ".*")
        self._load_global_parameters()
        self.users = Users(self.definitions, self.vhosts.__contains__)
        self.resources = ResourceMonitor(self.config, self.alarms, MemorySource(
            self.config.total_memory_available_override_value, tree=self.process_tree))
        self.resources.start(self.loop)  # alarms before the first client can publish
        for vhost_def in self.definitions.list_vhosts():
            self.add_vhost(vhost_def.name)
        log.info("recovery took %.2f s", time.monotonic() - t0)
        cfg = self.config
        serving = self.serving()  # what every connection's reader holds
        where = []
        try:
            if not listen:
                pass
            elif cfg.listeners_tcp.strip().lower() != "none":
                server = await self._listen(serving, listeners.AMQP, cfg.host, cfg.port)
                self.port = server.sockets[0].getsockname()[1]
                where.append(f"{cfg.host}:{self.port}")
            if cfg.listeners_ssl_default and listen:
                host, port = tls.parse_listener(cfg.listeners_ssl_default, cfg.host)
                server = await self._listen(
                    serving, listeners.AMQPS, host, port, ssl=tls.server_context(cfg),
                    ssl_handshake_timeout=cfg.handshake_timeout)
                self.ssl_port = server.sockets[0].getsockname()[1]
                where.append(f"{host}:{self.ssl_port} (amqps)")
            if not self._servers and listen:
                raise ValueError("no listener: listeners.tcp = none and no listeners.ssl.default")
            if cfg.stream_listeners_tcp_default or cfg.stream_listeners_ssl_default:
                where += await self._listen_stream(cfg, bind=listen)
            # the supervisors exist before the file is read: its shovel and federation
            # parameters go through them (RabbitMQ imports definitions once its plugins run)
            self.shovels = Shovels(serving)
            self.federation = Federation(serving)
            if cfg.load_definitions:
                self._load_definitions(cfg.load_definitions)
            if self.runs_links:
                self.shovels.start_all()
                self.federation.start_all()
            if cfg.management_tcp_port or cfg.prometheus_tcp_port:
                from broker.management.app import ManagementServer  # aiohttp only when used

                self.management = ManagementServer(self.started())
                await self.management.start()
        except listeners.ListenerError:
            # a port in use: close what did start (stores, definitions, the other
            # listeners) so the caller only has the one-line error to report
            await self.stop()
            raise
        self.ready.set()
        if listen:
            log.info("ready to accept connections on %s", ", ".join(where))
        else:  # the node process logs the ready line once every worker is up
            log.info("worker ready: serving the connections the node process hands over")

    async def adopt(self, sock: socket.socket, listener: str) -> Reader | None:
        """Serve a connection the node process accepted (`listener` is the one it came
        from: listeners.AMQP or AMQPS, whose TLS handshake runs here). None when the
        connection failed before it was served (a TLS handshake refused or timed out)."""
        assert self.loop is not None
        cfg = self.config
        serving = self.serving()
        kwargs: dict[str, Any] = {}
        if listener == listeners.AMQPS:
            kwargs = {"ssl": tls.server_context(cfg),
                      "ssl_handshake_timeout": cfg.handshake_timeout}
        try:
            _, reader = await self.loop.connect_accepted_socket(
                lambda: Reader(serving), sock, **kwargs)
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            log.info("connection handed over from the %s listener failed: %s", listener, exc)
            sock.close()
            return None
        return reader

    async def adopt_stream(self, sock: socket.socket, listener: str) -> None:
        """Serve a stream protocol connection the node process accepted (`listener`:
        listeners.STREAM or STREAM_TLS, whose TLS handshake runs here); only the worker
        whose configuration names the stream listeners (worker 0) gets them."""
        assert self.loop is not None and self.stream is not None
        kwargs: dict[str, Any] = {}
        if listener == listeners.STREAM_TLS:
            kwargs = {"ssl": tls.server_context(self.config),
                      "ssl_handshake_timeout": self.config.handshake_timeout}
        try:
            await self.loop.connect_accepted_socket(self.stream.protocol, sock, **kwargs)
        except (OSError, TimeoutError) as exc:
            log.info("connection handed over from the %s listener failed: %s", listener, exc)
            sock.close()

    async def _listen(self, serving: ServingBroker[Reader], listener: str, host: str,
                      port: int, **kwargs: Any) -> asyncio.Server:
        """Bind an AMQP(S) listener whose readers hold `serving`; ListenerError (which
        listener, where, the setting that moves it) when the address cannot be bound."""
        assert self.loop is not None
        try:
            server = await self.loop.create_server(
                lambda: Reader(serving), host, port, reuse_address=True, **kwargs)
        except OSError as exc:
            raise listeners.ListenerError(listener, host, port, exc) from exc
        self._servers.append(server)
        return server

    async def _listen_stream(self, cfg: BrokerConfig, bind: bool = True) -> list[str]:
        """Bind the stream protocol's listeners (stream.listeners.tcp.default and, with the
        ssl_options.* of AMQPS, stream.listeners.ssl.default); returns where they listen.
        ListenerError when an address cannot be bound. With `bind` False (worker 0 of a
        multi-worker broker) the settings name where the node process listens, and its
        connections come through `adopt`."""
        from broker.stream_protocol.reader import StreamListener

        assert self.loop is not None
        plain = cfg.stream_listeners_tcp_default
        host, port = tls.parse_listener(plain or cfg.stream_listeners_ssl_default, cfg.host)
        self.stream = StreamListener(
            self, host=host, port=port, frame_max=cfg.stream_frame_max,  # type: ignore[arg-type]
            heartbeat=cfg.stream_heartbeat, advertised_host=cfg.stream_advertised_host,
            advertised_port=cfg.stream_advertised_port)
        where = []
        for spec, use_tls in ((plain, False), (cfg.stream_listeners_ssl_default, True)):
            if not spec:
                continue
            host, port = tls.parse_listener(spec, cfg.host)
            if not bind:
                if use_tls:
                    self.stream_ssl_port = self.stream.tls_port = port
                else:
                    self.stream.port = self.stream_port = port
                continue
            try:
                if use_tls:
                    server = await self.loop.create_server(
                        self.stream.protocol, host, port, reuse_address=True,
                        ssl=tls.server_context(cfg),
                        ssl_handshake_timeout=cfg.handshake_timeout)
                else:
                    server = await self.loop.create_server(self.stream.protocol, host, port,
                                                           reuse_address=True)
            except OSError as exc:
                raise listeners.ListenerError(listeners.STREAM, host, port, exc) from exc
            self._servers.append(server)
            bound = server.sockets[0].getsockname()[1]
            if use_tls:
                self.stream_ssl_port = self.stream.tls_port = bound
                where.append(f"{host}:{bound} (stream, TLS)")
            else:
                self.stream.port = self.stream_port = bound
                where.append(f"{host}:{bound} (stream)")
        return where

    # -- resources (rabbitmq.com/alarms.html, memory.html, disk-alarms.html) -----------------
    def _alarms_changed(self, active: frozenset[str]) -> None:
        """Tell every connection (connection.blocked / unblocked, pausing publishers)."""
        for conn in list(self.connections):
            conn.alarms_changed(active)
        if self.stream is not None:
            self.stream.alarms_changed(active)

    def active_alarms(self) -> list[str]:
        """Resource alarms in effect: a sorted list of "memory" / "disk"."""
        return sorted(self.alarms.active)

    def memory_limit(self) -> int:
        """The memory high watermark in bytes (after start)."""
        assert self.resources is not None
        return self.resources.memory_limit

    def set_vm_memory_high_watermark(self, fraction: float | None = None, *,
                                     absolute: int | str | None = None) -> int:
        """Change the memory high watermark at run time, as `rabbitmqctl
        set_vm_memory_high_watermark <fraction>` or `... absolute <bytes|512MB>` do: a
        fraction of the total memory, or an absolute size. The memory alarm and queues'
        paging follow at once. Returns the watermark in bytes; ValueError for a bad value.
        Call on the broker's loop (EmbeddedBroker.call). Lasts until restart."""
        assert self.resources is not None
        return self.resources.set_vm_memory_high_watermark(fraction, absolute=absolute)

    def set_disk_free_limit(self, limit: int | str | None = None, *,
                            mem_relative: float | None = None) -> int:
        """Change disk_free_limit at run time, as `rabbitmqctl set_disk_free_limit <bytes|2GB>`
        or `... mem_relative <fraction>` do; the disk alarm is re-evaluated at once. Returns
        the limit in bytes; ValueError for a bad value. Call on the broker's loop. Lasts until
        restart."""
        assert self.resources is not None
        return self.resources.set_disk_free_limit(limit, mem_relative=mem_relative)

    def serving(self) -> ServingBroker[Reader]:
        """This broker as the reader and admission see it (broker/facades.py): its loop,
        definitions and users set. start() takes this view once, before binding a
        listener; AssertionError before that."""
        assert self.loop is not None and self.definitions is not None
        assert self.users is not None and self.resources is not None
        return cast("_ServingBroker", self)  # mypy checks _ServingBroker against the protocol

    def started(self) -> StartedBroker:
        """This broker as the management API sees it (broker/facades.py): also its
        shovels and federation set. start() takes this view when it imports a definitions
        file and when it builds the management server; AssertionError before the
        supervisors exist."""
        assert self.loop is not None and self.definitions is not None
        assert self.users is not None and self.resources is not None
        assert self.shovels is not None
        assert self.federation is not None
        return cast("_StartedBroker", self)  # mypy checks _StartedBroker against the protocol

    def connections_elsewhere(self, vhost: str, username: str) -> tuple[int, int, int]:
        """Open connections that the other worker processes of a multi-worker broker
        serve, as they told (all, in `vhost`, of `username`): the connection limits count
        them (rabbit_connection_tracking counts every node's). (0, 0, 0) in one process."""
        if self.count_elsewhere is None:
            return 0, 0, 0
        return self.count_elsewhere(vhost, username)

    def channels_elsewhere(self, username: str) -> int:
        """Open channels of `username` in the other worker processes of a multi-worker
        broker, as they told (users with a max-channels limit; rabbit_channel_tracking
        counts every node's); 0 in one process."""
        if self.user_channels_elsewhere is None:
            return 0
        return self.user_channels_elsewhere(username)

    def channels_changed(self, username: str) -> None:
        """A channel of `username` opened or closed here: a worker process tells the others
        how many it holds, when the user has a max-channels limit."""
        if self.on_user_channels is None or self.users is None:
            return
        if self.users.user_limits.get(username, {}).get("max-channels") is None:
            return
        self.on_user_channels(username, sum(
            len(c.channels) for c in self.connections if c.username == username))

    def connection_opened(self, conn: Reader) -> None:
        """`conn` sent connection.open-ok (a worker process's hook is told)."""
        if self.on_connection_opened is not None:
            self.on_connection_opened(conn)

    def connection_gone(self, conn: Reader) -> None:
        """A connection's socket closed (called by the reader)."""
        if conn in self.connections:
            self.churn.connections_closed += 1
            if self.on_connection_gone is not None:
                self.on_connection_gone(conn)
        self.connections.discard(conn)
        if not self.connections and self._all_closed is not None:
            self._all_closed.set()

    def _load_definitions(self, path: str) -> None:
        """`load_definitions = FILE` (rabbitmq.com/definitions.html#import-on-boot): import
        a definitions JSON file at boot; failures are logged, the broker still starts."""
        import json

        from broker.management.definitions import import_definitions

        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        # start() calls this once the shovel and federation supervisors exist (their
        # parameters may be in the file), before management starts
        failures = import_definitions(self.started(), data)
        for failure in failures:
            log.warning("load_definitions %s: %s", path, failure)
        log.info("definitions imported from %s (%d failures)", path, len(failures))

    async def stop(self) -> None:
        """Graceful shutdown: stop accepting, close clients with 320 CONNECTION_FORCED (waiting
        up to `SHUTDOWN_GRACE` seconds for their close-ok), stop queues."""
        self.loop_lag.stop()
        if self.management is not None:
            await self.management.stop()
            self.management = None
        if self.shovels is not None:
            await self.shovels.stop_all()
        if self.federation is not None:
            await self.federation.stop_all()
        for server in self._servers:
            server.close()
        if self.stream is not None:
            self.stream.close_all()
        self._all_closed = asyncio.Event()
        if not self.connections:
            self._all_closed.set()
        for conn in list(self.connections):
            conn.close(320, SHUTDOWN_TEXT)
        try:
            async with asyncio.timeout(SHUTDOWN_GRACE):
                await self._all_closed.wait()
        except TimeoutError:
            log.warning("%d connections did not answer connection.close", len(self.connections))
        for conn in list(self.connections):
            conn.abort()
        if self.resources is not None:
            self.resources.stop()
        for vhost in self.vhosts.values():
            vhost.shutdown()
        if self.definitions is not None:
            self.definitions.close()
            self.definitions = None
        for server in self._servers:
            await server.wait_closed()
        self._servers = []
        if self._removing:  # deleted vhosts' files still being removed
            await asyncio.gather(*self._removing)
        log.info("stopped")


if TYPE_CHECKING:
    class _ServingBroker(Broker):
        """`Broker` with the attributes start() sets before binding a listener narrowed
        (for type checkers only: `serving()` returns it as a `ServingBroker`, so mypy
        checks every other member of `Broker` against that protocol)."""

        loop: asyncio.AbstractEventLoop
        definitions: Definitions
        users: Users
        resources: ResourceMonitor

    class _StartedBroker(_ServingBroker):
        """Also the attributes start() sets after the listeners (see `started()`)."""

        shovels: Shovels
        federation: Federation
