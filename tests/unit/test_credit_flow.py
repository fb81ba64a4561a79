"""CreditFlow: block after `initial` sends, unblock on grant, grant every `more_after`."""

from broker.credit_flow import CreditFlow


def test_sender_blocks_when_credit_runs_out_and_unblocks_on_grant():
    c = CreditFlow(initial=3, more_after=2)
    assert [c.send("q") for _ in range(3)] == [False, False, True]
    assert c.blocked
    assert c.grant("q", 2) is True
    assert not c.blocked


def test_blocked_until_every_peer_has_credit():
    c = CreditFlow(initial=1, more_after=1)
    c.send("a")
    c.send("b")
    assert c.grant("a", 1) is False
    assert c.blocked
    assert c.grant("b", 1) is True


def test_receiver_grants_every_more_after():
    r = CreditFlow(initial=10, more_after=4)
    grants = [r.ack("s") for _ in range(9)]
    assert grants == [0, 0, 0, 4, 0, 0, 0, 4, 0]


def test_peer_down_unblocks():
    c = CreditFlow(initial=1, more_after=1)
    c.send("q")
    assert c.peer_down("q") is True
    assert not c.blocked


def test_credit_left_and_flow_state_window():
    from broker.credit_flow import FLOW_STATE_WINDOW, flow_state

    c = CreditFlow(initial=2, more_after=1)
    assert c.credit_left("q") == 2 and c.blocked_at is None
    c.send("q")
    c.send("q")
    assert c.credit_left("q") == 0 and c.blocked_at is not None
    t = c.blocked_at
    assert flow_state(c.blocked, t, t + 100) == "flow"  # blocked: flow whatever the time
    c.grant("q", 1)
    assert flow_state(c.blocked, t, t + FLOW_STATE_WINDOW / 2) == "flow"  # recently blocked
    assert flow_state(c.blocked, t, t + FLOW_STATE_WINDOW + 0.1) == "running"
    assert flow_state(False, None, 0.0) == "running"


def test_each_hop_blocks_and_replenishes():
    """reader -> channel -> queue (400, 200) and queue -> store (4000, 800): the sender blocks
    after exactly `initial` sends; the receiver's acks give `more_after` back per that many."""
    for initial, more_after in ((400, 200), (4000, 800)):
        sender, receiver = CreditFlow(initial, more_after), CreditFlow(initial, more_after)
        blocked_at = None
        for i in range(1, initial + 1):
            if sender.send("rx"):
                blocked_at = i
        assert blocked_at == initial and sender.blocked
        granted = sum(receiver.ack("tx") for _ in range(more_after - 1))
        assert granted == 0 and sender.blocked  # nothing back before more_after handled
        grant = receiver.ack("tx")
        assert grant == more_after
        assert sender.grant("rx", grant) is True and not sender.blocked
        assert sender.credit_left("rx") == more_after


def test_block_sets_credit_aside_until_unblock_and_grants_meanwhile_join_it():
    """credit_flow:block/1 (a busy queue's consumer bias): the sender stops at once with
    credit left; grants while blocked are set aside too; unblock gives all of it back."""
    c = CreditFlow(400, 200)
    for _ in range(150):
        c.send("q")
    assert not c.blocked and c.credit_left("q") == 250
    assert c.block("q") is True and c.blocked and c.credit_left("q") == 0
    assert c.block("q") is False  # already held
    assert c.grant("q", 200) is False and c.blocked  # set aside, not spent
    assert c.unblock("q") is True and not c.blocked
    assert c.credit_left("q") == 450
    assert c.unblock("q") is False  # nothing held any more


def test_block_of_an_exhausted_sender_keeps_it_blocked_until_credit_comes():
    c = CreditFlow(2, 1)
    c.send("q")
    assert c.send("q") is True and c.blocked  # out of credit
    assert c.block("q") is False  # blocked already: nothing new
    assert c.unblock("q") is False and c.blocked  # what was set aside was 0
    assert c.grant("q", 1) is True and not c.blocked


def test_block_by_one_peer_leaves_the_sender_blocked_while_another_still_is():
    c = CreditFlow(1, 1)
    c.send("a")  # out of credit for a
    assert c.blocked
    assert c.block("b") is False  # blocked already by a
    assert c.grant("a", 1) is False and c.blocked  # still held by b
    assert c.unblock("b") is True and not c.blocked


def test_senders_lists_who_sent_and_forgets_those_down():
    rx = CreditFlow(400, 200)
    rx.ack("ch1")
    rx.ack("ch2")
    assert set(rx.senders()) == {"ch1", "ch2"}
    rx.peer_down("ch1")
    assert set(rx.senders()) == {"ch2"}
