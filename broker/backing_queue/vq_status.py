"""Records of the variable queue: `MsgStatus` (RabbitMQ's `#msg_status{}`), the `Delta` range
and the EWMA rates behind `ram_duration`. Plain data owned by one `VariableQueue`; no I/O.
Source: rabbit_variable_queue.erl.
"""

from __future__ import annotations

import math
import time

from broker.backing_queue.base import MessageProps
from broker.message import Message

MSG_STORE = "msg_store"  # persist_to: body goes to the message store (index holds the id)
QUEUE_INDEX = "queue_index"  # persist_to: whole message embedded in the queue index


class MsgStatus:
    """One message the queue knows about (ready in q1..q4 or pending ack).

    seq_id: position in the queue, also the ack tag. msg_id: 16-byte store key.
    msg: the Message when in RAM, else None (beta/delta, or a paged pending ack).
    is_persistent: delivery_mode 2 *and* durable queue: must survive a restart.
    is_delivered: delivered before (redelivered flag; index has a deliver entry if on disk).
    msg_in_store: the body is in a message store (persistent or transient one).
    index_on_disk: the index holds a publish entry for seq_id.
    persist_to: MSG_STORE or QUEUE_INDEX (embedded), from the embed threshold.
    size: body bytes. props: MessageProps given at publish (expiry ms, needs_confirming).
    """

    __slots__ = (
        "seq_id",
        "msg_id",
        "msg",
        "is_persistent",
        "is_delivered",
        "msg_in_store",
        "index_on_disk",
        "persist_to",
        "size",
        "props",
    )

    def __init__(
        self,
        seq_id: int,
        msg_id: bytes,
        msg: Message | None,
        is_persistent: bool,
        is_delivered: bool,
        persist_to: str,
        size: int,
        props: MessageProps,
        msg_in_store: bool = False,
        index_on_disk: bool = False,
    ) -> None:
        self.seq_id = seq_id
        self.msg_id = msg_id
        self.msg = msg
        self.is_persistent = is_persistent
        self.is_delivered = is_delivered
        self.msg_in_store = msg_in_store
        self.index_on_disk = index_on_disk
        self.persist_to = persist_to
        self.size = size
        self.props = props

    @property
    def expiry(self) -> int | None:
        """Absolute expiry in ms since the epoch, or None."""
        return self.props.expiry

    @property
    def needs_confirming(self) -> bool:
        """The publisher waits for this queue's confirm."""
        return self.props.needs_confirming

    def __repr__(self) -> str:
        state = "alpha" if self.msg is not None and not self.index_on_disk else (
            "gamma" if self.index_on_disk else "beta")
        return f"MsgStatus({self.seq_id}, {state}, delivered={self.is_delivered})"


class Delta:
    """Messages only on disk: `count` un-acked index entries with seq ids in
    [start_seq_id, end_seq_id) that are neither ready in RAM nor pending ack.
    bytes: their body bytes. transient / transient_bytes: how many of them (and their bytes)
    are not persistent (dropped at a clean shutdown)."""

    __slots__ = ("start_seq_id", "count", "end_seq_id", "bytes", "transient", "transient_bytes")

    def __init__(self, start: int = 0, count: int = 0, end: int = 0, nbytes: int = 0) -> None:
        self.start_seq_id = start
        self.count = count
        self.end_seq_id = end
        self.bytes = nbytes
        self.transient = 0
        self.transient_bytes = 0

    def add(self, seq_id: int, is_persistent: bool, size: int) -> None:
        """Widen the range to take `seq_id` (RabbitMQ `expand_delta`)."""
        if self.count == 0:
            self.start_seq_id, self.end_seq_id = seq_id, seq_id + 1
        else:
            self.start_seq_id = min(self.start_seq_id, seq_id)
            self.end_seq_id = max(self.end_seq_id, seq_id + 1)
        self.count += 1
        self.bytes += size
        if not is_persistent:
            self.transient += 1
            self.transient_bytes += size

    def took(self, is_persistent: bool, size: int) -> None:
        """One message left delta for q3 (the caller moves start_seq_id and count)."""
        self.bytes -= size
        if not is_persistent:
            self.transient -= 1
            self.transient_bytes -= size

    def clear(self) -> None:
        """Empty range."""
        self.start_seq_id = self.end_seq_id = self.count = self.bytes = 0
        self.transient = self.transient_bytes = 0

    def __repr__(self) -> str:
        return f"Delta({self.start_seq_id}, {self.count}, {self.end_seq_id})"


class Rates:
    """Ingress/egress/ack rates (msg/s) as exponentially weighted averages with a 5 s
    half-life, sampled whenever `update` runs (RabbitMQ `update_rates`, `rabbit_misc:moving_average`)."""

    HALF_LIFE = 5.0  # seconds

    def __init__(self) -> None:
        self.counts = [0, 0, 0, 0]  # since the last sample: in, out, ack_in, ack_out
        self.avg = [0.0, 0.0, 0.0, 0.0]  # msg/s
        self.last = time.monotonic()

    def update(self, now: float | None = None) -> float:
        """Fold the counts into the averages; returns the summed rate in msg/s."""
        now = time.monotonic() if now is None else now
        elapsed = now - self.last
        if elapsed > 0:
            weight = math.exp(math.log(0.5) * elapsed / self.HALF_LIFE)
            for i, c in enumerate(self.counts):
                self.avg[i] = weight * self.avg[i] + (1 - weight) * (c / elapsed)
                self.counts[i] = 0
            self.last = now
        return sum(self.avg)
