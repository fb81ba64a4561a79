# bench/histogram.py — latency histogram shared by workers and the coordinator.
#
# Owns: the HDR bucket layout (1 µs to 2**36 µs, two significant decimal digits), counting,
# merging, and the hand-over to the hdrhistogram library, which computes every percentile
# and encodes the histogram in HdrHistogram's standard compressed form. Pure: no I/O, no
# clocks.
# Talks to: bench.consumer / bench.publisher (record), bench.coordinator (merge, percentiles).
# Must never: store raw samples (a 10-minute run at 100k msg/s would hold 60M floats).
"""HDR latency histogram in microseconds, mergeable across processes.

The layout is HdrHistogram's for ``lowest=1, highest=2**36, significant_figures=2``: 128
sub-buckets per power of two (relative error below 0.8 %), exact below 256 µs. A value v
(µs, int >= 0) goes to index ``v`` when ``v < 256``; otherwise, with
``s = v.bit_length() - 8``, to ``(s << 7) + (v >> s)`` — the index
``hdrh.histogram.HdrHistogram`` itself computes (tests/bench/test_bench_units.py checks it
against the library). Hot-path callers inline that formula (see `bucket`) and increment
``counts[index]`` in a plain list, which costs 0.2 µs a sample against the library's
``record_value`` at 1.2 µs; percentiles are then the library's own
(``get_percentile_to_value_dict``, each the highest value equivalent to its bucket, as
HdrHistogram reports them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hdrh.histogram import HdrHistogram

LOWEST = 1
HIGHEST = 1 << 36  # µs (~19 h); larger samples count as HIGHEST
SIGNIFICANT_FIGURES = 2
TOP = HIGHEST  # hot paths clamp with ``if v > TOP: v = TOP``


def new_hdr() -> HdrHistogram:
    """An empty library histogram with this module's layout."""
    return HdrHistogram(LOWEST, HIGHEST, SIGNIFICANT_FIGURES)


SIZE = new_hdr().counts_len


def bucket(value_us: int) -> int:
    """Counts index of a latency in µs (negative values count as 0, huge ones as HIGHEST)."""
    if value_us < 256:
        return value_us if value_us > 0 else 0
    if value_us > TOP:
        value_us = TOP
    s = value_us.bit_length() - 8
    return (s << 7) + (value_us >> s)


def bucket_value(index: int) -> float:
    """Representative value (µs) of an index: the middle of its range."""
    if index < 256:
        return float(index)
    s = (index >> 7) - 1
    low = (index - (s << 7)) << s
    return low + ((1 << s) - 1) / 2


class Histogram:
    """Counts per HDR index; ``counts`` is a plain list so hot loops can index it directly."""

    def __init__(self) -> None:
        self.counts = [0] * SIZE
        self.max_us = 0  # exact maximum seen, in µs

    def record(self, value_us: int) -> None:
        """Add one sample (µs)."""
        self.counts[bucket(value_us)] += 1
        if value_us > self.max_us:
            self.max_us = value_us

    def take_sparse(self) -> dict[int, int]:
        """Non-zero buckets as ``{index: count}``, then reset (for per-interval reports)."""
        counts = self.counts
        sparse = {i: c for i, c in enumerate(counts) if c}
        if sparse:
            self.counts = [0] * SIZE
        return sparse

    def merge_sparse(self, sparse: Mapping[int, int]) -> None:
        """Add a ``take_sparse`` result (keys may arrive as str after JSON)."""
        for i, c in sparse.items():
            self.counts[int(i)] += c

    @property
    def total(self) -> int:
        return sum(self.counts)

    def to_hdr(self) -> HdrHistogram:
        """The same counts in a ``hdrh.histogram.HdrHistogram`` (the library's object)."""
        h = new_hdr()
        lo = hi = -1
        total = 0
        for i, c in enumerate(self.counts):
            if c:
                h.counts[i] = c
                total += c
                hi = i
                if lo < 0:
                    lo = i
        h.set_internal_tacking_values(lo, hi, total)
        return h

    def encode(self) -> str:
        """HdrHistogram's compressed base64 form ("HISTF..."), for result files; decode with
        ``HdrHistogram.decode`` or any HdrHistogram tool."""
        return self.to_hdr().encode().decode("ascii")

    def percentiles(self, qs: Iterable[float] = (50, 95, 99, 99.9)) -> dict[str, float | None]:
        """``{"p50": ms, ...}`` for each q in percent, plus ``max`` (ms) and ``count``.

        Percentiles are the library's (``get_percentile_to_value_dict``) in milliseconds; max
        is the exact largest sample; None when empty.
        """
        qs = list(qs)
        total = self.total
        out: dict[str, float | None] = {}
        if not total:
            out.update({f"p{q:g}": None for q in qs})
            out["max"] = None
            out["count"] = 0
            return out
        hdr = self.to_hdr()
        values = hdr.get_percentile_to_value_dict(qs)
        # hot paths track the exact maximum only from 256 µs up, where buckets are ranges
        top = self.max_us if self.max_us >= 256 else hdr.get_max_value()
        for q in qs:
            out[f"p{q:g}"] = round(min(values[q], top) / 1000, 3)
        out["max"] = round(top / 1000, 3)
        out["count"] = total
        return out
