# bench/latency_curve.py — `python -m bench.latency_curve`: latency against offered rate,
# open loop, for several brokers in one alternated session (issue 36 item 2).
#
# Owns: the shapes, the run plan (rates × rounds × targets, alternated within each point),
# the quiet-machine wait, the per-point summary (p50/p99/p99.9/max of confirm and end-to-end
# latency, whether the broker kept up), the JSON document ("bench-latency-curve/1") and the
# plot.
# Talks to: `python -m bench` as a subprocess per run (the harness, with --open-loop),
# matplotlib.
# Must never: call a point sustained that lost or fell behind, or compare across sessions.
"""Latency against offered rate, open loop (issue 36 item 2).

Publishers send on a fixed schedule (``python -m bench -r R --open-loop``): each message's
confirm and end-to-end latency count from when it was *due*, so a broker that stalls is
charged for every message that queued up behind the stall (no coordinated omission). Each
point runs every target once per round, alternated, after waiting for the 1-minute load
average to fall below ``--quiet-load``.

Shapes (``--shape``):
- ``s2``: 16 B, confirms (window 200) and acks (prefetch 200), one producer, one consumer;
- ``paper``: the paper's 1.5 KB persistent shape (2 producers × 2 channels, 3 × 3 consumers);
- ``celery``: Celery-shaped properties (``--properties celery``), 256 B persistent, confirms
  and acks, one producer and one consumer.

A point is **sustained** when the broker took at least 97 % of the offered rate, its
consumers had everything within 3 % of the run's length (at least 0.5 s) after publishing
ended (its queues did not grow), and the run verified (every message once). ``--target`` ``NAME=URI`` (repeatable); ``--rates`` total msg/s, comma-separated;
``--up-to NAME=RATE`` stops a target at its maximum while the others go further.
``--floor`` adds a null server (``bench sink``) as the target ``floor`` at every rate: the
client's own latency. ``python -m bench.latency_curve --table DIR/curve.json BASELINE SUBJECT`` prints the
markdown table of a finished curve, with whether the subject's p99 and p99.9 medians are at
or below the baseline's at each rate.

    python -m bench.latency_curve --shape s2 --rates 2000,5000,10000 --rounds 3 -z 20 \\
        --target rabbitmq=amqp://guest:guest@127.0.0.1:5672/%2F \\
        --target pybroker=amqp://guest:guest@127.0.0.1:5674/%2F --out /tmp/curve-s2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SHAPES: dict[str, tuple[list[str], int]] = {  # bench arguments, producer channels
    "s2": (["--scenario", "s2"], 1),
    "paper": (["--scenario", "paper"], 4),
    "celery": (["--scenario", "s2", "--properties", "celery", "-s", "256", "-f",
                "persistent"], 1),
}
KEYS = ("p50", "p99", "p99.9", "max")


def wait_quiet(limit: float, longest: float = 200.0) -> list[float]:
    """Wait (at most `longest` s) for the 1-minute load average to fall below `limit`;
    return the load averages then."""
    deadline = time.monotonic() + longest
    while os.getloadavg()[0] >= limit and time.monotonic() < deadline:
        time.sleep(5)
    return [round(x, 2) for x in os.getloadavg()]


def run_point(shape: str, uri: str, rate: float, seconds: float, out: Path) -> dict[str, Any]:
    """One open-loop run at `rate` total msg/s; its summary."""
    args, channels = SHAPES[shape]
    cmd = [sys.executable, "-m", "bench", *args, "--uri", uri, "-z", str(seconds),
           "-r", f"{rate / channels:.3f}", "--open-loop", "--quiet", "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 4 + 120)
    if not out.exists():
        return {"error": (done.stderr or done.stdout)[-500:]}
    doc = json.loads(out.read_text())
    rates = doc["rates"]
    took = doc["duration_s"]
    behind = took["consuming"] - took["publishing"]  # the backlog left when publishing ended
    sustained = bool(doc.get("ok")) and rates["publish"] >= 0.97 * rate and \
        behind <= max(0.5, 0.03 * took["publishing"])
    return {"offered": rate, "publish": rates["publish"], "consume": rates["consume"],
            "behind_s": round(behind, 3),
            "sustained": sustained, "ok": doc.get("ok"),
            "confirm_ms": {k: doc["confirm_latency_ms"].get(k) for k in KEYS},
            "latency_ms": {k: doc["latency_ms"].get(k) for k in KEYS}}


def summarize(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Median over rounds of each percentile, with the spread (min, max)."""
    out: dict[str, Any] = {"rounds": len(points),
                           "sustained": all(p.get("sustained") for p in points)}
    for kind in ("confirm_ms", "latency_ms"):
        out[kind] = {}
        for k in KEYS:
            values = [p[kind][k] for p in points if p.get(kind) and p[kind][k] is not None]
            out[kind][k] = ({"median": statistics.median(values), "min": min(values),
                             "max": max(values)} if values else None)
    out["publish"] = statistics.median([p.get("publish", 0) for p in points])
    return out


