"""Mesh.send_grouped (broker/workers/mesh.py): a run of items with the same head, sent in one
loop turn, crosses as one record `(*head, [items])`, in order; a record of another head in
between starts a new one; the other end sees every item once, in the order sent."""

from __future__ import annotations

import asyncio
import socket

from broker.workers.link import open_link
from broker.workers.mesh import Mesh


def test_runs_of_one_head_cross_as_one_record_each_in_order():
    async def main() -> list[tuple]:
        a_sock, b_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        a, b = Mesh(0), Mesh(1)
        got: list[tuple] = []
        b.on("ch", lambda peer, record: got.append(record))
        b.on("x", lambda peer, record: got.append(record))
        a.opened(1, await open_link(a_sock, a.link_for(1)))
        b.opened(0, await open_link(b_sock, b.link_for(0)))
        head = ("ch", ("ref", 1), "deliver", "/", "q")
        for i in range(3):
            a.send_grouped(1, head, i)
        a.send(1, ("x", "between"))
        a.send_grouped(1, head, 3)
        a.send_grouped(1, ("ch", ("ref", 2), "deliver", "/", "q"), 4)
        await asyncio.sleep(0.05)  # the turn ends: one frame; the next turn: another
        a.send_grouped(1, head, 5)
        for _ in range(100):
            if len(got) == 5:
                break
            await asyncio.sleep(0.01)
        a.close()
        b.close()
        return got

    got = asyncio.run(main())
    assert got == [(*("ch", ("ref", 1), "deliver", "/", "q"), [0, 1, 2]), ("x", "between"),
                   ("ch", ("ref", 1), "deliver", "/", "q", [3]),
                   ("ch", ("ref", 2), "deliver", "/", "q", [4]),
                   ("ch", ("ref", 1), "deliver", "/", "q", [5])]
