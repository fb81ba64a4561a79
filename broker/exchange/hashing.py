# Owns: the stable hash of a routing value and jump consistent hashing, shared by the
# x-consistent-hash and x-modulus-hash exchange types.
# Talked to by: broker/exchange/consistent_hash.py, broker/exchange/modulus_hash.py.
# Must never: depend on Python's per-process `hash()` randomisation (routing must not change
# across restarts), do I/O.
"""Hashing for the plugin exchange types.

RabbitMQ hashes with `erlang:phash2`; which queue a given key lands on is not part of either
plugin's contract (only that the same key always lands on the same queue), so we use
BLAKE2b (64-bit digest) over a canonical byte form of the value.
"""

from __future__ import annotations

import hashlib
from typing import Any

from broker.exchange.base import freeze

_MASK64 = (1 << 64) - 1


def value_bytes(value: Any) -> bytes:
    """Canonical bytes of a routing value: str as UTF-8, bytes as they are, None as b"",
    anything else (numbers, tables, arrays) by its type-faithful frozen form."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if value is None:
        return b""
    return repr(freeze(value)).encode()


def hash64(value: Any) -> int:
    """Stable 64-bit hash of a routing value (same value, same hash, in every process)."""
    return int.from_bytes(hashlib.blake2b(value_bytes(value), digest_size=8).digest(), "big")


def jump_consistent_hash(key: int, buckets: int) -> int:
    """Bucket in [0, buckets) for a 64-bit `key` (Lamping and Veach, "A Fast, Minimal Memory,
    Consistent Hash Algorithm", 2014): O(ln buckets) steps; growing from n to n+1 buckets moves
    only keys into the new bucket. The plugin routes the same way (jump_consistent_hash over
    its buckets). Raises ValueError for buckets < 1."""
    if buckets < 1:
        raise ValueError("no buckets")
    b, j = -1, 0
    while j < buckets:
        b = j
        key = (key * 2862933555777941757 + 1) & _MASK64
        j = int((b + 1) * (float(1 << 31) / float((key >> 33) + 1)))
    return b
