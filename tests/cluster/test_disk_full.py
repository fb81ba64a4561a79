"""A member's disk full (issue 35 item 7), on a small tmpfs the test mounts (it skips with one
line where mounting is not allowed):

- a follower's disk fills while the leader takes confirmed publishes: the follower cannot
  write, so it never acks and its connection ends; it leaves the ISR and publishing goes on;
  given room again it syncs, rejoins the ISR, and after the leader's death serves every
  confirmed message;
- the leader's disk fills (something else took the room): its disk probe can no longer write,
  so it steps down (exit 75) and the follower leads; a publisher reconnecting to any member
  finds every message it was confirmed there."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from pathlib import Path

import pika
import pytest

from tests.cluster.members import Member
from tests.cluster.test_failover import drain, in_sync, isr, kill_and_drain, takes_over, wait
from tests.cluster.test_jepsen_kill_loop import PUBLISHER
from tests.integration.client_proc import start_client, stop_client


@contextlib.contextmanager
def small_disk(path: Path, size_mb: int):
    """A tmpfs of `size_mb` MiB mounted at `path` for the test's duration."""
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs",
                           str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"a full disk needs a small tmpfs, and mount failed here: "
                    f"{done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def grow(path: Path, size_mb: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size_mb}m", str(path)], check=True)


def fill(path: Path) -> None:
    """Take every free byte of the filesystem at `path`."""
    fd = os.open(path / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 20, 4096):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)


def test_a_follower_whose_disk_fills_leaves_the_isr_and_catches_up_with_room(tmp_path, etcd):
    prefix = f"/d-{uuid.uuid4().hex[:6]}"
    with small_disk(tmp_path / "bdisk", 8) as disk:
        a = Member(tmp_path, "a", etcd.endpoints, prefix)
        b = Member(tmp_path, "b", etcd.endpoints, prefix, data_dir=disk / "b")
        try:
            a.start().wait_serving()
            b.start()
            in_sync(etcd, prefix, 2, "b never joined the ISR")
            body = os.urandom(100_000)
            with pika.BlockingConnection(pika.URLParameters(a.url)) as conn:
                ch = conn.channel()
                ch.queue_declare("full", durable=True, arguments={"x-queue-type": "quorum"})
                ch.confirm_delivery()
                started = time.monotonic()
                for i in range(120):  # 12 MB, more than b's 8 MiB: every one confirmed
                    ch.basic_publish("", "full", b"%04d" % i + body,
                                     pika.BasicProperties(delivery_mode=2))
                took = time.monotonic() - started
            assert took < 30, took
            wait(lambda: isr(etcd, prefix) == {a.node_id}, 30, "b never left the ISR")
            assert "No space left on device" in b.log_path.read_text(errors="replace")
            grow(disk, 64)
            in_sync(etcd, prefix, 2, "b never caught up once its disk had room")
            got = kill_and_drain(a, b, etcd, prefix, "full")
            assert [m[:4] for m in got] == [b"%04d" % i for i in range(120)]
            assert all(m[4:] == body for m in got)
        finally:
            a.kill()
            b.kill()


def test_a_leader_whose_disk_fills_hands_over_and_nothing_confirmed_is_lost(tmp_path, etcd):
    prefix = f"/d-{uuid.uuid4().hex[:6]}"
    with small_disk(tmp_path / "adisk", 64) as disk:
        # a disk alarm below 1 MB free: the alarm is RabbitMQ's answer to a disk filling
        # slowly; a disk something else filled at once is what this test is about
        a = Member(tmp_path, "a", etcd.endpoints, prefix, data_dir=disk / "a",
                   **{"disk_free_limit.absolute": 1_000_000})
        b = Member(tmp_path, "b", etcd.endpoints, prefix)
        publisher = None
        try:
            a.start().wait_serving()
            b.start()
            in_sync(etcd, prefix, 2, "b never joined the ISR")
            log = tmp_path / "confirmed.txt"
            source = PUBLISHER.replace("URLS", repr([a.url, b.url])).replace(
                "PATH", repr(str(log)))
            publisher, _ = start_client(source, a.url)
            wait(lambda: log.exists() and len(log.read_text().split()) > 50, 30,
                 "nothing confirmed")
            fill(disk)
            wait(lambda: a.proc.poll() is not None, 30, "a kept leading on a full disk")
            assert a.proc.returncode == 75, a.log_tail()
            takes_over(b, etcd, prefix)
            count = len(log.read_text().split())
            wait(lambda: len(log.read_text().split()) > count + 50, 30,
                 "publishing did not go on with b")
        finally:
            if publisher is not None:
                stop_client(publisher)
            a.kill()
        confirmed = {int(x) for x in log.read_text().split()}
        try:
            seen = {int(body) for body in drain(b, "jepsen")}
        finally:
            b.kill()
        assert not confirmed - seen, sorted(confirmed - seen)[:20]
        assert "disk probe failed" in a.log_path.read_text(errors="replace")
