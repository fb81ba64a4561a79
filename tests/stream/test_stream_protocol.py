"""The stream protocol's listener (broker/stream_protocol/reader.py, issue 37 item 1-2):
rstream's client connects, creates, finds and deletes streams; a stream created over the
stream protocol is a stream queue over AMQP 0-9-1; wrong credentials, vhosts and bad input
get RabbitMQ's response codes and a closed connection, without touching other connections.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import subprocess
import sys

import pika
import pytest
from rstream import exceptions as rexc

from broker.embedded import EmbeddedBroker
from broker.stream_protocol import core
from tests.stream.helpers import producer, run
from tests.stream.raw_client import (
    closed,
    confirmed_ids,
    declare_publisher,
    frame,
    opened,
    publish_frame,
    read_frame,
    s,
    tuned,
)
from tests.stream.raw_client import (
    create_stream as raw_create_stream,
)


def test_rstream_creates_finds_and_deletes_a_stream_amqp_clients_see(sbroker):
    async def main() -> list:
        async with producer(sbroker) as p:
            await p.create_stream("sp-1", arguments={"max-length-bytes": 10_000_000})
            seen = [await p.stream_exists("sp-1"), await p.stream_exists("sp-none")]
            with pytest.raises(rexc.StreamAlreadyExists):  # equivalent arguments
                await p.create_stream("sp-1", arguments={"max-length-bytes": 10_000_000})
            with pytest.raises(rexc.PreconditionFailed):  # other arguments, as RabbitMQ's
                await p.create_stream("sp-1")
            return seen

    assert run(main()) == [True, False]
    conn = pika.BlockingConnection(pika.URLParameters(sbroker.url))
    ch = conn.channel()
    ok = ch.queue_declare("sp-1", durable=True, passive=True)
    assert ok.method.queue == "sp-1"
    q = sbroker.call(lambda: sbroker.broker.vhosts["/"].queues["sp-1"])
    assert q.queue_type == "stream" and q.arguments["x-max-length-bytes"] == 10_000_000
    conn.close()

    async def delete() -> bool:
        async with producer(sbroker) as p:
            await p.delete_stream("sp-1")
            with pytest.raises(rexc.StreamDoesNotExist):
                await p.delete_stream("sp-1")
            return await p.stream_exists("sp-1")

    assert run(delete()) is False


_REFUSED = """
import asyncio, sys, rstream
async def main(port, **kw):
    p = rstream.Producer("127.0.0.1", port, username="guest", **kw)
    try:
        await p.start()
    except Exception as exc:
        return type(exc).__name__
    return "started"
