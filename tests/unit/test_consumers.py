"""ConsumerSet: round-robin, priorities, per-consumer prefetch (rabbit_queue_consumers)."""

from broker.consumers import Consumer, ConsumerSet


def _ok(_c):
    return True


def test_round_robin_within_a_priority():
    s = ConsumerSet()
    for tag in "abc":
        s.add(Consumer(tag, channel=object(), no_ack=True))
    assert [s.next_ready(_ok).tag for _ in range(6)] == list("abcabc")


def test_higher_priority_first_while_it_has_capacity():
    ch = object()
    s = ConsumerSet()
    low = Consumer("low", ch, no_ack=False, priority=0)
    high = Consumer("high", ch, no_ack=False, priority=5, prefetch=2)
    s.add(low)
    s.add(high)
    picks = []
    for _ in range(4):
        c = s.next_ready(_ok)
        c.unacked += 1
        picks.append(c.tag)
    assert picks == ["high", "high", "low", "low"]


def test_prefetch_and_channel_predicate_limit_capacity():
    ch = object()
    s = ConsumerSet()
    c = Consumer("a", ch, no_ack=False, prefetch=1)
    s.add(c)
    assert s.next_ready(_ok) is c
    c.unacked = 1
    assert s.next_ready(_ok) is None
    c.unacked = 0
    assert s.next_ready(lambda _c: False) is None


def test_remove_and_remove_channel():
    ch1, ch2 = object(), object()
    s = ConsumerSet()
    s.add(Consumer("a", ch1, True))
    s.add(Consumer("b", ch1, True, priority=3))
    s.add(Consumer("c", ch2, True))
    assert s.remove(ch2, "c").tag == "c"
    assert s.remove(ch2, "c") is None
    assert {c.tag for c in s.remove_channel(ch1)} == {"a", "b"}
    assert len(s) == 0
    assert s.next_ready(_ok) is None
