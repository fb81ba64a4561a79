"""The cluster's etcd rules (issue 35 items 1 and 2) against a real etcd: only an ISR member
may take the leader key, the key's create revision is the term, an ISR change holds only
under the current term (a deposed leader is fenced), a lapsed lease frees the key, and
every member reads the same secret."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from broker.cluster.coordinator import Coordinator
from broker.cluster.etcd_client import EtcdSettings


def _member(etcd, node_id, prefix, ttl=2):
    settings = EtcdSettings(EtcdSettings.parse_endpoints(etcd.endpoints))
    return Coordinator(settings, prefix, node_id, ttl,
                       {"uri": f"tcp://127.0.0.1:{node_id}", "amqp": "", "http": ""})


async def _started_pair(etcd, ttl=2):
    """Members a and b of a fresh cluster (its own prefix), both started."""
    prefix = f"/t-{uuid.uuid4().hex[:6]}"
    a, b = _member(etcd, "a", prefix, ttl), _member(etcd, "b", prefix, ttl)
    await a.start()
    await b.start()
    return a, b


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_only_an_isr_member_may_lead_and_terms_grow(etcd):
    async def scenario():
        a, b = await _started_pair(etcd)
        term_a = await a.campaign()
        assert term_a is not None  # a fresh cluster: the first member starts the ISR
        assert await a.isr() == {"a"}
        assert await b.campaign() is None  # a leader exists
        assert (await b.leader()).id == "a" and (await b.leader()).term == term_a
        await a.resign(term_a)
        assert await b.campaign() is None  # b is not in the ISR
        assert await a.campaign() is not None
        term_a2 = (await a.leader()).term
        assert term_a2 > term_a
        assert await a.update_isr(term_a2, {"b"})
        assert await b.isr() == {"a", "b"}
        await a.resign(term_a2)
        term_b = await b.campaign()
        assert term_b is not None and term_b > term_a2
        await a.close()
        await b.close()

    run(scenario())


def test_a_deposed_leader_cannot_change_the_isr(etcd):
    async def scenario():
        a, b = await _started_pair(etcd)
        term_a = await a.campaign()
        assert await a.update_isr(term_a, {"b"})
        await a.client.revoke_lease(a.lease.id)  # a's lease lapses (paused, cut off)
        term_b = await b.campaign()
        assert term_b is not None
        # a wakes up and tries to drop b from the ISR: refused under its old term
        assert not await a.update_isr(term_a, set())
        assert await b.isr() == {"a", "b"}
        assert await b.update_isr(term_b, set())
        assert await b.isr() == {"b"}
        await b.close()
        await a.close(revoke=False)

    run(scenario())


@pytest.mark.timeout(60)
def test_a_lease_not_renewed_frees_the_leader_key(etcd):
    async def scenario():
        a, b = await _started_pair(etcd, ttl=2)
        term = await a.campaign()
        await a.update_isr(term, {"b"})
        assert await a.keepalive()
        changes = []

        async def watch():
            async for rec in b.watch_leader():
                changes.append(rec.id if rec else None)
                if rec is None:
                    return

        watcher = asyncio.create_task(watch())
        for _ in range(40):  # b renews, a does not
            await b.keepalive()
            await asyncio.sleep(0.25)
            if await b.leader() is None:
                break
        assert await b.leader() is None
        await asyncio.wait_for(watcher, 5)
        assert changes == ["a", None]
        assert not await a.keepalive()  # a learns its lease is gone
        assert await b.campaign() is not None
        assert sorted(m["id"] for m in await b.members()) == ["b"]
        await b.close()
        await a.close(revoke=False)

    run(scenario())


def test_every_member_reads_the_same_secret(etcd):
    async def scenario():
        a, b = await _started_pair(etcd)
        sa, sb = await a.secret(), await b.secret()
        assert sa == sb and len(sa) == 44
        await a.close()
        await b.close()

    run(scenario())


def test_a_member_is_known_by_name_after_its_lease_until_forgotten(etcd):
    """`P/members/<id>` goes with the lease; `P/nodes/<id>` (the node name) stays until
    forget() (brokerctl forget_cluster_node), so cluster_status can name a dead member."""
    async def scenario():
        prefix = f"/t-{uuid.uuid4().hex[:6]}"
        settings = EtcdSettings(EtcdSettings.parse_endpoints(etcd.endpoints))
        a = Coordinator(settings, prefix, "a", 2, {"uri": "", "node": "rabbit@a"})
        b = Coordinator(settings, prefix, "b", 2, {"uri": "", "node": "rabbit@b"})
        await a.start()
        await b.start()
        assert await a.nodes() == {"a": "rabbit@a", "b": "rabbit@b"}
        await b.close()  # its lease is revoked: as after kill -9, once the TTL is over
        assert [m["id"] for m in await a.members()] == ["a"]
        assert await a.nodes() == {"a": "rabbit@a", "b": "rabbit@b"}
        await a.forget("b")
        assert await a.nodes() == {"a": "rabbit@a"}
        await a.close()

    run(scenario())
