# broker/slow_release.py — let go of many objects a slice per event-loop turn.
#
# Owns: the lists handed to it until their items have been released.
# Talks to: the running asyncio loop (call_soon); nothing of the broker's.
# Must never: keep anything alive longer than a few loop turns per thousand items, or run
# without a loop (then it releases at once, as dropping the list would).
"""Releasing a big queue's messages in slices (issue 26 item 4: no piece of work may hold
the loop for more than a few milliseconds).

Deleting or purging a queue that holds 120 000 messages in RAM drops 360 000 objects
(MsgStatus, Message, the body) in one reference-counting cascade: ~90 ms during which no
other connection is served (a loop-lag probe around `queue.delete`). RabbitMQ frees a
deleted queue's heap in that queue's own process. Here the queue hands the list of what it
dropped to `release`, which pops PER_TURN items per loop turn (about 1 ms of deallocation).
"""

from __future__ import annotations

import asyncio
from typing import Any

PER_TURN = 2000  # items released per loop turn


def release(items: list[Any]) -> None:
    """Release `items` (taken over: the caller must not use the list again) a slice per
    loop turn; at once when no loop runs in this thread or the list is short."""
    if len(items) <= PER_TURN:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    loop.call_soon(_step, loop, items)


def _step(loop: asyncio.AbstractEventLoop, items: list[Any]) -> None:
    del items[-PER_TURN:]
    if items:
        loop.call_soon(_step, loop, items)
