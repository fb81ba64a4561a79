"""bench.fairness's placements against a real `--workers 2` broker: with `apart` the greedy
flood's two queues land on worker 0 and the bystander's on worker 1, and the bystander's
round trips are measured (issue 49: is a flood on one worker invisible on another?); with
`local` the bystander's queue goes to its own worker by x-queue-master-locator."""

from __future__ import annotations

import threading

import pytest

from bench import fairness

pytestmark = pytest.mark.timeout(120)


def run_watching_workers(broker, placement: str) -> tuple[dict, list[list[tuple[int, int, int]]]]:
    """A 5 s greedy run with `placement`, and (index, queues, connections) of each worker
    from /api/nodes every 0.5 s while it goes on."""
    seen: list[list[tuple[int, int, int]]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            nodes = broker.api_get("/api/nodes")
            seen.append([(w["index"], w["queues"], w["connections"])
                         for w in nodes[0].get("workers", [])])
            stop.wait(0.5)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        res = fairness.run(broker.url, seconds=5.0, every_ms=20, shape="greedy",
                           placement=placement)
    finally:
        stop.set()
        watcher.join()
    return res, seen


def test_the_flood_and_the_bystander_run_on_different_workers(workers_broker):
    res, seen = run_watching_workers(workers_broker(2), "apart")
    assert res["count"] > 20
    assert 0 < res["p50"] <= res["p99"] <= res["max"]
    # at some point during the run: worker 0 holds the flood's two queues and the admin,
    # the three flood connections; worker 1 the bystander's queue, the bystander and three
    # idle fillers
    assert [(0, 2, 4), (1, 1, 4)] in seen, seen


def test_a_client_local_bystander_queue_lives_on_the_bystanders_worker(workers_broker):
    """`--placement local`: the bystander declares its queue with x-queue-master-locator
    client-local, so it goes to the bystander's worker (1) though that worker already has
    the flood's second queue: worker 0 holds one queue, worker 1 two (the default would
    have put it on worker 0, the worker with fewer, and the flood's first queue on 1)."""
    res, seen = run_watching_workers(workers_broker(2), "local")
    assert res["count"] > 20
    assert [(0, 1), (1, 2)] in [[row[:2] for row in view] for view in seen], seen
