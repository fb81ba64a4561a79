"""Single active consumer on a stream and on a super stream's partitions (issue 37 item 5),
after RabbitMQ 3.13's `rabbit_stream_sac_coordinator`.

Owns: the groups of one stream's stream-protocol consumers that subscribed with the property
`single-active-consumer=true` and a `name`; which member of each group is active; the
consumer_update exchanges that move activity. Talks to: its stream queue (through
`Member`), which sends only to active members. No I/O of its own.
Must never: let two members of a group receive at once: a member steps down (its client
answers consumer_update active=false) before the next one is activated.

Rules (RabbitMQ 3.13):
- on a stream, the first member to subscribe is active; when it leaves, the next in
  subscription order is activated;
- on a super stream's partition (the property `super-stream`), the active member is the
  one at (partition index) mod (group size) in subscription order, so that a group of
  consumers spreads the partitions; a member joining or leaving can move activity: the
  active member is told to step down first.
- activation is a consumer_update(active=true) the client answers with where to start (an
  offset specification; "none" keeps the subscription's own).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Member(Protocol):
    """A subscription as the coordinator sees it (broker/stream/queue.py Subscription)."""

    properties: dict
    active: bool
    partition_index: int  # -1: not a super stream partition

    def ask(self, active: bool) -> None: ...  # send consumer_update(active) to its client


def group_of(properties: dict) -> str | None:
    """The group name of a subscription, None unless it asked for a single active
    consumer (`single-active-consumer=true` and a `name`)."""
    if str(properties.get("single-active-consumer", "")).lower() != "true":
        return None
    return properties.get("name") or None


class ActiveConsumers:
    """The groups of one stream. `join(m)` / `leave(m)` as subscriptions come and go,
    `answered(m, active)` when a client answered a consumer_update; `on_activate(m,
    offset_spec)` is the queue's callback once a member may receive."""

    def __init__(self) -> None:
        self.groups: dict[str, list[Member]] = {}
        self._stepping_down: set[int] = set()  # id() of members told to step down
        self._activating: set[int] = set()  # id() of members asked to take over

    def join(self, m: Member) -> None:
        name = group_of(m.properties)
        assert name is not None
        m.active = False
        self.groups.setdefault(name, []).append(m)
        self._settle(name)

    def leave(self, m: Member) -> None:
        name = group_of(m.properties)
        group = self.groups.get(name or "")
        if group is None or m not in group:
            return
        group.remove(m)
        self._stepping_down.discard(id(m))
        self._activating.discard(id(m))
        if not group:
            del self.groups[name or ""]
            return
        self._settle(name or "")

    def answered(self, m: Member, active: bool, on_activate: Callable[[Member], None]) -> None:
        """The client answered a consumer_update: a step-down lets the group move on; an
        activation lets the member receive (`on_activate`)."""
        name = group_of(m.properties) or ""
        if active and id(m) in self._activating:
            self._activating.discard(id(m))
            m.active = True
            on_activate(m)
        elif not active and id(m) in self._stepping_down:
            self._stepping_down.discard(id(m))
            if name in self.groups:
                self._settle(name)

    def _wanted(self, group: list[Member]) -> Member:
        first = group[0]
        if first.partition_index < 0:
            return first
        return group[first.partition_index % len(group)]

    def _settle(self, name: str) -> None:
        """Move the group towards its wanted active member, one step at a time."""
        group = self.groups[name]
        if any(id(m) in self._stepping_down for m in group):
            return  # wait for that answer
        wanted = self._wanted(group)
        for m in group:
            if m is not wanted and (m.active or id(m) in self._activating):
                m.active = False
                self._activating.discard(id(m))
                self._stepping_down.add(id(m))
                m.ask(False)
                return
        if not wanted.active and id(wanted) not in self._activating:
            self._activating.add(id(wanted))
            wanted.ask(True)
