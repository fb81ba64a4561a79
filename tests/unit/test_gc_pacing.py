"""GC pacing (broker/gc_pacing.py): old objects are frozen out of the cyclic collector's
scans, and a full collection still frees a reference cycle that became garbage after it
was frozen. The pacer runs in `python -m broker` only; these tests restore the process."""

from __future__ import annotations

import gc
import weakref

import pytest

from broker.gc_pacing import GcPacer


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def pacer():
    p = GcPacer(full_every_s=1e9, full_cheap_every_s=1e9)
    yield p
    p.stop()
    assert gc.get_freeze_count() == 0


def test_tick_freezes_what_survives_the_young_collection(pacer):
    kept = [Node() for _ in range(5000)]
    before = gc.get_freeze_count()
    pacer.tick()
    assert gc.get_freeze_count() >= before + len(kept)
    assert not any(o is kept[0] for o in gc.get_objects(generation=2))  # no pass scans it


def test_a_cycle_frozen_while_alive_is_freed_by_the_full_collection(pacer):
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    pacer.tick()  # frozen while reachable
    del a, b
    gc.collect()
    assert gone() is not None  # a plain collection does not scan frozen objects
    pacer.full_every_s = 0  # the full collection is due
    pacer.tick()
    assert gone() is None
    assert pacer.full_passes == 1


def test_cheap_full_collections_back_off_while_they_free_nothing_and_return_when_useful(pacer):
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
    held = []
    for _ in range(2000):  # cycles frozen while alive, then garbage
        a, b = Node(), Node()
        a.other, b.other = b, a
        held.append(a)
    del a, b
    pacer.tick()  # frozen while held
    held.clear()
    pacer.full_cheap_every_s = 10.0
    pacer._last_full -= 300
    pacer.tick()
    assert pacer.last_full_collected >= 4000
    assert pacer.cheap_every_s == 10.0  # useful: back to the shortest wait
