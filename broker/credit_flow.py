"""Credit-based flow control between processes (RabbitMQ `credit_flow.erl`).

Owns: pure counters. A sender holds `initial` credits per receiver and spends one per message;
the receiver, each time it has handled `more_after` messages from a sender, grants that many
back. A sender with no credit left for some receiver is *blocked*. No I/O, no asyncio: the
reader, channels and queues act on `blocked`. Defaults `(400, 200)` (credit_flow_default_credit)
for reader -> channel -> queue, `(4000, 800)` (msg_store_credit_disc_bound) for queue -> message
store. `flow_state` turns a sender's state into RabbitMQ's `running` / `flow` for operations
tooling (management API connection and channel `state`). The one clock read is the monotonic
time of a sender's transition to blocked (`blocked_at`), rare by construction.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterable

# credit_flow:state/0 reports "flow" while blocked and for this long after the last block (s)
FLOW_STATE_WINDOW = 5.0


def flow_state(blocked: bool, blocked_at: float | None, now: float) -> str:
    """"flow" while `blocked` or within FLOW_STATE_WINDOW seconds of `blocked_at` (monotonic
    seconds of the last block), else "running" (RabbitMQ credit_flow:state/0)."""
    if blocked or (blocked_at is not None and now - blocked_at < FLOW_STATE_WINDOW):
        return "flow"
    return "running"


class CreditFlow:
    """Both halves of credit flow for one process.

    Sender half: `send(peer)` after sending one message to `peer`; `grant(peer, n)` when the
    peer grants credit; `blocked` is True while any peer's credit is exhausted.
    Receiver half: `ack(sender)` after handling one message from `sender`; returns the credit
    to grant back now (0 most of the time, `more_after` every `more_after` messages).
    """

    __slots__ = ("initial", "more_after", "_credit", "_blocked_on", "_unacked", "blocked_at",
                 "_held")

    def __init__(self, initial: int = 400, more_after: int = 200) -> None:
        self.initial = initial  # credit a sender starts with per receiver
        self.more_after = more_after  # receiver grants this many after handling this many
        self._credit: dict[Hashable, int] = {}  # sender side: credit left per receiver
        self._blocked_on: set[Hashable] = set()  # sender side: receivers with no credit left
        self._unacked: dict[Hashable, int] = {}  # receiver side: handled since last grant
        self.blocked_at: float | None = None  # monotonic s the sender last became blocked
        self._held: dict[Hashable, int] = {}  # sender side: credit set aside by `block`

    # sender side
    def send(self, peer: Hashable, n: int = 1) -> bool:
        """Spend `n` credits on `peer` (n messages sent); returns True if this made the
        sender blocked."""
        credit = self._credit.get(peer, self.initial) - n
        self._credit[peer] = credit
        if credit <= 0 and peer not in self._blocked_on:
            self._blocked_on.add(peer)
            self.blocked_at = time.monotonic()  # only on the (rare) transition
            return True
        return False

    def grant(self, peer: Hashable, n: int) -> bool:
        """Receive `n` credits from `peer`; returns True if this unblocked the sender. While
        `peer` blocks the sender, the credit is set aside with the rest."""
        if peer in self._held:
            self._held[peer] += n
            return False
        credit = self._credit.get(peer, self.initial) + n
        self._credit[peer] = credit
        if credit > 0 and peer in self._blocked_on:
            self._blocked_on.discard(peer)
            return not self._blocked_on
        return False

    def block(self, peer: Hashable) -> bool:
        """`peer` asks the sender to stop at once, whatever credit is left (RabbitMQ
        credit_flow:block/1; here a busy queue's consumer bias, broker/consumer_bias.py): the
        credit is set aside until `unblock`. Returns True if this made the sender blocked."""
        if peer in self._held:
            return False
        self._held[peer] = self._credit.get(peer, self.initial)
        self._credit[peer] = 0
        if peer not in self._blocked_on:
            self._blocked_on.add(peer)
            self.blocked_at = time.monotonic()
            return len(self._blocked_on) == 1
        return False

    def unblock(self, peer: Hashable) -> bool:
        """Give back what `block` set aside; returns True if this unblocked the sender."""
        held = self._held.pop(peer, None)
        if held is None:
            return False
        return self.grant(peer, held)

    def peer_down(self, peer: Hashable) -> bool:
        """Forget `peer` (it died); returns True if this unblocked the sender."""
        self._credit.pop(peer, None)
        self._unacked.pop(peer, None)
        self._held.pop(peer, None)
        if peer in self._blocked_on:
            self._blocked_on.discard(peer)
            return not self._blocked_on
        return False

    @property
    def blocked(self) -> bool:
        return bool(self._blocked_on)

    def credit_left(self, peer: Hashable) -> int:
        """Credit the sender has left for `peer` (`initial` before the first send)."""
        return self._credit.get(peer, self.initial)

    # receiver side
    def senders(self) -> Iterable[Hashable]:
        """The senders this receiver has counted messages from (and not seen go down)."""
        return self._unacked.keys()

    def ack(self, sender: Hashable, n: int = 1) -> int:
        """Count `n` handled messages from `sender`; returns credit to grant back (maybe 0)."""
        count = self._unacked.get(sender, 0) + n
        if count >= self.more_after:
            grant = count - count % self.more_after
            self._unacked[sender] = count - grant
            return grant
        self._unacked[sender] = count
        return 0
