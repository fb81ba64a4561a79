"""broker/workers/link.py between two real processes: a child Python process holds the other
end of a socketpair and echoes every item back, in order, in its own batches. Checks order
and count across bursts, one frame per loop turn, back-pressure while the child is stopped
(SIGSTOP), and that kill -9 of the child is reported once."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from broker.workers.link import HIGH_WATER, Link, open_link

ROOT = Path(__file__).resolve().parents[2]
ECHO = """
import asyncio, socket, sys
from broker.workers.link import Link, open_link

async def main():
    sock = socket.socket(fileno=int(sys.argv[1]))
    done = asyncio.Event()
    def on_batch(items):
        for item in items:
            link.send(item)
    link = Link(on_batch, lambda exc: done.set())
    await open_link(sock, link)
    await done.wait()

asyncio.run(main())
"""


class Peer:
    """The child process and our end of the link, with what came back."""

    def __init__(self) -> None:
        self.ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, "-c", ECHO, str(theirs.fileno())],
                                     pass_fds=[theirs.fileno()], env=env)
        theirs.close()
        self.got: list = []
        self.batches = 0
        self.lost: list = []
        self.pauses = 0
        self.resumes = 0
        self.changed = asyncio.Event()
        self.link: Link | None = None

    async def open(self) -> Link:
        def on_batch(items):
            self.got += items
            self.batches += 1
            self.changed.set()

        def on_lost(exc):
            self.lost.append(exc)
            self.changed.set()

        self.link = await open_link(self.ours, Link(on_batch, on_lost, on_pause=self._paused,
                                                    on_resume=self._resumed))
        return self.link

    def _paused(self) -> None:
        self.pauses += 1
        self.changed.set()

    def _resumed(self) -> None:
        self.resumes += 1
        self.changed.set()

    async def until(self, cond, within_s: float = 20.0) -> None:
        async def wait():
            while not cond():
                self.changed.clear()
                await self.changed.wait()
        await asyncio.wait_for(wait(), within_s)

    def end(self) -> None:
        if self.link is not None:
            self.link.close()
        self.ours.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def run(coro):
    import uvloop

    return uvloop.run(coro)


def test_items_come_back_in_order_one_frame_per_turn():
    async def main():
        peer = Peer()
        try:
            link = await peer.open()
            sent = 0
            for burst in range(200):  # 200 loop turns of 1..500 items each
                for _ in range(1 + (burst * 37) % 500):
                    link.send(("publish", sent, b"m%d" % sent))
                    sent += 1
                await asyncio.sleep(0)
            await peer.until(lambda: len(peer.got) == sent)
            assert [item[1] for item in peer.got] == list(range(sent))
            assert peer.got[-1] == ("publish", sent - 1, b"m%d" % (sent - 1))
            assert link.items_sent == sent and link.batches_sent <= 200
            assert peer.batches < sent / 10  # the echo batches too
            assert peer.lost == []
        finally:
            peer.end()
            await asyncio.sleep(0.01)  # the transport closes its socket

    run(main())


def test_a_stopped_peer_pauses_the_sender_and_resumes_it():
    async def main():
        peer = Peer()
        try:
            link = await peer.open()
            link.send("hello")
            await peer.until(lambda: peer.got == ["hello"])
            os.kill(peer.proc.pid, signal.SIGSTOP)
            body = b"x" * 65536
            n = 0
            while link.writable:  # the child reads nothing: the socket and buffer fill
                link.send(body)
                link.flush()
                n += 1
                await asyncio.sleep(0)
                assert n * len(body) < 64 * HIGH_WATER, "never paused"
            assert peer.pauses == 1
            os.kill(peer.proc.pid, signal.SIGCONT)
            await peer.until(lambda: peer.resumes == 1)
            await peer.until(lambda: len(peer.got) == 1 + n)
            assert peer.lost == []
        finally:
            os.kill(peer.proc.pid, signal.SIGCONT)
            peer.end()
            await asyncio.sleep(0.01)

    run(main())


def test_kill_9_of_the_peer_is_reported_once_and_send_then_fails():
    async def main():
        peer = Peer()
        try:
            link = await peer.open()
            link.send(1)
            await peer.until(lambda: peer.got == [1])
            peer.proc.kill()
            await peer.until(lambda: peer.lost != [])
            await asyncio.sleep(0.05)
            assert len(peer.lost) == 1 and link.closed
            with pytest.raises(ConnectionError) as err:
                link.send(2)
            assert "closed" in str(err.value)
        finally:
            peer.end()
            await asyncio.sleep(0.01)  # the transport closes its socket

    run(main())
