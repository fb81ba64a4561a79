"""GC pacing (broker/gc_pacing.py): what exists when pacing begins is frozen out of the
cyclic collector's scans, CPython's own oldest-generation passes stop, the pacer's full
collections free cycles that became garbage since, and its deep pass frees a cycle that was
frozen while alive. The pacer runs in `python -m broker` only; these tests restore the
process."""

from __future__ import annotations

import gc
import weakref

import pytest

from broker.gc_pacing import NO_AUTOMATIC_PASS, GcPacer


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> tuple[Node, weakref.ref[Node]]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a, weakref.ref(a)


@pytest.fixture
def pacer():
    thresholds = gc.get_threshold()
    p = GcPacer(full_every_s=1e9, full_cheap_every_s=1e9, deep_every_s=1e9)
    yield p
    p.stop()
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == thresholds


def test_begin_freezes_what_exists_and_takes_over_the_oldest_generation(pacer):
    kept = [Node() for _ in range(5000)]
    before = gc.get_freeze_count()
    young, middle, _ = gc.get_threshold()
    pacer.begin()
    assert gc.get_freeze_count() >= before + len(kept)
    assert not any(o is kept[0] for o in gc.get_objects(generation=2))  # no pass scans it
    assert gc.get_threshold() == (young, middle, NO_AUTOMATIC_PASS)


def test_a_full_pass_frees_new_cycles_and_leaves_the_frozen_objects_frozen(pacer):
    kept = Node()
    pacer.begin()
    node, gone = cycle()
    del node
    pacer.full_every_s = 0  # the full collection is due
    pacer.tick()
    assert gone() is None
    assert pacer.full_passes == 1 and pacer.deep_passes == 0
    # nothing was unfrozen: what was frozen is in no generation a pass scans
    assert not any(o is kept for gen in range(3) for o in gc.get_objects(generation=gen))


def test_a_cycle_frozen_while_alive_waits_for_the_deep_pass(pacer):
    node, gone = cycle()
    pacer.begin()  # frozen while reachable
    del node
    pacer.full_every_s = 0
    pacer.tick()
    assert gone() is not None  # a full pass does not scan frozen objects
    pacer.deep_every_s = 0  # the deep pass is due
    pacer.tick()
    assert gone() is None
    assert pacer.deep_passes == 1
    assert gc.get_freeze_count() > 0  # what is alive is frozen again


def test_cheap_full_collections_back_off_while_they_free_nothing_and_return_when_useful(pacer):
    pacer.begin()
    pacer.full_every_s = 300.0
    pacer.full_cheap_every_s = pacer.cheap_every_s = 0.0  # due at every tick
    pacer.tick()  # frees next to nothing
    pacer.cheap_every_s = 10.0
    pacer._last_full -= 11  # due again
    pacer.tick()
    assert pacer.full_passes == 2 and pacer.cheap_every_s == 20.0
    pacer._last_full -= 21
    pacer.tick()
    assert pacer.cheap_every_s == 40.0
    pacer.cheap_every_s = 299.0
    pacer._last_full -= 300
    pacer.tick()
    assert pacer.cheap_every_s == 300.0  # capped at full_every_s
    held = [cycle()[0] for _ in range(2000)]  # cycles that outlive young collections
    gc.collect(1)
    held.clear()  # then become garbage
    pacer.full_cheap_every_s = 10.0
    pacer._last_full -= 300
    pacer.tick()
    assert pacer.last_full_collected >= 4000
    assert pacer.cheap_every_s == 10.0  # useful: back to the shortest wait


def test_no_automatic_oldest_generation_pass_while_pacing(pacer):
    """Many young collections with survivors would make CPython scan the oldest generation;
    while pacing only the pacer does."""
    pacer.begin()
    passes = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 2:
            passes.append(info)

    gc.callbacks.append(seen)
    try:
        survivors = []
        for _ in range(200):
            survivors.extend(Node() for _ in range(1000))
            gc.collect(1)
        gc.collect(0)
    finally:
        gc.callbacks.remove(seen)
    assert passes == []


def test_refreeze_makes_the_next_tick_a_deep_pass(pacer):
    """What a cluster member's broker sets up when it starts leading is frozen too."""
    pacer.begin()
    kept = [Node() for _ in range(3000)]
    pacer.refreeze()
    pacer.tick()
    assert pacer.deep_passes == 1
    # frozen: in no generation a pass scans (the freeze count is no measure: it falls when
    # the rest of the suite's frozen objects are freed by reference counting)
    probe = kept[len(kept) // 2]
    assert not any(o is probe for gen in range(3) for o in gc.get_objects(generation=gen))


def test_a_long_forced_pass_waits_while_the_loop_is_busy_and_no_longer_than_twice_its_period(
        pacer):
    """Issue 49: the forced full pass (every full_every_s whatever it costs) over a heap that
    grew (a flood's unacked messages) waits while the loop is saturated, since a flood's
    messages usually go when it ends; at twice full_every_s it runs anyway. A cheap one, or
    one on an idle loop, is not held."""
    busy = [True]
    pacer.busy = lambda: busy[0]
    pacer.begin()
    pacer.full_every_s = 300.0
    pacer.full_when_grown_below = -1  # whatever the heap, the pass counts as long
    pacer._last_full -= 301  # the forced pass is due
    pacer.tick()
    assert pacer.full_passes == 0  # held: the loop is busy
    busy[0] = False
    pacer.tick()
    assert pacer.full_passes == 1  # idle: it runs
    busy[0] = True
    pacer._last_full -= 600  # twice the period: it runs even now
    pacer.tick()
    assert pacer.full_passes == 2
    pacer.full_when_grown_below = 1 << 40  # a cheap pass is never held
    pacer.cheap_every_s = 0.0
    pacer._last_full -= 1
    pacer.tick()
    assert pacer.full_passes == 3


def test_a_deep_pass_waits_while_the_loop_is_active_and_no_longer_than_the_full_period(pacer):
    """The deep pass scans every object, the frozen ones too: as the long forced pass, it
    waits while the loop is active (a flood), up to full_every_s after it fell due; the
    full passes go on meanwhile."""
    busy = [True]
    pacer.busy = lambda: busy[0]
    pacer.begin()
    pacer.full_every_s = 300.0
    pacer.deep_every_s = 0.0  # due
    pacer.tick()
    assert pacer.deep_passes == 0  # held: the loop is active
    busy[0] = False
    pacer.tick()
    assert pacer.deep_passes == 1  # idle: it runs
    busy[0] = True
    pacer.tick()
    assert pacer.deep_passes == 1  # due again, held again
    pacer._deep_held_since -= 301  # held for longer than the full period: it runs now
    pacer.tick()
    assert pacer.deep_passes == 2
