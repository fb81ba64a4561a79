"""A quorum queue's delivery counts: how many times each message was returned.

rabbit_fifo (RabbitMQ 3.10.8) keeps a `delivery_count` in each message's header in the
queue's Raft log: every return (a reject or nack with requeue, the consumer's channel going
down with the message unacked) raises it (`return_one/7`), and past `x-delivery-limit` the
message is dead-lettered. Here the classic backing queue keeps the messages and this map
keeps the counts, by seq_id, for the messages returned at least once (most messages never
are, and cost nothing here).

Owns: the map and its file `delivery_counts` in the queue's directory, records
`SeqId:u64 | Count:u32 | State:u8`: RETURNED (the message is ready again with this count),
OUT (it was delivered again after a return) and SETTLED (acked, rejected or dead-lettered:
forgotten). At load, a message last seen OUT counts one more return: the restart took it
from its consumer, as rabbit_fifo returns the messages of a consumer whose channel is gone.
Records are appended without fsync (a killed broker keeps them; a power cut may lose the
latest increments, which only lets a message be delivered once more) and fsynced with the
queue's index; the file is compacted at load and at a clean stop.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from broker.quorum.record_log import RecordLog

RETURNED, OUT, SETTLED = 0, 1, 2
_REC = struct.Struct(">QIB")
FILE = "delivery_counts"


class DeliveryCounts:
    """seq_id → returns so far, kept in `directory` (None: in memory only, the queue has no
    storage)."""

    def __init__(self, directory: str | None) -> None:
        self._counts: dict[int, int] = {}
        self._out: set[int] = set()  # returned, then delivered again: not settled yet
        self._log = RecordLog(directory, FILE) if directory is not None else None
        if self._log is not None:
            for payload in self._log.load():
                seq_id, count, state = _REC.unpack(payload)
                if state == SETTLED:
                    self._counts.pop(seq_id, None)
                    self._out.discard(seq_id)
                    continue
                self._counts[seq_id] = count
                if state == OUT:
                    self._out.add(seq_id)
                else:
                    self._out.discard(seq_id)
            for seq_id in self._out:  # the restart returned what consumers held
                self._counts[seq_id] += 1
            self._out.clear()
            self._compact()

    def __len__(self) -> int:
        return len(self._counts)

    def get(self, seq_id: int) -> int | None:
        """The returns of message `seq_id`, None if it was never returned."""
        return self._counts.get(seq_id)

    def returned(self, seq_id: int) -> int:
        """Message `seq_id` came back (a return): its count, raised by one."""
        count = self._counts.get(seq_id, 0) + 1
        self._counts[seq_id] = count
        self._out.discard(seq_id)
        self._write(seq_id, count, RETURNED)
        return count

    def delivered(self, seq_id: int) -> None:
        """A returned message `seq_id` went to a consumer again (a restart now counts it)."""
        if seq_id not in self._out:
            self._out.add(seq_id)
            self._write(seq_id, self._counts[seq_id], OUT)

    def settle(self, seq_ids: Iterable[int]) -> None:
        """Messages that left the queue (acked, rejected, dead-lettered, taken without
        ack): forgotten."""
        counts = self._counts
        for seq_id in seq_ids:
            if counts.pop(seq_id, None) is not None:
                self._out.discard(seq_id)
                self._write(seq_id, 0, SETTLED)
        if self._log is not None and self._log.records > 4 * len(counts) + 4096:
            self._compact()

    def sync(self) -> None:
        """fsync the records appended since the last sync."""
        if self._log is not None:
            self._log.sync()

    def close(self, compact: bool) -> None:
        """Stop: with `compact` (a clean stop) leave only the live counts in the file."""
        if self._log is not None:
            if compact:
                self._compact()
            self._log.close()

    def _write(self, seq_id: int, count: int, state: int) -> None:
        if self._log is not None:
            self._log.append(_REC.pack(seq_id, count, state))

    def _compact(self) -> None:
        assert self._log is not None
        out = self._out
        self._log.rewrite(_REC.pack(seq_id, count, OUT if seq_id in out else RETURNED)
                          for seq_id, count in self._counts.items())
