"""basic.qos accounting for one channel (RabbitMQ `rabbit_limiter.erl`).

Owns: the channel-wide prefetch limit (basic.qos global=true) and the default per-consumer
limit new consumers get (global=false), plus the channel's unacked count. Pure: the channel
updates it on ack, the queue processes read `can_send` and count deliveries through the
channel's façade. Semantics as RabbitMQ redefines them (rabbitmq.com/consumer-prefetch.html):
global=false limits each consumer created afterwards; global=true limits the whole channel;
both may apply at once. 0 = unlimited. prefetch_size is not supported (RabbitMQ ignores it).
"""

from __future__ import annotations


class Limiter:
    """Channel-level prefetch state. `unacked` counts deliveries awaiting ack (no-ack
    deliveries are never counted)."""

    __slots__ = ("prefetch_count", "consumer_prefetch", "unacked", "reserved", "active")

    def __init__(self) -> None:
        self.prefetch_count = 0  # channel-wide limit (global=true); 0 = none
        self.consumer_prefetch = 0  # limit given to consumers created later (global=false)
        self.unacked = 0  # ack-required deliveries not yet acked/rejected on this channel
        # deliveries the channel-wide limit has promised to queues of other worker
        # processes (broker/workers/global_qos.py) and they have not sent yet; 0 in one
        self.reserved = 0
        self.active = True  # channel.flow: False stops deliveries to this channel

    def qos(self, prefetch_count: int, global_: bool) -> None:
        """Apply basic.qos (prefetch_size is ignored as by RabbitMQ)."""
        if global_:
            self.prefetch_count = prefetch_count
        else:
            # RabbitMQ 3.10 also lifts the channel-wide limit here (rabbit_channel calls
            # rabbit_limiter:unlimit_prefetch); the integration suite checks this quirk
            self.consumer_prefetch = prefetch_count
            self.prefetch_count = 0

    def can_send(self) -> bool:
        """True when the channel-wide limit allows one more ack-required delivery."""
        return self.active and (self.prefetch_count == 0
                                or self.unacked + self.reserved < self.prefetch_count)

    def full(self) -> bool:
        """The channel-wide limit is reached (what is unacked and promised fills it)."""
        return bool(self.prefetch_count) and (
            self.unacked + self.reserved >= self.prefetch_count)

    def on_deliver(self) -> None:
        self.unacked += 1

    def on_ack(self, n: int = 1) -> None:
        self.unacked -= n
