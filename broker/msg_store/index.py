"""The message store's in-RAM index and file summaries (RabbitMQ `rabbit_msg_store_ets_index`
and the `#file_summary{}` records of `rabbit_msg_store.erl`).

Owns: where each stored message lives and how many queues still reference it, plus per-file
byte totals the GC decides on. Plain data; `store.MessageStore` guards every access with its
lock (the GC thread reads and updates both under that lock).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class IndexEntry:
    """Location of one stored message: msg_id → (ref_count, file, offset, total_size).

    ref_count: how many enqueues (across this vhost's queues) still need the body.
    file: the `<N>.rdq` number. offset, total_size: byte position and length of the whole
    record (Size + 9) in that file.
    """

    ref_count: int
    file: int
    offset: int
    total_size: int


@dataclass(slots=True)
class FileSummary:
    """Per-file totals (bytes).

    valid_total_size: bytes of records still referenced (garbage = file_size - this).
    file_size: bytes in the file, including records still in the write buffer.
    locked: the GC is combining this file; it is read-only and no file is deleted under it.
    readers: 1 while the store holds a cached read descriptor for it, else 0.
    """

    valid_total_size: int = 0
    file_size: int = 0
    locked: bool = False
    readers: int = 0


class StoreIndex:
    """msg_id → IndexEntry, as a dict (RabbitMQ's default index is an ETS set)."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[bytes, IndexEntry] = {}  # msg_id -> location + ref count

    def lookup(self, msg_id: bytes) -> IndexEntry | None:
        """The entry for `msg_id`, or None."""
        return self._entries.get(msg_id)

    def insert(self, msg_id: bytes, entry: IndexEntry) -> None:
        """Add or replace the entry of `msg_id`."""
        self._entries[msg_id] = entry

    def delete(self, msg_id: bytes) -> None:
        """Forget `msg_id` (its ref count reached 0)."""
        self._entries.pop(msg_id, None)

    def items(self) -> list[tuple[bytes, IndexEntry]]:
        """A snapshot list of (msg_id, entry) pairs."""
        return list(self._entries.items())

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, msg_id: object) -> bool:
        return msg_id in self._entries
