"""Clients of a follower reach the leader (issue 35 item 4; LavinMQ 2's `proxy.cr`).

A follower listens on the member's AMQP, management HTTP and Prometheus ports; each client
connection is carried to the leader over the leader's replication port — the port only
members use, where the follower first proves it knows the cluster secret — and spliced
there to the leader's own service. The follower sends a PROXY protocol v1 line
first (`PROXY TCP4 <client> <member> <client port> <member port>`), and the leader hands the
connection to its broker through a Unix socket in its `cluster/` directory that only accepts
such lines, so the leader's connection list shows each client's real address and no client
can claim another's (a client cannot reach that socket, and the member port wants the
secret). HTTP and Prometheus go the same way, to Unix sockets of their own whose HTTP
server sees the client's address as the connection's peer (`request.remote`).

Owns: the follower's listeners and the splicing on both ends; the broker side's reader of
the PROXY line (`ProxiedReader`). After a leader change every spliced connection is closed:
clients reconnect, to any member.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import ssl as ssl_module
from collections.abc import Awaitable, Callable
from typing import cast

from broker.cluster import wire

log = logging.getLogger("broker.cluster")
MAX_PROXY_LINE = 107  # bytes: PROXY v1's longest line, CRLF included
SERVICES = ("amqp", "http", "prometheus")


def proxy_line(client: tuple, member: tuple) -> bytes:
    """The PROXY v1 line for a client at `client` (host, port) that reached `member`."""
    family = "TCP6" if ":" in client[0] else "TCP4"
    return f"PROXY {family} {client[0]} {member[0]} {client[1]} {member[1]}\r\n".encode()


def parse_proxy_line(line: bytes) -> tuple[str, int]:
    """(client host, client port) of a PROXY v1 line (CRLF stripped); ValueError else."""
    parts = line.decode("ascii").split(" ")
    if len(parts) != 6 or parts[0] != "PROXY" or parts[1] not in ("TCP4", "TCP6"):
        raise ValueError(f"not a PROXY v1 line: {line!r}")
    ipaddress.ip_address(parts[2])
    port = int(parts[4])
    if not 0 < port < 65536:
        raise ValueError(f"bad source port in {line!r}")
    return parts[2], port


class PeerTransport:
    """A transport as the protocol behind a PROXY line sees it: `get_extra_info("peername")`
    is the client's address from that line; everything else is the real (Unix) transport's.
    For protocols that read their peer from the transport (aiohttp's request handler)."""

    def __init__(self, transport: asyncio.Transport, peer: tuple[str, int]) -> None:
        self._transport = transport
        self._peer = peer

    def get_extra_info(self, name: str, default: object = None) -> object:
        if name == "peername":
            return self._peer
        return self._transport.get_extra_info(name, default)

    def __getattr__(self, name: str) -> object:
        return getattr(self._transport, name)


class ProxiedReader(asyncio.Protocol):
    """The broker's side of a Unix socket the leader's proxied clients arrive on: reads the
    PROXY line, then gives the transport to a new protocol (`make_reader()`) whose peer is
    the client's address: as its `peer` attribute (the AMQP reader), or with `wrap`
    through PeerTransport (an HTTP server's protocol)."""

    def __init__(self, make_reader: Callable[[], asyncio.Protocol], wrap: bool = False) -> None:
        self._make_reader = make_reader
        self._wrap = wrap
        self._buf = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance check
        self._transport = cast("asyncio.Transport", transport)

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        self._buf += data
        end = self._buf.find(b"\r\n")
        if end < 0:
            if len(self._buf) > MAX_PROXY_LINE:
                self._transport.close()
            return
        try:
            peer = parse_proxy_line(self._buf[:end])
        except ValueError as exc:
            log.warning("cluster: proxied connection refused: %s", exc)
            self._transport.close()
            return
        rest = self._buf[end + 2:]
        reader = self._make_reader()
        self._transport.set_protocol(reader)
        if self._wrap:
            reader.connection_made(cast("asyncio.Transport",
                                        PeerTransport(self._transport, peer)))
        else:
            reader.connection_made(self._transport)
            reader.peer = peer  # type: ignore[attr-defined]
        if rest:
            reader.data_received(rest)


async def splice(a_reader: asyncio.StreamReader, a_writer: asyncio.StreamWriter,
                 b_reader: asyncio.StreamReader, b_writer: asyncio.StreamWriter) -> None:
    """Copy both ways until either side closes, then close both."""

    async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(Exception):
                dst.close()

    await asyncio.gather(pipe(a_reader, b_writer), pipe(b_reader, a_writer))


class FollowerProxy:
    """A follower's client listeners: `service` → (host, port) to listen on; each
    connection is carried to the leader at `leader` (host, port of its replication port)
    as member `node_id` with `secret`."""

    def __init__(self, node_id: str, secret: bytes,
                 ssl: ssl_module.SSLContext | None = None) -> None:
        self.node_id = node_id
        self.secret = secret
        self.ssl = ssl  # the member port's TLS (broker/cluster/member_tls.py)
        self.leader: tuple[str, int] | None = None
        self._servers: list[asyncio.base_events.Server] = []
        self._conns: set[asyncio.StreamWriter] = set()

    async def start(self, services: dict[str, tuple[str, int]]) -> None:
        for service, (host, port) in services.items():
            if port:
                server = await asyncio.start_server(self._handler(service), host, port,
                                                    reuse_address=True)
                self._servers.append(server)

    def _handler(self, service: str) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter],
                                                 Awaitable[None]]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._client(service, reader, writer)

        return handle

    def follow(self, leader: tuple[str, int] | None) -> None:
        """The leader changed: new connections go to `leader`, spliced ones are closed."""
        if leader != self.leader:
            self.leader = leader
            if self._conns:
                log.info("cluster: the leader changed: %d carried clients closed",
                         len(self._conns))
            for writer in list(self._conns):
                writer.close()

    async def _client(self, service: str, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        leader = self.leader
        if leader is None:
            writer.close()
            return
        self._conns.add(writer)
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(
                *leader, ssl=self.ssl,
                server_hostname=leader[0] if self.ssl is not None else None), 5)
            line = proxy_line(writer.get_extra_info("peername"),
                              writer.get_extra_info("sockname"))
            up_writer.write(wire.PREAMBLE + wire.frame(
                wire.PROXY_HELLO, wire.s16(self.node_id),
                len(self.secret).to_bytes(2, "big") + self.secret, wire.s16(service), line))
            await splice(reader, writer, up_reader, up_writer)
        except (TimeoutError, OSError) as exc:
            log.info("cluster: a %s client could not be carried to the leader: %s", service,
                     exc)
        finally:
            self._conns.discard(writer)
            writer.close()

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for writer in list(self._conns):
            writer.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self._servers = []
