"""Publisher-confirm bookkeeping for one channel (RabbitMQ `rabbit_confirms.erl`).

Owns: which `msg_seq_no`s still wait for which queues, and turning released/rejected seq nos
into basic.ack/basic.nack frames batched with `multiple` (ARCHITECTURE §6). Pure: the channel
calls it when it routes a publish and when queues release or reject messages; time is not
involved. Confirm *modes* (when a queue releases) live in the queue process; this tracker only
counts releases. Source: rabbitmq.com/confirms.html ("Publisher Confirms").
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

CONFIRM_MODES = ("persist", "ack", "ack-lite")


class ConfirmTracker:
    """msg_seq_no → set of queues still to release it.

    `next_seq_no()` numbers publishes from 1 after confirm.select. `track(seq, queues)` records
    a routed publish (an empty set confirms at once: unroutable messages are acked).
    `release(queue, seqs)` / `reject(queue, seqs)` come from queues; a seq is acked once every
    queue released it and nacked as soon as one queue rejects it. `take()` returns the frames
    owed as `[(is_ack, delivery_tag, multiple)]`, nacks first, acks batched: one
    multiple=true ack up to the lowest still-pending seq no, the rest singly.
    """

    def __init__(self) -> None:
        self._seq = 0  # last msg_seq_no handed out
        self._pending: dict[int, set[Hashable]] = {}  # seq -> queues yet to release (ordered)
        self._acks: list[int] = []  # seqs confirmed, not yet sent
        self._nacks: list[int] = []  # seqs rejected, not yet sent

    def next_seq_no(self) -> int:
        self._seq += 1
        return self._seq

    def track(self, seq: int, queues: Iterable[Hashable]) -> None:
        qs = set(queues)
        if qs:
            self._pending[seq] = qs
        else:
            self._acks.append(seq)

    def release(self, queue: Hashable, seqs: Iterable[int]) -> None:
        pending = self._pending
        for seq in seqs:
            qs = pending.get(seq)
            if qs is not None:
                qs.discard(queue)
                if not qs:
                    del pending[seq]
                    self._acks.append(seq)

    def reject(self, queue: Hashable, seqs: Iterable[int]) -> None:
        for seq in seqs:
            if self._pending.pop(seq, None) is not None:
                self._nacks.append(seq)

    def queue_down(self, queue: Hashable) -> None:
        """The queue is gone (deleted): it will never release; treat as released, as
        RabbitMQ does for a deleted queue in `persist` mode."""
        self.release(queue, [s for s, qs in self._pending.items() if queue in qs])

    def has_output(self) -> bool:
        return bool(self._acks or self._nacks)

    def take(self) -> list[tuple[bool, int, bool]]:
        out: list[tuple[bool, int, bool]] = [(False, s, False) for s in sorted(self._nacks)]
        self._nacks.clear()
        if self._acks:
            acks = sorted(self._acks)
            self._acks.clear()
            lowest_pending = next(iter(self._pending), None)
            if lowest_pending is None:
                below, rest = acks, []
            else:
                i = 0
                while i < len(acks) and acks[i] < lowest_pending:
                    i += 1
                below, rest = acks[:i], acks[i:]
            if len(below) == 1:
                out.append((True, below[0], False))
            elif below:
                out.append((True, below[-1], True))
            out.extend((True, s, False) for s in rest)
        return out

    @property
    def unconfirmed(self) -> int:
        return len(self._pending)
