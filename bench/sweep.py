# bench/sweep.py — `python -m bench sweep URI`: the paper's experiment over queue counts.
#
# Owns: running the `paper` scenario for each queue count (1–30 in the paper; more than 15
# queues on two exchanges, as the paper did) and each confirm mode (queue argument
# x-confirm-on, docs/architecture.md §6; "default" sends no argument), interleaving the modes within
# each queue count, and reporting send rates as a table, a JSON document ("bench-sweep/1")
# and a PNG. With `--target NAME=MODE@URI` (repeatable) each series has its own broker, so one
# alternated session compares RabbitMQ's `persist` with this broker's `ack` and `ack-lite`.
# Talks to: bench.scenarios, bench.options, bench.coordinator, matplotlib.
# Must never: compare rates across sessions; ratios are taken within one sweep.
"""Paper reproduction (seed 000): send rate versus number of queues, per confirm mode."""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from bench import options, report, scenarios

DEFAULT_QUEUES = "1,2,3,5,10,15,20,30"  # the paper plots 1..30


def parse_target(spec: str) -> tuple[str, str, str]:
    """`NAME=MODE@URI` -> (name, mode, uri): a series of the sweep on its own broker, e.g.
    `rabbitmq=default@amqp://guest:guest@127.0.0.1:5672/%2F` or
    `ack-lite=ack-lite@amqp://guest:guest@127.0.0.1:5691/%2F`. Raises ValueError."""
    name, sep, rest = spec.partition("=")
    mode, sep2, uri = rest.partition("@")
    if not (sep and sep2 and name and mode and uri):
        raise ValueError(f"--target wants NAME=MODE@URI, got {spec!r}")
    return name, mode, uri


def plan_runs(queues: list[int], modes: list[str], rounds: int) -> list[tuple[int, str, int]]:
    """(queues, mode, round) in execution order: modes interleaved within each point."""
    return [(n, m, r) for n in queues for r in range(1, rounds + 1) for m in modes]


def scenario_for(base: options.Scenario, n: int, mode: str) -> options.Scenario:
    """The paper scenario with ``n`` queues (two exchanges above 15) and confirm ``mode``."""
    args = dict(base.queue_args)
    if mode != "default":
        args["x-confirm-on"] = mode
    return base.replace(queue_pattern_to=base.queue_pattern_from + n - 1,
                        exchanges=1 if n <= 15 else 2, queue_args=tuple(args.items()),
                        quiet=True)


def table(points: dict[int, dict[str, list[float]]], modes: list[str]) -> str:
    """Median send rate (msg/s) per queue count and mode, and each mode / the first."""
    w = {m: max(14, len(m) + 2) for m in modes}  # series names may be long (--target)
    rw = {m: max(18, len(m) + len(modes[0]) + 3) for m in modes[1:]}
    head = f"{'queues':>6}" + "".join(f"{m:>{w[m]}}" for m in modes)
    head += "".join(f"{m + '/' + modes[0]:>{rw[m]}}" for m in modes[1:])
    rows = [head]
    for n, per in points.items():
        med = {m: statistics.median(per[m]) if per.get(m) else None for m in modes}
        row = f"{n:>6}" + "".join(f"{'-' if med[m] is None else f'{med[m]:,.0f}':>{w[m]}}"
                                  for m in modes)
        for m in modes[1:]:
            a, b = med[modes[0]], med[m]
            row += f"{'-' if not a or b is None else f'{b / a:.2f}':>{rw[m]}}"
        rows.append(row)
    return "\n".join(rows)


def draw(points: dict[int, dict[str, list[float]]], modes: list[str], out: str) -> None:
    """Send rate vs queues, one line per mode (median of rounds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    xs = list(points)
    for m in modes:
        ys = [statistics.median(points[n][m]) if points[n].get(m) else float("nan") for n in xs]
        ax.plot(xs, ys, marker="o", label=m)
    ax.set_xlabel("queues")
    ax.set_ylabel("send rate (msg/s, confirmed publishes)")
    ax.set_title("paper scenario: 2×2 producers, 3×3 consumers per queue, 1500 B persistent")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench sweep", description=__doc__)
    p.add_argument("sweep_uri", metavar="URI")
    p.add_argument("--queues", default=DEFAULT_QUEUES, help="queue counts, comma separated")
    p.add_argument("--modes", default="default",
                   help="confirm modes (x-confirm-on values; 'default' = no argument), e.g. "
                        "default,ack,ack-lite")
    p.add_argument("--rounds", type=int, default=1, help="runs per point (median)")
    p.add_argument("--out", help="write bench-sweep/1 JSON here")
    p.add_argument("--png", help="write the plot here")
    p.add_argument("--target", action="append", default=[], metavar="NAME=MODE@URI",
                   help="a series on its own broker (repeatable; replaces --modes and URI; "
                        "the first is the baseline of the ratios)")
    options.add_run_options(p)
    ns = p.parse_args(argv)
    queues = [int(x) for x in ns.queues.split(",") if x]
    modes = [m for m in ns.modes.split(",") if m]
    targets = {m: (m, ns.sweep_uri) for m in modes}  # series name -> (mode, uri)
    if ns.target:
        try:
            parsed = [parse_target(t) for t in ns.target]
        except ValueError as exc:
            p.error(str(exc))
        targets = {name: (mode, uri) for name, mode, uri in parsed}
        modes = list(targets)
    out_file, ns.json, ns.uri = ns.out, None, None
    base = options.scenario_from_args(ns, scenarios.named("paper").replace(uri=ns.sweep_uri))
    from bench.coordinator import run

    points: dict[int, dict[str, list[float]]] = {n: {} for n in queues}
    runs: list[dict[str, Any]] = []
    ok = True
    for n, name, rnd in plan_runs(queues, modes, ns.rounds):
        mode, uri = targets[name]
        doc = run(scenario_for(base.replace(uri=uri), n, mode))
        ok &= doc["ok"]
        points[n].setdefault(name, []).append(doc["rates"]["confirm"])
        runs.append({"queues": n, "mode": mode, "series": name, "round": rnd, "result": doc})
        cpu = (doc.get("broker") or {}).get("cpu_us_per_message")
        print(f"queues {n:>2} {name:>10} round {rnd}: send {doc['rates']['confirm']:,.0f} msg/s,"
              f" consume {doc['rates']['consume']:,.0f} msg/s, broker CPU "
              f"{'?' if cpu is None else f'{cpu:.1f}'} us/msg, verification "
              f"{doc['verification']['status']}" + (f", errors {doc['errors']}"
                                                    if doc["errors"] else ""), flush=True)
    print()
    print(table(points, modes))
    if out_file:
        with open(out_file, "w") as f:
            json.dump({"schema": "bench-sweep/1", "environment": report.environment(),
                       "modes": modes, "points": {str(k): v for k, v in points.items()},
                       "runs": runs}, f, indent=1)
    if ns.png:
        draw(points, modes, ns.png)
        print(f"wrote {ns.png}")
    return 0 if ok else 1
