"""The leader's end of replication: the listener on `clustering.port` that followers connect
to, the stream of durable writes it sends them, and the wait a publisher confirm makes for
their acks.

Flow (LavinMQ 2's clustering `server.cr` and `follower.cr`): a follower proves it knows the
cluster secret, then syncs — the leader lists every replicated file with its size and
SHA-1, the follower asks for those it lacks or has otherwise, the leader sends them — while
the writes made meanwhile wait in its buffer; then it receives every write as it happens and
acks the stream position it has written. A follower that has acked everything up to the end
of its sync joins the in-sync replica set (ISR); one that disconnects, or does not ack within
`clustering.ack_timeout` ms while a confirm waits for it, leaves the ISR **before** that
confirm is released, so etcd never lists as a failover candidate a member that lacks a
confirmed write (`wait_replicated`). Below `clustering.min_insync_replicas` members (the
leader counted) confirms wait.

Owns: the followers' connections, the position counter, the ISR as the leader sees it.
Talks to: the broker's writers (`append`, `replace`, `truncate`, `delete`, callable from any
thread), the coordinator through `set_isr` (an etcd transaction fenced by the term; False
means this leader is deposed), and the confirm path (`wait_replicated`).
Must never: release a wait while a listed ISR member lacks the position, or block the loop
on disk (files are listed and read in a worker thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import inspect
import logging
import os
import ssl as ssl_module
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from broker.cluster import wire
from broker.cluster.files import list_files, replicated
from broker.cluster.framed import read_frame
from broker.cluster.proxy import splice

log = logging.getLogger("broker.cluster")
WRITE_BUFFER_LIMIT = 64 * 1024 * 1024  # bytes queued for one follower before it is dropped
# s of silence after which the leader repeats SYNCED (its stream position) to a follower:
# the follower acks it, so it is the heartbeat both ways (broker/cluster/follower.py
# LEADER_SILENCE); a frame older followers already take, so no protocol version change
HEARTBEAT_INTERVAL = 0.1


@dataclass(eq=False)
class FollowerLink:
    """One connected follower: `id`, its socket writer, state "syncing" or "streaming",
    the last position it acked, and when it last acked (monotonic s)."""

    id: str
    address: str
    writer: asyncio.StreamWriter
    state: str = "syncing"
    acked: int = 0
    sent: int = 0
    last_ack: float = field(default_factory=time.monotonic)
    buffered: list[bytes] = field(default_factory=list)  # stream frames held during sync
    closed: bool = False
    last_write: float = field(default_factory=time.monotonic)  # monotonic s

    def lag(self) -> int:
        return self.sent - self.acked


class ReplicationServer:
    """Leader `node_id` in `term`, replicating `data_dir`. `set_isr(members)` records the
    ISR (follower ids; the leader is added by the coordinator) and returns False when the
    term is over. Times in ms."""

    def __init__(self, data_dir: str, node_id: str, term: int, secret: bytes,
                 set_isr: Callable[[set[str]], Awaitable[bool]], *, ack_timeout: int = 3000,
                 min_insync_replicas: int = 1,
                 definitions_snapshot: Callable[[], list[bytes] | Awaitable[list[bytes]]]
                 | None = None) -> None:
        self.data_dir = os.path.abspath(data_dir)
        self.node_id = node_id
        self.term = term
        self.secret = secret
        self._set_isr = set_isr
        self.ack_timeout = ack_timeout / 1000.0
        self.min_insync_replicas = min_insync_replicas
        # service -> how to open it locally, for clients a follower carries here
        self.proxy_targets: dict[str, Callable[[], Awaitable[
            tuple[asyncio.StreamReader, asyncio.StreamWriter]]]] = {}
        # the operations that rebuild the definitions (broker/definitions_ops.py), sent at
        # the end of each sync; None: this leader replicates files only
        self._definitions_snapshot = definitions_snapshot
        self.followers: dict[str, FollowerLink] = {}
        self.isr: set[str] = set()  # follower ids in the ISR (as last written to etcd)
        self._isr_dirty = True  # etcd's ISR may list members this leader has not synced
        self.deposed = False  # set_isr said the term is over
        # monotonic s until which this leader's lease is known alive (the cluster node
        # moves it on at each renewal): no confirm is released after it, so a leader that
        # was paused past its lease (SIGSTOP, a stalled loop) releases none when it wakes
        self.lease_valid_until = float("inf")
        self.position = 0  # the last stream position handed out
        self._lock = threading.Lock()  # position and outbox: writers call from any thread
        self._outbox: list[bytes] = []
        self._flush_scheduled = False
        self._changed = asyncio.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._heartbeat_task: asyncio.Task | None = None
        self._sync_lock = asyncio.Lock()  # one follower syncs at a time
        # one ISR write at a time, each computed from the ISR the one before wrote: two
        # followers finishing their syncs together must not each write "ISR + me"
        self._isr_lock = asyncio.Lock()

    # -- the listener ----------------------------------------------------------------------
    async def start(self, host: str, port: int, ssl: ssl_module.SSLContext | None = None
                    ) -> int:
        """Listen on host:port (0: any free port), with TLS when `ssl` is given (member
        certificates required: broker/cluster/member_tls.py); returns the port."""
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._serve, host, port, ssl=ssl)
        self._heartbeat_task = self._loop.create_task(self._heartbeat())
        return int(self._server.sockets[0].getsockname()[1])

    async def _heartbeat(self) -> None:
        """Every HEARTBEAT_INTERVAL s, a streaming follower that was sent nothing for that
        long is sent SYNCED at the position it was sent: it acks it, and a follower that
        hears nothing for LEADER_SILENCE s suspects this leader (docs/high-availability.md
        §0.3)."""
        while True:
            await asyncio.sleep(HEARTBEAT_INTERVAL)
            now = time.monotonic()
            with self._lock:
                for link in list(self.followers.values()):
                    if (link.state == "streaming" and not link.closed
                            and now - link.last_write >= HEARTBEAT_INTERVAL * 0.9):
                        link.writer.write(wire.frame(wire.SYNCED, wire.u64(link.sent)))
                        link.last_write = now

    async def stop(self) -> None:
        """Close the listener and every follower connection."""
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
        if self._server is not None:
            self._server.close()
        for link in list(self.followers.values()):
            self._drop(link, "the leader stops")
        if self._tasks:  # their sockets are closed: they end by themselves
            await asyncio.wait(list(self._tasks), timeout=2)
        for task in list(self._tasks):  # a proxied client still spliced
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peer = writer.get_extra_info("peername")
        address = f"{peer[0]}:{peer[1]}" if peer else "?"
        link: FollowerLink | None = None
        try:
            link = await self._handshake(reader, writer, address)
            if link is not None:
                await self._sync(link, reader)
                await self._ack_loop(link, reader)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, wire.ProtocolError) as exc:
            log.info("cluster: follower %s disconnected: %s", link.id if link else address,
                     exc or type(exc).__name__)
        finally:
            if link is not None:
                self._drop(link, "disconnected")
            writer.close()
            self._tasks.discard(task)

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         address: str) -> FollowerLink | None:
        preamble = await asyncio.wait_for(reader.readexactly(len(wire.PREAMBLE)), 5)
        if preamble != wire.PREAMBLE:
            log.error("cluster: %s speaks %r, this member replication version %d: refused "
                      "(upgrade one member at a time: docs/high-availability.md)", address,
                      preamble, wire.VERSION)
            writer.write(wire.PREAMBLE)
            return None
        kind, payload = await read_frame(reader, 5)
        if kind == wire.PROXY_HELLO:
            await self._proxy(payload, reader, writer, address)
            return None
        if kind != wire.HELLO:
            raise wire.ProtocolError(f"expected HELLO, got frame {kind}")
        f = wire.Fields(payload)
        node_id, secret, seen_term = f.s16(), f.b16(), f.u64()
        if not hmac.compare_digest(secret, self.secret):
            log.warning("cluster: %s (%s) presented a wrong cluster secret", address, node_id)
            writer.write(wire.frame(wire.REFUSED, wire.s16("wrong cluster secret")))
            return None
        if seen_term > self.term:
            log.warning("cluster: %s has followed term %d, newer than this leader's %d",
                        node_id, seen_term, self.term)
            writer.write(wire.frame(wire.REFUSED, wire.s16(
                f"term {self.term} is older than {seen_term}")))
            return None
        if node_id == self.node_id:
            writer.write(wire.frame(wire.REFUSED, wire.s16("the leader's own id")))
            return None
        old = self.followers.get(node_id)
        if old is not None:
            self._drop(old, "replaced by a new connection")
        # the trailing flag: this leader sends heartbeats (a follower of an earlier release
        # reads the term and id and ignores it; one of this release bounds its silence)
        writer.write(wire.frame(wire.WELCOME, wire.u64(self.term), wire.s16(self.node_id),
                                b"\x01"))
        link = FollowerLink(node_id, address, writer)
        self.followers[node_id] = link  # from now on it buffers the stream
        log.info("cluster: follower %s connected from %s", node_id, address)
        return link

    async def _proxy(self, payload: bytes, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, address: str) -> None:
        """A follower carries one client to this leader's `service` (broker/cluster/proxy.py):
        check the secret, open the service locally, pass the PROXY line on, splice."""
        f = wire.Fields(payload)
        node_id, secret, service = f.s16(), f.b16(), f.s16()
        line = f.rest()
        if not hmac.compare_digest(secret, self.secret):
            log.warning("cluster: %s (%s) asked to proxy with a wrong cluster secret",
                        address, node_id)
            return
        opener = self.proxy_targets.get(service)
        if opener is None:
            log.info("cluster: %s asked to proxy %r, which this leader does not serve", node_id,
                     service)
            return
        try:
            up_reader, up_writer = await opener()
        except OSError as exc:
            log.info("cluster: %s for a client of %s: %s", service, node_id, exc)
            return
        if line:
            up_writer.write(line)
        await splice(reader, writer, up_reader, up_writer)

    async def _sync(self, link: FollowerLink, reader: asyncio.StreamReader) -> None:
        """Send the file list and the files the follower asks for, then what was written
        meanwhile; it joins the ISR once it acked up to there."""
        async with self._sync_lock:
            entries = await asyncio.to_thread(list_files, self.data_dir)
            link.writer.write(wire.files_frame(entries))
            await link.writer.drain()
            kind, payload = await read_frame(reader, 60)
            if kind != wire.WANT:
                raise wire.ProtocolError(f"expected WANT, got frame {kind}")
            wanted = wire.parse_want(payload)
            for path in wanted:
                if not replicated(path):  # only what it replicates, nothing else it holds
                    raise wire.ProtocolError(f"asked for {path!r}, which is not replicated")
            for path in wanted:
                content = await asyncio.to_thread(self._read, path)
                link.writer.write(wire.frame(wire.FILE, wire.s16(path), content))
                await link.writer.drain()
            if self._definitions_snapshot is not None:  # what changes meanwhile follows
                ops = self._definitions_snapshot()  # in `held`, applied again on top
                if inspect.isawaitable(ops):  # several workers: worker 0 is asked
                    ops = await ops
                link.writer.write(wire.defs_snapshot_frame(ops))
            with self._lock:
                link.state = "streaming"
                held, link.buffered = link.buffered, []
                end = self.position
            for data in held:  # written meanwhile: applied again where the files had it
                link.writer.write(data)
            link.writer.write(wire.frame(wire.SYNCED, wire.u64(end)))
            link.sent = end
            await link.writer.drain()
        log.info("cluster: follower %s synced (%d files sent of %d), stream at %d", link.id,
                 len(wanted), len(entries), end)

    def _read(self, path: str) -> bytes:
        try:
            with open(os.path.join(self.data_dir, *path.split("/")), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return b""  # deleted since it was listed: the stream's DELETE follows

    async def _ack_loop(self, link: FollowerLink, reader: asyncio.StreamReader) -> None:
        while True:
            kind, payload = await read_frame(reader, None)
            if kind != wire.ACK:
                raise wire.ProtocolError(f"expected ACK, got frame {kind}")
            link.acked = wire.Fields(payload).u64()
            link.last_ack = time.monotonic()
            if link.id not in self.isr and link.acked >= link.sent:
                await self._isr_join(link)
            async with self._changed:
                self._changed.notify_all()

    async def _isr_join(self, link: FollowerLink) -> None:
        async with self._isr_lock:
            if link.closed or link.id in self.isr or self.deposed:
                return
            if not await self._write_isr(self.isr | {link.id}):
                return
        log.info("cluster: follower %s joined the ISR", link.id)

    async def _write_isr(self, members: set[str]) -> bool:
        try:
            ok = await self._set_isr(members)
        except Exception as exc:  # noqa: BLE001 - etcd unreachable: leadership unprovable
            log.error("cluster: the ISR could not be written (%s): no confirm may go out", exc)
            ok = False
        if ok:
            self.isr = set(members)
            self._isr_dirty = False
        else:
            self.deposed = True
            log.error("cluster: the ISR could not be written: term %d is over", self.term)
        return ok

    def _drop(self, link: FollowerLink, why: str) -> None:
        if link.closed:
            return
        link.closed = True
        if self.followers.get(link.id) is link:
            del self.followers[link.id]
            if link.id in self.isr:
                self._isr_dirty = True  # written before the next confirm goes out
        link.writer.close()
        log.info("cluster: follower %s dropped: %s", link.id, why)
        if self._loop is not None:
            self._loop.create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- the writers' side (any thread) ----------------------------------------------------
    def _rel(self, path: str) -> str | None:
        if os.path.isabs(path):
            path = os.path.relpath(path, self.data_dir)
        rel = path.replace(os.sep, "/")
        return rel if replicated(rel) else None

    def _emit(self, kind: int, path: str | None, *parts: bytes) -> int:
        rel = self._rel(path) if path is not None else ""
        with self._lock:
            if rel is None:
                return self.position
            self.position += 1
            head = wire.u64(self.position) if path is None else (
                wire.u64(self.position) + wire.s16(rel))
            data = wire.frame(kind, head, *parts)
            self._outbox.append(data)
            if not self._flush_scheduled and self._loop is not None:
                self._flush_scheduled = True
                self._loop.call_soon_threadsafe(self._flush)
            return self.position

    def append(self, path: str, offset: int, data: bytes) -> int:
        """`data` was written at `offset` of `path`; its stream position."""
        return self._emit(wire.APPEND, path, wire.u64(offset), data)

    def replace(self, path: str, data: bytes) -> int:
        """`path` now holds exactly `data`."""
        return self._emit(wire.REPLACE, path, data)

    def truncate(self, path: str, size: int) -> int:
        return self._emit(wire.TRUNCATE, path, wire.u64(size))

    def delete(self, path: str) -> int:
        """`path` (a file or a directory tree) is gone."""
        return self._emit(wire.DELETE, path)

    def definitions(self, op: bytes) -> int:
        """A definitions operation (broker/definitions.py encode_op)."""
        return self._emit(wire.DEFS, None, op)

    def _flush(self) -> None:
        with self._lock:
            out, self._outbox = self._outbox, []
            self._flush_scheduled = False
            position = self.position
            for link in list(self.followers.values()):
                if link.state == "syncing":
                    link.buffered.extend(out)
                    continue
                for data in out:
                    link.writer.write(data)
                link.sent = position
                link.last_write = time.monotonic()
        for link in list(self.followers.values()):
            transport = link.writer.transport
            if transport.get_write_buffer_size() > WRITE_BUFFER_LIMIT:
                self._drop(link, f"{WRITE_BUFFER_LIMIT} bytes unsent")

    # -- the confirm side ------------------------------------------------------------------
    async def wait_replicated(self, position: int) -> bool:
        """Return True once every ISR follower has acked `position`: one that is gone, or
        has not acked within the ack timeout, is first removed from the ISR (in etcd). Waits
        while fewer than min_insync_replicas members (the leader counted) are in the ISR.
        False when this leader's term is over: nothing may be confirmed any more."""
        async with self._changed:
            while True:
                if self.deposed or not self.leading():
                    return False
                now = time.monotonic()
                members = set(self.isr)
                late = set()
                for fid in members:
                    link = self.followers.get(fid)
                    if link is None or link.closed:
                        late.add(fid)
                    elif link.acked < position and now - link.last_ack > self.ack_timeout \
                            and link.sent >= position:
                        late.add(fid)
                        self._drop(link, f"no ack within {self.ack_timeout * 1000:.0f} ms")
                if late or self._isr_dirty:
                    async with self._isr_lock:  # from the ISR as the last write left it
                        synced = {fid for fid in self.isr - late
                                  if (link := self.followers.get(fid)) is not None
                                  and not link.closed and link.state == "streaming"}
                        if not await self._write_isr(synced):
                            return False
                    continue
                waiting = [fid for fid in self.isr if self.followers[fid].acked < position]
                if not waiting and 1 + len(self.isr) >= self.min_insync_replicas:
                    return True
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), self.ack_timeout / 4)

    def leading(self) -> bool:
        """This leader's term is not over as far as it knows: not deposed, and its lease
        renewed recently enough (`lease_valid_until`)."""
        return not self.deposed and time.monotonic() < self.lease_valid_until

    def status(self) -> list[dict]:
        """The followers for /api/nodes: id, address, state, in the ISR or not, lag (stream
        positions) and seconds since the last ack."""
        now = time.monotonic()
        return [{"id": link.id, "address": link.address, "state": link.state,
                 "insync": link.id in self.isr, "lag": link.lag(),
                 "last_ack_s": round(now - link.last_ack, 3)}
                for link in self.followers.values()]
