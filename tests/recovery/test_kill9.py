"""kill -9 during confirmed persistent publishing loses no confirmed message (issue 4's
crash test; `python -m tests.recovery.crash_check 20` is the 20-run acceptance check)."""

from __future__ import annotations

import random

import pytest

from tests.recovery.crash_check import run_once


@pytest.mark.slow
@pytest.mark.parametrize("size", [64, 6000])  # embedded in the index / in the message store
def test_kill9_keeps_every_confirmed_message(tmp_path, size):
    rng = random.Random()
    for _ in range(2):
        result = run_once(tmp_path, rng, size=size)
        assert result["confirmed"] > 0
