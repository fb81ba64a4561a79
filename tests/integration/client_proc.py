"""A pika client in its own process, for tests that kill a broker under a client that holds
something (unacked messages, a consumer mid-stream): the client lives and dies as a separate
process, as a real application would, and leaves no half-closed socket in the test process.

`start_client(script, url)` runs `script` (Python source; `URL` is the broker's AMQP URL) and
returns (process, first line it prints, parsed as JSON)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any


def start_client(script: str, url: str, timeout: float = 60) -> tuple[subprocess.Popen, Any]:
    """Start `script` with URL defined; wait for its first stdout line (JSON)."""
    source = f"URL = {url!r}\n" + textwrap.dedent(script)
    proc = subprocess.Popen([sys.executable, "-c", source], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        line = _readline(proc, timeout)
    except BaseException:
        stop_client(proc)
        raise
    return proc, json.loads(line)


def _readline(proc: subprocess.Popen, timeout: float) -> str:
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise TimeoutError(f"the client printed nothing in {timeout} s")
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"the client exited with {proc.wait(10)} before printing")
    return line


def stop_client(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(10)
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()
