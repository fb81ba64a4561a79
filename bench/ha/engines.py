# bench/ha/engines.py — three local members of an engine, and a client that fails over.
#
# Owns: the member processes (ports, data dirs, fsync settings, SIGKILL), finding the leader,
# and one commit = one replicated write of a batch of (key, value) entries.
# Talks to: etcd 3.4 (Debian's etcd-server) through aetcd's gRPC client; PySyncObj members
# (bench.ha.syncobj_member) through their request socket.
# Must never: retry silently: a commit either returns (it is committed on a majority) or raises.
"""Engine clusters for the HA prototype.

An engine exposes ``start()``, ``stop()``, ``leader() -> member index``, ``kill(i)`` (SIGKILL),
``client() -> Client`` and the facts the report prints (``version``, ``fsync``). A client's
``commit(batch)`` writes a list of ``(key, value)`` in one replicated command and returns once
the engine says it is committed; ``read_all(prefix)`` reads every entry back (linearizably).
"""

from __future__ import annotations

import asyncio
import os
import pickle
import shutil
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field

ENGINES = ("etcd", "pysyncobj")


class CommitFailed(Exception):
    """The engine did not confirm the commit (timeout, no leader, member gone)."""


@dataclass
class Member:
    name: str
    client_port: int
    peer_port: int
    data_dir: str
    proc: subprocess.Popen | None = None
    alive: bool = False


