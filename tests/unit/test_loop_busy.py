"""The loop-lag probe's `busy` flag (broker/loop_lag.py), which the queues' consumer bias
reads (issue 49): on a real event loop, a callback that keeps the thread on the CPU makes it
True within a few 10 ms intervals, and an idle loop makes it False again."""

from __future__ import annotations

import asyncio
import time

from broker.loop_lag import LoopLagProbe


def test_busy_follows_the_loop_threads_cpu_share() -> None:
    async def scenario() -> tuple[bool, bool, float]:
        probe = LoopLagProbe(busy_load=0.3)  # a loaded test machine gives the thread less
        probe.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 0.3

        def spin() -> None:  # 2 ms of CPU per turn, yielding so the probe's timer runs
            end = time.thread_time() + 0.002
            while time.thread_time() < end:
                pass
            if loop.time() < deadline:
                loop.call_soon(spin)

        spin()
        await asyncio.sleep(deadline - loop.time())  # the spinning runs meanwhile
        busy_when_spinning = probe.busy
        load = probe.load
        await asyncio.sleep(0.2)
        idle = probe.busy
        recently = probe.was_busy_within(5.0)  # what the GC pacer asks (gc_pacing.py)
        long_ago = probe.was_busy_within(0.05)
        probe.stop()
        return busy_when_spinning, idle, load, recently, long_ago

    busy, idle_busy, load, recently, long_ago = asyncio.run(scenario())
    assert busy, load
    assert not idle_busy
    assert recently and not long_ago


def test_a_zero_busy_load_is_always_busy() -> None:
    """consumer_bias_load = 0: the bias applies whatever the load (tests use it)."""
    assert LoopLagProbe(busy_load=0).busy


def test_a_probe_never_busy_was_never_busy_recently() -> None:
    assert not LoopLagProbe().was_busy_within(3600.0)


def test_a_loop_kept_waiting_is_active_though_not_busy() -> None:
    """A loop that gets no CPU (here: callbacks that block without using one, as a worker
    waits for a CPU other processes hold) runs its ticks late: it is active for the GC
    pacer, though its thread's CPU share never makes it busy (issue 49's 338 ms pass)."""
    async def scenario() -> tuple[bool, bool, bool]:
        probe = LoopLagProbe()
        probe.start()
        before = probe.was_active_within(5.0)
        for _ in range(5):
            await asyncio.sleep(0.011)  # the probe's tick falls due meanwhile
            time.sleep(0.02)  # noqa: ASYNC251 - blocks the loop on purpose: the tick runs late
        await asyncio.sleep(0.011)  # the last late tick runs
        active, busy = probe.was_active_within(5.0), probe.busy
        probe.stop()
        return before, active, busy

    before, active, busy = asyncio.run(scenario())
    assert not before
    assert active and not busy


def test_a_probe_never_started_was_never_active() -> None:
    assert not LoopLagProbe().was_active_within(3600.0)