port = int(sys.argv[1])
print(asyncio.run(main(port, password="wrong")))
print(asyncio.run(main(port, password="guest", vhost="no-such-vhost")))
"""


def test_wrong_password_and_a_vhost_without_access_are_refused(sbroker):
    """In a process of its own: rstream leaves its socket open when the server refuses it
    (a client-side leak the test process must not inherit)."""
    out = subprocess.run([sys.executable, "-c", _REFUSED, str(sbroker.stream_port)],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["AuthenticationFailure", "VirtualHostAccessFailure"], out


# -- raw frames, built by hand from PROTOCOL.adoc -----------------------------------------------
def test_a_refusal_reaches_a_client_that_writes_on_after_open(sbroker):
    """The flake rstream showed: its first heartbeat leaves with `open`. Had the server
    closed with that frame unread, its kernel would have answered with a reset, and an
    asyncio client raises the reset before the refusal it holds unread
    (VIRTUAL_HOST_ACCESS_FAILURE became ConnectionResetError). Here 800 kB of heartbeats
    follow `open`, more than one read takes, so part is surely unread when the server
    gives up; it now half-closes and reads on (_fail)."""
    sock = tuned(sbroker)

    async def refused() -> bytes:
        reader, writer = await asyncio.open_connection(sock=sock)
        writer.write(frame(struct.pack(">HHI", 21, 1, 4) + s("no-such-vhost"))
                     + frame(struct.pack(">HH", 23, 1)) * 100_000)
        await asyncio.sleep(0.3)  # a reset, if any, has arrived by now
        try:
            size = struct.unpack(">I", await reader.readexactly(4))[0]
            reply = await reader.readexactly(size)
            assert await reader.read() == b""  # then the server's FIN
            return reply
        finally:
            writer.close()

    key, _v, corr, code = struct.unpack_from(">HHIH", run(refused()))
    assert (key, corr, code) == (0x8015, 4, core.VIRTUAL_HOST_ACCESS_FAILURE)


def test_a_command_before_authentication_closes_the_connection(sbroker):
    sock = socket.create_connection(("127.0.0.1", sbroker.stream_port), timeout=5)
    sock.sendall(frame(struct.pack(">HHI", 13, 1, 1) + s("early") + struct.pack(">I", 0)))
    assert closed(sock)
    sock.close()
    exists = sbroker.call(lambda: "early" in sbroker.broker.vhosts["/"].queues)
    assert not exists


def test_unknown_command_and_oversized_frame_get_a_close_with_their_code(sbroker):
    sock = opened(sbroker)
    sock.sendall(frame(struct.pack(">HHI", 99, 1, 5)))
    key, _v, _corr, code = struct.unpack_from(">HHIH", read_frame(sock))
    assert (key, code) == (22, 13)  # close, UNKNOWN_FRAME
    assert closed(sock)
    sock.close()
    sock = tuned(sbroker)  # frame_max 4096, not open yet
    sock.sendall(struct.pack(">I", 4097) + b"\0" * 16)
    key, _v, _corr, code = struct.unpack_from(">HHIH", read_frame(sock))
    assert (key, code) == (22, 14)  # close, FRAME_TOO_LARGE
    assert closed(sock)
    sock.close()


@pytest.fixture(scope="module")
def small_broker():
    b = EmbeddedBroker(stream_listeners_tcp_default="0", max_message_size=65536).start()
    yield b
    b.stop()


def test_once_open_frames_above_frame_max_are_read_up_to_max_message_size(small_broker):
    """RabbitMQ 3.10-3.13 read frames of any size after open, and rstream's producer sends
    frames above the frame_max it negotiated; max_message_size bounds them here."""
    sock = opened(small_broker)  # tuned to frame_max 4096
    assert raw_create_stream(sock, "big-frames") == 1
    assert declare_publisher(sock, 1, "", "big-frames") == 1
    sock.sendall(publish_frame(1, [(1, b"x" * 3000), (2, b"y" * 3000)]))  # 6 KB > 4096
    f = read_frame(sock)
    key, _v, pub, n, first, second = struct.unpack(">HHBIQQ", f)
    assert (key, pub, n, first, second) == (3, 1, 2, 1, 2)  # publish_confirm of both
    sock.sendall(struct.pack(">I", 65537) + b"\0" * 16)
    key, _v, _corr, code = struct.unpack_from(">HHIH", read_frame(sock))
    assert (key, code) == (22, 14)  # close, FRAME_TOO_LARGE
    assert closed(sock)
    sock.close()


def test_a_malformed_frame_closes_only_its_connection(sbroker):
    other = opened(sbroker)
    sock = opened(sbroker)
    sock.sendall(frame(struct.pack(">HHI", 15, 1, 9) + b"\x00\x00\x00\x05"))  # 5 names, none
    assert closed(sock)
    sock.close()
    other.sendall(frame(struct.pack(">HHII", 15, 1, 10, 1) + s("nope")))  # metadata
    reply = read_frame(other)
    assert struct.unpack_from(">HHI", reply) == (0x800F, 1, 10)
    assert reply.endswith(s("nope") + struct.pack(">HHI", 2, 0xFFFF, 0))
    other.close()


def test_close_by_the_client_is_answered(sbroker):
    sock = opened(sbroker)
    sock.sendall(frame(struct.pack(">HHIH", 22, 1, 7, 1) + s("bye")))
    assert struct.unpack(">HHIH", read_frame(sock)) == (0x8016, 1, 7, 1)
    assert closed(sock)
    sock.close()



def test_metadata_advertises_the_host_name_when_listening_on_every_address():
    """rabbit_stream:host/0 answers the node's host name; this broker does so when bound to
    every address, else the bound address, and stream.advertised_* win over both."""
    from broker.stream_protocol.reader import StreamListener

    def endpoint(host: str, **kw) -> tuple[str, int]:
        return StreamListener(None, host=host, port=5552, frame_max=1 << 20,  # type: ignore[arg-type]
                              heartbeat=60, **kw).endpoint()

    assert endpoint("0.0.0.0") == (socket.gethostname(), 5552)
    assert endpoint("::") == (socket.gethostname(), 5552)
    assert endpoint("127.0.0.1") == ("127.0.0.1", 5552)
    assert endpoint("0.0.0.0", advertised_host="stream.example", advertised_port=6000) == (
        "stream.example", 6000)


def test_peer_properties_announce_the_stream_protocol_version_clients_gate_features_on(sbroker):
    """The Go client turns super streams, single active consumer and filtering on only for a
    server version of 3.11 / 3.13 or more: peer_properties says 3.13.7, the version of
    rabbit_stream_reader this reader follows, and this broker's own version beside it."""
    from broker import __version__

    sock = socket.create_connection(("127.0.0.1", sbroker.stream_port), timeout=5)
    sock.sendall(frame(struct.pack(">HHII", 17, 1, 1, 0)))
    reply = read_frame(sock)
    assert struct.unpack_from(">HHIH", reply) == (0x8011, 1, 1, 1)
    props = core.Cursor(reply, 10).string_map()
    assert (props["product"], props["version"]) == ("RabbitMQ", "3.13.7")
    assert props["pybroker_version"] == __version__
    sock.close()


def _stream_stats(sock: socket.socket, name: str, corr: int) -> dict[str, int]:
    sock.sendall(frame(struct.pack(">HHI", 28, 1, corr) + s(name)))
    while True:
        f = read_frame(sock)
        key, _v, c, code = struct.unpack_from(">HHIH", f)
        if key == 0x801C and c == corr:
            break
    assert code == 1
    c = core.Cursor(f, 10)  # the map: count, then (string, i64) pairs
    return {c.string() or "": c.i64() for _ in range(c.u32())}


def test_stream_stats_answer_osiris_keys_with_minus_one_for_what_is_not_there_yet(sbroker):
    """osiris:get_stats/1 (RabbitMQ 3.13): first_chunk_id, committed_chunk_id and
    last_chunk_id, -1 on an empty stream (the Go client's StreamStats errors on -1)."""
    sock = opened(sbroker)
    assert raw_create_stream(sock, "stats") == 1
    assert _stream_stats(sock, "stats", 200) == {
        "first_chunk_id": -1, "committed_chunk_id": -1, "last_chunk_id": -1}
    assert declare_publisher(sock, 1, "", "stats") == 1
    sock.sendall(publish_frame(1, [(1, b"a"), (2, b"b")]))
    assert confirmed_ids(sock, 2) == [1, 2]
    sock.sendall(publish_frame(1, [(3, b"c")]))
    assert confirmed_ids(sock, 1) == [3]
    assert _stream_stats(sock, "stats", 201) == {
        "first_chunk_id": 0, "committed_chunk_id": 2, "last_chunk_id": 2}
    sock.close()
