"""What makes the worker processes one broker (issue 47, docs/multicore.md): the runtime of
one worker process.

Owns, in every worker: the mesh of links to the other workers; the placement table
(broker/workers/placement.py) and the `RemoteQueue` proxies for queues of other workers;
the `RemoteChannel` proxies for channels of other workers that publish to or consume from
our queues; the records between them (broker/workers/remote.py), held back until the broker
is up and then handed to the data plane (broker/workers/data_plane.py); the requests a queue's
owner answers (broker/workers/queue_requests.py); numbering our connections so that other
workers can name them (`ConnRef`; broker/workers/connection_tracking.py tells them); the
bridge of worker 0's management API into the others (broker/workers/api_bridge.py).
In the metadata owner (worker 0): executing definition changes (`submit` from its own
channels, "op" requests from the others) on its authoritative vhost tables, stamping each
resulting operation record with the next number of the `ChangeLog`, sending it to every
other worker and answering the requester once every live worker has applied it; placing
new queues; answering a starting worker's "snapshot" request.
In the other workers: replaying the owner's records in order (`ChangeApplier`) and
acknowledging them; forwarding the changes that start here (a definition change a channel
asks for, a queue deleting itself, an exclusive owner closing).
Talks to: broker/workers/worker.py (which builds it), the channel handlers
(broker/workers/handlers.py), the vhosts (broker/workers/vhost.py). Must never: run a
client's method itself (the handlers do) or touch a queue's messages other than through
its mailbox and façade.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker import errors, trace
from broker.access import CONFIGURE, READ, WRITE, ChannelAccess
from broker.connection_close import CLOSED
from broker.direct_reply_to import REGISTRY as REPLY_REGISTRY
from broker.workers import dedup_sharing, federation_watch, queue_requests
from broker.workers.api_bridge import ApiBridge
from broker.workers.change_log import ChangeApplier, ChangeLog
from broker.workers.connection_tracking import ConnectionTracking
from broker.workers.data_plane import DataPlane
from broker.workers.global_qos import GlobalQos
from broker.workers.mesh import Answer, Mesh
from broker.workers.placement import LEAST_QUEUES, Placement
from broker.workers.refs import ChannelRef, ConnRef, conn_ref, forget, forget_worker
from broker.workers.remote import RemoteChannel, RemoteQueue
from broker.workers.vhost import WorkerVHost, apply

if TYPE_CHECKING:
    from broker.reader import Reader
    from broker.server import Broker

log = logging.getLogger("broker.workers")

OWNER = 0  # the metadata owner's index
OnReply = Callable[[bool, Any], None]


def _closing(reader: Any) -> bool:
    """Is this connection of ours closed or on its way (its socket closing)?"""
    transport = getattr(reader, "transport", None)
    return reader.state == CLOSED or (transport is not None and transport.is_closing())


class LocalAnswer:
    """An Answer for a request this worker makes of itself."""

    def __init__(self, on_reply: OnReply) -> None:
        self._on_reply = on_reply
        self.done = False

    def reply(self, value: Any = None) -> None:
        if not self.done:
            self.done = True
            self._on_reply(True, value)

    def fail(self, exc: errors.AMQPError) -> None:
        if not self.done:
            self.done = True
            self._on_reply(False, exc)


class WorkerRuntime:
    """Worker `index` of `count`, serving `broker`; `mesh` is wired by the caller."""

    def __init__(self, index: int, count: int, mesh: Mesh) -> None:
        self.index = index
        self.count = count
        self.mesh = mesh
        self.broker: Broker | None = None  # set before the broker starts
        self.replaying = False  # applying the owner's records now
        # (vhost, queue) -> the worker that owns its process
        self.places = Placement()
        self.placed = self.places.placed  # (vhost, queue) -> worker: the same dict
        # (vhost, queue) -> the proxy channels of this worker hold (confirms, deliveries
        # and credit come back naming the queue)
        self.proxies: dict[tuple[str, str], RemoteQueue] = {}
        self.remote_channels: dict[ChannelRef, RemoteChannel] = {}
        self._serials: dict[Reader, int] = {}  # our connections' numbers
        self._readers: dict[int, Reader] = {}  # ... and back
        self._next_serial = 1
        # the metadata owner's log; the others' applier
        self.log: ChangeLog[int] | None = (
            ChangeLog(i for i in range(count) if i != index) if index == OWNER else None)
        self.applier = ChangeApplier()
        self._applied_waiters: dict[int, list[Callable[[], None]]] = {}
        self._completed = 0  # the owner: every change up to this one is applied everywhere
        self.started = False  # the broker is up: changes from now on are told and replayed
        self._snapshot_waiting: list[tuple[int, Answer]] = []  # asked before we were up
        self._closing: set[int] = set()  # our closed connections whose exclusive queues
        # the owner is deleting (their serials resolve until its record comes back)
        self._early_records: list[tuple[int, tuple]] = []  # queue records before we were up
        # every worker's connections as the others know them (limits, the management API)
        self.tracking = ConnectionTracking(index, count, mesh, self.serial, self._reader_of)
        self.api = ApiBridge(self)  # worker 0's management API into the other workers
        # channel-wide prefetch limits over queues of other workers
        self.global_qos = GlobalQos(index, mesh.send, self._local_channel,
                                    self.remote_channels.get, self.channel_ref)
        # a cluster leader's (broker/workers/replication.py WorkerSink.after), else None
        self.replicated_gate: Callable[[Callable[[], None]], None] | None = None
        # the records for our queues and channels
        self.data = DataPlane(mesh, self._vhost, self._local_channel, self.remote_channel,
                              self.remote_channels, self.proxies, self.global_qos)
        self._register()

    @property
    def is_owner(self) -> bool:
        return self.index == OWNER

    # -- wiring ------------------------------------------------------------------------------
    def _register(self) -> None:
        m = self.mesh
        m.on("q", self._on_queue_record)
        m.on("ch", self.data.on_channel_record)
        m.on("chg", self._on_change)
        m.on("chg_ok", self._on_change_applied)
        m.on("fwd", self._on_forwarded)
        m.on("gq_want", lambda peer, record: self.global_qos.on_want(peer, record))
        m.on("gq_credit", lambda peer, record: self.global_qos.on_credit(peer, record))
        m.on("gq_mode", lambda peer, record: self.global_qos.on_mode(peer, record))
        m.on("fedwatch", lambda peer, record: federation_watch.watch(
            m, self._local_queue, peer, record))
        m.on("wants", lambda peer, record: federation_watch.wanted(self.proxies, peer, record))
        dedup_sharing.install(m, self.index, self.count, self._vhost)
        m.on_request("op", self._on_op_request)
        m.on_request("snapshot", self._on_snapshot)
        m.on_request("settled", self._on_settled_request)
        m.on_request("conn_alive", self._on_conn_alive)
        for kind in ("consume", "get", "counts", "purge", "check_delete", "get_n", "browse",
                     "move", "figures"):
            m.on_request(kind, self._queue_request(kind))
        m.on("reply", self._on_reply)
        REPLY_REGISTRY.worker = self.index
        REPLY_REGISTRY.elsewhere = lambda worker, key: _RemoteReply(self, worker, key)
        REPLY_REGISTRY.on_gone = self._reply_gone
        m.on("reply_gone", lambda peer, record: REPLY_REGISTRY.mark_gone(record[1]))
        m.on_peer_lost = self._peer_lost
        m.on_peer_back = self._peer_back

    def vhost_class(self) -> type[WorkerVHost]:
        return type("WorkerVHost", (WorkerVHost,), {"runtime": self})

    def _vhost(self, name: str) -> Any:
        assert self.broker is not None
        return self.broker.vhosts.get(name)

    def _local_queue(self, vhost: str, name: str) -> Any:
        v = self._vhost(vhost)
        return v.queues.get(name) if v is not None else None

    # -- our connections, as other workers name them ----------------------------------------
    def serial(self, reader: Any) -> int:
        s = self._serials.get(reader)
        if s is None:
            s = self._serials[reader] = self._next_serial
            self._readers[s] = reader
            self._next_serial += 1
        return s

    def connection_gone(self, reader: Reader) -> None:
        s = self._serials.pop(reader, None)
        self.tracking.gone(reader, s)
        self.data.connection_gone(s)
        if s is not None and s not in self._closing:
            self._readers.pop(s, None)

    def _reader_of(self, serial: int) -> Reader | None:
        """Our open connection numbered `serial`, if it still is."""
        reader = self._readers.get(serial)
        return reader if reader is not None and reader in self._serials else None

    def owner_ref(self, owner: Any) -> ConnRef | None:
        if owner is None or isinstance(owner, ConnRef):
            return owner
        return conn_ref(self.index, self.serial(owner))

    def resolve(self, ref: ConnRef | None) -> Any:
        """A ConnRef as this worker's vhosts hold it: our own connection itself."""
        if ref is None:
            return None
        if ref.worker == self.index:
            reader = self._readers.get(ref.serial)
            return reader if reader is not None else conn_ref(ref.worker, ref.serial)
        return conn_ref(ref.worker, ref.serial)

    def channel_ref(self, channel: Any) -> ChannelRef | None:
        if channel is None:
            return None
        if isinstance(channel, RemoteChannel):
            return channel.ref
        return ChannelRef(self.index, self.serial(channel.conn), channel.number)

    def _local_channel(self, ref: ChannelRef) -> Any:
        reader = self._readers.get(ref.serial)
        return None if reader is None else reader.channels.get(ref.number)

    def remote_channel(self, ref: ChannelRef | None) -> RemoteChannel | None:
        if ref is None:
            return None
        rc = self.remote_channels.get(ref)
        if rc is None:
            rc = self.remote_channels[ref] = RemoteChannel(self, ref)
        return rc

    # -- WorkerPort / VHostRuntime ---------------------------------------------------------
    def send(self, worker: int, record: tuple) -> None:
        self.mesh.send(worker, record)

    def send_grouped(self, worker: int, head: tuple, item: Any) -> None:
        self.mesh.send_grouped(worker, head, item)

    def placement(self, vhost: str, name: str, exclusive_owner: Any,
                  queue_type: str = "classic", how: str = LEAST_QUEUES) -> int:
        """Where queue `name` lives: recorded (a replayed record, a recovered queue), or,
        in the owner, chosen now: a stream in the owner, whose worker serves the stream
        protocol (its connections read the stream's log in place); an exclusive queue on
        its connection's worker; else as `how` says (broker/workers/placement.py
        `locator`: the declaring connection's worker, the worker with the fewest queues,
        ties to the declaring connection's, or a random one)."""
        key = (vhost, name)
        worker = self.placed.get(key)
        if worker is not None:
            return worker
        if not self.is_owner:  # a record for it is on its way: the owner decided
            return OWNER
        ref = self.owner_ref(exclusive_owner)
        fixed = OWNER if queue_type == "stream" else ref.worker if ref is not None else None
        live = self.log.live | {OWNER} if self.log is not None else set(range(self.count))
        return self.places.choose(key, fixed,
                                  self._origin if self._origin is not None else OWNER, live,
                                  how)

    _origin: int | None = None  # the worker whose request the owner executes now

    def remote_queue(self, vhost: str, name: str, worker: int, **attrs: Any) -> RemoteQueue:
        proxy = RemoteQueue(self, worker, vhost, name, **attrs)
        proxy.vhost = self._vhost(vhost)  # type: ignore[attr-defined]
        self.proxies[(vhost, name)] = proxy
        return proxy

    def queue_deleted(self, queue: RemoteQueue) -> None:
        for reader in list(self._serials):
            for ch in list(reader.channels.values()):
                for tag, consumed in list(ch.consumers.items()):
                    if consumed is queue:
                        ch.consumer_cancelled(queue, tag)

    def queue_worker(self, queue: Any) -> int:
        return queue.worker if isinstance(queue, RemoteQueue) else self.index

    # -- definition changes: the owner's side ------------------------------------------------
    def changed(self, op: tuple) -> None:
        """A top-level change was made on the owner's tables: stamp and send it, with the
        placements chosen while it was made (a policy's or an exchange's shards, declared
        inside the call: the replicas take the owner's choice instead of choosing)."""
        assert self.log is not None
        fresh = self.places.take_fresh()
        if op[0] == "qdel":
            self.placed.pop((op[1], op[2]), None)
            self._save_placement()
        elif fresh:
            self._save_placement()
        seq = self.log.propose(0)
        for worker in self.log.live:
            self.mesh.send(worker, ("chg", seq, (op, fresh)))
        self._complete(self.log.completed())

    async def api_changed(self) -> None:
        """The owner, after a management API request that changed something (users,
        permissions, limits, vhosts, parameters: what the channel handlers never change):
        send the whole definitions database as one record, replayed as a replacement of
        every other worker's copy; return once every worker has it."""
        assert self.broker is not None and self.broker.definitions is not None
        assert self.broker.loop is not None
        self.changed(("defs", "", self.broker.definitions.snapshot(),
                      sorted(self.broker.trace_vhosts)))
        self._tell_limited_users()
        done: asyncio.Future[None] = self.broker.loop.create_future()

        def applied() -> None:
            if not done.done():
                done.set_result(None)
        self._when_applied(applied)
        await done

    def _tell_limited_users(self) -> None:
        """Tell the other workers our open channels of each user with a max-channels
        limit (one set just now included); unchanged counts are not sent again."""
        assert self.broker is not None
        if self.broker.users is not None:
            for user, limits in self.broker.users.user_limits.items():
                if "max-channels" in limits:
                    self.broker.channels_changed(user)

    def _sync_definitions(self, data: bytes, traced: list[str]) -> None:
        """A replica: take the owner's whole definitions database (`api_changed`), then
        create and delete vhosts to match it, drop cached permission checks, close the
        connections of users that are gone (Broker.delete_user's close) and turn the
        firehose on and off as the owner has it (`traced`: broker.trace_vhosts)."""
        assert self.broker is not None and self.broker.definitions is not None
        users_before = {u.name for u in self.broker.definitions.list_users()}
        self.broker.definitions.replace_with(data)
        gone = users_before - {u.name for u in self.broker.definitions.list_users()}
        for name in sorted(gone):
            self.broker.close_user_connections(name)
        for name in sorted(set(traced) - self.broker.trace_vhosts):
            trace.start(self.broker, name)
        for name in sorted(self.broker.trace_vhosts - set(traced)):
            trace.stop(self.broker, name)
        names = {v.name for v in self.broker.definitions.list_vhosts()}
        for name in sorted(names - set(self.broker.vhosts)):
            self.broker.add_vhost(name)
        for name in sorted(set(self.broker.vhosts) - names):
            self.broker.delete_vhost(name)
            for key in [k for k in self.placed if k[0] == name]:
                del self.placed[key]
        if self.broker.users is not None:
            self.broker.users.load()
            self._tell_limited_users()

    def _complete(self, done: list[int]) -> None:
        assert self.log is not None
        if done:
            self._completed = self.log.last_seq - self.log.waiting
            for seq in [s for s in self._applied_waiters if s <= self._completed]:
                for fn in self._applied_waiters.pop(seq):
                    fn()

    def _when_applied(self, fn: Callable[[], None]) -> None:
        """Run `fn` once every change stamped so far is applied by every live worker."""
        assert self.log is not None
        seq = self.log.last_seq
        if seq <= self._completed or not self.log.waiting:
            fn()
        else:
            self._applied_waiters.setdefault(seq, []).append(fn)

    def _on_change_applied(self, peer: int, record: tuple) -> None:
        if self.log is not None:
            self._complete(self.log.applied(peer, record[1]))

    def submit(self, op: str, payload: tuple, on_reply: OnReply) -> None:
        """A definition change asked for by one of our channels."""
        if self.is_owner:
            self._execute(self.index, op, payload, LocalAnswer(on_reply))
        else:
            self.mesh.request(OWNER, "op", (op, payload), on_reply)

    def _on_op_request(self, peer: int, payload: Any, answer: Answer) -> None:
        op, args = payload
        self._execute(peer, op, args, answer)

    def _execute(self, origin: int, op: str, args: tuple, answer: Any,
                 retried: bool = False) -> None:
        """Make the change `op` on the owner's tables for a channel of worker `origin`;
        answer once every worker has applied what it changed. A queue.declare refused
        because an exclusive queue of that name is another connection's is made again
        once that connection's worker has said whether it is still open: a client that
        reconnects after its connection was dropped may reach the owner through another
        worker before the dropped connection's exclusive queues were deleted, where one
        process would have deleted them first (`_recheck_exclusive`)."""
        self._origin = origin
        try:
            result = self._run(origin, op, args, answer)
        except errors.AMQPError as exc:
            if (op == "qdecl" and not retried and isinstance(exc, errors.ResourceLocked)
                    and self._recheck_exclusive(args, lambda: self._execute(
                        origin, op, args, answer, retried=True))):
                return
            answer.fail(exc)
            return
        finally:
            self._origin = None
        if result is not _LATER:
            self._when_applied(lambda: answer.reply(result))

    def _run(self, origin: int, op: str, args: tuple, answer: Any) -> Any:
        if op == "xdecl":
            vhost, name, type_, durable, auto_delete, internal, arguments, m = args
            self.vhost_or_404(vhost, m).declare_exchange(
                name, type_, durable=durable, auto_delete=auto_delete, internal=internal,
                arguments=arguments, method=m, check_reserved=True)
            return None
        if op == "xdel":
            vhost, name, if_unused, m = args
            self.vhost_or_404(vhost, m).delete_exchange(name, if_unused, m)
            return None
        if op in ("bind", "unbind"):
            vhost, kind, destination, source, routing_key, arguments, owner, m = args
            getattr(self.vhost_or_404(vhost, m), op)(
                kind, destination, source, routing_key, arguments, self.resolve(owner), m)
            return None
        if op == "qdecl":
            vhost, name, durable, exclusive, auto_delete, arguments, owner, user, m = args
            v = self.vhost_or_404(vhost, m)
            assert self.broker is not None and self.broker.users is not None
            access = ChannelAccess(self.broker.users.control, user, vhost)

            def authorize(qname: str, exists: bool) -> None:
                access.check("queue", qname, CONFIGURE, m)
                dlx = arguments.get("x-dead-letter-exchange")
                if not exists and dlx is not None:
                    access.check("queue", qname, READ, m)
                    access.check("exchange", str(dlx), WRITE, m)
            queue = v.declare_queue(name, durable=durable, exclusive=exclusive,
                                    auto_delete=auto_delete, arguments=arguments,
                                    owner=self.resolve(owner), method=m, authorize=authorize)
            return queue.name
        if op == "qdel":
            return self._delete_queue(args, answer)
        raise errors.amqp_error(errors.InternalError, f"unknown definition change {op!r}")

    def _recheck_exclusive(self, args: tuple, again: Callable[[], None]) -> bool:
        """queue.declare (`args`) found queue args[1] exclusive to another connection: ask
        that connection's worker whether it is still open (`conn_alive`: one that is
        closing deletes its exclusive queues first, and that change reaches us before the
        answer, on the same link) and run `again()` once it answers; False when there is
        no one to ask (the refusal stands)."""
        v = self._vhost(args[0])
        queue = v.queues.get(args[1]) if v is not None else None
        owner = getattr(queue, "exclusive_owner", None)
        if owner is None:
            return False
        if not isinstance(owner, ConnRef):  # one of ours
            if not _closing(owner):
                return False
            owner.release_exclusive()
            again()
            return True
        self.mesh.request(owner.worker, "conn_alive", owner.serial,
                          lambda _ok, _alive: again())
        return True

    def _on_conn_alive(self, peer: int, serial: Any, answer: Answer) -> None:
        """Is our connection `serial` still open? One that is closing deletes its exclusive
        queues now (their change is sent before this answer)."""
        reader = self._readers.get(serial)
        if reader is None or _closing(reader):
            if reader is not None:
                reader.release_exclusive()
            answer.reply(False)
        else:
            answer.reply(True)

    def vhost_or_404(self, name: str, method: Any) -> Any:
        v = self._vhost(name)
        if v is None:  # deleted while the request travelled
            raise errors.amqp_error(errors.NotFound, f"no vhost '{name}'", method)
        return v

    def _delete_queue(self, args: tuple, answer: Any) -> Any:
        """queue.delete: the checks the queue's owner makes (if-unused, if-empty) first,
        then the change; answers the ready count it had."""
        vhost, name, if_unused, if_empty, owner, m = args
        v = self.vhost_or_404(vhost, m)
        if name not in v.queues:
            return 0
        queue = v.get_queue(name, self.resolve(owner), m)  # 405 if locked
        if queue.queue_type == "quorum" and (if_unused or if_empty):
            flag = "if-unused" if if_unused else "if-empty"
            raise errors.amqp_error(
                errors.NotImplemented_,
                f"cannot delete queue '{name}' in vhost '{vhost}'. queue.delete operations "
                f"with {flag} flag set are not supported by quorum queues", m)

        def checked(ok: bool, value: Any) -> None:
            if not ok:
                if isinstance(value, errors.AMQPError) and hasattr(m, "index"):
                    value.class_id = m.index >> 16  # type: ignore[attr-defined]
                    value.method_id = m.index & 0xFFFF  # type: ignore[attr-defined]
                answer.fail(value)
                return
            current = v.queues.get(name)
            if current is queue:
                v.delete_queue_now(queue)
            self._when_applied(lambda: answer.reply(value))
        self.ask_queue(self.queue_worker(queue), "check_delete",
                       (vhost, name, if_unused, if_empty), checked)
        return _LATER

    # -- definition changes: the other workers' side -------------------------------------------
    def forward(self, op: tuple) -> None:
        """A change that starts here (a queue deleting itself, an exclusive owner's
        close): the owner makes it and replays it everywhere."""
        if op[0] == "closed" and op[2] is not None:
            self._closing.add(op[2].serial)
        self.mesh.send(OWNER, ("fwd", op))

    def settled(self, then: Callable[[], None]) -> None:
        """Run `then()` once every change this worker made or forwarded so far is applied
        by every live worker: the owner waits for its log; another worker asks the owner
        behind its forwarded changes (one link keeps their order). A lost owner answers
        too (Mesh.request fails the request), so a closing client is never left waiting."""
        if self.is_owner:
            self._when_applied(then)
        else:
            self.mesh.request(OWNER, "settled", None, lambda _ok, _value: then())

    def _on_settled_request(self, peer: int, payload: Any, answer: Answer) -> None:
        self._when_applied(lambda: answer.reply(None))

    def _on_forwarded(self, peer: int, record: tuple) -> None:
        op = record[1]
        v = self._vhost(op[1])
        if v is None:
            return
        if op[0] == "qdel":
            queue = v.queues.get(op[2])
            if queue is not None and self.queue_worker(queue) == peer:
                v.delete_queue_now(queue)
        elif op[0] == "closed":
            v.connection_closed(self.resolve(op[2]))
            if op[2] is not None:
                forget(op[2].worker, op[2].serial)

    def _on_change(self, peer: int, record: tuple) -> None:
        _, seq, op = record
        for _seq, ready in self.applier.receive(seq, op):
            self._replay(ready)
        self.mesh.send(OWNER, ("chg_ok", self.applier.applied))

    def _replay(self, change: tuple) -> None:
        op, fresh = change
        self.placed.update(fresh)
        if op[0] == "defs":
            self._sync_definitions(op[2], op[3])
            return
        v = self._vhost(op[1])
        if v is None:
            log.warning("change %r for an unknown vhost", op[0])
            return
        self.replaying = True
        try:
            apply(v, op, self.resolve)
        except errors.AMQPError as exc:  # the tables differ from the owner's: a bug
            log.error("replaying %r failed: %s", op, errors.close_args(exc)[1])
        finally:
            self.replaying = False
        if op[0] == "qdel":
            self.placed.pop((op[1], op[2]), None)
        elif op[0] == "closed" and op[2] is not None:
            forget(op[2].worker, op[2].serial)
            if op[2].worker == self.index and op[2].serial in self._closing:
                self._closing.discard(op[2].serial)
                self._readers.pop(op[2].serial, None)

    # -- placement of durable queues (the owner) -------------------------------------------
    def load_placement(self, data_dir: str) -> None:
        """The owner, before recovery: where each durable queue's files are."""
        self.places.load(data_dir, self.count)

    def _save_placement(self) -> None:
        """Write where every durable, not exclusive queue lives (queue_workers.json)."""
        def durable(vhost: str, name: str) -> bool:
            v = self._vhost(vhost)
            q = v.queues.get(name) if v is not None else None
            return q is not None and q.durable and q.exclusive_owner is None
        if self.broker is not None:
            self.places.save(durable)

    # -- snapshot ------------------------------------------------------------------------------
    def _on_snapshot(self, peer: int, payload: Any, answer: Answer) -> None:
        """A starting worker's tables: the definitions database, where each queue lives,
        and the change number they include (the worker follows the log from there)."""
        if not self.started:
            self._snapshot_waiting.append((peer, answer))
            return
        assert self.broker is not None and self.broker.definitions is not None
        assert self.log is not None
        seq = self.log.worker_back(peer)
        answer.reply((self.broker.definitions.snapshot(), dict(self.placed), seq))

    def mark_started(self) -> None:
        """The broker is up: answer the snapshots asked for meanwhile; report figures."""
        self.started = True
        if self.is_owner and self.broker is not None:
            self.broker.on_api_change = self.api_changed
            self.broker.remote_queue_call = self.api.remote_queue_call
            self.broker.remote_connections = self.tracking.remote_connections
            self.broker.worker_views = self.tracking.worker_views
            self.broker.remote_unacked = self.api.remote_unacked
            self.broker.remote_delayed = self.api.remote_delayed
        early, self._early_records = self._early_records, []
        for peer, record in early:
            self._on_queue_record(peer, record)
        if not self.is_owner:
            self.api.report_loop()
        waiting, self._snapshot_waiting = self._snapshot_waiting, []
        for peer, answer in waiting:
            self._on_snapshot(peer, None, answer)

    def start_from(self, placed: dict[tuple[str, str], int], seq: int) -> None:
        self.placed.update(placed)
        self.applier = ChangeApplier(seq)

    def _on_queue_record(self, peer: int, record: tuple) -> None:
        if not self.started:  # a restarted worker: its queues are not recovered yet
            self._early_records.append((peer, record))
            return
        self.data.on_queue_record(peer, record)

    # -- requests to a queue's owner ---------------------------------------------------------
    def ask_queue(self, worker: int, kind: str, payload: tuple, on_reply: OnReply) -> None:
        if worker == self.index:
            self._queue_request(kind)(self.index, payload, LocalAnswer(on_reply))
        else:
            self.mesh.request(worker, kind, payload, on_reply)

    def _queue_request(self, kind: str) -> Callable[[int, Any, Any], None]:
        def handle(peer: int, payload: Any, answer: Any) -> None:
            vhost, name = payload[0], payload[1]
            v = self._vhost(vhost)
            queue = v.queues.get(name) if v is not None else None
            if queue is None or isinstance(queue, RemoteQueue):
                answer.fail(errors.amqp_error(errors.NotFound,
                                              f"no queue '{name}' in vhost '{vhost}'"))
                return
            try:
                answer.reply(self._answer_queue(kind, queue, payload))
            except errors.AMQPError as exc:
                answer.fail(exc)
        return handle

    def _answer_queue(self, kind: str, queue: Any, payload: tuple) -> Any:
        return queue_requests.answer(kind, queue, payload, self.remote_channel)

    def _reply_gone(self, token: str) -> None:
        """One of our direct reply-to requesters went: every other worker is told."""
        for peer in range(self.count):
            if peer != self.index:
                self.mesh.send(peer, ("reply_gone", token))

    def _on_reply(self, peer: int, record: tuple) -> None:
        """A direct reply-to reply published on another worker for one of our channels."""
        _, routing_key, message = record
        target = REPLY_REGISTRY.channel_for(routing_key)
        if target is not None:
            target.deliver_reply(message)

    # -- a peer died, a peer came back -------------------------------------------------------
    def _peer_lost(self, peer: int) -> None:
        """Worker `peer` died (the node restarts it). Our queues take back what its channels
        held unacked and drop their consumers; our channels are told its queues crashed
        (consumers cancelled, unconfirmed publishes nacked, their old delivery tags
        forgotten, credit towards them reset); the owner stops waiting for it and deletes
        what died with it: its transient queues and its connections' exclusive queues."""
        if peer < 0:
            return
        for ref, rc in list(self.remote_channels.items()):
            if ref.worker != peer:
                continue
            del self.remote_channels[ref]
            rc.open = False
            for queue in rc.queues | set(rc.outstanding):
                if not queue.deleted:
                    queue.call(queue.channel_down, rc, sorted(rc.outstanding.get(queue, ())))
        down = {p for p in self.proxies.values() if p.worker == peer}
        for proxy in down:
            proxy.down = True
        for reader in list(self._serials):
            for ch in list(reader.channels.values()):
                self.data.queues_crashed(ch, down)
        forget_worker(peer)
        self.tracking.peer_lost(peer)
        if self.log is None:
            return
        self._complete(self.log.worker_gone(peer))
        assert self.broker is not None
        for v in list(self.broker.vhosts.values()):
            for queue in list(v.queues.values()):
                owner = queue.exclusive_owner
                if (isinstance(queue, RemoteQueue) and queue.worker == peer
                        and not queue.durable) or (
                        isinstance(owner, ConnRef) and owner.worker == peer):
                    v.delete_queue_now(queue)

    def _peer_back(self, peer: int) -> None:
        """A new link to restarted worker `peer`: its queues take records again; it is told
        our open connections (for the connection limits)."""
        for proxy in self.proxies.values():
            if proxy.worker == peer:
                proxy.down = False
        self.tracking.peer_back(peer)


_LATER = object()  # _run's answer comes later (the queue's worker is asked first)


class _RemoteReply:
    """The requester's channel of a direct reply-to name of another worker: the reply is
    carried there (and dropped there if that channel is gone)."""

    def __init__(self, runtime: WorkerRuntime, worker: int, routing_key: str) -> None:
        self._runtime = runtime
        self._worker = worker
        self._key = routing_key

    def deliver_reply(self, message: Any) -> bool:
        self._runtime.mesh.send(self._worker, ("reply", self._key, message))
        return True
