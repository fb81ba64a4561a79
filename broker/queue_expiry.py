"""Queue expiry, `x-expires` (rabbitmq.com/ttl.html#queue-ttl): the lease of one queue.

Owns: when the queue was last used and the one timer that checks it. A queue is unused while
it has no consumers and nobody declares it or calls basic.get on it; after `expires` ms of
that the owner deletes it. After a restart the lease starts again from the boot, as in
RabbitMQ. The timer only wakes the owner's mailbox (`wake()`); the decision runs there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class UnusedLease:
    """`expires`: ms (> 0) or None (no expiry); `wake()` is called when a check is due."""

    def __init__(self, loop: asyncio.AbstractEventLoop, wake: Callable[[], None]) -> None:
        self._loop = loop
        self._wake = wake
        self.expires: int | None = None
        self.last_used = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None

    def set(self, expires: int | None) -> None:
        """A new x-expires (declare or policy): the lease restarts when it changes."""
        if expires == self.expires:
            return
        self.expires = expires
        self.cancel()
        if expires is not None:
            self._timer = self._loop.call_later(expires / 1000, self._wake)

    def touch(self) -> None:
        """The queue was used (consume, basic.get, declare): the lease counts from now."""
        self.last_used = time.monotonic()

    def expired(self, in_use: bool) -> bool:
        """The due check: True if the queue stayed unused for `expires` ms (delete it);
        else the timer is set for the rest of the lease."""
        self._timer = None
        if self.expires is None:
            return False
        now = time.monotonic()
        if in_use:
            self.last_used = now
        idle_ms = (now - self.last_used) * 1000
        if idle_ms >= self.expires:
            return True
        self._timer = self._loop.call_later((self.expires - idle_ms) / 1000, self._wake)
        return False

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
