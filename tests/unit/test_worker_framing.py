"""broker/workers/framing.py: the inter-worker batch format, at every split point (STYLE
"Tests": the same batches whole, one byte at a time and split at each offset), and its
malformed frames."""

from __future__ import annotations

import pickle
import struct

import pytest

from broker.workers.framing import BatchDecoder, FrameError, encode_batch

BATCHES = [[("publish", 1, b"x" * 40, {"h": 1})], [1, 2, 3], [b""] * 5, [None]]
STREAM = b"".join(encode_batch(b) for b in BATCHES)


def test_whole():
    assert BatchDecoder().feed(STREAM) == BATCHES


def test_one_byte_at_a_time():
    d = BatchDecoder()
    out = []
    for i in range(len(STREAM)):
        out += d.feed(STREAM[i:i + 1])
    assert out == BATCHES and d.pending == 0


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_split_at_each_offset(cut):
    d = BatchDecoder()
    assert d.feed(STREAM[:cut]) + d.feed(STREAM[cut:]) == BATCHES


def test_an_empty_batch_is_never_encoded():
    with pytest.raises(ValueError) as err:
        encode_batch([])
    assert "empty" in str(err.value)


@pytest.mark.parametrize("frame, why", [
    (struct.pack(">I", 0), "0 bytes"),
    (struct.pack(">I", 2048) + b"x", "2048 bytes"),
    (struct.pack(">I", 3) + b"abc", "does not unpickle"),
    (struct.pack(">I", len(pickle.dumps({}))) + pickle.dumps({}), "not a non-empty list"),
    (struct.pack(">I", len(pickle.dumps([]))) + pickle.dumps([]), "not a non-empty list"),
])
def test_malformed_frames(frame, why):
    with pytest.raises(FrameError) as err:
        BatchDecoder(max_frame=1024).feed(frame)
    assert why in str(err.value)
