"""A stream queue's confirms after one fsync (broker/stream/queue.py merged_confirms): each
run of one client's publisher becomes one publish_confirm's ids, in order, packed as the
frame carries them, and no merged frame passes MAX_CONFIRM_IDS."""

from __future__ import annotations

import struct

from broker.stream.queue import MAX_CONFIRM_IDS, merged_confirms


def ids_of(x: list[int] | bytes) -> list[int]:
    return list(struct.unpack(f">{len(x) // 8}Q", x)) if isinstance(x, bytes) else list(x)


def test_runs_of_one_publisher_merge_in_order_and_others_stay_apart():
    a, b = object(), object()
    owed = [(a, 1, [1, 2]), (a, 1, struct.pack(">QQ", 3, 4)), (a, 2, [5]), (b, 1, [6]),
            (b, 1, [7]), (a, 1, [8])]
    got = [(c, p, ids_of(i)) for c, p, i in merged_confirms(owed)]
    assert got == [(a, 1, [1, 2, 3, 4]), (a, 2, [5]), (b, 1, [6, 7]), (a, 1, [8])]
    assert merged_confirms(owed)[1][2] == [5]  # a run of one is passed on as it came


def test_a_merged_confirm_stays_under_the_id_limit():
    a = object()
    per = MAX_CONFIRM_IDS // 2 + 1
    owed = [(a, 1, list(range(i * per, (i + 1) * per))) for i in range(3)]
    got = merged_confirms(owed)
    assert [len(ids_of(i)) for _c, _p, i in got] == [per, per, per]
    assert sum((ids_of(i) for _c, _p, i in got), []) == list(range(3 * per))
