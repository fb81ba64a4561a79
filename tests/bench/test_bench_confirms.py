"""Outstanding confirms tracked per batch behave like a per-message dict (model test)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.confirms import Outstanding

ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 20)),
        st.tuples(st.just("ack"), st.integers(0, 40), st.booleans()),
        st.tuples(st.just("expire"), st.integers(0, 5)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_batches_match_a_per_message_model(steps: list[tuple]) -> None:
    out = Outstanding()
    model: dict[int, tuple[int, int]] = {}  # msg_seq_no -> (tag, sent)
    msn, tag, clock = 1, 1000, 0
    for step in steps:
        if step[0] == "add":
            n = step[1]
            clock += 1
            out.add(msn, range(tag, tag + n), clock)
            model.update({msn + i: (tag + i, clock) for i in range(n)})
            msn, tag = msn + n, tag + n
        elif step[0] == "ack":
            dtag = max(1, msn - 1 - step[1])
            got = sorted(t for tags, _ in out.settle(dtag, step[2]) for t in tags)
            keys = [k for k in model if k <= dtag] if step[2] else [dtag] if dtag in model else []
            assert got == sorted(model.pop(k)[0] for k in keys)
        else:
            before = clock - step[1]
            got = sorted(out.expire(before))
            keys = [k for k, (_, sent) in model.items() if sent < before]
            # expiry is by batch order, which is send order: same set as the model's
            assert got == sorted(model.pop(k)[0] for k in keys)
        assert len(out) == len(model)


def test_single_nack_in_the_middle_splits_a_batch() -> None:
    out = Outstanding()
    out.add(1, range(100, 110), 7)
    assert [(list(t), s) for t, s in out.settle(5, False)] == [([104], 7)]
    assert [list(t) for t, _ in out.settle(10, True)] == [[100, 101, 102, 103],
                                                         [105, 106, 107, 108, 109]]
    assert len(out) == 0 and out.settle(3, False) == []
