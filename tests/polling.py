"""Bounded polling for tests: never sleep-and-hope, wait for a condition with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(cond: Callable[[], object], timeout: float = 5.0, interval: float = 0.01) -> object:
    """Poll `cond` until truthy or `timeout` seconds pass (then AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)
