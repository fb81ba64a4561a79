"""One agreed order for definition changes across worker processes (issue 47,
docs/multicore.md "Definitions in one agreed order"): pure bookkeeping, sans-IO (STYLE §4).

Owns: `ChangeLog`, the metadata owner's side: it stamps each change (a declare, bind, delete,
policy, user or permission change) with the next sequence number, remembers which request
asked for it, and says when every live worker has applied it, so that the requester's
`declare-ok` / `bind-ok` / `delete-ok` goes out only then: a publish from any connection, on
any worker, routes with the change once a client has seen its `-ok` (RabbitMQ answers after
the Mnesia transaction; ../shared/MULTICORE.md point 1). `ChangeApplier`, a worker's side:
hands changes to the worker's tables strictly in sequence order, once each.
Talks to: the node process (ChangeLog) and each worker (ChangeApplier), through
`broker.workers.link`. Must never: apply a change itself, or do I/O.

Acknowledgements are cumulative: a worker that reports `seq` has applied every change up to
it. A change is complete when every worker that is live has applied it, so completions come
in sequence order. A worker that dies stops being waited for (its restart loads the tables
as of `last_seq` and then follows the log from there: `worker_back`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

T = TypeVar("T")  # what identifies a request: the node process's reply address


class ChangeLog(Generic[T]):
    """The metadata owner's log. `propose(token)` -> seq; `applied(worker, seq)` and
    `worker_gone(worker)` return the tokens whose changes every live worker has now applied,
    in sequence order, each once."""

    def __init__(self, workers: Iterable[int]) -> None:
        self.live: set[int] = set(workers)  # workers that apply changes and are waited for
        self.applied_by: dict[int, int] = dict.fromkeys(self.live, 0)  # worker -> last seq applied
        self.last_seq = 0  # the last number stamped (0: none yet)
        self._pending: deque[tuple[int, T]] = deque()  # (seq, token) not yet complete, in order

    def propose(self, token: T) -> int:
        """Stamp a change for request `token`: its sequence number, which the caller sends
        with the change to every live worker (and applies to its own authoritative tables
        first). With no live worker the change is complete at once: see `completed`."""
        self.last_seq += 1
        self._pending.append((self.last_seq, token))
        return self.last_seq

    def applied(self, worker: int, seq: int) -> list[T]:
        """Worker `worker` has applied every change up to `seq`. ValueError for a number
        never stamped or going backwards (a worker's acknowledgements only grow)."""
        if worker not in self.live:
            return []  # a late report from a worker already given up on
        if seq > self.last_seq or seq < self.applied_by[worker]:
            raise ValueError(f"worker {worker} reports change {seq}: it had applied "
                             f"{self.applied_by[worker]}, the last stamped is {self.last_seq}")
        self.applied_by[worker] = seq
        return self.completed()

    def worker_gone(self, worker: int) -> list[T]:
        """Stop waiting for `worker` (its process died); the changes only it held back are
        complete now."""
        self.live.discard(worker)
        self.applied_by.pop(worker, None)
        return self.completed()

    def worker_back(self, worker: int) -> int:
        """`worker` (re)starts from the owner's tables as of now: the sequence number those
        tables include. It is waited for from the next change on."""
        self.live.add(worker)
        self.applied_by[worker] = self.last_seq
        return self.last_seq

    def completed(self) -> list[T]:
        """Pop the tokens of every change that all live workers have applied."""
        floor = min(self.applied_by.values(), default=self.last_seq)
        done: list[T] = []
        pending = self._pending
        while pending and pending[0][0] <= floor:
            done.append(pending.popleft()[1])
        return done

    @property
    def waiting(self) -> int:
        """Changes stamped and not yet applied by every live worker."""
        return len(self._pending)


class ChangeApplier:
    """A worker's side: `receive(seq, change)` returns the changes that can be applied now,
    in order (none while an earlier one is missing; a number already applied is dropped);
    `applied` is what to report back to the owner after applying them."""

    def __init__(self, applied: int = 0) -> None:
        self.applied = applied  # the last seq handed out for applying
        self._early: dict[int, Any] = {}  # seq -> change received before its predecessors

    def receive(self, seq: int, change: Any) -> list[tuple[int, Any]]:
        if seq <= self.applied or seq in self._early:
            return []
        self._early[seq] = change
        ready: list[tuple[int, Any]] = []
        while self.applied + 1 in self._early:
            self.applied += 1
            ready.append((self.applied, self._early.pop(self.applied)))
        return ready
