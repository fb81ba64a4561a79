"""Issue 49: is a flood on one worker invisible to a bystander on another when each has a
core? bench.fairness --placement apart against a `--workers 2` broker (management on),
with and without CPU pinning: pinned, worker 0 and the flood's three client processes on
CPU 0, worker 1, the node process and the bystander (this process) on CPU 1; unpinned,
everything may run on both. Shapes "none" (the bystander alone) and "greedy", alternated.

    PYTHONPATH=<checkout> python3 run.py AMQP_URI API_URL ROUNDS > out.jsonl
"""
import json
import os
import sys
import threading
from urllib.parse import urlparse

import requests

from bench import fairness

ALL = set(range(os.cpu_count() or 2))


def pin(pid: int, cpus: set[int]) -> None:
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def main() -> None:
    uri, api, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    url = urlparse(uri)
    node = fairness.find_listener(url.hostname or "127.0.0.1", url.port or 5672)
    workers = {w["index"]: w["os_pid"] for w in requests.get(
        f"{api}/api/nodes", auth=("guest", "guest"), timeout=10).json()[0]["workers"]}
    for _ in range(rounds):
        for pinned in (True, False):
            for shape in ("none", "greedy"):
                while os.getloadavg()[0] > 1.5:  # a quiet machine before each run
                    threading.Event().wait(2)
                pin(workers[0], {0} if pinned else ALL)
                pin(workers[1], {1} if pinned else ALL)
                pin(node, {1} if pinned else ALL)
                pin(os.getpid(), {1} if pinned else ALL)
                stop = threading.Event()

                def pin_flood(pinned: bool = pinned, stop: threading.Event = stop) -> None:
                    while not stop.is_set():
                        for child in children(os.getpid()):
                            pin(child, {0} if pinned else ALL)
                        stop.wait(0.05)

                watcher = threading.Thread(target=pin_flood, daemon=True)
                watcher.start()
                try:
                    res = fairness.run(uri, seconds=25.0, every_ms=100, shape=shape,
                                       placement="apart")
                finally:
                    stop.set()
                    watcher.join()
                res.update(pinned=pinned, shape=shape)
                print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
