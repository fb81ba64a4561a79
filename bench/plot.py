# bench/plot.py — `python -m bench plot RESULTS… -o out.png`.
#
# Owns: drawing result documents with matplotlib (Agg backend, PNG): rates per second,
# latency per second, and a bar chart of the summary rates and latency percentiles.
# Takes bench-result/1 files (one run) and bench-compare/1 files (each run becomes a series
# labelled "<name> r<round>").
# Talks to: result JSON files only.
# Must never: need a display.
"""Plot benchmark results to a PNG."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any


def load(paths: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """[(label, bench-result/1 document)] from result and compare files."""
    out: list[tuple[str, dict[str, Any]]] = []
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        if doc.get("schema") == "bench-compare/1":
            names = doc.get("names", ["A", "B"])
            for r in doc["runs"]:
                label = f"{names['AB'.index(r['side'])]} r{r['round']}"
                out.append((label, r["result"]))
        else:
            sc = doc.get("scenario", {})
            out.append((f"{sc.get('name', '?')} {os.path.basename(path)}", doc))
    return out


def _group(label: str) -> str:
    """'rabbitmq r2' -> 'rabbitmq' (runs of one broker share a colour); others unchanged."""
    head, sep, tail = label.rpartition(" r")
    return head if sep and tail.isdigit() else label


def draw(series: list[tuple[str, dict[str, Any]]], out: str, title: str | None = None) -> None:
    """Write a 3-panel PNG: rates over time, latency over time, summary bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_rate, ax_lat, ax_bar) = plt.subplots(3, 1, figsize=(10, 11))
    groups: list[str] = []  # one colour per broker of a compare file (label "name rN")
    for label, _ in series:
        if _group(label) not in groups:
            groups.append(_group(label))
    for label, doc in series:
        color = f"C{groups.index(_group(label)) % 10}"
        tl = doc.get("timeline", [])
        t = [e["t"] for e in tl]
        ax_rate.plot(t, [e["published"] for e in tl], color=color, marker=".", label=f"{label} publish")
        ax_rate.plot(t, [e["consumed"] for e in tl], color=color, linestyle="--", marker=".",
                     label=f"{label} consume")
        p50 = [e["latency_ms"]["p50"] for e in tl]
        p99 = [e["latency_ms"]["p99"] for e in tl]
        ax_lat.plot(t, [float("nan") if v is None else v for v in p50], color=color, marker=".",
                    label=f"{label} p50")
        ax_lat.plot(t, [float("nan") if v is None else v for v in p99], color=color,
                    linestyle=":", marker=".", label=f"{label} p99")
    ax_rate.set_ylabel("msg/s")
    ax_rate.set_xlabel("time (s)")
    ax_rate.set_title("rates per second (solid: publish, dashed: consume)")
    ax_lat.set_ylabel("end-to-end latency (ms)")
    ax_lat.set_xlabel("time (s)")
    ax_lat.set_yscale("symlog", linthresh=1.0)
    ax_lat.set_title("latency per second (solid: p50, dotted: p99)")
    for ax in (ax_rate, ax_lat):
        ax.grid(True, alpha=0.3)
        if len(series) <= 6:
            ax.legend(fontsize=7, ncol=2)
    labels = [label for label, _ in series]
    x = range(len(series))
    width = 0.27
    for k, (key, name) in enumerate((("publish", "publish"), ("confirm", "confirm"),
                                     ("consume", "consume"))):
        ax_bar.bar([i + (k - 1) * width for i in x],
                   [doc["rates"][key] for _, doc in series], width, label=f"{name} msg/s")
    ax_bar.set_xticks(list(x), labels, rotation=20, fontsize=7, ha="right")
    ax_bar.set_ylabel("msg/s (whole run)")
    ax_bar.legend(fontsize=7, loc="upper left")
    ax_bar.grid(True, axis="y", alpha=0.3)
    ax2 = ax_bar.twinx()
    ax2.plot(list(x), [doc["latency_ms"]["p50"] or 0 for _, doc in series], "kD",
             label="latency p50 ms")
    ax2.plot(list(x), [doc["latency_ms"]["p99"] or 0 for _, doc in series], "k^",
             label="latency p99 ms")
    ax2.set_ylabel("ms")
    ax2.legend(fontsize=7, loc="upper right")
    ax_bar.set_title("whole-run rates (bars) and latency percentiles (markers)")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench plot", description=__doc__)
    p.add_argument("results", nargs="+", help="bench-result/1 or bench-compare/1 JSON files")
    p.add_argument("-o", "--out", default="bench.png", help="PNG file to write")
    p.add_argument("--title")
    ns = p.parse_args(argv)
    draw(load(ns.results), ns.out, ns.title)
    print(f"wrote {ns.out}")
    return 0
