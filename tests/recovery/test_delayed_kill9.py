"""kill -9 while persistent delayed messages wait loses none, delivers none early and none
twice, and keeps due order (issue 50; `python -m tests.recovery.delayed_crash 100000` is
the issue's full-size check)."""

from __future__ import annotations

import random

import pytest

from tests.recovery.delayed_crash import run_firing, run_once


@pytest.mark.slow
def test_kill9_keeps_every_confirmed_delayed_message(tmp_path):
    result = run_once(tmp_path, 5_000, random.Random())
    assert result["confirmed"] == 5_000


@pytest.mark.slow
def test_kill9_while_messages_fall_due_loses_none(tmp_path):
    """The queues a due message went to confirm it to the holder lazily (their 200 ms
    index sync): a kill in that window publishes it again after the restart, never loses it."""
    result = run_firing(tmp_path, 3_000, random.Random())
    assert result["delivered"] >= 3_000
