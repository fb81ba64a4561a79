"""Consumer bias: a busy queue serves its consumers before its publishers (issue 49 item 3).

RabbitMQ's queue process handles a consumer's acks and its channel's `notify_sent` ahead of
publishes while the queue delivers less than twice what it takes in
(`rabbit_amqqueue_process:prioritise_cast/3`, `consumer_bias/3`, CONSUMER_BIAS_RATIO 2.0;
"Consumer Bias in RabbitMQ 3.3", rabbitmq.com blog, 2014-04-14). The publishes wait in the
queue's mailbox, the channel runs out of credit, the reader stops reading: at saturation the
publisher is held to the rate the queue delivers and the queue stays short. Priorities only
matter while the process is busy: an idle queue takes every publish at once, so a slow
consumer never throttles its publishers.

Here every queue shares one event loop, so "busy" is the loop's (`LoopLagProbe.busy`: the
loop's thread used most of the last 10 ms of CPU), and "serve the consumers first" is done
with credit flow: while the loop is busy and the queue holds more than HIGH ready messages
with a consumer attached, the queue blocks the channels that publish to it
(`credit_flow:block/1`), which keep their publishes in their mailboxes (unconfirmed), until
the backlog is down to LOW, the loop is no longer busy, or the consumers leave. Every
CHECK_S a check asks whether the consumers took at least MIN_DRAIN messages over the last
two checks (consumers ack in bursts: one interval may see none); if not, they cannot take more now (prefetch full, a socket that does not read), so holding
the publishers would only stall them: they are let go, and not held again for COOL_S. A
slow consumer so costs its publishers at most CHECK_S of every COOL_S, and only while the
loop is busy. A channel that consumes is never held: its acks travel the same mailbox, and
holding them would hold the deliveries the bias waits for.

Owns: the set of channels held and one timer while any is. Talks to: channels through
`hold_publishes(queue)` / `release_publishes(queue)`. Must never: hold a channel without a
timer that lets it go.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

HIGH = 256  # ready messages at which a queue on a busy loop holds its publishers
LOW = 64  # ready messages at which it lets them go
CHECK_S = 0.01  # seconds between checks while publishers are held
MIN_DRAIN = 16  # messages the consumers must take over two checks for the hold to go on
COOL_S = 0.1  # seconds without holds after consumers that did not drain


class ConsumerBias:
    """One queue's bias. `check(ready, consumers, senders)` after each batch the queue
    handled (ready: its ready message count; consumers: how many it has; senders: the
    channels it took publishes from); `release()` when the queue goes."""

    __slots__ = ("_loop", "_queue", "_busy", "_state", "held", "_timer", "_delivered",
                 "_cool_until", "holds")
    # _delivered: the queue's delivered count at the last two checks (the hold's start
    # counts as both)

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: Any,
                 busy: Callable[[], bool], state: Callable[[], tuple[int, int, int]]) -> None:
        self._loop = loop
        self._queue = queue  # what the channels are held for (their credit peer)
        self._busy = busy  # is the event loop saturated?
        # () -> the queue's (ready messages, consumers, messages delivered since it started)
        self._state = state
        self.held: list[Any] = []  # channels held now
        self._timer: asyncio.TimerHandle | None = None
        self._delivered = (0, 0)  # delivered counts: two checks ago, at the last check
        self._cool_until = 0.0  # loop time before which no hold starts
        self.holds = 0  # holds started since the queue started

    def check(self, ready: int, consumers: int, senders: Iterable[Any]) -> None:
        if self.held:
            if ready <= LOW or not consumers or not self._busy():
                self.release()
        elif (ready >= HIGH and consumers and self._busy()
              and self._loop.time() >= self._cool_until):
            self._hold(senders)

    def _hold(self, senders: Iterable[Any]) -> None:
        queue = self._queue
        held = self.held
        for channel in senders:
            if channel.hold_publishes(queue):
                held.append(channel)
        if held:
            self.holds += 1
            delivered = self._state()[2]
            self._delivered = (delivered, delivered)
            self._timer = self._loop.call_later(CHECK_S, self._timed_check)
        else:  # only channels that consume (or close) publish here: ask again later
            self._cool_until = self._loop.time() + COOL_S

    def _timed_check(self) -> None:
        self._timer = None
        if not self.held:
            return
        ready, consumers, delivered = self._state()
        if ready <= LOW or not consumers or not self._busy():
            self.release()
        elif delivered - self._delivered[0] < MIN_DRAIN:
            self.release()
            self._cool_until = self._loop.time() + COOL_S
        else:
            self._delivered = (self._delivered[1], delivered)
            self._timer = self._loop.call_later(CHECK_S, self._timed_check)

    def release(self) -> None:
        """Let every held channel publish again."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        held, self.held = self.held, []
        queue = self._queue
        for channel in held:
            channel.release_publishes(queue)
