"""Message counters: the integers channels and queues bump on the hot path, read by the
management API and Prometheus (a sampler turns them into rates every 5 s).

Owns: `MessageStats`, one per channel, per queue and per vhost (totals of closed channels),
with RabbitMQ's `message_stats` field names (rabbitmq.com/management.html, the HTTP API's
"message_stats" objects: publish, confirm, deliver, deliver_no_ack, get, get_no_ack,
deliver_get, ack, redeliver, return_unroutable, drop_unroutable). Nothing here runs per
message beyond the caller's `+= 1`; adding up happens only when someone asks.
"""

from __future__ import annotations

# every counter, in RabbitMQ's names; deliver_get is derived (deliver + deliver_no_ack +
# get + get_no_ack), as RabbitMQ reports it
FIELDS = ("publish", "confirm", "deliver", "deliver_no_ack", "get", "get_no_ack", "get_empty",
          "ack", "redeliver", "return_unroutable", "drop_unroutable")
# a queue's message_stats carry only these (rabbit_mgmt_format, queue_stats in 3.10.8):
# confirms and unroutable publishes are a channel's, not a queue's
QUEUE_FIELDS = ("publish", "deliver", "deliver_no_ack", "get", "get_no_ack", "get_empty",
                "ack", "redeliver")


class MessageStats:
    """Monotonic message counts of one channel, queue or vhost (messages, not bytes)."""

    __slots__ = FIELDS
    # the slots, declared for type checkers (set to 0 by __init__; no class attributes)
    publish: int
    confirm: int
    deliver: int
    deliver_no_ack: int
    get: int
    get_no_ack: int
    get_empty: int  # basic.get answered get-empty
    ack: int
    redeliver: int
    return_unroutable: int
    drop_unroutable: int

    def __init__(self) -> None:
        for name in FIELDS:
            setattr(self, name, 0)

    def add(self, other: MessageStats) -> None:
        """Add `other`'s counts to these (a closed channel's into its vhost's totals)."""
        for name in FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @classmethod
    def from_dict(cls, counts: dict[str, int]) -> MessageStats:
        """The counts `as_dict` gave (another worker process's, sent as plain data);
        derived fields (`deliver_get`) are left out."""
        out = cls()
        for name in FIELDS:
            if name in counts:
                setattr(out, name, counts[name])
        return out

    def as_dict(self, fields: tuple[str, ...] = FIELDS) -> dict[str, int]:
        """{field: count} of `fields` (all; QUEUE_FIELDS for a queue) with `deliver_get`
        added."""
        out = {name: getattr(self, name) for name in fields}
        out["deliver_get"] = out["deliver"] + out["deliver_no_ack"] + out["get"] + out["get_no_ack"]
        return out


class Churn:
    """Counts of objects opened and closed since boot (rabbitmq_prometheus's
    rabbitmq_connections_opened_total, ..._channels_closed_total, rabbitmq_queues_*_total)."""

    __slots__ = ("connections_opened", "connections_closed", "channels_opened",
                 "channels_closed", "queues_declared", "queues_created", "queues_deleted")
    # the slots, declared for type checkers (set to 0 by __init__; no class attributes)
    connections_opened: int
    connections_closed: int
    channels_opened: int
    channels_closed: int
    queues_declared: int
    queues_created: int
    queues_deleted: int

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)


def total(items: list[MessageStats]) -> MessageStats:
    """The sum of several counters (a new object)."""
    out = MessageStats()
    for item in items:
        out.add(item)
    return out


class AuthAttempts:
    """Authentication attempts since boot per protocol ("amqp091", "http"), as RabbitMQ's
    rabbit_core_metrics auth_attempt_succeeded / _failed count them and
    GET /api/auth/attempts/{node} reports them. Per-source tracking is off, as RabbitMQ's
    default (`track_auth_attempt_source = false`)."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[str, list[int]] = {}  # protocol -> [succeeded, failed]

    def record(self, protocol: str, ok: bool) -> None:
        """One attempt on `protocol`, succeeded or not."""
        counts = self._counts.setdefault(protocol, [0, 0])
        counts[0 if ok else 1] += 1

    def as_list(self) -> list[dict]:
        """[{"protocol", "auth_attempts", "auth_attempts_failed", "auth_attempts_succeeded"}]."""
        return [{"protocol": p, "auth_attempts": ok + failed, "auth_attempts_failed": failed,
                 "auth_attempts_succeeded": ok}
                for p, (ok, failed) in sorted(self._counts.items())]
