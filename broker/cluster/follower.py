"""A follower's end of replication: connect to the leader, sync, apply the stream, ack.

The follower sends the preamble and HELLO (its id, the cluster secret, the highest term it
has followed), checks the WELCOME's term is not older than that (a deposed leader's stream is
refused: fencing by term), records the term in `cluster/term` (its own directory, never
replicated), answers the file list with the paths it lacks (deleting replicated files the
leader does not have: a tail that diverged while it led), writes what it receives, and from
SYNCED on acks each batch of stream frames once written — after fdatasync with
`clustering.follower_fsync` (the default), else once in the page cache.

Owns: one connection to one leader and this member's copy of the replicated files while it
follows. Must never: ack a position it has not written.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl as ssl_module

from broker.cluster import wire
from broker.cluster.files import LOCAL_DIR, FollowerDefinitions, FollowerFiles
from broker.cluster.framed import read_frame
from broker.durable_io import write_atomically

log = logging.getLogger("broker.cluster")


class Refused(Exception):
    """The leader refused this follower (wrong secret, an older term, another version)."""


# s without a frame from a streaming leader (which sends one every 0.1 s: leader.py
# HEARTBEAT_INTERVAL) after which this follower takes it for lost (LeaderSilent)
LEADER_SILENCE = 1.0


class LeaderSilent(ConnectionError):
    """The leader sent nothing for LEADER_SILENCE s: hung, paused or cut off."""


class ReplicationClient:
    """Follower `node_id` of the cluster whose secret is `secret`, copying into `data_dir`."""

    def __init__(self, data_dir: str, node_id: str, secret: bytes, fsync: bool = True) -> None:
        self.data_dir = os.path.abspath(data_dir)
        self.node_id = node_id
        self.secret = secret
        self.files = FollowerFiles(self.data_dir, fsync)
        self.definitions = FollowerDefinitions(self.data_dir)
        self.state = "idle"  # connecting, syncing, streaming
        self.position = 0  # the last stream position written (and acked)
        self.leader_term = 0
        self.leader_id = ""
        self._heartbeats = False  # the leader said it sends a frame every 0.1 s at least

    # -- the highest term followed (cluster/term) --------------------------------------------
    def seen_term(self) -> int:
        try:
            with open(os.path.join(self.data_dir, LOCAL_DIR, "term")) as f:
                return int(f.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def _record_term(self, term: int) -> None:
        directory = os.path.join(self.data_dir, LOCAL_DIR)
        os.makedirs(directory, exist_ok=True)
        write_atomically(directory, "term", str(term).encode(), fsync=True)

    # -- following --------------------------------------------------------------------------
    async def follow(self, host: str, port: int, synced: asyncio.Event | None = None,
                     ssl: ssl_module.SSLContext | None = None) -> None:
        """Follow the leader at host:port until the connection ends (returns) or the
        leader refuses this member (Refused). `synced` is set once the sync is done; `ssl`:
        the member port's TLS (broker/cluster/member_tls.py)."""
        self.state = "connecting"
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            host, port, ssl=ssl, server_hostname=host if ssl is not None else None), 5)
        try:
            writer.write(wire.PREAMBLE + wire.frame(
                wire.HELLO, wire.s16(self.node_id), _b16(self.secret),
                wire.u64(self.seen_term())))
            await writer.drain()
            head = await asyncio.wait_for(reader.readexactly(5), 10)
            if head == wire.PREAMBLE[:5]:
                rest = await reader.readexactly(3)
                raise Refused(f"the leader speaks {head + rest!r}, this member "
                              f"{wire.PREAMBLE!r}: another version")
            size = int.from_bytes(head[1:], "big")
            payload = await reader.readexactly(size)
            if head[0] == wire.REFUSED:
                raise Refused(wire.Fields(payload).s16())
            if head[0] != wire.WELCOME:
                raise wire.ProtocolError(f"expected WELCOME, got frame {head[0]}")
            f = wire.Fields(payload)
            term, leader_id = f.u64(), f.s16()
            self._heartbeats = not f.done() and f.raw(1) == b"\x01"  # it sends them
            if term < self.seen_term():
                raise Refused(f"leader {leader_id} is in term {term}, older than "
                              f"{self.seen_term()}")
            self._record_term(term)
            self.leader_term, self.leader_id = term, leader_id
            await self._sync(reader, writer)
            if synced is not None:
                synced.set()
            await self._stream(reader, writer)
        finally:
            self.state = "idle"
            self.definitions.close()
            writer.close()

    async def _sync(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.state = "syncing"
        kind, payload = await read_frame(reader, 60)
        if kind != wire.FILES:
            raise wire.ProtocolError(f"expected FILES, got frame {kind}")
        entries = wire.parse_files(payload)
        wanted = await asyncio.to_thread(self.files.wanted, entries)
        writer.write(wire.frame(wire.WANT, *(wire.s16(p) for p in wanted)))
        await writer.drain()
        for _ in wanted:
            kind, payload = await read_frame(reader, 60)
            if kind != wire.FILE:
                raise wire.ProtocolError(f"expected FILE, got frame {kind}")
            f = wire.Fields(payload)
            path = wire.safe_path(f.s16())
            await asyncio.to_thread(self.files.replace, path, f.rest())
        log.info("cluster: synced %d of %d files from leader %s (term %d)", len(wanted),
                 len(entries), self.leader_id, self.leader_term)

    async def _stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = wire.Reader()
        while True:
            try:  # bounded when the leader said it sends heartbeats (a leader of an
                # earlier release, during a rolling upgrade, does not)
                data = await asyncio.wait_for(
                    reader.read(1 << 20), LEADER_SILENCE if self._heartbeats else None)
            except TimeoutError:
                raise LeaderSilent(f"nothing from leader {self.leader_id} for "
                                   f"{LEADER_SILENCE} s") from None
            if not data:
                log.info("cluster: leader %s closed the stream", self.leader_id)
                return
            frames.feed(data)
            batch = frames.frames()
            if not batch:
                continue
            ack = await asyncio.to_thread(self._apply, batch)
            if ack is not None:
                self.position = ack
                writer.write(wire.frame(wire.ACK, wire.u64(ack)))

    def _apply(self, batch: list[tuple[int, bytes]]) -> int | None:
        """Write a batch of stream frames (worker thread); the position to ack, if any."""
        ack = None
        files = self.files
        for kind, payload in batch:
            if kind == wire.SYNCED:  # the end of the sync, then each heartbeat
                ack = wire.Fields(payload).u64()
                self.state = "streaming"
                continue
            if kind == wire.DEFS_SNAPSHOT:
                self.definitions.rebuild(wire.parse_defs_snapshot(payload))
                continue
            if kind not in wire.STREAM_KINDS:
                raise wire.ProtocolError(f"unexpected frame {kind} in the stream")
            f = wire.Fields(payload)
            position = f.u64()
            if kind == wire.DEFS:
                self.definitions.apply(f.rest())
                if self.state == "streaming":
                    ack = position
                continue
            path = wire.safe_path(f.s16())
            if kind == wire.APPEND:
                offset = f.u64()
                files.append(path, offset, f.rest())
            elif kind == wire.REPLACE:
                files.replace(path, f.rest())
            elif kind == wire.TRUNCATE:
                files.truncate(path, f.u64())
            else:
                files.delete(path)
            if self.state == "streaming":
                ack = position
        if ack is not None:
            files.sync()
        return ack


def _b16(data: bytes) -> bytes:
    return len(data).to_bytes(2, "big") + data
