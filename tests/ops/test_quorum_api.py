"""A quorum queue in the management API (issue 34 item 6): `type: quorum` with its Raft
group's `leader`, `members` and `online` nodes, in RabbitMQ 3.10.8's shape (one node here:
the broker's). Passes against RabbitMQ 3.10.8 with BROKER_TEST_URI/BROKER_TEST_API set."""

from __future__ import annotations

import uuid

from tests.polling import wait_for


def test_a_quorum_queue_shows_its_type_leader_and_members(api):
    q = f"qq-api-{uuid.uuid4().hex[:8]}"
    path = f"/api/queues/%2F/{q}"
    assert api.put(path, json={"durable": True,
                               "arguments": {"x-queue-type": "quorum"}}).status_code == 201
    try:
        node = api.get("/api/overview").json()["node"]
        shown = wait_for(lambda: (lambda j: j if "leader" in j else None)(api.get(path).json()),
                         timeout=15)
        assert shown["type"] == "quorum"
        assert shown["arguments"] == {"x-queue-type": "quorum"}
        assert (shown["leader"], shown["members"], shown["online"]) == (node, [node], [node])
        others = api.get("/api/queues").json()  # other tests' queues too: only quorum ones
        assert all("leader" not in j for j in others if j.get("type") != "quorum")
    finally:
        api.delete(path)
