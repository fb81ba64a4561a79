"""bench/micro/interprocess.py (the multicore prototype, docs/multicore.md) moves every
message intact and in order, with both encodings, both modes and any batch size."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location(
    "interprocess", Path(__file__).resolve().parents[2] / "bench" / "micro" / "interprocess.py")
interprocess = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(interprocess)


@pytest.mark.parametrize("codec", ["framed", "pickle"])
@pytest.mark.parametrize("round_trip", [False, True])
@pytest.mark.parametrize(("size", "batch"), [(16, 1), (1500, 7), (0, 256)])
def test_batches_arrive_intact_and_in_order(codec, round_trip, size, batch) -> None:
    r = interprocess.run(codec, round_trip, size, batch, 600)  # asserts count, crc, order
    assert r["messages"] == 600 and r["msg_per_s"] > 0


def test_framed_decode_is_the_inverse_of_encode() -> None:
    msgs = interprocess.messages(50, 33)
    frame = interprocess.encode_framed(msgs)
    assert interprocess.decode_framed(frame[4:]) == msgs