@dataclass
class Cluster:
    base_dir: str
    base_port: int
    members: list[Member] = field(default_factory=list)
    name: str = ""
    version: str = ""
    fsync: str = ""

    def _log(self, m: Member):
        return open(os.path.join(self.base_dir, f"{m.name}.log"), "ab")

    def kill(self, i: int) -> None:
        m = self.members[i]
        assert m.proc is not None
        os.kill(m.proc.pid, signal.SIGKILL)
        m.proc.wait()
        m.alive = False

    def restart(self, i: int) -> None:
        """Start a killed member again on its own data dir (it recovers from its log)."""
        self._spawn(self.members[i])

    def stop(self) -> None:
        for m in self.members:
            if m.proc is not None and m.proc.poll() is None:
                m.proc.terminate()
                try:
                    m.proc.wait(5)
                except subprocess.TimeoutExpired:
                    m.proc.kill()
                    m.proc.wait()
            m.alive = False

    def alive_indexes(self) -> list[int]:
        return [i for i, m in enumerate(self.members) if m.alive]

    async def leader_async(self) -> int:
        """The index of the current leader (raises while there is none)."""
        raise NotImplementedError

    async def _wait_ready(self, limit_s: float = 30.0) -> None:
        """Until a leader is elected (TimeoutError after `limit_s` seconds)."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            try:
                await self.leader_async()
                return
            except Exception:  # noqa: BLE001 - not up yet; bounded by the deadline
                await asyncio.sleep(0.2)
        raise TimeoutError(f"{self.name} cluster did not elect a leader")


# --------------------------------------------------------------------------------------- etcd

class EtcdCluster(Cluster):
    """Three etcd members. etcd fsyncs its WAL before a member acknowledges an append (there is
    no switch to turn that off in 3.4), so a commit is on disk on a majority when it returns."""

    def start(self, n: int = 3) -> None:
        self.name = "etcd"
        out = subprocess.run(["etcd", "--version"], capture_output=True, text=True, check=True)
        self.version = out.stdout.split("\n")[0].replace("etcd Version: ", "")
        self.fsync = "WAL fdatasync before every append is acknowledged (always on)"
        self.members = [Member(f"etcd{i}", self.base_port + 2 * i, self.base_port + 2 * i + 1,
                               os.path.join(self.base_dir, f"etcd{i}")) for i in range(n)]
        for m in self.members:
            shutil.rmtree(m.data_dir, ignore_errors=True)
            self._spawn(m, "new")
        asyncio.run(self._wait_ready())

    def _spawn(self, m: Member, state: str = "existing") -> None:
        initial = ",".join(f"{o.name}=http://127.0.0.1:{o.peer_port}" for o in self.members)
        m.proc = subprocess.Popen(
            ["etcd", "--name", m.name, "--data-dir", m.data_dir,
             "--listen-client-urls", f"http://127.0.0.1:{m.client_port}",
             "--advertise-client-urls", f"http://127.0.0.1:{m.client_port}",
             "--listen-peer-urls", f"http://127.0.0.1:{m.peer_port}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{m.peer_port}",
             "--initial-cluster", initial, "--initial-cluster-state", state,
             "--initial-cluster-token", "bench-ha",
             # a batch of 200 entries is one txn of 200 puts (default limit 128)
             "--max-txn-ops", "1024", "--quota-backend-bytes", str(8 << 30),
             # keep every revision: compaction is not what is measured
             "--auto-compaction-retention", "0",
             "--logger", "zap", "--log-level", os.environ.get("BENCH_HA_ETCD_LOG", "warn")],
            stdout=self._log(m), stderr=subprocess.STDOUT)
        m.alive = True

    async def leader_async(self) -> int:
        from aetcd import rpc

        for i in self.alive_indexes():
            c = EtcdClient(self, [i])
            try:
                await c._connect(i)
                st = await c._clients[i].maintenancestub.Status(rpc.StatusRequest(), timeout=1)
                if st.leader == 0:
                    continue
                if st.leader == st.header.member_id:
                    return i
                for j in self.alive_indexes():
                    await c._connect(j)
                    s2 = await c._clients[j].maintenancestub.Status(rpc.StatusRequest(), timeout=1)
                    if s2.header.member_id == st.leader:
                        return j
            finally:
                await c.close()
        raise CommitFailed("no leader")

    def client(self) -> EtcdClient:
        return EtcdClient(self, list(range(len(self.members))))


class EtcdClient:
    def __init__(self, cluster: EtcdCluster, order: list[int], timeout: float = 2.0) -> None:
        self.cluster = cluster
        self.order = order            # endpoints in the order this client tries them
        self.cur = order[0]           # the endpoint commits go to until one fails
        self.timeout = timeout        # seconds before a commit counts as failed
        self._clients: dict[int, object] = {}

    async def _connect(self, i: int):
        import aetcd

        if i not in self._clients:
            c = aetcd.Client("127.0.0.1", self.cluster.members[i].client_port,
                             timeout=self.timeout,
                             # read-back pages of packed batches pass gRPC's 4 MiB default
                             options={"grpc.max_receive_message_length": 256 << 20})
            await c.connect()
            self._clients[i] = c
        return self._clients[i]

    async def commit(self, batch: list[tuple[bytes, bytes]]) -> None:
        try:
            c = await self._connect(self.cur)
            ops = [c.transactions.put(k, v) for k, v in batch]
            await c.transaction(compare=[], success=ops, failure=[])
        except Exception as exc:  # noqa: BLE001 - any client error = commit not confirmed
            self.failover()
            raise CommitFailed(repr(exc)) from exc

    async def settle(self, keys: list[bytes]) -> None:
        """One commit that removes ``keys`` (a quorum queue's settle of acked messages)."""
        try:
            c = await self._connect(self.cur)
            ops = [c.transactions.delete(k) for k in keys]
            await c.transaction(compare=[], success=ops, failure=[])
        except Exception as exc:  # noqa: BLE001 - any client error = commit not confirmed
            self.failover()
            raise CommitFailed(repr(exc)) from exc

    def failover(self) -> None:
        k = self.order.index(self.cur)
        self.cur = self.order[(k + 1) % len(self.order)]

    async def read_all(self, prefix: bytes) -> dict[bytes, bytes]:
        from aetcd import rpc, utils

        c = await self._connect(self.cur)
        out: dict[bytes, bytes] = {}
        start = prefix
        end = utils.prefix_range_end(prefix)
        while True:  # linearizable range reads, 500 keys a page
            req = rpc.RangeRequest(key=start, range_end=end, limit=500)
            resp = await c.kvstub.Range(req, timeout=30)
            for kv in resp.kvs:
                out[kv.key] = kv.value
            if not resp.more:
                return out
            start = resp.kvs[-1].key + b"\0"

    async def close(self) -> None:
        for c in self._clients.values():
            await c.close()
        self._clients.clear()


# --------------------------------------------------------------------------------- PySyncObj

class SyncObjCluster(Cluster):
    """Three PySyncObj members, each a process with a file journal. PySyncObj writes its
    journal into an mmap'd file and never msyncs it before answering (journal.py: flush() is
    only called at shutdown), so a commit survives kill -9 (the page cache keeps it) but not a
    power cut: the report says so beside its figures."""

    def start(self, n: int = 3) -> None:
        import pysyncobj

        self.name = "pysyncobj"
        self.version = getattr(pysyncobj, "__version__", "") or _dist_version("pysyncobj")
        self.fsync = "none: mmap journal, no msync/fsync before a commit is acknowledged"
        self.members = [Member(f"syncobj{i}", self.base_port + 2 * i, self.base_port + 2 * i + 1,
                               os.path.join(self.base_dir, f"syncobj{i}")) for i in range(n)]
        for m in self.members:
            shutil.rmtree(m.data_dir, ignore_errors=True)
        for m in self.members:
            self._spawn(m)
        asyncio.run(self._wait_ready())

    def _spawn(self, m: Member) -> None:
        partners = [f"127.0.0.1:{o.peer_port}" for o in self.members if o is not m]
        args = [sys.executable, "-m", "bench.ha.syncobj_member", "--self",
                f"127.0.0.1:{m.peer_port}", "--listen", str(m.client_port), "--dir", m.data_dir]
        for p in partners:
            args += ["--partner", p]
        m.proc = subprocess.Popen(args, stdout=self._log(m), stderr=subprocess.STDOUT)
        m.alive = True

    async def leader_async(self) -> int:
        for i in self.alive_indexes():
            c = SyncObjClient(self, [i])
            try:
                st = await c._call(i, "status", None, wait_s=1)
            finally:
                await c.close()
            if st["leader"]:
                port = int(st["leader"].rsplit(":", 1)[1])
                for j, m in enumerate(self.members):
                    if m.peer_port == port and m.alive:
                        return j
        raise CommitFailed("no leader")

    def client(self) -> SyncObjClient:
        return SyncObjClient(self, list(range(len(self.members))))


class SyncObjClient:
    def __init__(self, cluster: SyncObjCluster, order: list[int], timeout: float = 6.0) -> None:
        self.cluster = cluster
        self.order = order
        self.cur = order[0]
        self.timeout = timeout
        self._conns: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}

    async def _call(self, i: int, op: str, arg, wait_s: float | None = None):
        if i not in self._conns:
            self._conns[i] = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", self.cluster.members[i].client_port), 2)
        r, w = self._conns[i]
        data = pickle.dumps((op, arg), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            w.write(struct.pack(">I", len(data)) + data)
            head = await asyncio.wait_for(r.readexactly(4), wait_s or self.timeout)
            body = await asyncio.wait_for(r.readexactly(struct.unpack(">I", head)[0]),
                                          wait_s or self.timeout)
        except BaseException:
            self._conns.pop(i, None)
            w.close()
            raise
        status, res = pickle.loads(body)
        if status != "ok":
            raise CommitFailed(res)
        return res

    async def commit(self, batch: list[tuple[bytes, bytes]]) -> None:
        try:
            await self._call(self.cur, "append", batch)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, CommitFailed) as exc:
            self.failover()
            raise CommitFailed(repr(exc)) from exc

    async def settle(self, keys: list[bytes]) -> None:
        try:
            await self._call(self.cur, "settle", keys)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, CommitFailed) as exc:
            self.failover()
            raise CommitFailed(repr(exc)) from exc

    def failover(self) -> None:
        k = self.order.index(self.cur)
        self.cur = self.order[(k + 1) % len(self.order)]

    async def read_all(self, prefix: bytes) -> dict[bytes, bytes]:
        res = await self._call(self.cur, "read", None, wait_s=60)
        return {k: v for k, v in res.items() if k.startswith(prefix)}

    async def close(self) -> None:
        for _, w in self._conns.values():
            w.close()
        self._conns.clear()


def _dist_version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def make(engine: str, base_dir: str, base_port: int) -> Cluster:
    os.makedirs(base_dir, exist_ok=True)
    if engine == "etcd":
        return EtcdCluster(base_dir, base_port)
    if engine == "pysyncobj":
        return SyncObjCluster(base_dir, base_port)
    raise ValueError(f"unknown engine {engine!r} (one of {', '.join(ENGINES)})")
