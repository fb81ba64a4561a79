"""A cluster member's life: follow the leader until this member leads, then run the
broker; stop leading the moment leadership cannot be proven (issue 35; LavinMQ 2's
`controller.cr`).

- **Identity**: `cluster/id` in the data directory (made once) names the member.
- **Following**: the member registers in etcd, reads the leader, and replicates from it
  (broker/cluster/follower.py) while watching the leader key; when the key changes it
  drops the stream and follows the new leader. Its AMQP and HTTP ports are not served.
- **Leading**: when the key is free, it campaigns (only an ISR member can win;
  broker/cluster/coordinator.py). A member that has just started into a cluster with no
  leader (the whole cluster restarting) first leaves the campaign to the member that led
  last, for up to three lease TTLs: that member has the most data. on winning it starts the replication listener, installs
  it as the writers' sink and the confirms' gate (broker/replication_hook.py), then boots
  the broker from its copy of the data (a crash recovery, as after kill -9) and serves.
- **Stepping down**: the lease is renewed every TTL/3 from the event loop; a renewal that
  fails or is not answered before the lease would lapse (an event loop or etcd that
  stalled), or a disk probe (a 4 KiB file written anew and fsynced every second on a
  worker thread) that failed twice in a row or has not completed for five TTLs, means
  this member can no longer prove it leads: it stops confirming, closes its clients and exits with status 75
  (EX_TEMPFAIL) for its supervisor to start it again as a follower — the stall LavinMQ's
  issue #2151 describes cannot keep a dead leader in place.

Owns: the role loop, the lease keepalive and the watchdog. Talks to: the coordinator, the
replication server and client, the broker (start, stop).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from broker import replication_hook
from broker.cluster import member_tls
from broker.cluster.coordinator import Coordinator, LeaderRecord
from broker.cluster.etcd_client import EtcdSettings
from broker.cluster.files import LOCAL_DIR
from broker.cluster.follower import Refused, ReplicationClient
from broker.cluster.leader import ReplicationServer
from broker.cluster.leading import Leading
from broker.cluster.proxy import FollowerProxy
from broker.durable_io import write_atomically

if TYPE_CHECKING:
    from broker.config import BrokerConfig

log = logging.getLogger("broker.cluster")
EX_TEMPFAIL = 75  # sysexits.h: leadership lost; start again (as a follower)
# a member that starts into a cluster with no leader waits this many lease TTLs for the
# member that led last (the one with the most data) before campaigning itself
STARTUP_GRACE_TTLS = 3
# a leader whose disk probe has not completed for this many lease TTLs steps down
DISK_STALL_TTLS = 5


def node_id(data_dir: str) -> str:
    """This member's id, made once and kept in `cluster/id`."""
    directory = os.path.join(data_dir, LOCAL_DIR)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "id")
    try:
        with open(path) as f:
            value = f.read().strip()
            if value:
                return value
    except FileNotFoundError:
        pass
    value = uuid.uuid4().hex[:12]
    with open(path, "w") as f:
        f.write(value)
    return value


def _host_port(uri: str, default_port: int) -> tuple[str, int]:
    rest = uri.split("://", 1)[-1].rstrip("/")
    host, _sep, port = rest.rpartition(":")
    return (host, int(port)) if host else (rest, default_port)


class DiskProbe:
    """A worker thread that writes a 4 KiB file in `directory` anew every `interval` s
    (write, fsync, rename over the last);
    `healthy(limit)` says whether one completed within the last `limit` s."""

    def __init__(self, directory: str, interval: float = 1.0) -> None:
        self.path = os.path.join(directory, "probe")
        self.interval = interval
        self.last_ok = time.monotonic()
        self.failures = 0  # probes failed in a row (ENOSPC, EIO)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cluster-disk-probe",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:  # a new file renamed over the old: a disk with no room fails it (ENOSPC),
                # where rewriting one small file in place would reuse its own block
                write_atomically(os.path.dirname(self.path), os.path.basename(self.path),
                                 str(time.time()).encode().ljust(4096), fsync=True)
                self.last_ok = time.monotonic()
                self.failures = 0
            except OSError as exc:
                self.failures += 1
                log.warning("cluster: disk probe failed: %s", exc)

    def healthy(self, limit: float) -> bool:
        """A probe completed within `limit` s, and the last two did not both fail."""
        return self.failures < 2 and time.monotonic() - self.last_ok <= limit

    def stop(self) -> None:
        self._stop.set()


