"""Per-stage broker CPU from a py-spy raw profile and a bench JSON (issue 15, item 1).

    py-spy record -p BROKER_PID -d 15 -r 250 -f raw -o s1.raw   # while `python -m bench` runs
    python -m bench.profile_stages s1.raw s1.json

Prints the broker's CPU per message (the bench's /proc figure ÷ messages consumed) and, per
stage, its share of py-spy's samples and µs per message. A sample belongs to the innermost
process on its stack: the queue process (deliver encode, backing-queue ack, the rest), the
channel process, the reader's own frames (read, decode, assemble), the writer, worker
threads, or the rest of the event loop.
"""

from __future__ import annotations

import collections
import json
import sys


def classify(frames: list[str]) -> str:
    """The stage one py-spy stack (outermost first) counts against."""
    joined = ";".join(f.split(" (")[0] for f in frames)
    if "QueueProcess." in joined:
        if "ChannelProcess.deliver" in joined or "encode_deliver" in joined:
            return "queue: deliver encode + write buffer (ChannelProcess.deliver)"
        if "VariableQueue.ack" in joined or "VqDisk._forget" in joined:
            return "queue: backing-queue ack"
        return "queue: enqueue, delivery choice, settle (QueueProcess)"
    if "ChannelProcess." in joined or "channel_basic." in joined:
        return "channel: dispatch, route, publish, acks, confirms (ChannelProcess)"
    if "Reader.data_received" in joined:
        return "read + decode + assemble (Reader.data_received, own frames)"
    if "Writer." in joined:
        return "socket writes (Writer.flush)"
    if "Thread" in joined or "_worker" in joined:
        return "worker threads (fsync, fold)"
    return "event loop and other"


def stages(raw_path: str) -> tuple[int, collections.Counter]:
    """(total samples, samples per stage) of a py-spy `-f raw` file."""
    total = 0
    counts: collections.Counter = collections.Counter()
    with open(raw_path) as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            samples = int(n)
            total += samples
            counts[classify(stack.split(";"))] += samples
    return total, counts


def main(argv: list[str]) -> int:
    raw_path, bench_path = argv
    with open(bench_path) as f:
        result = json.load(f)
    cpu_s = result["broker"]["cpu_seconds"]
    msgs = result["totals"]["consumed"] or result["totals"]["published"]
    per_msg = cpu_s / msgs * 1e6
    total, counts = stages(raw_path)
    print(f"broker CPU {cpu_s:.2f} s for {msgs} messages = {per_msg:.2f} us/msg")
    for name, n in counts.most_common():
        print(f"{n * 100 / total:5.1f} %  {per_msg * n / total:5.2f} us  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
