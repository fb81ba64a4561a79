"""broker/workers/change_log.py against a model (STYLE "Tests": a Hypothesis stateful test):
workers apply changes at their own pace, die and come back; a request completes exactly
once, in sequence order, and only when every worker live at that moment has applied it; the
applier hands changes out in order, once each, however they arrive."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.workers.change_log import ChangeApplier, ChangeLog

WORKERS = 4


class LogModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.log: ChangeLog[str] = ChangeLog(range(WORKERS))
        self.applied = dict.fromkeys(range(WORKERS), 0)  # the model: live worker -> seq
        self.done: list[str] = []
        self.tokens: dict[int, str] = {}

    def _complete(self, tokens: list[str]) -> None:
        self.done += tokens

    @rule()
    def propose(self) -> None:
        token = f"req-{self.log.last_seq + 1}"
        seq = self.log.propose(token)
        self.tokens[seq] = token
        if not self.applied:  # nobody to wait for
            self._complete(self.log.completed())

    @precondition(lambda self: self.applied)
    @rule(data=st.data())
    def apply_some(self, data) -> None:
        worker = data.draw(st.sampled_from(sorted(self.applied)))
        seq = data.draw(st.integers(self.applied[worker], self.log.last_seq))
        self.applied[worker] = seq
        self._complete(self.log.applied(worker, seq))

    @precondition(lambda self: self.applied)
    @rule(data=st.data())
    def kill(self, data) -> None:
        worker = data.draw(st.sampled_from(sorted(self.applied)))
        del self.applied[worker]
        self._complete(self.log.worker_gone(worker))
        assert self.log.applied(worker, self.log.last_seq) == []  # a late report is ignored

    @precondition(lambda self: len(self.applied) < WORKERS)
    @rule(data=st.data())
    def restart(self, data) -> None:
        worker = data.draw(st.sampled_from(sorted(set(range(WORKERS)) - set(self.applied))))
        self.applied[worker] = self.log.worker_back(worker)

    @invariant()
    def completions_are_the_prefix_every_live_worker_applied(self) -> None:
        floor = min(self.applied.values(), default=self.log.last_seq)
        assert self.done == [self.tokens[s] for s in range(1, floor + 1)]
        assert self.log.waiting == self.log.last_seq - floor


TestChangeLog = LogModel.TestCase
TestChangeLog.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_a_report_backwards_or_ahead_is_refused():
    log: ChangeLog[str] = ChangeLog([0])
    log.propose("a")
    log.applied(0, 1)
    with pytest.raises(ValueError) as err:
        log.applied(0, 0)
    assert "had applied 1" in str(err.value)
    with pytest.raises(ValueError) as err:
        log.applied(0, 2)
    assert "the last stamped is 1" in str(err.value)


@given(st.permutations(range(1, 30)), st.lists(st.integers(1, 29), max_size=10))
def test_the_applier_hands_out_in_order_once_each(order, repeats):
    applier = ChangeApplier()
    out: list[tuple[int, str]] = []
    for seq in list(order) + repeats:
        out += applier.receive(seq, f"c{seq}")
    assert out == [(s, f"c{s}") for s in range(1, 30)] and applier.applied == 29