class ClusterNode:
    """Member of the cluster `config` describes (clustering.enabled); `make_leader(config,
    server)` builds what it runs while leading (broker/cluster/leading.py: the broker in one
    process, or its worker processes), its durable writes going to `server`."""

    def __init__(self, config: BrokerConfig,
                 make_leader: Callable[[BrokerConfig, ReplicationServer], Leading]) -> None:
        self.config = config
        self.make_leader = make_leader
        self.data_dir = os.path.abspath(config.data_dir)
        os.makedirs(self.data_dir, exist_ok=True)
        self.id = node_id(self.data_dir)
        port = config.clustering_port
        self.advertised = config.clustering_advertised_uri or (
            f"tcp://{config.clustering_bind}:{port}")
        settings = EtcdSettings(
            EtcdSettings.parse_endpoints(config.clustering_etcd_endpoints),
            config.clustering_etcd_username, config.clustering_etcd_password,
            config.clustering_etcd_tls_cacertfile, config.clustering_etcd_tls_certfile,
            config.clustering_etcd_tls_keyfile)
        self.coordinator = Coordinator(
            settings, config.clustering_etcd_prefix, self.id, config.clustering_lease_ttl,
            {"uri": self.advertised, "amqp": f"{config.host}:{config.port}",
             "http": f"{config.management_tcp_ip}:{config.management_tcp_port}",
             "node": config.resolved_node_name()})
        self.role = "starting"  # following, leading, stopped
        self.term = 0
        self.server: ReplicationServer | None = None
        self.client: ReplicationClient | None = None
        self.leading: Leading | None = None  # the broker, while this member leads
        self._suspected: set[int] = set()  # terms whose leader this member reported lost
        self.proxy: FollowerProxy | None = None  # a follower's client listeners

    async def run(self, stop: asyncio.Event) -> int:
        """Follow or lead until `stop` is set (returns 0) or leadership is lost (returns
        EX_TEMPFAIL)."""
        await self.coordinator.start()
        secret = await self.coordinator.secret()
        keepalive = asyncio.create_task(self._keep_member_alive(stop))
        cfg = self.config
        proxy = self.proxy = FollowerProxy(self.id, secret, member_tls.client_context(cfg))
        await proxy.start({"amqp": (cfg.host, cfg.port),
                           "http": (cfg.management_tcp_ip, cfg.management_tcp_port),
                           "prometheus": (cfg.prometheus_tcp_ip, cfg.prometheus_tcp_port)})
        grace_until = time.monotonic() + STARTUP_GRACE_TTLS * cfg.clustering_lease_ttl
        try:
            while not stop.is_set():
                leader = await self.coordinator.leader()
                proxy.follow(_host_port(leader.uri, cfg.clustering_port)
                             if leader is not None and leader.id != self.id else None)
                if leader is not None:
                    grace_until = 0.0  # a running cluster: a failover campaigns at once
                if leader is None:
                    if time.monotonic() < grace_until and await self._defer_to_last_leader():
                        await _wait(stop, 0.2)
                        continue
                    term = await self.coordinator.campaign()
                    if term is not None:
                        keepalive.cancel()
                        await proxy.stop()  # the broker binds these ports now
                        return await self._lead(term, secret, stop)
                    await _wait(stop, 0.3)
                    continue
                if leader.id == self.id:  # our own key from before a restart: let it lapse
                    await _wait(stop, 0.5)
                    continue
                await self._follow(leader, secret, stop)
            return 0
        finally:
            keepalive.cancel()
            await proxy.stop()
            with contextlib.suppress(Exception):
                await self.coordinator.close()
            self.role = "stopped"

    async def _defer_to_last_leader(self) -> bool:
        """Should this member, just started in a cluster with no leader, leave the campaign
        to the member that led last? That member has everything any follower has plus its
        own unconfirmed tail: the most data, so after a stop of the whole cluster it should
        lead again and nothing it wrote is truncated away. Only while it is in the ISR; the
        caller gives up after the startup grace (it may never come back)."""
        last = await self.coordinator.last_leader()
        if last is None or last == self.id:
            return False
        return last in (await self.coordinator.isr() or set())

    async def _keep_member_alive(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.coordinator.keepalive()
            await _wait(stop, self.config.clustering_lease_ttl / 3)

    # -- following --------------------------------------------------------------------------
    async def _follow(self, leader: LeaderRecord, secret: bytes, stop: asyncio.Event) -> None:
        self.role = "following"
        client = self.client = ReplicationClient(
            self.data_dir, self.id, secret, self.config.clustering_follower_fsync)
        host, port = _host_port(leader.uri, self.config.clustering_port)
        log.info("cluster: %s follows %s at %s:%d (term %d)", self.id, leader.id, host, port,
                 leader.term)
        synced = asyncio.Event()
        following = asyncio.create_task(client.follow(
            host, port, synced=synced, ssl=member_tls.client_context(self.config)))
        changed = asyncio.create_task(self._leader_changes(leader))
        stopping = asyncio.create_task(stop.wait())
        hearing = asyncio.create_task(self._hear_again(leader, synced))
        try:
            done, _pending = await asyncio.wait({following, changed, stopping},
                                                return_when=asyncio.FIRST_COMPLETED)
            if following in done:
                exc = following.exception()
                if isinstance(exc, Refused):
                    log.warning("cluster: leader %s refused this member: %s", leader.id, exc)
                    await _wait(stop, 0.5)
                else:
                    log.info("cluster: stream from %s ended: %s", leader.id,
                             exc or "closed by the leader")
                    if synced.is_set():
                        await self._leader_lost(leader, host, port, stop)
                    else:  # never synced with it: a new leader may not listen yet
                        await _wait(stop, 0.2)
        finally:
            for task in (following, changed, stopping, hearing):
                task.cancel()
            await asyncio.gather(following, changed, stopping, hearing,
                                 return_exceptions=True)
            self.client = None

    async def _hear_again(self, leader: LeaderRecord, synced: asyncio.Event) -> None:
        """Once synced with `leader` again, withdraw this member's suspicion of it."""
        await synced.wait()
        if leader.term in self._suspected:
            self._suspected.discard(leader.term)
            with contextlib.suppress(Exception):
                await self.coordinator.unsuspect(leader.term)

    async def _leader_lost(self, leader: LeaderRecord, host: str, port: int,
                           stop: asyncio.Event) -> None:
        """The stream from `leader` broke after this member had synced with it (reset,
        closed, or LEADER_SILENCE s of nothing: a leader that was never reached may just
        not listen yet, and is left to its lease).
        An ISR member ends the leader's term at once (Coordinator.depose: its lease is
        revoked, so the campaign that follows needs no lease to lapse) when the leader's
        process is gone (its member port refuses connections), or when every running ISR
        member other than the leader has lost it too (each records it in etcd: one
        follower whose own link broke does not depose a leader the others still hear);
        otherwise it returns within a lease TTL to follow again (docs/high-availability.md
        §0.3)."""
        coordinator = self.coordinator
        try:
            if self.id not in (await coordinator.isr() or set()):
                await _wait(stop, 0.5)  # not a candidate: follow again when there is one
                return
            if await _refuses(host, port):
                await coordinator.depose(leader)
                return
            await coordinator.suspect(leader.term)
            self._suspected.add(leader.term)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.config.clustering_lease_ttl
            while not stop.is_set() and loop.time() < deadline:
                current = await coordinator.leader()
                if current is None or current.term != leader.term:
                    return  # deposed or lapsed: the run loop campaigns or follows
                if await coordinator.lost_by_all(leader) or await _refuses(host, port):
                    await coordinator.depose(leader)
                    return
                await _wait(stop, 0.1)
        except Exception as exc:  # noqa: BLE001 - etcd unreachable: the lease decides
            log.warning("cluster: could not judge leader %s: %s", leader.id, exc)
            await _wait(stop, 0.5)

    async def _leader_changes(self, current: LeaderRecord) -> None:
        """Returns when the leader key no longer names `current` in its term."""
        async for record in self.coordinator.watch_leader():
            if record is None or (record.id, record.term) != (current.id, current.term):
                return

    # -- leading ----------------------------------------------------------------------------
    async def _lead(self, term: int, secret: bytes, stop: asyncio.Event) -> int:
        self.role, self.term = "leading", term
        cfg = self.config
        coordinator = self.coordinator
        leading: Leading | None = None

        async def set_isr(members: set[str]) -> bool:
            return await coordinator.update_isr(term, members)

        async def definitions_snapshot() -> list[bytes]:
            return [] if leading is None else await leading.definitions_snapshot()

        server = self.server = ReplicationServer(
            self.data_dir, self.id, term, secret, set_isr,
            ack_timeout=cfg.clustering_ack_timeout,
            min_insync_replicas=cfg.clustering_min_insync_replicas,
            definitions_snapshot=definitions_snapshot)
        await server.start(cfg.clustering_bind, cfg.clustering_port,
                           ssl=member_tls.server_context(cfg))
        # renewed at most TTL/3 ago by _keep_member_alive: alive at least 2/3 TTL more
        server.lease_valid_until = time.monotonic() + cfg.clustering_lease_ttl * 2 / 3
        replication_hook.install(server)
        probe = DiskProbe(os.path.join(self.data_dir, LOCAL_DIR))
        probe.start()
        code = 0
        # the lease is renewed from the campaign on, the broker's start included (a start
        # longer than the TTL would otherwise lose the lease, and confirms stop once it
        # is not known alive: ReplicationServer.lease_valid_until)
        hold = asyncio.create_task(self._hold(term, probe, stop))
        try:
            leading = self.leading = self.make_leader(replace(cfg), server)
            starting = asyncio.create_task(leading.start())
            await asyncio.wait({hold, starting}, return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():  # leadership lost while the broker started
                starting.cancel()
                await asyncio.gather(starting, return_exceptions=True)
                code = hold.result()
            else:
                starting.result()
                server.proxy_targets.update(await leading.proxy_targets())
                with contextlib.suppress(Exception):
                    await self._publish_state(term)
                replication_hook.forget_member = self._forget
                log.info("cluster: %s serves as leader, term %d", self.id, term)
                code = await hold
        finally:
            if not hold.done():
                hold.cancel()
                await asyncio.gather(hold, return_exceptions=True)
            if code:
                log.error("cluster: %s stops leading (term %d): leadership cannot be "
                          "proven; exiting for a restart as a follower", self.id, term)
            replication_hook.install(None)
            replication_hook.forget_member = None
            if leading is not None:
                leading.publish(None)
                try:
                    await leading.stop()
                except Exception:  # a full or failing disk: what is on it is recovered
                    log.exception("cluster: the broker did not stop cleanly; its data is "
                                  "recovered at the next start, as after a crash")
            await server.stop()
            probe.stop()
            if not code:
                with contextlib.suppress(Exception):
                    await coordinator.resign(term)
            self.server = self.leading = None
        return code

    async def _publish_state(self, term: int) -> None:
        """Refresh replication_hook.cluster_state: every member etcd knows (running, stopped
        but not forgotten, or only listed in the ISR) by its node name, its role, and the
        replication figures of the connected ones."""
        members = {m["id"]: m for m in await self.coordinator.members()}
        known = await self.coordinator.nodes()  # by name, also those stopped or dead
        isr = await self.coordinator.isr() or set()
        links = {f["id"]: f for f in (self.server.status() if self.server else [])}
        names = {**known, **{mid: m.get("node", mid) for mid, m in members.items()}}
        out = []
        for mid in sorted(set(members) | set(known) | isr | {self.id}):
            link = links.get(mid, {})
            out.append({"id": mid, "node": names.get(mid, mid),
                        "role": "leader" if mid == self.id else "follower",
                        "running": mid in members, "insync": mid in isr,
                        "lag": 0 if mid == self.id else link.get("lag"),
                        "last_ack_s": None if mid == self.id else link.get("last_ack_s"),
                        "connected": mid == self.id or bool(link)})
        state = {"term": term, "leader": self.id, "members": out}
        replication_hook.cluster_state = state
        if self.leading is not None:
            self.leading.publish(state)

    async def _forget(self, member_id: str) -> bool:
        """Remove a dead member from etcd (its records, its name and its ISR key); False
        when it is running (its lease is alive) or is this leader."""
        running = {m["id"] for m in await self.coordinator.members()}
        if member_id in running or member_id == self.id:
            return False
        await self.coordinator.forget(member_id)
        log.info("cluster: member %s forgotten", member_id)
        with contextlib.suppress(Exception):
            await self._publish_state(self.term)
        return True

    async def _hold(self, term: int, probe: DiskProbe, stop: asyncio.Event) -> int:
        """Renew the lease every TTL/3 while this member can prove it leads; EX_TEMPFAIL
        once not: the last renewal is a TTL old (the event loop stalled, or etcd did not
        answer in time: the lease may have lapsed), the disk probe failed twice in a row or
        has not completed for DISK_STALL_TTLS lease TTLs, or an ISR write found the term
        over. A slow fsync under load is not a hung disk: at saturation on this machine the
        probe's fsync took over 1 s, so the disk's bound is longer than the lease's."""
        ttl = float(self.config.clustering_lease_ttl)
        loop = asyncio.get_running_loop()
        renewed_at = loop.time()
        while not stop.is_set():
            now = loop.time()
            if now - renewed_at >= ttl:
                log.error("cluster: the lease was last renewed %.1f s ago (the event loop "
                          "stalled, or etcd was slow): it may have lapsed", now - renewed_at)
                return EX_TEMPFAIL
            if not probe.healthy(DISK_STALL_TTLS * ttl):
                log.error("cluster: the data directory's disk cannot be written: no probe "
                          "completed for %.1f s, %d failed in a row",
                          time.monotonic() - probe.last_ok, probe.failures)
                return EX_TEMPFAIL
            if self.server is not None and self.server.deposed:
                return EX_TEMPFAIL
            if self.leading is not None and self.leading.failed:
                log.error("cluster: the broker ended on its own")
                return EX_TEMPFAIL
            asked = loop.time()
            try:  # an answer after the lease's end proves nothing
                renewed = await asyncio.wait_for(self.coordinator.keepalive(),
                                                 max(0.05, renewed_at + ttl - asked))
            except TimeoutError:
                renewed = False
            if not renewed:
                log.error("cluster: the lease could not be renewed")
                return EX_TEMPFAIL
            renewed_at = asked  # etcd renewed it no earlier than the request was sent
            if self.server is not None:  # confirms may go out until the lease's end
                self.server.lease_valid_until = time.monotonic() - (loop.time() - asked) + ttl
            with contextlib.suppress(Exception):  # a view for operators; etcd may lag
                await asyncio.wait_for(self._publish_state(term), ttl / 3)
            await _wait(stop, max(0.0, renewed_at + ttl / 3 - loop.time()))
        return 0


async def _refuses(host: str, port: int, within: float = 0.25) -> bool:
    """Does host:port refuse a TCP connection (nothing listens: the leader's process is
    gone, its machine up)? A connection that opens, or times out, proves nothing."""
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), within)
    except ConnectionRefusedError:
        return True
    except (OSError, TimeoutError):
        return False
    writer.close()
    return False


async def _wait(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
