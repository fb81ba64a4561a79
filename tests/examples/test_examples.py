"""Seed 003's patterns in examples/ run against the broker: retry with delay, a delayed
queue, sharded work queues."""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def prefix() -> str:
    return f"ex-{uuid.uuid4().hex[:8]}"


def test_retry_with_delay(broker, prefix, capsys):
    events = load("retry_with_delay").main(broker.url, delay_ms=150, failures=2, prefix=prefix)
    assert [a for a, _t in events] == [1, 2, 3]
    # each retry waited at least the delay in the wait queue
    assert events[1][1] - events[0][1] >= 0.14
    assert events[2][1] - events[1][1] >= 0.14
    assert "attempt 3" in capsys.readouterr().out


def test_delayed_queue(broker, prefix):
    arrived = load("delayed_queue").main(broker.url, delays_ms=(300, 100, 200), prefix=prefix)
    assert [b for b, _t in arrived] == [b"after 100 ms", b"after 200 ms", b"after 300 ms"]
    for body, seconds in arrived:
        assert seconds >= int(body.split()[1]) / 1000 - 0.01


def test_sharded_work_queues(broker, prefix):
    seen = load("sharded_work_queues").main(broker.url, shards=4, keys=20, per_key=5,
                                              prefix=prefix)
    keys_per_shard = [set(v) for v in seen.values()]
    all_keys = set().union(*keys_per_shard)
    assert len(all_keys) == 20
    assert sum(len(k) for k in keys_per_shard) == 20  # every key on exactly one shard
    assert all(keys_per_shard)  # every shard got some keys
    for jobs_by_key in seen.values():
        for jobs in jobs_by_key.values():
            assert jobs == list(range(5))  # in order, on its shard


def test_examples_are_runnable_scripts():
    for name in ("retry_with_delay", "delayed_queue", "sharded_work_queues"):
        text = (EXAMPLES / f"{name}.py").read_text()
        assert 'if __name__ == "__main__":' in text
