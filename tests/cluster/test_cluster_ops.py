"""Operating a cluster (issue 35 item 6) with two real members and etcd: /api/nodes lists
every member with its role, whether it is in sync and its replication lag, and so does the
UI's overview (headless chromium); Prometheus shows
the term, the ISR's size and each follower's lag; `brokerctl cluster_status` prints the
members and `brokerctl forget_cluster_node` removes a stopped one (a running one is
refused with 409)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
import requests

from tests.cluster.etcd_proc import free_port
from tests.cluster.members import Member, ctl
from tests.cluster.test_failover import isr, wait
from tests.ops.test_ui import driver, login, wait_id  # noqa: F401 (driver: a fixture)


@pytest.mark.timeout(120)
def test_nodes_metrics_and_cluster_commands(tmp_path, etcd, driver):  # noqa: F811
    prefix = f"/c-{uuid.uuid4().hex[:6]}"
    http, metrics = free_port(), free_port()
    a = Member(tmp_path, "a", etcd.endpoints, prefix, node_name="rabbit@a",
               **{"management.tcp.port": http, "prometheus.tcp.port": metrics}).start()
    b = None
    try:
        a.wait_serving()
        b = Member(tmp_path, "b", etcd.endpoints, prefix, node_name="rabbit@b").start()
        wait(lambda: len(isr(etcd, prefix) or ()) == 2, 30, "b never joined the ISR")
        api = f"http://127.0.0.1:{http}/api"

        def nodes():
            got = requests.get(f"{api}/nodes", auth=("guest", "guest"), timeout=5).json()
            return got if len(got) == 2 and all(n.get("insync") for n in got) else None

        shown = wait(nodes, 15, "/api/nodes never listed both members")
        assert [(n["name"], n["cluster_role"], n["running"]) for n in shown] == [
            ("rabbit@a", "leader", True), ("rabbit@b", "follower", True)]
        assert shown[0]["term"] > 0 and shown[0]["mem_used"] > 0
        assert shown[1]["replication_lag"] == 0
        text = requests.get(f"http://127.0.0.1:{metrics}/metrics", timeout=5).text
        assert "pybroker_cluster_in_sync_replicas 2.0" in text
        assert 'pybroker_cluster_follower_lag{follower="rabbit@b"} 0.0' in text
        login(driver, f"http://127.0.0.1:{http}")  # the UI's overview lists the members
        members = wait_id(driver, "members-table").text
        assert "rabbit@a" in members and "rabbit@b" in members and "leader" in members
        code, out, err = ctl(http, "cluster_status")
        assert code == 0, err
        status = json.loads(out)
        assert status["leader"] == "rabbit@a"
        assert [m["node"] for m in status["members"]] == ["rabbit@a", "rabbit@b"]
        code, _out, err = ctl(http, "forget_cluster_node", "rabbit@b")
        assert code != 0 and "running" in err  # 409: stop it first
        b.stop()
        wait(lambda: any(n["name"] == "rabbit@b" and not n["running"] for n in requests.get(
            f"{api}/nodes", auth=("guest", "guest"), timeout=5).json()), 15,
            "b never showed as stopped")
        code, _out, err = ctl(http, "forget_cluster_node", "rabbit@b")
        assert code == 0, err
        time.sleep(0.5)
        left = requests.get(f"{api}/nodes", auth=("guest", "guest"), timeout=5).json()
        assert [n["name"] for n in left] == ["rabbit@a"]
        assert isr(etcd, prefix) == {a.node_id}
    finally:
        a.kill()
        if b is not None:
            b.stop()
