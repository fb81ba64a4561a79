"""bench.ha without its engines: the arithmetic and the CLI (issue 25).

The engines (Debian's etcd-server, PySyncObj from the `ha` extra) are not needed here, so the
CI suite runs this with `pip install -e '.[test]'` only.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from bench.ha import __main__ as ha
from bench.ha import engines


def test_percentile_picks_nearest_rank() -> None:
    xs = [float(i) for i in range(1, 101)]
    assert ha._pct(xs, 50) == 51.0  # round(0.5 * 99) = 50 → the 51st value
    assert ha._pct(xs, 99) == 99.0
    assert ha._pct([3.0], 99) == 3.0
    assert math.isnan(ha._pct([], 50))


def test_value_is_checkable_from_the_key_alone() -> None:
    v = ha._value(b"bench/etcd/b1/i1/0/0000000001", 1024)
    assert len(v) == 1024
    assert v.startswith(b"bench/etcd/b1/i1/0/0000000001bench/")
    assert ha._value(b"k", 3) == b"kkk"


def test_unknown_engine_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError) as info:
        engines.make("zookeeper", str(tmp_path), 30000)
    assert "etcd" in str(info.value)


def test_help_runs_without_the_engines_installed() -> None:
    out = subprocess.run([sys.executable, "-m", "bench.ha", "--help"], capture_output=True,
                         text=True, timeout=60, check=True)
    assert "--engine" in out.stdout and "--rabbitmq-uri" in out.stdout


def test_packed_batch_is_one_key_holding_every_entry() -> None:
    per_key = ha._entries(b"p", 3, 10, 4, 64, pack=False)
    packed = ha._entries(b"p", 3, 10, 4, 64, pack=True)
    assert [k for k, _ in per_key] == [b"p/3/0000000010", b"p/3/0000000011",
                                       b"p/3/0000000012", b"p/3/0000000013"]
    assert packed == [(b"p/3/0000000010", b"".join(v for _, v in per_key))]
