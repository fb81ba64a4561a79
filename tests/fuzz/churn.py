"""`python -m tests.fuzz.churn --cycles 100000`: connection churn against a broker process.

Starts `python -m broker` on an ephemeral port in a subprocess, then runs `--cycles` complete
AMQP connections (protocol header, start-ok, tune-ok, open, channel.open, close, close-ok),
`--concurrency` at a time, and prints the broker's RSS (VmRSS, MiB) and open file
descriptors before (after a warm-up of 1000 cycles) and after, from /proc/<pid>.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

from pamqp import commands, frame

HEADER = b"AMQP\x00\x00\x09\x01"
SESSION = (
    frame.marshal(commands.Connection.StartOk(client_properties={"product": "churn"},
                                              mechanism="PLAIN", response="\0guest\0guest"), 0)
    + frame.marshal(commands.Connection.TuneOk(channel_max=8, frame_max=131072, heartbeat=0), 0)
    + frame.marshal(commands.Connection.Open(virtual_host="/"), 0)
    + frame.marshal(commands.Channel.Open(), 1)
    + frame.marshal(commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0,
                                              method_id=0), 0)
)


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def one(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(HEADER)
    await reader.readexactly(7)  # start's frame header: the broker is talking
    writer.write(SESSION)
    await reader.read()  # until the broker closes after close-ok
    writer.close()


async def churn(port: int, cycles: int, concurrency: int) -> None:
    sem = asyncio.Semaphore(concurrency)

    async def task() -> None:
        async with sem:
            await one(port)

    done = 0
    while done < cycles:
        batch = min(5000, cycles - done)
        await asyncio.gather(*(task() for _ in range(batch)))
        done += batch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz.churn")
    p.add_argument("--cycles", type=int, default=100_000)
    p.add_argument("--concurrency", type=int, default=20)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as data:
        proc = subprocess.Popen([sys.executable, "-m", "broker", "--port", "0", "--data-dir", data],
                                stderr=subprocess.PIPE, text=True)
        try:
            for line in proc.stderr:
                m = re.search(r"ready to accept connections on [\d.]+:(\d+)", line)
                if m:
                    port = int(m.group(1))
                    break
            else:
                raise RuntimeError("broker did not start")
            # keep reading its log so a full pipe never blocks the broker
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            asyncio.run(churn(port, 1000, args.concurrency))
            time.sleep(1)
            before = rss_mib(proc.pid), fds(proc.pid)
            t = time.monotonic()
            asyncio.run(churn(port, args.cycles, args.concurrency))
            secs = time.monotonic() - t
            time.sleep(1)
            after = rss_mib(proc.pid), fds(proc.pid)
            print(f"{args.cycles} connect/close cycles in {secs:.0f} s "
                  f"({args.cycles / secs:.0f}/s): broker RSS {before[0]:.1f} -> {after[0]:.1f} MiB, "
                  f"open fds {before[1]} -> {after[1]}")
        finally:
            proc.terminate()
            proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
