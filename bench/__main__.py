# bench/__main__.py — `python -m bench [run] OPTIONS | compare | plot | sink`.
#
# Owns: command dispatch and exit codes (0 ok, 1 verification failed or run errors, 2 usage).
# Talks to: bench.options, bench.scenarios, bench.coordinator, bench.compare, bench.plot,
# bench.sink.
# Must never: hold benchmark logic itself.
"""Command line entry point. ``python -m bench -h`` for the run options (PerfTest names)."""

from __future__ import annotations

import argparse
import json
import sys

from bench import options, scenarios


def run_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="PerfTest-style AMQP benchmark. Subcommands: compare, sweep, plot, sink, "
                    "selftest (python -m bench SUBCOMMAND -h).",
    )
    p.add_argument("--scenario", choices=scenarios.NAMES, help="(bench) start from a preset")
    options.add_run_options(p)
    ns = p.parse_args(argv)
    base = scenarios.named(ns.scenario) if ns.scenario else options.Scenario()
    try:
        sc = options.scenario_from_args(ns, base)
    except ValueError as exc:
        p.error(str(exc))
    from bench.amqp import AMQPError
    from bench.coordinator import run

    try:
        doc = run(sc)
    except (AMQPError, OSError, TimeoutError) as exc:
        print(f"cannot set up the run on {sc.to_json()['uri']}: {exc!r}", file=sys.stderr)
        return 2
    summary = {k: doc[k] for k in ("rates", "latency_ms", "confirm_latency_ms", "totals",
                                    "broker", "verification", "errors")}
    summary["verification"] = {k: v for k, v in doc["verification"].items() if k != "producers"}
    print(json.dumps(summary, indent=1))
    return 0 if doc["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cmd = argv[0] if argv else ""
    if cmd == "compare":
        from bench.compare import main as compare_main

        return compare_main(argv[1:])
    if cmd == "plot":
        from bench.plot import main as plot_main

        return plot_main(argv[1:])
    if cmd == "sink":
        from bench.sink import main as sink_main

        return sink_main(argv[1:])
    if cmd == "sweep":
        from bench.sweep import main as sweep_main

        return sweep_main(argv[1:])
    if cmd == "selftest":  # noqa: SIM102 - one branch per subcommand
        from bench.selftest import main as selftest_main

        return selftest_main(argv[1:])
    if cmd == "run":
        argv = argv[1:]
    return run_main(argv)


if __name__ == "__main__":
    sys.exit(main())
