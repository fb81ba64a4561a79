"""Where a new queue's process goes in a `--workers 2` broker (broker/workers/placement.py):
`x-queue-master-locator`, the `queue-master-locator` policy and `queue_master_locator` in
the configuration choose as in RabbitMQ 3.10.8, with workers in place of nodes; without
them, the worker with the fewest queues. The durable queues' record
(queue_workers.json) says where each one went."""

from __future__ import annotations

import pika
import pytest

from tests.polling import wait_for
from tests.workers.test_workers import connect, placements

pytestmark = pytest.mark.timeout(120)


def declare(conn: pika.BlockingConnection, name: str, **arguments: object) -> None:
    conn.channel().queue_declare(name, durable=True, arguments=arguments or None)


def test_the_argument_and_the_policy_choose_the_worker(workers_broker):
    broker = workers_broker(2)
    first, second = connect(broker, 2)  # on worker 0, then worker 1
    wait_for(lambda: [w["connections"] for w in
                      broker.api_get("/api/nodes")[0]["workers"]] == [1, 1], timeout=20)
    for i in range(3):  # client-local: all on the declaring connection's worker
        declare(second, f"local-{i}", **{"x-queue-master-locator": "client-local"})
    declare(second, "spread-0")  # the default: the worker with fewer queues
    declare(second, "spread-1")
    declare(second, "spread-2", **{"x-queue-master-locator": "min-masters"})
    declare(second, "spread-3", **{"x-queue-master-locator": "nearest"})  # unknown: passed
    broker.api.put(f"http://127.0.0.1:{broker.api_port}/api/policies/%2F/local",
                   json={"pattern": "^pol-", "apply-to": "queues",
                         "definition": {"queue-master-locator": "client-local"}},
                   timeout=10).raise_for_status()
    declare(first, "pol-0")
    declare(first, "pol-1")
    # the argument wins over the policy
    declare(second, "pol-2", **{"x-queue-master-locator": "client-local"})
    bad = broker.api.put(f"http://127.0.0.1:{broker.api_port}/api/policies/%2F/bad",
                         json={"pattern": "^x", "definition": {"queue-master-locator": "far"}},
                         timeout=10)
    assert bad.status_code == 400
    assert "invalid queue-master-locator value" in bad.json()["reason"]
    where = placements(broker)
    assert [where[f"local-{i}"] for i in range(3)] == [1, 1, 1]
    # 3 on worker 1: the next three go to worker 0 until they are level, the fourth to the
    # declaring connection's worker (a tie)
    assert [where[f"spread-{i}"] for i in range(4)] == [0, 0, 0, 1]
    assert [where[f"pol-{i}"] for i in range(3)] == [0, 0, 1]
    for conn in (first, second):
        conn.close()


def test_the_configuration_chooses_the_worker(workers_broker):
    broker = workers_broker(2, queue_master_locator="client-local")
    first, second = connect(broker, 2)
    wait_for(lambda: [w["connections"] for w in
                      broker.api_get("/api/nodes")[0]["workers"]] == [1, 1], timeout=20)
    for i in range(3):
        declare(second, f"a-{i}")
    declare(first, "b-0")
    declare(second, "c-0", **{"x-queue-master-locator": "min-masters"})
    where = placements(broker)
    assert [where[f"a-{i}"] for i in range(3)] + [where["b-0"], where["c-0"]] == [1, 1, 1, 0, 0]
    for conn in (first, second):
        conn.close()
