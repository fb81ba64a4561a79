"""kill -9 during publish: every message confirmed (and not acked) before the kill is there
after recovery, intact and marked redelivered (storage only: VariableQueue in a child process,
no broker)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from broker.backing_queue.variable_queue import VariableQueue
from broker.msg_store.vhost import VhostStores


@pytest.mark.parametrize("embed", [0, 4096])
def test_confirmed_messages_survive_kill_9(tmp_path, embed):
    child = subprocess.Popen(
        [sys.executable, os.path.join(os.path.dirname(__file__), "crash_child.py"),
         str(tmp_path), str(embed)],
        stdout=subprocess.PIPE, text=True,
    )
    confirmed: set[int] = set()
    acked: set[int] = set()
    assert child.stdout is not None
    for line in child.stdout:
        kind, n = line.split()
        (confirmed if kind == "C" else acked).add(int(n))
        if len(confirmed) >= 400:
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    for line in child.stdout:  # whatever it wrote before dying still counts
        kind, n = line.split()
        (confirmed if kind == "C" else acked).add(int(n))
    child.stdout.close()

    stores = VhostStores(str(tmp_path), "/")
    assert not stores.recover()  # no clean snapshot after a kill
    bq = VariableQueue(("/", "crash"), True, stores=stores, queue_index_embed_msgs_below=embed)
    seen: list[int] = []
    while (f := bq.fetch(False)) is not None:
        n = int(f.message.body.split(b":")[0])
        assert f.message.body == (b"%d:" % n).ljust(1000 + n % 7000, b"x")
        assert f.redelivered
        seen.append(n)
    assert seen == sorted(seen)  # publish order kept
    assert len(seen) == len(set(seen))
    missing = (confirmed - acked) - set(seen)
    assert not missing
    bq.terminate()
    stores.close()
