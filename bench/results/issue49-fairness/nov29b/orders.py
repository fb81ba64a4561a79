"""Issue 49 diagnosis: bench.fairness's greedy flood as "any" places it, but with the three
flood processes connecting in a fixed order instead of racing. After the admin connection
(worker 0) and the bystander's (worker 1) they land on workers 0, 1, 0; the queues, declared
by the admin, on 0 (the greedy consumer's), 1 (the slow reader's), 0 (the bystander's).

    PYTHONPATH=<checkout> python3 orders.py URI[,URI...] greedy-pub-trickle,... ROUNDS

One JSON line per run: the order, the bystander's round trip (p50, p99, max, ms) and the
broker's run-queue waits added up over the run (ms).
"""
import json
import multiprocessing as mp
import os
import sys
import time
import uuid

import pika

from bench import fairness as f


def run(uri: str, order: list[str], seconds: float = 25.0, every_ms: float = 100) -> dict:
    tag = uuid.uuid4().hex[:8]
    a, b, c = f"fair-flood-{tag}", f"fair-drain-{tag}", f"fair-bystander-{tag}"
    admin = pika.BlockingConnection(pika.URLParameters(uri))
    ch = admin.channel()
    for q in (a, b, c):
        ch.queue_declare(q, auto_delete=False)
    by = pika.BlockingConnection(pika.URLParameters(uri))
    ctx = mp.get_context("spawn")
    table = {"greedy": (f._never_acks, (uri, a, seconds)),
             "trickle": (f._trickle_reader, (uri, b, seconds)),
             "pub": (f._greedy_flood, (uri, (a, b), seconds))}
    procs = []
    for name in order:
        target, args = table[name]
        ready = ctx.Event()
        procs.append(ctx.Process(target=target, args=(*args, ready)))
        procs[-1].start()
        if not ready.wait(30):
            raise RuntimeError("a flood connection did not open")
    bch = by.channel()
    bch.confirm_delivery()
    got: list[float] = []
    bch.basic_consume(c, lambda *args: got.append(time.monotonic()), auto_ack=True)
    time.sleep(1.0)
    result = f.round_trips(uri, by, bch, c, got, seconds - 2, every_ms)
    for p in procs:
        p.join(seconds + 30)
        if p.is_alive():
            p.kill()
    by.close()
    for q in (a, b, c):
        ch.queue_delete(q)
    admin.close()
    result.update(order=order, wait_total_ms=result["broker_runqueue_wait_total_ms"])
    return result


def main() -> None:
    uris = sys.argv[1].split(",")
    orders = [o.split("-") for o in sys.argv[2].split(",")]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    for r in range(rounds):
        for order in orders:
            for uri in uris:
                while os.getloadavg()[0] > 1.5:
                    time.sleep(2)
                res = run(uri, order)
                res.update(uri=uri, round=r)
                print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
