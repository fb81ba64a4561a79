"""The member port fuzzed as the AMQP port is (issue 35 item 7): random bytes, random frames
after a valid preamble, and random frames after a valid handshake (paths that climb out of
the data directory, unknown kinds, lengths past the limit) never crash the leader's listener
or raise an unhandled exception, write nothing outside the data directory, and leave it
serving a real follower afterwards. Seeded: every run sends the same 600 inputs."""

from __future__ import annotations

import asyncio
import random

from broker.cluster import wire
from broker.cluster.follower import ReplicationClient
from broker.cluster.leader import ReplicationServer
from tests.cluster.test_replication import SECRET, Isr, follow, run

CASES = 600


def _inputs(rng: random.Random) -> list[bytes]:
    kinds = [wire.HELLO, wire.WANT, wire.ACK, wire.PROXY_HELLO, 0, 99, 255]
    hello = wire.PREAMBLE + wire.frame(wire.HELLO, wire.s16("fz"),
                                       len(SECRET).to_bytes(2, "big") + SECRET, wire.u64(0))
    out = []
    for i in range(CASES):
        mode = i % 4
        junk = rng.randbytes(rng.randrange(0, 300))
        if mode == 0:
            out.append(junk)
        elif mode == 1:
            out.append(wire.PREAMBLE + bytes([rng.choice(kinds)])
                       + rng.randrange(0, 1 << 32).to_bytes(4, "big") + junk)
        elif mode == 2:  # a handshake, then a WANT naming odd paths, then junk
            paths = [rng.choice(["../escape", "/etc/passwd", "a/../../b", "", "x" * 300,
                                 "vhosts/v/queues/q/\x00", "vhosts/v/queues/q/j"])
                     for _ in range(rng.randrange(1, 4))]
            want = b"".join(wire.s16(p) for p in paths)
            out.append(hello + wire.frame(wire.WANT, want) + junk)
        else:  # a handshake, then random frames of random kinds
            frames = b"".join(wire.frame(rng.choice(kinds), rng.randbytes(rng.randrange(0, 40)))
                              for _ in range(rng.randrange(1, 5)))
            out.append(hello + frames)
    return out


def test_random_input_never_crashes_the_member_port(tmp_path):
    async def scenario():
        loop = asyncio.get_running_loop()
        unhandled = []
        loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
        lead = tmp_path / "leader"
        (lead / "vhosts/v/queues/q").mkdir(parents=True)
        (lead / "vhosts/v/queues/q/j").write_bytes(b"journal")
        server = ReplicationServer(str(lead), "L", 5, SECRET, Isr(), ack_timeout=300)
        port = await server.start("127.0.0.1", 0)
        rng = random.Random(35)
        for data in _inputs(rng):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(data)
            try:
                await writer.drain()
                writer.write_eof()
                await asyncio.wait_for(reader.read(1 << 20), 2)
            except (ConnectionError, TimeoutError):
                pass
            writer.close()
        await asyncio.sleep(0.2)
        assert unhandled == []
        assert not (tmp_path / "escape").exists() and not (tmp_path / "b").exists()
        # still serving: a real follower syncs and joins the ISR
        client = ReplicationClient(str(tmp_path / "follower"), "F", SECRET)
        task = await follow(client, port, server)
        assert (tmp_path / "follower/vhosts/v/queues/q/j").read_bytes() == b"journal"
        await server.stop()
        await asyncio.wait_for(task, 5)

    run(scenario())
