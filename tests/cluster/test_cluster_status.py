"""`brokerctl cluster_status` after a failover (issue 46 point 3), with real etcd and real
broker processes: every member that joined and was not forgotten is listed by its node name,
running or not, as RabbitMQ's cluster_status lists its disk nodes, on the new leader and on
every follower (whose API is carried to the leader); a restarted member is running again;
`forget_cluster_node` removes it for good (its name's record in etcd goes too)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from broker.cluster.coordinator import Coordinator
from broker.cluster.etcd_client import EtcdSettings
from tests.cluster.etcd_proc import free_port
from tests.cluster.members import Member, ctl
from tests.cluster.test_failover import in_sync, isr, leader_id, takes_over, wait


def _members(tmp_path, etcd, prefix, names):
    """Members `names`, each with node name rabbit@<name> and a management port of its
    own; not started."""
    return [Member(tmp_path, n, etcd.endpoints, prefix, node_name=f"rabbit@{n}",
                   **{"management.tcp.port": free_port()}) for n in names]


def _http(member):
    return int(next(a.split("=", 1)[1] for a in member.cmd
                    if a.startswith("management.tcp.port=")))


def _status(member):
    """cluster_status as JSON through `member`'s API, or None while it cannot answer."""
    code, out, _err = ctl(_http(member), "cluster_status")
    return json.loads(out) if code == 0 else None


def _running(status):
    """node name -> running, of every member cluster_status lists."""
    return {m["node"]: m["running"] for m in status["members"]}


def _known(etcd, prefix):
    """The member names etcd keeps (P/nodes), id -> node name."""
    async def read():
        c = Coordinator(EtcdSettings(EtcdSettings.parse_endpoints(etcd.endpoints)), prefix,
                        "reader", 5, {})
        await c.client.connect()
        try:
            return await c.nodes()
        finally:
            await c.client.close()

    return asyncio.run(read())


@pytest.mark.timeout(180)
def test_a_killed_leader_is_listed_by_name_until_it_runs_again(tmp_path, etcd):
    prefix = f"/c-{uuid.uuid4().hex[:6]}"
    a, b, c = _members(tmp_path, etcd, prefix, "abc")
    try:
        a.start().wait_serving()
        b.start()
        c.start()
        in_sync(etcd, prefix, 3, "b and c never joined the ISR")
        a.kill()
        wait(lambda: leader_id(etcd, prefix) in (b.node_id, c.node_id), 30, "no new leader")
        new, follower = (b, c) if leader_id(etcd, prefix) == b.node_id else (c, b)
        takes_over(new, etcd, prefix)
        # the new leader takes a out of the ISR once the follower syncs with it: a has then
        # no record but its name (before the fix it vanished from the list here)
        wait(lambda: isr(etcd, prefix) == {b.node_id, c.node_id}, 30, "a stayed in the ISR")
        for via in (new, follower):
            status = wait(lambda via=via: (s := _status(via)) and s["leader"] == f"rabbit@"
                          f"{new.name}" and sum(m["insync"] for m in s["members"]) == 2 and s,
                          30, f"cluster_status through {via.name} never showed the new ISR")
            assert _running(status) == {"rabbit@a": False, "rabbit@b": True,
                                        "rabbit@c": True}, status
            dead = next(m for m in status["members"] if m["node"] == "rabbit@a")
            assert dead["id"] == a.node_id and not dead["insync"]
            assert sorted(status["disk_nodes"]) == ["rabbit@a", "rabbit@b", "rabbit@c"]
            assert sorted(status["running_nodes"]) == sorted(["rabbit@b", "rabbit@c"])
        a.start()  # it rejoins as a follower, under the same id and name
        for via in (new, follower, a):
            status = wait(lambda via=via: (s := _status(via)) and all(_running(s).values())
                          and s, 30, f"a never showed as running through {via.name}")
            assert _running(status) == {"rabbit@a": True, "rabbit@b": True, "rabbit@c": True}
            assert sorted(status["running_nodes"]) == ["rabbit@a", "rabbit@b", "rabbit@c"]
    finally:
        for m in (a, b, c):
            m.kill()


@pytest.mark.timeout(120)
def test_forget_cluster_node_removes_a_killed_leader_by_name(tmp_path, etcd):
    prefix = f"/c-{uuid.uuid4().hex[:6]}"
    a, b = _members(tmp_path, etcd, prefix, "ab")
    try:
        a.start().wait_serving()
        b.start()
        in_sync(etcd, prefix, 2, "b never joined the ISR")
        a.kill()
        takes_over(b, etcd, prefix)
        status = wait(lambda: (s := _status(b)) and s["leader"] == "rabbit@b" and s, 30,
                      "cluster_status never named b the leader")
        assert _running(status) == {"rabbit@a": False, "rabbit@b": True}, status
        code, _out, err = ctl(_http(b), "forget_cluster_node", "rabbit@a")
        assert code == 0, err
        status = _status(b)
        assert _running(status) == {"rabbit@b": True}
        assert status["disk_nodes"] == status["running_nodes"] == ["rabbit@b"]
        assert _known(etcd, prefix) == {b.node_id: "rabbit@b"}
        assert isr(etcd, prefix) == {b.node_id}
    finally:
        a.kill()
        b.kill()
