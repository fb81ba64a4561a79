"""A queue's effective arguments, parsed: what the queue process enforces from
`x-message-ttl`, `x-max-length`, `x-max-length-bytes`, `x-overflow`,
`x-dead-letter-exchange`, `x-dead-letter-routing-key`, `x-expires` and `x-queue-mode`
(declared arguments with the policy folded in, broker/policies.py), and the length-limit
rules over a backing queue.

Pure: no I/O, no state beyond the parsed values. Invalid values were refused with 406 at
declare (broker/vhost.py); here they count as unset. Sources: rabbitmq.com/ttl.html,
maxlength.html, dlx.html, lazy-queues.html; rabbit_amqqueue_process `will_overflow` and
`is_over_limit`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.backing_queue.base import BackingQueue

REJECTING = ("reject-publish", "reject-publish-dlx")


def _non_negative(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


@dataclass(frozen=True, slots=True)
class QueueArguments:
    """message_ttl: ms or None; max_length: ready messages; max_length_bytes: ready body
    bytes; overflow: drop-head | reject-publish | reject-publish-dlx; dlx / dlrk: dead
    letter exchange and routing key; expires: ms unused before deletion (> 0) or None;
    lazy: x-queue-mode = lazy."""

    message_ttl: int | None = None
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = "drop-head"
    dlx: str | None = None
    dlrk: str | None = None
    expires: int | None = None
    lazy: bool = False

    @property
    def limited(self) -> bool:
        """A length limit is set."""
        return self.max_length is not None or self.max_length_bytes is not None

    @property
    def rejects(self) -> bool:
        """Past the limit, publishes are refused (not heads dropped)."""
        return self.overflow in REJECTING

    def would_overflow(self, bq: BackingQueue, size: int) -> bool:
        """reject-publish: would one more message of `size` body bytes pass a limit of
        backing queue `bq`? (rabbit_amqqueue_process `will_overflow`)"""
        return ((self.max_length is not None and bq.len() + 1 > self.max_length)
                or (self.max_length_bytes is not None
                    and bq.ready_bytes() + size > self.max_length_bytes))

    def over_limit(self, bq: BackingQueue) -> bool:
        """Ready messages or their body bytes past a limit (`is_over_limit`)."""
        return ((self.max_length is not None and bq.len() > self.max_length)
                or (self.max_length_bytes is not None
                    and bq.ready_bytes() > self.max_length_bytes))


def parse_arguments(args: dict) -> QueueArguments:
    """The enforced settings in effective arguments `args`."""
    dlx = args.get("x-dead-letter-exchange")
    dlrk = args.get("x-dead-letter-routing-key")
    expires = _non_negative(args.get("x-expires"))
    return QueueArguments(
        message_ttl=_non_negative(args.get("x-message-ttl")),
        max_length=_non_negative(args.get("x-max-length")),
        max_length_bytes=_non_negative(args.get("x-max-length-bytes")),
        overflow=args.get("x-overflow") or "drop-head",
        dlx=dlx if isinstance(dlx, str) else None,
        dlrk=dlrk if isinstance(dlrk, str) else None,
        expires=expires if expires else None,
        lazy=args.get("x-queue-mode") == "lazy",
    )
