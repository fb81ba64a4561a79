"""Publisher throttling under resource alarms (broker/throttle.py, RabbitMQ rabbit_reader's
#throttle{}): who is blocked, when connection.blocked / unblocked go out."""

from broker.throttle import BLOCKED, UNBLOCKED, Throttle

MEM = frozenset({"memory"})
BOTH = frozenset({"memory", "disk"})
NONE: frozenset[str] = frozenset()


def test_a_consumer_only_connection_is_never_blocked():
    t = Throttle(notify=True)
    assert t.alarms_changed(MEM) is None
    assert not t.blocked and t.state() is None
    assert t.alarms_changed(NONE) is None


def test_a_publisher_is_told_at_once_and_stops_after_its_next_publish():
    t = Throttle(notify=True)
    assert t.publish_received() is None and not t.blocked  # no alarm: nothing happens
    assert not t.check  # the reader skips the throttle from now on
    assert t.alarms_changed(MEM) == BLOCKED  # it has published: told now
    assert t.check and not t.blocked and t.state() == "blocking"
    assert t.publish_received() is None  # already told: not twice
    assert t.blocked and t.state() == "blocked"
    assert t.alarms_changed(BOTH) is None  # a second alarm: still blocked, no new method
    assert t.reason() == "low on disk & memory"
    assert t.alarms_changed(MEM) is None and t.blocked  # one alarm left
    assert t.alarms_changed(NONE) == UNBLOCKED
    assert not t.blocked and t.state() is None and not t.check


def test_first_publish_under_an_alarm_blocks_and_notifies():
    t = Throttle(MEM, notify=True)
    assert t.reason() == "low on memory"
    assert t.publish_received() == BLOCKED
    assert t.blocked
    assert t.alarms_changed(NONE) == UNBLOCKED


def test_clients_without_the_capability_are_blocked_silently():
    t = Throttle(notify=False)
    t.publish_received()
    assert t.alarms_changed(frozenset({"disk"})) is None
    assert t.publish_received() is None and t.blocked
    assert t.alarms_changed(NONE) is None and not t.blocked


def test_an_alarm_that_clears_before_the_next_publish_owes_unblocked():
    t = Throttle(notify=True)
    t.publish_received()
    assert t.alarms_changed(MEM) == BLOCKED
    assert t.alarms_changed(NONE) == UNBLOCKED  # blocked was sent: unblocked follows
    assert t.alarms_changed(MEM) == BLOCKED  # a new episode: told again
