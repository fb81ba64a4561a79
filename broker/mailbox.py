"""Mailboxes: how broker processes (channels, queues) receive work.

Owns: `Process`, a mailbox (a deque) drained in batches by a callback the event loop runs —
one wake-up per batch, not per message. A process never runs another process's handlers: it
`cast`s to it. `call` is the synchronous request of RabbitMQ's gen_server:call: since all
processes share one event loop thread, the callee first drains everything already in its
mailbox (so order is kept) and then answers, without a round trip through the loop.
Must never await, block, or grow without bound (senders are limited by credit_flow).
It is the boundary for unexpected exceptions: one raised while handling a message goes to the
process's `crashed(exc)` (which logs it and closes what the process belongs to) and the
mailbox keeps draining; it never reaches the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger("broker.process")

BATCH = 256  # messages handled per wake-up before yielding to other processes


class Process:
    """A mailbox plus a handler. Subclasses implement `handle(msg)` and may override
    `on_mailbox_empty()` (RabbitMQ's "mailbox empty" hooks: journal sync, writer flush).

    `cast(msg)`: enqueue, schedule a drain if idle. `call(fn, *args)`: drain the mailbox now,
    then return `fn(*args)`. `suspend()`/`resume()` stop/restart draining (a process blocked
    by credit flow keeps its mailbox); `hold()`/`release()` do the same while it waits for
    another worker process's answer.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop  # the one broker event loop
        self._mailbox: deque[Any] = deque()  # pending messages, FIFO
        self._scheduled = False  # a drain callback is queued on the loop
        self._suspended = False  # credit-flow blocked: keep messages, don't drain
        self._dead = False  # terminated: casts are dropped
        self._credit_blocked = False  # suspended by credit flow (suspend / resume)
        self._waits = 0  # answers awaited from other worker processes (hold / release)

    # -- senders' side ----------------------------------------------------------------------
    def cast(self, msg: Any) -> None:
        if self._dead:
            return
        self._mailbox.append(msg)
        if not self._scheduled and not self._suspended:
            self._scheduled = True
            self._loop.call_soon(self._drain)

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Synchronous request: handle what is already queued, then run fn(*args)."""
        if not self._suspended:
            self._drain_all()
            self.after_batch()
        return fn(*args)

    # -- the process's side -----------------------------------------------------------------
    def _drain(self) -> None:
        self._scheduled = False
        if self._suspended or self._dead:
            return
        mailbox = self._mailbox
        handle = self.handle
        n = 0
        while mailbox and n < BATCH:
            try:  # free in CPython 3.11 unless raised
                handle(mailbox.popleft())
            except Exception as exc:  # noqa: BLE001 - the process boundary (STYLE §6)
                self.crashed(exc)
            n += 1
            if self._suspended or self._dead:
                return
        try:
            self.after_batch()
        except Exception as exc:  # noqa: BLE001 - the process boundary (STYLE §6)
            self.crashed(exc)
        if mailbox:
            if not self._scheduled and not self._dead and not self._suspended:
                self._scheduled = True
                self._loop.call_soon(self._drain)  # yield: one busy process can't starve others
            return
        try:
            self.on_mailbox_empty()
        except Exception as exc:  # noqa: BLE001 - the process boundary (STYLE §6)
            self.crashed(exc)

    def _drain_all(self) -> None:
        mailbox = self._mailbox
        while mailbox and not self._suspended and not self._dead:
            try:
                self.handle(mailbox.popleft())
            except Exception as exc:  # noqa: BLE001 - the process boundary (STYLE §6)
                self.crashed(exc)

    def suspend(self) -> None:
        """Stop draining until `resume` (credit flow: out of credit towards a receiver)."""
        self._credit_blocked = True
        self._suspended = True

    def resume(self) -> None:
        self._credit_blocked = False
        if self._suspended and not self._waits:
            self._suspended = False
            if self._mailbox and not self._scheduled:
                self._scheduled = True
                self._loop.call_soon(self._drain)

    def hold(self) -> None:
        """Stop draining until as many `release`s: the process waits for the answer to a
        request it sent another worker process (docs/multicore.md); unlike `suspend`, a
        credit grant's `resume` does not restart it."""
        self._waits += 1
        self._suspended = True

    def release(self) -> None:
        self._waits -= 1
        if not self._waits and not self._credit_blocked:
            self._suspended = False
            if self._mailbox and not self._scheduled and not self._dead:
                self._scheduled = True
                self._loop.call_soon(self._drain)

    def mailbox_len(self) -> int:
        return len(self._mailbox)

    def stop_process(self) -> None:
        """Drop the mailbox; later casts are ignored."""
        self._dead = True
        self._mailbox.clear()

    # -- to implement -----------------------------------------------------------------------
    def handle(self, msg: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def after_batch(self) -> None:
        """Runs after every drained batch (emit what the batch produced, e.g. confirms)."""
        return None

    def on_mailbox_empty(self) -> None:
        """Runs when the mailbox has been drained completely."""
        return None

    def crashed(self, exc: BaseException) -> None:
        """An unexpected exception escaped `handle` (or a hook): log the traceback. Processes
        override this to close what they belong to (a channel closes its connection with
        541 INTERNAL_ERROR)."""
        log.error("unexpected error in %r", self, exc_info=exc)
