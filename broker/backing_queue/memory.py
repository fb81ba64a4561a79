"""In-memory backing queue: the reference implementation and test oracle.

Owns: the ready list and pending acks of one queue, in RAM only. Nothing is ever written, so
nothing needs confirming (`drain_confirmed` is always empty): a durable queue backed by this
class loses its messages on restart. Follows `base.BackingQueue`; the variable queue must behave
the same as this class in every observable way (Hypothesis tests compare them).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterable

from broker.backing_queue.base import AckTag, Fetched, MessageProps
from broker.message import Message

# ready entry: (seq_id, message, props, delivered_before)
_Entry = tuple[int, Message, MessageProps, bool]


class MemoryBackingQueue:
    """Ready messages in a deque ordered by seq_id, pending acks in a dict by seq_id."""

    def __init__(
        self,
        name: tuple[str, str] = ("/", ""),
        durable: bool = False,
        notify: Callable[[], None] | None = None,
        **_options: object,
    ) -> None:
        self.name = name  # (vhost, queue) for logs
        self._ready: deque[_Entry] = deque()  # head = next to fetch; seq_id increasing
        self._pending: dict[int, tuple[Message, MessageProps]] = {}  # seq_id -> unacked msg
        self._next_seq_id = 0  # seq_id of the next publish
        self._bytes = 0  # body bytes of ready + pending messages
        self._ready_bytes = 0  # body bytes of ready messages

    # -- publishing -------------------------------------------------------------------------
    def publish(self, message: Message, props: MessageProps, delivered: bool = False) -> None:
        seq_id = self._next_seq_id
        self._next_seq_id = seq_id + 1
        self._ready.append((seq_id, message, props, delivered))
        self._bytes += len(message.body)
        self._ready_bytes += len(message.body)

    def publish_delivered(self, message: Message, props: MessageProps) -> AckTag:
        seq_id = self._next_seq_id
        self._next_seq_id = seq_id + 1
        self._pending[seq_id] = (message, props)
        self._bytes += len(message.body)
        return seq_id

    # -- consuming --------------------------------------------------------------------------
    def fetch(self, need_ack: bool) -> Fetched | None:
        if not self._ready:
            return None
        seq_id, message, props, delivered = self._ready.popleft()
        self._ready_bytes -= len(message.body)
        if need_ack:
            self._pending[seq_id] = (message, props)
            return Fetched(message, delivered, seq_id, props, seq_id)
        self._bytes -= len(message.body)
        return Fetched(message, delivered, None, props, seq_id)

    def ack(self, ack_tags: Iterable[AckTag]) -> list[bytes]:
        out = []
        pending = self._pending
        for tag in ack_tags:
            entry = pending.pop(tag, None)
            if entry is not None:
                self._bytes -= len(entry[0].body)
                out.append(entry[0].msg_id)
        return out

    def requeue(self, ack_tags: Iterable[AckTag]) -> None:
        back: list[_Entry] = []
        for tag in sorted(ack_tags):
            entry = self._pending.pop(tag, None)
            if entry is not None:
                back.append((tag, entry[0], entry[1], True))
        if not back:
            return
        self._ready_bytes += sum(len(e[1].body) for e in back)
        if not self._ready or back[-1][0] < self._ready[0][0]:
            self._ready.extendleft(reversed(back))
        else:
            self._ready = deque(heapq.merge(back, self._ready, key=lambda e: e[0]))

    def discard_pending(self, ack_tags: Iterable[AckTag]) -> list[tuple[Message, MessageProps]]:
        out = []
        for tag in sorted(ack_tags):
            entry = self._pending.pop(tag, None)
            if entry is not None:
                self._bytes -= len(entry[0].body)
                out.append(entry)
        return out

    def dropwhile(
        self, pred: Callable[[MessageProps], bool]
    ) -> list[tuple[Message, MessageProps]]:
        out = []
        ready = self._ready
        while ready and pred(ready[0][2]):
            _seq, message, props, _d = ready.popleft()
            self._bytes -= len(message.body)
            self._ready_bytes -= len(message.body)
            out.append((message, props))
        return out

    def peek_props(self) -> MessageProps | None:
        return self._ready[0][2] if self._ready else None

    def peek(self, offset: int, count: int) -> list[tuple[Message, bool]]:
        return [(m, d) for _s, m, _p, d in itertools.islice(self._ready, offset, offset + count)]

    # -- whole-queue operations -------------------------------------------------------------
    def purge(self) -> int:
        count = len(self._ready)
        for _seq, message, _p, _d in self._ready:
            self._bytes -= len(message.body)
        self._ready.clear()
        self._ready_bytes = 0
        return count

    def purge_acks(self) -> None:
        for message, _p in self._pending.values():
            self._bytes -= len(message.body)
        self._pending.clear()

    def len(self) -> int:
        return len(self._ready)

    def is_empty(self) -> bool:
        return not self._ready

    def depth(self) -> int:
        return len(self._ready) + len(self._pending)

    def ready_bytes(self) -> int:
        return self._ready_bytes

    def drain_confirmed(self) -> list[bytes]:
        return []

    def needs_sync(self) -> bool:
        return False

    def sync(self) -> None:
        return None

    def set_ram_duration_target(self, duration: float | None) -> None:
        return None

    def ram_duration(self) -> float | None:
        return None

    def needs_resume(self) -> bool:
        return False

    def resume(self) -> None:
        return None

    def flow_blocked(self) -> bool:
        return False

    def stats(self) -> dict[str, int]:
        n = len(self._ready)
        return {
            "len": n,
            "pending_acks": len(self._pending),
            "ram_msgs": n + len(self._pending),
            "persistent": sum(1 for e in self._ready if e[1].persistent),
            "bytes": self._bytes,
        }

    def terminate(self) -> None:
        return None

    def delete_and_terminate(self) -> None:
        self._ready.clear()
        self._pending.clear()
        self._bytes = self._ready_bytes = 0
