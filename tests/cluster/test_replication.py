"""The replication stream (issue 35 item 3) between a real leader listener and a real
follower over TCP, on two data directories: the follower syncs only the files that differ
(by SHA-1) and deletes replicated files the leader lacks, then applies appends, replaces,
truncates and deletes and acks them; the leader's wait for a position returns once every
in-sync follower acked it, drops a follower that stops acking from the ISR first, waits
while the ISR is below min_insync_replicas, and refuses to confirm once its term is over;
wrong secrets, older terms and other versions are refused."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import pytest

from broker.cluster import wire
from broker.cluster.follower import Refused, ReplicationClient
from broker.cluster.leader import ReplicationServer

SECRET = b"s3cret"
Q = "vhosts/V1/queues/Q1"
STORE = "vhosts/V1/msg_store_persistent"


def put(root: Path, rel: str, data: bytes) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def append_bytes(path: Path, data: bytes) -> None:
    """What a broker's writer does to a file (small and local: fine on the test's loop)."""
    with path.open("ab") as f:
        f.write(data)


def tree(root: Path) -> dict[str, str]:
    """Replicated files under root → sha1 (the local cluster/ directory left out)."""
    out = {}
    for path in root.rglob("*"):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and rel.startswith("vhosts/") and "/msg_store_transient/" not in rel:
            out[rel] = hashlib.sha1(path.read_bytes()).hexdigest()
    return out


class Isr:
    """What the leader writes to etcd, recorded; `ok` False plays a deposed leader."""

    def __init__(self) -> None:
        self.writes: list[set[str]] = []
        self.ok = True

    async def __call__(self, members: set[str]) -> bool:
        self.writes.append(set(members))
        return self.ok


async def leader_and_follower(tmp_path, *, ack_timeout=3000, min_insync=1, term=7,
                              follower_fsync=True):
    lead_dir, follow_dir = tmp_path / "leader", tmp_path / "follower"
    lead_dir.mkdir(exist_ok=True)
    follow_dir.mkdir(exist_ok=True)
    isr = Isr()
    server = ReplicationServer(str(lead_dir), "L", term, SECRET, isr,
                               ack_timeout=ack_timeout, min_insync_replicas=min_insync)
    port = await server.start("127.0.0.1", 0)
    client = ReplicationClient(str(follow_dir), "F", SECRET, fsync=follower_fsync)
    return server, port, client, isr, lead_dir, follow_dir


async def follow(client, port, server):
    """Start following; return once the leader counts the follower in its ISR."""
    task = asyncio.create_task(client.follow("127.0.0.1", port))
    for _ in range(200):
        if client.node_id in server.isr:
            return task
        await asyncio.sleep(0.05)
    raise TimeoutError("the follower never joined the ISR")


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


@pytest.mark.parametrize("follower_fsync", [True, False])
def test_sync_then_stream_leaves_identical_files(tmp_path, follower_fsync):
    async def scenario():
        server, port, client, isr, lead, foll = await leader_and_follower(
            tmp_path, follower_fsync=follower_fsync)
        put(lead, f"{Q}/journal.jif", b"J" * 1000)
        put(lead, f"{STORE}/0.rdq", b"R" * 5000)
        put(lead, f"{Q}/0.idx", b"same")
        put(foll, f"{Q}/0.idx", b"same")  # equal: not sent
        put(foll, f"{STORE}/0.rdq", b"R" * 4000 + b"X")  # diverged tail: replaced
        put(foll, f"{STORE}/9.rdq", b"only here")  # the leader has none: deleted
        put(lead, "vhosts/V1/msg_store_transient/0.rdq", b"transient: not replicated")
        task = await follow(client, port, server)
        assert tree(foll) == tree(lead)
        assert not (foll / "vhosts/V1/msg_store_transient/0.rdq").exists()
        # the stream
        append_bytes(lead / f"{Q}/journal.jif", b"more")
        server.append(str(lead / f"{Q}/journal.jif"), 1000, b"more")
        put(lead, f"{Q}/clean.terms", b"terms")
        server.replace(f"{Q}/clean.terms", b"terms")
        os.truncate(lead / f"{STORE}/0.rdq", 100)
        server.truncate(f"{STORE}/0.rdq", 100)
        put(lead, "vhosts/V1/queues/Q2/journal.jif", b"q2")
        server.append("vhosts/V1/queues/Q2/journal.jif", 0, b"q2")
        (lead / "vhosts/V1/queues/Q2/journal.jif").unlink()
        (lead / "vhosts/V1/queues/Q2").rmdir()
        position = server.delete("vhosts/V1/queues/Q2")
        assert position == 5
        assert await server.wait_replicated(position)
        assert client.position == 5
        assert tree(foll) == tree(lead)
        assert not (foll / "vhosts/V1/queues/Q2").exists()
        assert server.isr == {"F"} and isr.writes[-1] == {"F"}
        assert (foll / "cluster/term").read_text() == "7"
        await server.stop()
        await asyncio.wait_for(task, 5)

    run(scenario())


def test_writes_during_the_sync_reach_the_follower(tmp_path):
    async def scenario():
        server, port, client, _isr, lead, foll = await leader_and_follower(tmp_path)
        for i in range(50):
            put(lead, f"{STORE}/{i}.rdq", os.urandom(20_000))
        follower = asyncio.create_task(client.follow("127.0.0.1", port))
        last = 0
        for i in range(200):  # appends while the follower lists, asks and receives
            path = lead / f"{STORE}/{i % 50}.rdq"
            size = path.stat().st_size
            append_bytes(path, b"%06d" % i)
            last = server.append(str(path), size, b"%06d" % i)
            await asyncio.sleep(0)
        for _ in range(400):
            if "F" in server.isr:
                break
            await asyncio.sleep(0.05)
        assert "F" in server.isr
        assert await asyncio.wait_for(server.wait_replicated(last), 20)
        assert client.position == last
        assert tree(foll) == tree(lead)
        await server.stop()
        await asyncio.wait_for(follower, 5)

    run(scenario())


def test_two_followers_that_finish_their_syncs_together_both_join_the_isr(tmp_path):
    """The CI failure of stop 39: two followers acked the end of their syncs within a
    millisecond, and each ISR write was "the ISR + me" from the same old ISR, so the second
    write dropped the first follower and the ISR never held three members."""

    class SlowIsr(Isr):
        async def __call__(self, members: set[str]) -> bool:
            await asyncio.sleep(0.2)  # etcd's round trip, long enough to overlap
            return await super().__call__(members)

    async def scenario():
        lead = tmp_path / "leader"
        lead.mkdir()
        isr = SlowIsr()
        server = ReplicationServer(str(lead), "L", 7, SECRET, isr)
        port = await server.start("127.0.0.1", 0)
        clients = [ReplicationClient(str(tmp_path / name), name, SECRET)
                   for name in ("F1", "F2")]
        for c in clients:
            (tmp_path / c.node_id).mkdir()
        tasks = [asyncio.create_task(c.follow("127.0.0.1", port)) for c in clients]
        for _ in range(100):
            if server.isr == {"F1", "F2"}:
                break
            await asyncio.sleep(0.05)
        assert server.isr == {"F1", "F2"} and isr.writes[-1] == {"F1", "F2"}, isr.writes
        await server.stop()
        for task in tasks:
            await asyncio.wait_for(task, 5)

    run(scenario())


def test_a_follower_that_stops_acking_leaves_the_isr_first(tmp_path):
    async def scenario():
        server, port, client, isr, lead, _foll = await leader_and_follower(
            tmp_path, ack_timeout=500)
        task = await follow(client, port, server)
        assert await server.wait_replicated(server.append(f"{STORE}/0.rdq", 0, b"a"))
        assert server.isr == {"F"}

        import threading

        release = threading.Event()
        apply = client._apply
        client._apply = lambda batch: (release.wait(), apply(batch))[1]  # its disk hangs
        try:
            position = server.append(f"{STORE}/0.rdq", 1, b"b")
            loop = asyncio.get_running_loop()
            started = loop.time()
            assert await server.wait_replicated(position)
            waited = loop.time() - started
        finally:
            release.set()
        assert 0.4 <= waited < 3, waited
        assert isr.writes[-1] == set() and server.isr == set()
        await server.stop()
        task.cancel()

    run(scenario())


def test_below_min_insync_replicas_a_confirm_waits_for_a_follower(tmp_path):
    async def scenario():
        server, port, client, _isr, _lead, _foll = await leader_and_follower(
            tmp_path, min_insync=2)
        position = server.append(f"{STORE}/0.rdq", 0, b"a")
        waiting = asyncio.create_task(server.wait_replicated(position))
        await asyncio.sleep(1.0)
        assert not waiting.done()  # the leader alone is 1 < 2
        task = await follow(client, port, server)
        assert await asyncio.wait_for(waiting, 10)
        await server.stop()
        await asyncio.wait_for(task, 5)

    run(scenario())


def test_a_deposed_leader_confirms_nothing(tmp_path):
    async def scenario():
        server, port, client, isr, _lead, _foll = await leader_and_follower(tmp_path)
        task = await follow(client, port, server)
        assert await server.wait_replicated(server.append(f"{STORE}/0.rdq", 0, b"a"))
        isr.ok = False  # etcd says the term is over
        await client_disconnect(server)
        assert not await server.wait_replicated(server.append(f"{STORE}/0.rdq", 1, b"b"))
        assert server.deposed
        await server.stop()
        task.cancel()

    run(scenario())


async def client_disconnect(server):
    for link in list(server.followers.values()):
        server._drop(link, "test")
    await asyncio.sleep(0.1)


@pytest.mark.parametrize("case", ["secret", "term"])
def test_refusals(tmp_path, case):
    async def scenario():
        server, port, client, _isr, _lead, foll = await leader_and_follower(tmp_path, term=7)
        if case == "secret":
            client.secret = b"wrong"
            expected = "wrong cluster secret"
        else:
            (foll / "cluster").mkdir()
            (foll / "cluster/term").write_text("9")
            expected = "older than 9"
        with pytest.raises(Refused, match=expected):
            await client.follow("127.0.0.1", port)
        assert not server.followers
        await server.stop()

    run(scenario())


def test_members_of_another_version_refuse_each_other(tmp_path):
    """A follower of version 99 gets the leader's preamble and a closed connection; a
    follower meeting a leader of another version says so."""
    async def scenario():
        server, port, client, _isr, _lead, _foll = await leader_and_follower(tmp_path)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"PYREPL\x00\x63" + wire.frame(wire.HELLO, b"x"))
        assert await asyncio.wait_for(reader.read(100), 5) == wire.PREAMBLE
        assert await asyncio.wait_for(reader.read(100), 5) == b""
        writer.close()
        assert not server.followers
        await server.stop()

        async def other_leader(r, w):
            await r.read(100)
            w.write(b"PYREPL\x00\x63")
            await w.drain()
            w.close()

        fake = await asyncio.start_server(other_leader, "127.0.0.1", 0)
        with pytest.raises(Refused, match="another version"):
            await client.follow("127.0.0.1", fake.sockets[0].getsockname()[1])
        fake.close()

    run(scenario())


def test_definitions_travel_as_operations(tmp_path):
    """The follower's definitions.db is rebuilt from the leader's at the sync (its own
    extra queue goes) and then changes with each replayed operation; no database file is
    copied."""
    from broker import replication_hook
    from broker.definitions import Definitions, QueueDef
    from broker.definitions_ops import snapshot_ops

    async def scenario():
        lead_dir, foll_dir = tmp_path / "leader", tmp_path / "follower"
        lead_dir.mkdir()
        foll_dir.mkdir()
        defs = Definitions(str(lead_dir / "definitions.db"))
        defs.add_vhost("/")
        defs.add_user("alice", "secret", tags=["administrator"])
        defs.add_queue(QueueDef("/", "before", True, False, {"x-queue-type": "quorum"}))
        stale = Definitions(str(foll_dir / "definitions.db"))
        stale.add_vhost("/")
        stale.add_queue(QueueDef("/", "only-on-the-follower"))
        stale.close()
        isr = Isr()
        server = ReplicationServer(str(lead_dir), "L", 3, SECRET, isr,
                                   definitions_snapshot=lambda: snapshot_ops(defs))
        port = await server.start("127.0.0.1", 0)
        client = ReplicationClient(str(foll_dir), "F", SECRET)
        task = await follow(client, port, server)
        replication_hook.install(server)
        try:
            defs.add_queue(QueueDef("/", "after", True, False, {"x-max-length": 3}))
            defs.remove_queue("/", "before")
        finally:
            replication_hook.install(None)
        assert await server.wait_replicated(server.position)
        copy = Definitions(str(foll_dir / "definitions.db"))
        assert [q.name for q in copy.list_queues()] == ["after"]
        assert copy.list_queues()[0].arguments == {"x-max-length": 3}
        assert copy.check_user_password("alice", "secret")
        copy.close()
        await server.stop()
        await asyncio.wait_for(task, 5)
        defs.close()

    run(scenario())


def test_the_member_port_over_tls(tmp_path):
    """clustering.tls: the leader asks for the member's certificate and the follower checks
    the leader's, both against the cluster's CA; a follower without TLS, or with a
    certificate of another CA, gets no stream."""
    import ssl
    from dataclasses import replace

    from broker.cluster import member_tls
    from broker.config import BrokerConfig
    from tests.integration.certs import TestCA

    for d in ("ca", "other"):
        (tmp_path / d).mkdir()
    ca, other = TestCA(str(tmp_path / "ca")), TestCA(str(tmp_path / "other"), "another CA")

    def config_for(authority):
        pair = authority.issue("member", server=True, client_too=True)
        return replace(BrokerConfig(), clustering_tls=True, clustering_tls_certfile=pair.cert,
                       clustering_tls_keyfile=pair.key, clustering_tls_cacertfile=ca.ca.cert)

    async def scenario():
        lead = tmp_path / "leader"
        put(lead, f"{STORE}/0.rdq", b"over tls")
        server = ReplicationServer(str(lead), "L", 5, SECRET, Isr())
        port = await server.start("127.0.0.1", 0, ssl=member_tls.server_context(
            config_for(ca)))
        client = ReplicationClient(str(tmp_path / "follower"), "F", SECRET)
        task = asyncio.create_task(client.follow(
            "127.0.0.1", port, ssl=member_tls.client_context(config_for(ca))))
        for _ in range(200):
            if "F" in server.isr:
                break
            await asyncio.sleep(0.05)
        assert "F" in server.isr
        assert (tmp_path / "follower" / STORE / "0.rdq").read_bytes() == b"over tls"
        plain = ReplicationClient(str(tmp_path / "plain"), "P", SECRET)
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError, TimeoutError)):
            await plain.follow("127.0.0.1", port)
        stranger = ReplicationClient(str(tmp_path / "stranger"), "S", SECRET)
        with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
            await stranger.follow("127.0.0.1", port,
                                  ssl=member_tls.client_context(config_for(other)))
        assert set(server.followers) == {"F"}
        await server.stop()
        await asyncio.wait_for(task, 5)

    run(scenario())
