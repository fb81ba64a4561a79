# broker/backing_queue/vq_confirms.py — which of a variable queue's messages are owed a
# publisher confirm, and when each becomes confirmable.
#
# Owns: the owed / waiting-for-store / waiting-for-index sets and the ready list of one
# variable queue, and the inbox the fsync workers post to.
# Talks to: nothing; the variable queue calls it, the index's and the store's fsync workers
# call `index_synced` / `store_synced` (which only append to a deque).
# Must never: be read or changed from a worker thread except through those two posts.
"""Confirm bookkeeping of a variable queue (RabbitMQ's rabbit_variable_queue
`record_confirms`, `msgs_written_to_disk`, `msg_indices_written_to_disk`).

A persistent message in a durable queue, published with a confirm owed, is confirmable
once its index entry is fsynced and, if its body went to the message store, once the store
has fsynced it too; or at once when it is acked before that (consumed messages need no
disk). Everything lives on the queue process's thread: the fsync workers only append
(`from_store`, msg_ids) to a deque (atomic) and wake the queue, and `drain` applies what
they posted first. No lock is taken on the publish path.

Shapes: msg_ids are 16-byte `bytes`; `drain()` returns each confirmable msg_id once.
"""

from __future__ import annotations

from collections import deque


class ConfirmBook:
    """The confirm state of one variable queue (module docstring)."""

    __slots__ = ("unconfirmed", "_needs_store", "_store_done", "_qi_done", "_ready",
                 "_synced")

    def __init__(self) -> None:
        self.unconfirmed: set[bytes] = set()  # msg_ids owed a confirm
        self._needs_store: set[bytes] = set()  # ...of which the body goes to the store
        self._store_done: set[bytes] = set()  # store fsynced, index not yet
        self._qi_done: set[bytes] = set()  # index fsynced, store not yet
        self._ready: list[bytes] = []  # confirmable, for drain()
        self._synced: deque[tuple[bool, list[bytes]]] = deque()  # the workers' posts

    # -- the queue process's thread -------------------------------------------------------
    def owe(self, msg_id: bytes, to_store: bool) -> None:
        """`msg_id` is owed a confirm once on disk; `to_store`: its body goes to the store."""
        self.unconfirmed.add(msg_id)
        if to_store:
            self._needs_store.add(msg_id)

    def ready_now(self, msg_id: bytes) -> None:
        """Nothing to write for `msg_id` (a transient message): confirmable at once."""
        self._ready.append(msg_id)

    def needs_store(self, msg_id: bytes) -> bool:
        """The store's fsync must report `msg_id` before it is confirmable."""
        return msg_id in self._needs_store

    def confirm(self, msg_ids: list[bytes]) -> None:
        """These owed msg_ids are confirmable now (acked, or both fsyncs reported)."""
        for msg_id in msg_ids:
            self.unconfirmed.discard(msg_id)
            self._needs_store.discard(msg_id)
            self._store_done.discard(msg_id)
            self._qi_done.discard(msg_id)
            self._ready.append(msg_id)

    def drain(self) -> list[bytes]:
        """The confirmable msg_ids since the last drain (the workers' posts applied first)."""
        if self._synced:
            self._apply_synced()
        out, self._ready = self._ready, []
        return out

    def _apply_synced(self) -> None:
        synced = self._synced
        unconfirmed = self.unconfirmed
        while synced:
            from_store, msg_ids = synced.popleft()
            ready = []
            if from_store:
                for msg_id in msg_ids:
                    if msg_id not in unconfirmed:
                        continue
                    if msg_id in self._qi_done:
                        ready.append(msg_id)
                    else:
                        self._store_done.add(msg_id)
            else:
                for msg_id in msg_ids:
                    if msg_id not in unconfirmed:
                        continue
                    if msg_id in self._needs_store and msg_id not in self._store_done:
                        self._qi_done.add(msg_id)
                    else:
                        ready.append(msg_id)
            if ready:
                self.confirm(ready)

    # -- any thread (the fsync workers) ----------------------------------------------------
    def index_synced(self, msg_ids: list[bytes]) -> None:
        """The queue index made these publishes durable (post; applied by `drain`)."""
        self._synced.append((False, msg_ids))

    def store_synced(self, msg_ids: list[bytes]) -> None:
        """The persistent store fsynced these bodies (post; applied by `drain`)."""
        self._synced.append((True, msg_ids))