def table(doc: dict[str, Any], baseline: str, subject: str) -> str:
    """A markdown table of confirm latency (ms, median over rounds with min-max) per
    offered rate: p99, p99.9 and max of `baseline` and `subject` side by side, and whether
    the subject's p99 and p99.9 medians are at or below the baseline's ("-" where the
    baseline did not run or did not sustain the rate). When the document has a `floor`
    target (--floor), a last column gives its p99 / p99.9 medians: the client's own."""

    def cell(series: dict[str, Any], rate: str, key: str) -> str:
        point = series.get(rate)
        if point is None:
            return "-"
        c = point["confirm_ms"].get(key)
        if c is None:
            return "-"
        unsustained = "" if point["sustained"] else " (not sustained)"
        if key == "max":
            return f"{c['median']:.1f}{unsustained}"
        return f"{c['median']:.2f} ({c['min']:.2f}-{c['max']:.2f}){unsustained}"

    base, subj = doc["summary"].get(baseline, {}), doc["summary"].get(subject, {})
    floor = doc["summary"].get("floor") if "floor" not in (baseline, subject) else None
    rows = [f"| offered msg/s | {baseline} p99 | {subject} p99 | {baseline} p99.9 | "
            f"{subject} p99.9 | {baseline} max | {subject} max | p99, p99.9 at or below |"
            + (" floor p99 / p99.9 |" if floor else ""),
            "|---:|---|---|---|---|---:|---:|---|" + ("---|" if floor else "")]
    for rate in sorted(set(base) | set(subj), key=float):
        verdict = "-"
        b, s_ = base.get(rate), subj.get(rate)
        if b is not None and s_ is not None and b["sustained"]:
            ok = [s_["confirm_ms"][k]["median"] <= b["confirm_ms"][k]["median"]
                  for k in ("p99", "p99.9")]
            verdict = ", ".join("yes" if o else "no" for o in ok)
        extra = ""
        if floor:
            f = floor.get(rate)
            extra = (f" {f['confirm_ms']['p99']['median']:.2f} / "
                     f"{f['confirm_ms']['p99.9']['median']:.2f} |" if f else " - |")
        rows.append(f"| {float(rate):,.0f} | " + " | ".join(
            cell(series, rate, key) for key in ("p99", "p99.9", "max")
            for series in (base, subj)) + f" | {verdict} |" + extra)
    return "\n".join(rows)


