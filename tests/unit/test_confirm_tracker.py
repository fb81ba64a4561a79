"""ConfirmTracker: batching with `multiple`, multi-queue release, nacks (docs/architecture.md §6)."""

from hypothesis import given
from hypothesis import strategies as st

from broker.confirms import ConfirmTracker


def _track(t: ConfirmTracker, queues_per_msg: list[list[str]]) -> list[int]:
    seqs = []
    for qs in queues_per_msg:
        s = t.next_seq_no()
        t.track(s, qs)
        seqs.append(s)
    return seqs


def test_seq_nos_start_at_one():
    t = ConfirmTracker()
    assert [t.next_seq_no() for _ in range(3)] == [1, 2, 3]


def test_unroutable_is_acked_at_once():
    t = ConfirmTracker()
    _track(t, [[]])
    assert t.take() == [(True, 1, False)]


def test_contiguous_release_is_one_multiple_ack():
    t = ConfirmTracker()
    _track(t, [["q"]] * 5)
    t.release("q", [1, 2, 3, 4, 5])
    assert t.take() == [(True, 5, True)]
    assert t.unconfirmed == 0


def test_acks_above_a_pending_seq_go_singly():
    t = ConfirmTracker()
    _track(t, [["q"], ["q"], ["q", "r"], ["q"], ["q"]])
    t.release("q", [1, 2, 3, 4, 5])
    assert t.take() == [(True, 2, True), (True, 4, False), (True, 5, False)]
    t.release("r", [3])
    assert t.take() == [(True, 3, False)]


def test_message_in_two_queues_waits_for_both():
    t = ConfirmTracker()
    _track(t, [["a", "b"]])
    t.release("a", [1])
    assert t.take() == []
    t.release("b", [1])
    assert t.take() == [(True, 1, False)]


def test_reject_nacks_and_comes_first():
    t = ConfirmTracker()
    _track(t, [["q"], ["q"]])
    t.reject("q", [1])
    t.release("q", [2])
    assert t.take() == [(False, 1, False), (True, 2, False)]


def test_queue_down_releases_its_share():
    t = ConfirmTracker()
    _track(t, [["a", "b"], ["b"]])
    t.release("a", [1])
    t.queue_down("b")
    assert t.take() == [(True, 2, True)]


@given(st.lists(st.sampled_from(["q", "r", "qr", ""]), max_size=40), st.randoms())
def test_every_seq_confirmed_exactly_once(routes, rnd):
    t = ConfirmTracker()
    seqs = _track(t, [list(r) for r in routes])
    releases = [(q, s) for s, r in zip(seqs, routes, strict=True) for q in r]
    rnd.shuffle(releases)
    acked: set[int] = set()
    outstanding = set(seqs)
    for q, s in releases + [("", 0)]:
        if s:
            t.release(q, [s])
        for is_ack, tag, multiple in t.take():
            assert is_ack
            covered = {x for x in outstanding if x <= tag} if multiple else {tag}
            assert tag in outstanding
            assert not covered & acked
            acked |= covered
            outstanding -= covered
    assert acked == set(seqs)
