"""Publisher throttling of one connection under resource alarms (RabbitMQ `rabbit_reader.erl`,
its `#throttle{}` record and the "Publisher throttling" functions; rabbitmq.com/alarms.html,
connection-blocked.html).

Owns: pure bookkeeping: which alarms are in effect for the connection, whether it has ever
published, whether its reader must stop reading, and whether `connection.blocked` was sent (so
`connection.unblocked` is owed). The reader (`reader.py`) calls it and does the I/O: it sends
the method it is told to and pauses or resumes the socket. Never touches a socket or a clock.

Rules: while an alarm is in effect, a connection's reader stops reading right after the next
publish it reads (RabbitMQ `publish_received` -> `maybe_block`); a connection that only consumes
is never blocked. `connection.blocked` (reason "low on memory", "low on disk", or
"low on memory & disk") goes to clients that announced the `connection.blocked` capability:
at once to a connection that has already published when the alarm is set (as
rabbitmq.com/connection-blocked.html describes: "sent to publishing connections"), else on its
first publish under the alarm; at most once per alarm episode. When every alarm has cleared
the reader reads again and `connection.unblocked` follows if `connection.blocked` was sent.
Clients without the capability are blocked the same way without either method.
"""

from __future__ import annotations

BLOCKED, UNBLOCKED = "blocked", "unblocked"  # what the reader must send


class Throttle:
    """One connection's throttle state. `notify`: the client announced connection.blocked."""

    __slots__ = ("alarms", "notify", "published", "blocked", "blocked_sent", "check")

    def __init__(self, alarms: frozenset[str] = frozenset(), notify: bool = False) -> None:
        self.alarms = alarms  # resource alarms in effect ("memory", "disk")
        self.notify = notify  # send connection.blocked / unblocked to this client
        self.published = False  # the connection has published at least once
        self.blocked = False  # the reader must not read until every alarm has cleared
        self.blocked_sent = False  # connection.blocked went out: connection.unblocked is owed
        # the reader's one-attribute hot-path test: call publish_received for this publish
        # (the first publish ever, or any publish while an alarm is in effect)
        self.check = True

    def reason(self) -> str:
        """connection.blocked's reason: "low on memory", "low on disk", "low on memory & disk"
        (rabbit_reader blocked_by_message)."""
        return "low on " + " & ".join(sorted(self.alarms))

    def alarms_changed(self, alarms: frozenset[str]) -> str | None:
        """The broker's alarms are now `alarms`. Returns BLOCKED / UNBLOCKED to send, or None.
        When every alarm has cleared, `blocked` is False again (the reader may resume)."""
        self.alarms = alarms
        self.check = bool(alarms) or not self.published
        if alarms:
            if self.published and self.notify and not self.blocked_sent:
                self.blocked_sent = True
                return BLOCKED
            return None
        self.blocked = False
        if self.blocked_sent:
            self.blocked_sent = False
            return UNBLOCKED
        return None

    def publish_received(self) -> str | None:
        """The reader read one publish. Under an alarm `blocked` becomes True (stop reading);
        returns BLOCKED if connection.blocked must be sent now, else None."""
        self.published = True
        self.check = bool(self.alarms)
        if not self.alarms:
            return None
        self.blocked = True
        if self.notify and not self.blocked_sent:
            self.blocked_sent = True
            return BLOCKED
        return None

    def state(self) -> str | None:
        """RabbitMQ's connection state under alarms: "blocked" (not reading), "blocking"
        (an alarm is in effect and the connection has published), else None."""
        if self.blocked:
            return "blocked"
        if self.alarms and self.published:
            return "blocking"
        return None
