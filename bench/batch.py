# bench/batch.py — vectorised decoding of a run of same-shaped deliveries (numpy).
#
# Owns: the numpy record layout of one delivery (deliver method frame + content header frame
# + one body frame) for a given (consumer-tag length, header size, body size), validation of
# every frame-type / frame-end octet of a run of such records, and the per-batch consumer
# bookkeeping (latency histogram, per-producer count and checksum, ack frames).
# Talks to: bench.amqp (which calls `decode_run` from its frame loop), bench.consumer.
# Must never: accept a record it has not validated; anything unusual returns 0 records and
# the frame-by-frame path handles it.
"""One numpy pass over many deliveries instead of one Python step per frame.

A broker sends a consumer a stream of deliveries that, for one bench publisher, all have the
same shape: only delivery_tag, timestamp and tag differ. Viewing the buffer as an array of
fixed-size records (``numpy.frombuffer``) decodes thousands of them per call.
"""

from __future__ import annotations

from typing import Any

from bench.histogram import TOP

try:
    import numpy as np
except ImportError:  # pragma: no cover - numpy comes with matplotlib; without it: per frame
    np = None

MIN_RUN = 64  # below this the per-message path is as fast (measured ~40 at 1500 B)
_layouts: dict[tuple[int, int, int], Any] = {}


def run_length(buf: Any, head: bytes, at: int, size: int, k: int, known: int = 1) -> int:
    """How many records of `size` bytes from offset `at` start with `head` (at most `k`,
    at least `known`, which the caller has checked): gallop 1, 2, 4, … then bisect, so a
    run costs O(log n) byte checks. Used by the client's and the sink's batch paths."""
    lo, step = known, 1
    while lo + step <= k and buf.startswith(head, at + (lo + step - 1) * size):
        lo += step
        step *= 2
    hi = min(k, lo + step - 1)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if buf.startswith(head, at + (mid - 1) * size):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _layout(deliver_len: int, ctag_len: int, head_len: int, body_len: int) -> Any:
    key = (deliver_len, ctag_len, head_len, body_len)
    dt = _layouts.get(key)
    if dt is None:
        b = deliver_len + head_len  # body frame offset
        fields = {
            "ftype": ("u1", 0), "ch": (">u2", 1), "dsize": (">u4", 3), "sig": (">u4", 7),
            "dtag": (">u8", 7 + 5 + ctag_len), "dend": ("u1", deliver_len - 1),
            "htype": ("u1", deliver_len), "hend": ("u1", b - 1),
            "bodysize": (">u8", deliver_len + 11),
            "btype": ("u1", b), "bsize": (">u4", b + 3), "ts": (">u8", b + 7),
            "tag": (">u8", b + 15), "bend": ("u1", b + body_len - 1),
        }
        dt = np.dtype({"names": list(fields), "formats": [f for f, _ in fields.values()],
                       "offsets": [o for _, o in fields.values()],
                       "itemsize": deliver_len + head_len + body_len})
        _layouts[key] = dt
    return dt


def decode_run(buf: bytes, at: int, channel: int, deliver_len: int, ctag_len: int,
               head_len: int, body_len: int) -> Any:
    """Records of the run of deliveries starting at ``buf[at]`` shaped like the one before it
    on ``channel`` (lengths in bytes of its deliver, header and body frames), or None when
    fewer than MIN_RUN such records are complete in ``buf``.

    The run's length is found first with cheap byte checks (gallop, then bisect, on the
    7-byte frame header of each record's deliver frame), so a stream whose channels
    interleave finely costs O(log n) per attempt, never O(n). Then every record of the run is
    validated (frame types, end octets, channel, sizes, method); it stops at the first one
    that differs.
    """
    if np is None:
        return None
    size = deliver_len + head_len + body_len
    k = (len(buf) - at) // size
    if k < MIN_RUN:
        return None
    head = buf[at - size : at - size + 7]  # deliver frame header of the message just handled
    if not (buf.startswith(head, at) and buf.startswith(head, at + (MIN_RUN - 1) * size)):
        return None
    lo = run_length(buf, head, at, size, k, MIN_RUN)
    recs = np.frombuffer(buf, _layout(deliver_len, ctag_len, head_len, body_len), lo, at)
    first = recs[0]
    ok = ((recs["ftype"] == 1) & (recs["ch"] == channel)
          & (recs["dsize"] == first["dsize"]) & (recs["sig"] == 0x003C003C)
          & (recs["dend"] == 0xCE) & (recs["htype"] == 2) & (recs["hend"] == 0xCE)
          & (recs["bodysize"] == first["bodysize"]) & (recs["btype"] == 3)
          & (recs["bsize"] == first["bsize"]) & (recs["bend"] == 0xCE))
    if not ok.all():
        n = int(np.argmin(ok))
        if n < MIN_RUN:
            return None
        recs = recs[:n]
    return recs


_ACK = None


def ack_frames(channel: int, dtags: Any, multiple: bool) -> bytes:
    """basic.ack frames for every delivery tag in ``dtags`` (21 bytes each), in one buffer."""
    global _ACK
    if _ACK is None:
        _ACK = np.dtype([("type", "u1"), ("ch", ">u2"), ("size", ">u4"), ("sig", ">u4"),
                         ("dtag", ">u8"), ("multiple", "u1"), ("end", "u1")])
    out = np.empty(len(dtags), _ACK)
    out["type"], out["ch"], out["size"], out["sig"] = 1, channel, 13, 0x003C0050
    out["dtag"], out["multiple"], out["end"] = dtags, int(multiple), 0xCE
    return out.tobytes()


def latency_buckets(now_ns: int, ts: Any) -> tuple[Any, Any, int]:
    """(bucket indices, counts, max µs) of ``now - ts`` with bench.histogram's layout."""
    v = (np.int64(now_ns) - ts.astype(np.int64)) // 1000
    v = np.minimum(np.maximum(v, 0), TOP)
    _, exp = np.frexp(v.astype(np.float64))  # exp == bit_length for v < 2**53
    s = np.maximum(exp - 8, 0)
    idx = np.where(v < 256, v, (s << 7) + (v >> s))
    uniq, counts = np.unique(idx, return_counts=True)
    return uniq, counts, int(v.max())
