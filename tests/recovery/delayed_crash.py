"""The delayed exchange's crash check (issue 50): publish persistent messages with confirms
to a durable x-delayed-message exchange, kill -9 the broker while they all wait, restart it,
and check that every confirmed message arrives once, never before its due time, in due
order. Used by tests/recovery/test_delayed_kill9.py (a few thousand messages) and by
`python -m tests.recovery.delayed_crash N` (the issue's 100 000)."""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

import aio_pika

from tests.recovery.brokerproc import BrokerProcess

EXCHANGE, QUEUE = "crash-delayed", "crash-delayed-q"
WINDOW = 500  # confirms outstanding


async def _publish(url: str, n: int, due_at: float, spread: float,
                   rng: random.Random) -> dict[int, tuple[float, float]]:
    """Publish 0 .. n-1, message i due at `due_at` + U(0, spread) (s since the epoch);
    returns {i: (earliest, latest due time)} for every confirmed one: the broker counts
    the delay from when it took the message, between our send and its confirm."""
    conn = await aio_pika.connect(url)
    try:
        ch = await conn.channel(publisher_confirms=True)
        x = await ch.declare_exchange(EXCHANGE, "x-delayed-message", durable=True,
                                      arguments={"x-delayed-type": "direct"})
        q = await ch.declare_queue(QUEUE, durable=True)
        await q.bind(x, "k")
        confirmed: dict[int, tuple[float, float]] = {}

        async def one(i: int) -> None:
            due = due_at + rng.uniform(0, spread)
            sent = time.time()
            delay = max(1, int((due - sent) * 1000))
            await x.publish(aio_pika.Message(
                b"%d" % i, headers={"x-delay": delay},
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT), "k")
            confirmed[i] = (sent + delay / 1000, time.time() + delay / 1000)

        for start in range(0, n, WINDOW):
            await asyncio.gather(*(one(i) for i in range(start, min(n, start + WINDOW))))
        return confirmed
    finally:
        await conn.close()


async def _collect(url: str, n: int, wait_s: float) -> tuple[list[tuple[float, int]], int]:
    """(arrival s since the epoch, i) of deliveries until `n` came or `wait_s` passed, and
    how many messages were left in the queue after them."""
    conn = await aio_pika.connect(url)
    got: list[tuple[float, int]] = []
    try:
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=1000)
        q = await ch.declare_queue(QUEUE, durable=True)
        deadline = time.monotonic() + wait_s
        async with q.iterator() as it:
            while len(got) < n and time.monotonic() < deadline:
                try:
                    msg = await asyncio.wait_for(it.__anext__(), deadline - time.monotonic())
                except TimeoutError:
                    break
                got.append((time.time(), int(msg.body)))
                await msg.ack()
        # anything more (a duplicate) is in the queue a short while later
        await asyncio.sleep(2)
        left = await ch.declare_queue(QUEUE, durable=True, passive=True)
        extra = left.declaration_result.message_count
    finally:
        await conn.close()
    return got, extra


def run_once(data_dir: Path, n: int, rng: random.Random, lead: float | None = None,
             spread: float = 3.0) -> dict:
    """One round; raises AssertionError on a loss, an early or repeated delivery, or one
    out of due order. `lead`: s from the start of publishing to the first due time (long
    enough for every publish and the kill; default from `n`)."""
    if lead is None:
        lead = 4.0 + n / 1500
    b = BrokerProcess(data_dir).start()
    try:
        started = time.time()
        confirmed = asyncio.run(_publish(b.url, n, started + lead, spread, rng))
        published_s = time.time() - started
        assert time.time() < started + lead, "publishing outlasted the delays: raise lead"
    finally:
        b.kill()
    b2 = BrokerProcess(data_dir).start()
    try:
        wait = max(0.0, started + lead + spread - time.time()) + 15 + n / 1000
        got, extra = asyncio.run(_collect(b2.url, len(confirmed), wait))
    finally:
        assert b2.stop() == 0, b2.output()
    ids = [i for _t, i in got]
    missing = set(confirmed) - set(ids)
    assert not missing, f"confirmed but lost: {sorted(missing)[:10]} ({len(missing)})"
    assert len(ids) == len(set(ids)) and not extra, (
        f"{len(ids) - len(set(ids)) + extra} came twice")
    early = [(i, confirmed[i][0] - at) for at, i in got if at < confirmed[i][0] - 0.002]
    assert not early, f"{len(early)} before their due time, e.g. {early[:3]}"
    # out of order only where the intervals prove it: a later arrival surely due before an
    # earlier one (its latest due time before the other's earliest)
    ceiling = 0.0  # the largest earliest due time of what arrived so far
    out_of_order = 0
    for _at, i in got:
        earliest, latest = confirmed[i]
        if latest < ceiling:
            out_of_order += 1
        ceiling = max(ceiling, earliest)
    assert not out_of_order, f"{out_of_order} out of due order"
    lateness = sorted(at - confirmed[i][1] for at, i in got)
    return {"confirmed": len(confirmed), "delivered": len(got),
            "publish_msg_s": round(len(confirmed) / published_s),
            "lateness_p50_ms": round(lateness[len(lateness) // 2] * 1000, 1),
            "lateness_max_ms": round(lateness[-1] * 1000, 1)}


def run_firing(data_dir: Path, n: int, rng: random.Random, spread: float = 4.0) -> dict:
    """Kill -9 while messages fall due into a queue nobody consumes: half way through
    `spread` s of due times, so that some were sent to the queue moments before (the queue
    confirms them to the holder lazily, at its 200 ms index sync). After the restart every
    confirmed message must be in the queue at least once; a message whose queue wrote it
    but whose holder had not yet recorded that comes twice (at least once, as documented).
    Raises AssertionError on a loss."""
    lead = 4.0 + n / 1500
    b = BrokerProcess(data_dir).start()
    try:
        started = time.time()
        confirmed = asyncio.run(_publish(b.url, n, started + lead, spread, rng))
        assert time.time() < started + lead, "publishing outlasted the delays: raise lead"
        time.sleep(max(0.0, started + lead + spread / 2 - time.time()))
    finally:
        b.kill()
    b2 = BrokerProcess(data_dir).start()
    try:
        time.sleep(max(0.0, started + lead + spread - time.time()) + 1.0)
        got, extra = asyncio.run(_collect(b2.url, len(confirmed) * 2, 10 + n / 1000))
    finally:
        assert b2.stop() == 0, b2.output()
    ids = [i for _t, i in got]
    missing = set(confirmed) - set(ids)
    assert not missing, f"confirmed but lost: {sorted(missing)[:10]} ({len(missing)})"
    assert not extra
    return {"confirmed": len(confirmed), "delivered": len(ids),
            "twice": len(ids) - len(set(ids))}


def main(n: int) -> int:
    with tempfile.TemporaryDirectory() as d:
        print(run_once(Path(d), n, random.Random()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000))
