# bench/confirms.py — a publisher channel's outstanding publisher confirms, tracked per batch.
#
# Owns: msg_seq_no ranges still waiting for basic.ack / basic.nack, stored as batches
# [first msg_seq_no, tags, sent ns] (a batch is what one write sent, so the bookkeeping costs
# O(1) per batch instead of a dict entry per message), settling by single or multiple
# (n)acks, and expiry by age. Pure: no I/O, time passed in.
# Talks to: bench.publisher.
# Must never: lose or double-count a message: every msg_seq_no added is settled or expired once.
"""Outstanding confirms (RabbitMQ publisher confirms: https://www.rabbitmq.com/docs/confirms)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence


class Outstanding:
    """Batches of consecutive msg_seq_nos; ``len()`` is the number of messages outstanding."""

    def __init__(self) -> None:
        self.batches: deque[list] = deque()  # [first msg_seq_no, tags (range/list), sent ns]
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def add(self, first_msn: int, tags: Sequence[int], sent_ns: int) -> None:
        """Messages ``first_msn .. first_msn + len(tags) - 1`` were just published."""
        if tags:
            self.batches.append([first_msn, tags, sent_ns])
            self.count += len(tags)

    def settle(self, dtag: int, multiple: bool) -> list[tuple[Sequence[int], int]]:
        """(n)ack for ``dtag`` (and everything below when ``multiple``): the settled pieces
        as (tags, sent ns). Unknown or already settled tags settle nothing."""
        out: list[tuple[Sequence[int], int]] = []
        batches = self.batches
        if multiple:
            while batches:
                b = batches[0]
                first, tags, sent = b
                if first > dtag:
                    break
                if first + len(tags) - 1 <= dtag:
                    batches.popleft()
                    out.append((tags, sent))
                else:
                    k = dtag - first + 1
                    out.append((tags[:k], sent))
                    b[0], b[1] = dtag + 1, tags[k:]
                    break
        else:
            for i, b in enumerate(batches):
                first, tags, sent = b
                if dtag < first:
                    break
                if dtag < first + len(tags):
                    k = dtag - first
                    out.append((tags[k : k + 1], sent))
                    left, right = tags[:k], tags[k + 1 :]
                    if left and right:
                        b[1] = left
                        batches.insert(i + 1, [dtag + 1, right, sent])
                    elif left:
                        b[1] = left
                    elif right:
                        b[0], b[1] = dtag + 1, right
                    else:
                        del batches[i]
                    break
        self.count -= sum(len(t) for t, _ in out)
        return out

    def expire(self, sent_before_ns: int) -> list[int]:
        """Remove and return the tags of messages sent before ``sent_before_ns``."""
        tags: list[int] = []
        batches = self.batches
        while batches and batches[0][2] < sent_before_ns:
            tags.extend(batches.popleft()[1])
        self.count -= len(tags)
        return tags