def plot(doc: dict[str, Any], path: Path) -> None:
    """Confirm p99 (solid) and p99.9 (dashed) against offered rate, one line per target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, series in doc["summary"].items():
        rates = sorted(series, key=float)
        for key, style in (("p99", "-"), ("p99.9", "--")):
            xs, ys = [], []
            for r in rates:
                cell = series[r]["confirm_ms"].get(key)
                if cell is not None:
                    xs.append(float(r))
                    ys.append(cell["median"])
            ax.plot(xs, ys, style, marker="o", label=f"{name} {key}")
    ax.set_xlabel("offered rate (msg/s)")
    ax.set_ylabel("confirm latency from scheduled send (ms)")
    ax.set_yscale("log")
    ax.set_title(f"{doc['shape']}: open loop, median of {doc['rounds']} rounds")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--table"]:  # --table CURVE_JSON BASELINE SUBJECT
        if len(args) != 4:
            print("usage: python -m bench.latency_curve --table CURVE_JSON BASELINE SUBJECT",
                  file=sys.stderr)
            return 2
        print(table(json.loads(Path(args[1]).read_text()), args[2], args[3]))
        return 0
    p = argparse.ArgumentParser(prog="python -m bench.latency_curve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=sorted(SHAPES), required=True)
    p.add_argument("--target", action="append", required=True, help="NAME=URI")
    p.add_argument("--rates", required=True, help="total msg/s, comma-separated")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("-z", "--time", type=float, default=20.0, help="seconds per run")
    p.add_argument("--quiet-load", type=float, default=1.5,
                   help="wait before each run until the 1-minute load is below this")
    p.add_argument("--out", required=True, help="directory for the runs, JSON and plot")
    p.add_argument("--floor", action="store_true",
                   help="also run every point against a null server (`python -m bench "
                        "sink`, target 'floor'): the client's own latency")
    p.add_argument("--up-to", action="append", default=[], metavar="NAME=RATE",
                   help="run target NAME only at rates up to RATE msg/s (its maximum: "
                        "points past it only pile up a backlog that slows the next run)")
    a = p.parse_args(argv)
    targets = [t.split("=", 1) for t in a.target]
    if any(len(t) != 2 for t in targets):
        p.error("--target wants NAME=URI")
    try:
        up_to = {n: float(r) for n, r in (u.split("=", 1) for u in a.up_to)}
    except ValueError:
        p.error("--up-to wants NAME=RATE")
    rates = [float(r) for r in a.rates.split(",")]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    floor = None
    if a.floor:
        floor, uri = start_sink()
        targets.append(["floor", uri])
    try:
        return _run_curve(a, targets, up_to, rates, out)
    finally:
        if floor is not None:
            floor.terminate()
            floor.wait(10)
            if floor.stdout is not None:
                floor.stdout.close()


def start_sink() -> tuple[subprocess.Popen[str], str]:
    """`python -m bench sink --port 0` and the URI of the port it reports (the null server
    the client's floor is measured against). Raises RuntimeError if it does not start."""
    import select

    proc = subprocess.Popen([sys.executable, "-m", "bench", "sink", "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 15)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("sink listening on "):
        proc.kill()
        raise RuntimeError(f"the null server did not start: {line!r}")
    return proc, f"amqp://guest:guest@127.0.0.1:{int(line.rsplit(':', 1)[1])}/%2F"


def _run_curve(a: argparse.Namespace, targets: list, up_to: dict[str, float],
               rates: list[float], out: Path) -> int:
    runs: list[dict[str, Any]] = []
    for rate in rates:
        for rnd in range(1, a.rounds + 1):
            for name, uri in targets:
                if rate > up_to.get(name, float("inf")):
                    continue
                load = wait_quiet(a.quiet_load)
                result = run_point(a.shape, uri, rate,
                                   a.time, out / f"{name}-{rate:g}-{rnd}.json")
                result.update({"target": name, "round": rnd, "load": load, "rate": rate})
                runs.append(result)
                c = result.get("confirm_ms") or {}
                print(f"{a.shape} {name} {rate:g} msg/s round {rnd} load {load}: "
                      f"published {result.get('publish', 0):.0f} "
                      f"sustained {result.get('sustained')} confirm p50/p99/p99.9/max "
                      f"{c.get('p50')}/{c.get('p99')}/{c.get('p99.9')}/{c.get('max')} ms",
                      flush=True)
    summary: dict[str, dict[str, Any]] = {}
    for name, _uri in targets:
        summary[name] = {}
        for rate in rates:
            pts = [r for r in runs if r["target"] == name and r["rate"] == rate
                   and "error" not in r]
            if pts:
                summary[name][f"{rate:g}"] = summarize(pts)
    doc = {"schema": "bench-latency-curve/1", "shape": a.shape, "rounds": a.rounds,
           "seconds": a.time, "targets": dict(targets), "runs": runs, "summary": summary}
    (out / "curve.json").write_text(json.dumps(doc, indent=1))
    plot(doc, out / "curve.png")
    print(f"wrote {out / 'curve.json'} and {out / 'curve.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
