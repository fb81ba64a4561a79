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
