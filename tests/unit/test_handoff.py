"""broker/workers/handoff.py with real processes: this test is the node process (an Acceptor
on a real listener), the workers are child processes that adopt the handed sockets and greet
each client with their index. Checks that connections spread to the fewest, that closes are
counted back, and that a worker killed with SIGKILL gets no more connections."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

from broker.workers.handoff import Acceptor, handoff_pair

ROOT = Path(__file__).resolve().parents[2]
WORKER = """
import asyncio, socket, sys
from broker.workers.handoff import HandOffReceiver

index, fd = int(sys.argv[1]), int(sys.argv[2])

class Greeter(asyncio.Protocol):
    def __init__(self, name):
        self.name = name
    def connection_made(self, transport):
        transport.write(b"worker %d %s\\n" % (index, self.name.encode()))
    def connection_lost(self, exc):
        receiver.closed(self.name)

async def main():
    global receiver
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    def adopt(sock, name):
        loop.create_task(loop.connect_accepted_socket(lambda: Greeter(name), sock))
    receiver = HandOffReceiver(loop, socket.socket(fileno=fd), adopt, done.set)
    await done.wait()

asyncio.run(main())
"""


class Node:
    def __init__(self, loop: asyncio.AbstractEventLoop, workers: int) -> None:
        self.acceptor = Acceptor(loop)
        self.procs: dict[int, subprocess.Popen] = {}
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        for i in range(workers):
            node_end, worker_end = handoff_pair()
            self.procs[i] = subprocess.Popen(
                [sys.executable, "-c", WORKER, str(i), str(worker_end.fileno())],
                pass_fds=[worker_end.fileno()], env=env)
            worker_end.close()
            self.acceptor.add_worker(i, node_end)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.acceptor.serve(self.listener, "amqp")

    async def connect(self) -> tuple[int, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        line = await asyncio.wait_for(reader.readline(), 10)
        words = line.split()
        assert words[0] == b"worker" and words[2] == b"amqp", line
        return int(words[1]), writer

    async def until(self, cond) -> None:
        for _ in range(400):
            if cond():
                return
            await asyncio.sleep(0.025)
        raise AssertionError("condition not met in 10 s")

    def stop(self) -> None:
        self.acceptor.close()
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
            p.wait(10)


def test_connections_go_to_the_fewest_closes_count_and_a_killed_worker_gets_none():
    async def main():
        node = Node(asyncio.get_running_loop(), 4)
        writers = []
        try:
            got = [await node.connect() for _ in range(16)]
            writers = [w for _, w in got]
            assert sorted(i for i, _ in got) == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4
            assert node.acceptor.connections == {0: 4, 1: 4, 2: 4, 3: 4}

            for i, w in got:  # worker 2's clients leave: it reports each close
                if i == 2:
                    w.close()
            await node.until(lambda: node.acceptor.connections[2] == 0)
            again = [await node.connect() for _ in range(4)]
            writers += [w for _, w in again]
            assert [i for i, _ in again] == [2, 2, 2, 2]

            node.procs[1].kill()
            node.procs[1].wait(10)
            await node.until(lambda: 1 not in node.acceptor.connections)
            after = [await node.connect() for _ in range(6)]
            writers += [w for _, w in after]
            assert 1 not in {i for i, _ in after}
            assert sorted(node.acceptor.connections.values()) == [6, 6, 6]
        finally:
            for w in writers:
                w.close()
            node.stop()

    import uvloop

    uvloop.run(main())
