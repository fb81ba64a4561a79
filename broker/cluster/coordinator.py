"""What the cluster keeps in etcd, and the only code that changes it.

Keys, under `clustering.etcd_prefix` (P):
- `P/leader`: the leader's member record (JSON: id, replication URI, AMQP and HTTP
  addresses), put under the leader's lease. Its **create revision is the leader's term**:
  a new leader's key is a new key, so its term is higher than every earlier one.
- `P/last_leader`: the id of the member that led last, with no lease (it survives a stop of
  the whole cluster).
- `P/isr/<id>`: one key per member of the in-sync replica set; `P/isr` lists them (for
  people) and marks that the cluster has an ISR at all.
- `P/members/<id>`: every running member's record, under its own lease (/api/nodes).
- `P/nodes/<id>`: every member that ever joined, by its node name (JSON: id, node), with no
  lease: a member that died or stopped is still listed by name (RabbitMQ's disk nodes in
  `cluster_status`) until an operator forgets it.
- `P/secret`: the cluster secret followers and proxies present, made once.

Rules (LavinMQ 2's clustering, `etcd_coordinator.cr`; Patroni and Kafka's ISR):
- **Campaign**: one transaction takes `P/leader` only if it is absent **and** this member is
  in the ISR; a fresh cluster (no `P/isr` yet) lets the first member in and writes the ISR
  with it. A member outside the ISR can never lead, so no member that lacks a confirmed
  write can be elected.
- **ISR changes** are transactions that compare `P/leader`'s create revision with the
  caller's term: a deposed leader, paused or cut off, cannot rewrite the ISR.
- Nothing here votes: the agreement is etcd's.

Owns: the member's lease (granted, kept alive, revoked), the transactions above, reading and
watching the leader. Must never: decide when to campaign or step down (broker/cluster/node.py
does), or touch message data.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from broker.cluster.etcd_client import EtcdClient, EtcdSettings

log = logging.getLogger("broker.cluster")


@dataclass(frozen=True)
class LeaderRecord:
    """The leader as etcd holds it: `id`, its `uri` (replication, tcp://host:port), `amqp`
    and `http` (host:port the proxies forward to, "" when off), and `term`."""

    id: str
    uri: str
    amqp: str
    http: str
    term: int
    lease: int = 0  # the etcd lease the key is under (the leader's own)


class Coordinator:
    """Member `node_id`'s view of the cluster in etcd. `info` is the JSON-able record this
    member publishes (uri, amqp, http). Call `start()` first, `close()` last."""

    def __init__(self, settings: EtcdSettings, prefix: str, node_id: str, lease_ttl: int,
                 info: dict[str, str]) -> None:
        self.settings = settings
        self.prefix = prefix.rstrip("/")
        self.node_id = node_id
        self.lease_ttl = lease_ttl  # s
        self.info = info
        self.client = EtcdClient(settings)
        self.lease: Any = None  # aetcd Lease, granted by start()

    def _key(self, *parts: str) -> bytes:
        return "/".join((self.prefix, *parts)).encode()

    async def start(self) -> None:
        """Connect, grant this member's lease and register it: under `P/members/<id>` (with
        the lease) and `P/nodes/<id>` (without, so its name outlives it)."""
        await self.client.connect()
        self.lease = await self.client.lease(self.lease_ttl)
        t = self.client.transactions
        name = {"id": self.node_id, "node": self.info.get("node", self.node_id)}
        await self.client.transaction(compare=[], success=[
            t.put(self._key("nodes", self.node_id), json.dumps(name).encode()),
            t.put(self._key("members", self.node_id),
                  json.dumps({"id": self.node_id, **self.info}).encode(), self.lease)],
            failure=[])

    async def keepalive(self) -> bool:
        """Renew the lease once; False when it is gone (expired or revoked): whoever held
        keys under it has lost them."""
        try:
            resp = await self.client.refresh_lease(self.lease.id)
        except Exception as exc:  # noqa: BLE001 - etcd unreachable: the caller steps down
            log.warning("cluster: lease renewal failed: %s", exc)
            return False
        return bool(getattr(resp, "TTL", 0) > 0)

    # -- leadership ------------------------------------------------------------------------
    async def campaign(self) -> int | None:
        """Take `P/leader` if it is free and this member may lead; the term, or None."""
        t = self.client.transactions
        leader, isr_mark = self._key("leader"), self._key("isr")
        record = json.dumps({"id": self.node_id, **self.info}).encode()
        last = t.put(self._key("last_leader"), self.node_id.encode())  # outlives the lease
        ok, responses = await self.client.transaction(
            compare=[t.create(leader) == 0, t.version(self._key("isr", self.node_id)) > 0],
            success=[t.put(leader, record, self.lease), last], failure=[])
        if not ok:  # not in the ISR, or a leader exists; a fresh cluster has no ISR at all
            ok, responses = await self.client.transaction(
                compare=[t.create(leader) == 0, t.version(isr_mark) == 0],
                success=[t.put(leader, record, self.lease), last,
                         t.put(isr_mark, self.node_id.encode()),
                         t.put(self._key("isr", self.node_id), b"1")], failure=[])
            if ok:
                log.info("cluster: a fresh cluster; %s starts its ISR", self.node_id)
        if not ok:
            return None
        term = int(responses[0].response_put.header.revision)
        log.info("cluster: %s leads, term %d", self.node_id, term)
        return term

    async def last_leader(self) -> str | None:
        """The id of the member that took `P/leader` last (kept after its lease ends), or
        None in a cluster that never had a leader."""
        got = await self.client.get(self._key("last_leader"))
        return bytes(got.value).decode() if got is not None and got.value else None

    async def leader(self) -> LeaderRecord | None:
        """The current leader, or None while there is none."""
        got = await self.client.get(self._key("leader"))
        return _leader_record(got)

    async def watch_leader(self) -> AsyncIterator[LeaderRecord | None]:
        """The leader now, then at every change (None: the key is gone). The watch starts
        before the first read, so no change between them is missed (one may come twice)."""
        watch = await self.client.watch(self._key("leader"))
        try:
            yield await self.leader()
            async for event in watch:
                yield None if event.kind == "DELETE" else _leader_record(event.kv)
        finally:
            await watch.cancel()

    async def resign(self, term: int) -> None:
        """Give up the leader key if it is still this term's."""
        t = self.client.transactions
        leader = self._key("leader")
        await self.client.transaction(compare=[t.create(leader) == term],
                                      success=[t.delete(leader)], failure=[])

    # -- deposing a leader that is gone (docs/high-availability.md §0.3) --------------------
    async def depose(self, leader: LeaderRecord) -> bool:
        """End `leader`'s term now; True when this member did. One transaction deletes
        `P/leader` only while it is still that term's and this member is still in the ISR
        (so it is never raced by the old leader's ISR write that drops this member: one of
        the two fails, and a member that could not lead deposes nobody); then its lease is
        revoked, so its member record goes too and its next renewal fails (it steps down at
        once instead of at its next ISR write)."""
        t = self.client.transactions
        key = self._key("leader")
        ok, _responses = await self.client.transaction(
            compare=[t.create(key) == leader.term,
                     t.version(self._key("isr", self.node_id)) > 0],
            success=[t.delete(key)], failure=[])
        if not ok:
            return False
        log.warning("cluster: %s deposed leader %s (term %d)", self.node_id, leader.id,
                    leader.term)
        if leader.lease:
            try:
                await self.client.revoke_lease(leader.lease)
            except Exception as exc:  # noqa: BLE001 - expired already, or etcd away
                log.info("cluster: revoking the lease of %s failed: %s", leader.id, exc)
        return True

    async def suspect(self, term: int) -> None:
        """Record that this member lost term `term`'s leader (`P/suspect/<term>/<id>`,
        under this member's lease: it goes with the member)."""
        await self.client.put(self._key("suspect", str(term), self.node_id), b"1",
                              self.lease)

    async def unsuspect(self, term: int) -> None:
        """This member hears term `term`'s leader again."""
        await self.client.delete(self._key("suspect", str(term), self.node_id))

    async def lost_by_all(self, leader: LeaderRecord) -> bool:
        """Has every running member of the ISR other than `leader` lost it (each wrote its
        suspicion for its term)? A follower whose own link broke is outvoted by one that
        still hears the leader."""
        isr = await self.isr() or set()
        running = {m["id"] for m in await self.members()}
        others = (isr & running) - {leader.id}
        if not others:
            return False
        suspects = {kv.key.decode().rsplit("/", 1)[1] for kv in await self.client.get_prefix(
            self._key("suspect", str(leader.term), ""))}
        return others <= suspects

    # -- the in-sync replica set -----------------------------------------------------------
    async def isr(self) -> set[str] | None:
        """The ISR's member ids, or None for a cluster that has none yet."""
        mark = await self.client.get(self._key("isr"))
        if mark is None:
            return None
        out = set()
        for kv in await self.client.get_prefix(self._key("isr", "")):
            out.add(kv.key.decode().rsplit("/", 1)[1])
        return out

    async def update_isr(self, term: int, members: set[str]) -> bool:
        """Make the ISR exactly `members` (the leader always included), in one transaction
        that holds only while `term` is the leader's term; False if it is not (fenced)."""
        members = set(members) | {self.node_id}
        current = await self.isr() or set()
        t = self.client.transactions
        ops = [t.delete(self._key("isr", m)) for m in sorted(current - members)]
        ops += [t.put(self._key("isr", m), b"1") for m in sorted(members - current)]
        ops.append(t.put(self._key("isr"), ",".join(sorted(members)).encode()))
        ok, _responses = await self.client.transaction(
            compare=[t.create(self._key("leader")) == term], success=ops, failure=[])
        if ok:
            log.info("cluster: in-sync replicas now %s (term %d)", ",".join(sorted(members)),
                     term)
        return bool(ok)

    async def members(self) -> list[dict[str, Any]]:
        """Every running member's record (those whose lease is alive)."""
        out = []
        for kv in await self.client.get_prefix(self._key("members", "")):
            out.append(json.loads(kv.value))
        return out

    async def nodes(self) -> dict[str, str]:
        """Every member that joined and was not forgotten, running or not: id -> node name."""
        out = {}
        for kv in await self.client.get_prefix(self._key("nodes", "")):
            record = json.loads(kv.value)
            out[record["id"]] = record.get("node", record["id"])
        return out

    async def forget(self, node_id: str) -> None:
        """Remove a dead member: its member record, its name and its ISR key, in one
        transaction (an operator's act: brokerctl forget_cluster_node)."""
        t = self.client.transactions
        await self.client.transaction(compare=[], success=[
            t.delete(self._key(part, node_id)) for part in ("members", "nodes", "isr")],
            failure=[])

    async def secret(self) -> bytes:
        """The cluster secret: made by the first member that asks, the same for all."""
        t = self.client.transactions
        key = self._key("secret")
        mine = base64.b64encode(os.urandom(32))
        await self.client.transaction(compare=[t.create(key) == 0],
                                      success=[t.put(key, mine)], failure=[])
        got = await self.client.get(key)
        return bytes(got.value)

    async def close(self, revoke: bool = True) -> None:
        """Revoke the lease (a leader's key goes at once) and disconnect."""
        if revoke and self.lease is not None:
            try:
                await asyncio.wait_for(self.client.revoke_lease(self.lease.id), 2)
            except Exception as exc:  # noqa: BLE001 - it expires by itself
                log.info("cluster: lease not revoked (%s); it expires by itself", exc)
        await self.client.close()


def _leader_record(kv: Any) -> LeaderRecord | None:
    if kv is None or not getattr(kv, "value", None):
        return None
    data = json.loads(kv.value)
    return LeaderRecord(data["id"], data.get("uri", ""), data.get("amqp", ""),
                        data.get("http", ""), int(kv.create_revision),
                        int(getattr(kv, "lease", 0) or 0))
