"""`python -m tests.fuzz --seconds N [--seed S]`: fuzz the broker for N seconds with the same
structured mutations as the CI test, and report cases, seconds, crashes, hangs and stalls.
Failing streams are written to --out (default fuzz-failures/) as .bin files. Exit status 1
if anything failed."""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

from tests.fuzz.harness import FuzzHarness
from tests.fuzz.streams import mutate, session_frames


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz")
    p.add_argument("--seconds", type=float, default=60.0, help="how long to fuzz")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: time)")
    p.add_argument("--out", default="fuzz-failures", help="where failing streams go")
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    rnd = random.Random(seed)
    frames = session_frames()
    counts = {"crash": 0, "hang": 0, "stall": 0}
    cases = 0
    t0 = time.monotonic()
    with FuzzHarness() as h:
        while time.monotonic() - t0 < args.seconds:
            data = b"".join(mutate(frames, rnd))
            v = h.check(data)
            cases += 1
            if v.problems:
                os.makedirs(args.out, exist_ok=True)
                with open(os.path.join(args.out, f"case-{seed}-{cases}.bin"), "wb") as f:
                    f.write(data)
                for problem in v.problems:
                    counts[problem.split(":")[0]] += 1
                    print(f"case {cases}: {problem}", file=sys.stderr)
    secs = time.monotonic() - t0
    print(f"seed {seed}: {cases} cases in {secs:.0f} s ({cases / secs:.0f}/s): "
          f"crashes {counts['crash']}, hangs {counts['hang']}, stalls {counts['stall']}")
    return 1 if any(counts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
