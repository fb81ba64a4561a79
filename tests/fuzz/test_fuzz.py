"""Hypothesis fuzzing of the frame decoder and connection state machine (bounded for CI;
`python -m tests.fuzz --seconds N` runs longer). Each example is a valid client session with
structure-aware mutations (tests/fuzz/streams.py); see harness.py for what fails a case."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.harness import FuzzHarness
from tests.fuzz.streams import mutate, session_frames

FRAMES = session_frames()


@pytest.fixture(scope="module")
def harness(embedded_only_module):
    with FuzzHarness() as h:
        yield h


def test_the_unmutated_session_is_accepted(harness):
    v = harness.check(b"".join(FRAMES))
    assert v.problems == []
    assert v.outcome.reply_code is None  # the session closed itself normally


@settings(max_examples=1500, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=False))
def test_mutated_sessions_never_crash_or_hang_the_broker(harness, rnd: random.Random):
    v = harness.check(b"".join(mutate(FRAMES, rnd)))
    assert v.problems == []


def test_the_harness_sees_an_injected_crash(harness, monkeypatch):
    """The oracle can fail: with basic.qos made to raise, the unmutated session is judged a
    crash (its logged traceback; the 541 itself is not sent here because the session's own
    connection.close was already read when the channel crashed)."""
    from pamqp import commands

    from broker import channel_handlers as channel_module

    def boom(ch, cmd):
        raise RuntimeError("injected failure")

    monkeypatch.setitem(channel_module.HANDLERS.methods, commands.Basic.Qos, boom)
    v = harness.check(b"".join(FRAMES))
    assert any(p.startswith("crash: logged unexpected error") and "injected failure" in p
               for p in v.problems)
