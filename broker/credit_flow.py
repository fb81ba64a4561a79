"""Credit-based flow control between processes (RabbitMQ `credit_flow.erl`).

Owns: pure counters. A sender holds `initial` credits per receiver and spends one per message;
the receiver, each time it has handled `more_after` messages from a sender, grants that many
back. A sender with no credit left for some receiver is *blocked*. No I/O, no asyncio: the
reader, channels and queues act on `blocked`. Defaults `(400, 200)` (credit_flow_default_credit).
"""

from __future__ import annotations

from collections.abc import Hashable


class CreditFlow:
    """Both halves of credit flow for one process.

    Sender half: `send(peer)` after sending one message to `peer`; `grant(peer, n)` when the
    peer grants credit; `blocked` is True while any peer's credit is exhausted.
    Receiver half: `ack(sender)` after handling one message from `sender`; returns the credit
    to grant back now (0 most of the time, `more_after` every `more_after` messages).
    """

    __slots__ = ("initial", "more_after", "_credit", "_blocked_on", "_unacked")

    def __init__(self, initial: int = 400, more_after: int = 200) -> None:
        self.initial = initial  # credit a sender starts with per receiver
        self.more_after = more_after  # receiver grants this many after handling this many
        self._credit: dict[Hashable, int] = {}  # sender side: credit left per receiver
        self._blocked_on: set[Hashable] = set()  # sender side: receivers with no credit left
        self._unacked: dict[Hashable, int] = {}  # receiver side: handled since last grant

    # sender side
    def send(self, peer: Hashable) -> bool:
        """Spend one credit on `peer`; returns True if this made the sender blocked."""
        credit = self._credit.get(peer, self.initial) - 1
        self._credit[peer] = credit
        if credit <= 0 and peer not in self._blocked_on:
            self._blocked_on.add(peer)
            return True
        return False

    def grant(self, peer: Hashable, n: int) -> bool:
        """Receive `n` credits from `peer`; returns True if this unblocked the sender."""
        credit = self._credit.get(peer, self.initial) + n
        self._credit[peer] = credit
        if credit > 0 and peer in self._blocked_on:
            self._blocked_on.discard(peer)
            return not self._blocked_on
        return False

    def peer_down(self, peer: Hashable) -> bool:
        """Forget `peer` (it died); returns True if this unblocked the sender."""
        self._credit.pop(peer, None)
        self._unacked.pop(peer, None)
        if peer in self._blocked_on:
            self._blocked_on.discard(peer)
            return not self._blocked_on
        return False

    @property
    def blocked(self) -> bool:
        return bool(self._blocked_on)

    # receiver side
    def ack(self, sender: Hashable, n: int = 1) -> int:
        """Count `n` handled messages from `sender`; returns credit to grant back (maybe 0)."""
        count = self._unacked.get(sender, 0) + n
        if count >= self.more_after:
            grant = count - count % self.more_after
            self._unacked[sender] = count - grant
            return grant
        self._unacked[sender] = count
        return 0
