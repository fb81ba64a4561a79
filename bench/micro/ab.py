"""Run a bench/micro script against two checkouts, alternated, and compare (issue 15).

    python bench/micro/ab.py OLD_TREE NEW_TREE bench/micro/publish_decode.py [--rounds 5]

Each round runs the script (with --json; it prints {case: µs}) once with OLD_TREE first on
PYTHONPATH and once with NEW_TREE, A B A B …, so drifting machine load hits both alike.
Prints the median µs per case for each and new/old. A checkout is any directory holding the
`broker` package (e.g. `git worktree add /tmp/base <commit>`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys


def run(tree: str, script: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    out = subprocess.run([sys.executable, script, "--json"], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("script")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    results: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    for _ in range(args.rounds):
        for label, tree in (("old", args.old), ("new", args.new)):
            for case, us in run(tree, args.script).items():
                results[label].setdefault(case, []).append(us)
    print(f"{'case':48} {'old µs':>9} {'new µs':>9} {'new/old':>8}")
    for case, olds in results["old"].items():
        old = statistics.median(olds)
        new = statistics.median(results["new"][case])
        print(f"{case:48} {old:9.3f} {new:9.3f} {new / old:8.2f}")


if __name__ == "__main__":
    main()
