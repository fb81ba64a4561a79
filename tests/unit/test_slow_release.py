"""broker/slow_release.py: a big list's items are released a slice per loop turn, so a
queue deletion never frees 100 000 messages in one turn; without a running loop, or for a
short list, nothing is deferred."""

from __future__ import annotations

import asyncio
import weakref

from broker import slow_release


class Item:
    pass


def test_a_long_list_is_released_over_several_loop_turns():
    async def main() -> tuple[int, int, int]:
        items = [Item() for _ in range(slow_release.PER_TURN * 3 + 5)]
        refs = [weakref.ref(i) for i in items]
        slow_release.release(items)
        del items
        alive_now = sum(r() is not None for r in refs)
        await asyncio.sleep(0)  # one turn: one slice
        after_one = sum(r() is not None for r in refs)
        for _ in range(10):
            await asyncio.sleep(0)
        return alive_now, after_one, sum(r() is not None for r in refs)

    alive_now, after_one, at_end = asyncio.run(main())
    assert alive_now == slow_release.PER_TURN * 3 + 5
    assert after_one == slow_release.PER_TURN * 2 + 5
    assert at_end == 0


def test_without_a_loop_or_for_a_short_list_nothing_is_kept():
    items = [Item() for _ in range(slow_release.PER_TURN * 2)]
    refs = [weakref.ref(i) for i in items]
    slow_release.release(items)
    del items
    assert all(r() is None for r in refs)
