"""A channel-wide prefetch limit (basic.qos global=true, RabbitMQ's rabbit_limiter) over
queues that live in other worker processes (issue 47, docs/multicore.md "Limits across
workers").

The channel's limit is counted where the channel lives. A queue of another worker may send
the channel an ack-required delivery only with credit its channel's worker granted:
`RemoteChannel.global_credit` (broker/workers/remote.py) is None while the channel has no
channel-wide limit, else the deliveries still allowed. Out of credit with messages to send,
the queue's worker asks (`("gq_want", ref)`); the channel's worker grants what its limit
leaves, counting it as reserved in the channel's Limiter (so its own queues see the room
taken) until the deliveries arrive, splits it among the workers that asked, and grants
again when acks free room (`ChannelProcess.on_capacity`). basic.qos tells each worker that
feeds the channel whether a channel-wide limit now applies (`("gq_mode", ref, limited)`),
which also drops the credit it held. Like RabbitMQ, deliveries already on their way when
the limit is lowered still arrive.

Owns: `GlobalQos`, in every worker: both sides of the exchange above. Talks to: the mesh,
the runtime's channels (ours by ref) and remote channels (theirs by ref). Must never: let a
queue of another worker deliver past a channel-wide limit it was told of.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Protocol

from broker.limiter import Limiter
from broker.workers.refs import ChannelRef


class QosChannel(Protocol):
    """One of our channels, as the grants see it (broker/channel.py ChannelProcess)."""

    limiter: Limiter
    state: str
    on_capacity: Callable[[], None] | None


class CreditedChannel(Protocol):
    """Another worker's channel as our queues see it (broker/workers/remote.py
    RemoteChannel)."""

    def add_global_credit(self, n: int) -> None: ...

    def set_global_limited(self, limited: bool) -> None: ...


class GlobalQos:
    """See the module docstring. `local_channel(ref)` finds one of our channels (None when
    it closed); `remote_channel(ref)` another worker's channel's proxy here (None if none);
    `send(worker, record)` sends."""

    def __init__(self, index: int, send: Callable[[int, tuple], None],
                 local_channel: Callable[[ChannelRef], QosChannel | None],
                 remote_channel: Callable[[ChannelRef], CreditedChannel | None],
                 channel_ref: Callable[[QosChannel], ChannelRef | None]) -> None:
        self.index = index
        self._send = send
        self._local = local_channel
        self._remote = remote_channel
        self._ref = channel_ref
        # our channels (forgotten with them): worker -> credit granted and not yet used,
        # and the workers that wait for more
        self._granted: weakref.WeakKeyDictionary[QosChannel, dict[int, int]] = (
            weakref.WeakKeyDictionary())
        self._wanting: weakref.WeakKeyDictionary[QosChannel, set[int]] = (
            weakref.WeakKeyDictionary())

    # -- the channel's side --------------------------------------------------------------
    def limited(self, ch: QosChannel) -> bool:
        """Does `ch` have a channel-wide limit (for a new remote consumer's payload)?"""
        if ch.on_capacity is None:
            ch.on_capacity = lambda: self.grant(ch)
        return bool(ch.limiter.prefetch_count)

    def qos_changed(self, ch: QosChannel, workers: set[int]) -> None:
        """basic.qos on `ch`, which consumes from queues of `workers`: each is told whether
        a channel-wide limit applies; the credit they held is dropped (room given back)."""
        ref = self._ref(ch)
        if ref is None:
            return
        granted = self._granted.pop(ch, {})
        ch.limiter.reserved = max(0, ch.limiter.reserved - sum(granted.values()))
        self._wanting.pop(ch, None)
        for worker in sorted(workers):
            self._send(worker, ("gq_mode", ref, bool(ch.limiter.prefetch_count)))

    def delivered(self, ch: QosChannel, worker: int, n: int) -> None:
        """`n` ack-required deliveries from `worker`'s queues reached `ch`: their credit is
        used (the Limiter counts them unacked now)."""
        granted = self._granted.get(ch)
        if not granted:
            return
        used = min(n, granted.get(worker, 0))
        if used:
            granted[worker] -= used
            ch.limiter.reserved = max(0, ch.limiter.reserved - used)

    def grant(self, ch: QosChannel) -> None:
        """Give the room `ch`'s limit leaves to the workers that asked, split evenly."""
        wanting = self._wanting.get(ch)
        if not wanting:
            return
        ref = self._ref(ch)
        limiter = ch.limiter
        if ref is None or not limiter.prefetch_count:
            return
        room = limiter.prefetch_count - limiter.unacked - limiter.reserved
        if room <= 0:
            return
        share = max(1, room // len(wanting))
        granted = self._granted.setdefault(ch, {})
        for worker in sorted(wanting):
            n = min(share, room)
            if n <= 0:
                break
            room -= n
            limiter.reserved += n
            granted[worker] = granted.get(worker, 0) + n
            wanting.discard(worker)
            self._send(worker, ("gq_credit", ref, n))

    def on_want(self, peer: int, record: tuple) -> None:
        ch = self._local(record[1])
        if ch is None or ch.state != "open":
            return
        self._wanting.setdefault(ch, set()).add(peer)
        self.grant(ch)

    # -- the queue's side ----------------------------------------------------------------
    def on_credit(self, peer: int, record: tuple) -> None:
        rc = self._remote(record[1])
        if rc is not None:
            rc.add_global_credit(record[2])

    def on_mode(self, peer: int, record: tuple) -> None:
        rc = self._remote(record[1])
        if rc is not None:
            rc.set_global_limited(record[2])
