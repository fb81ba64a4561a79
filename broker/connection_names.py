"""What RabbitMQ calls a connection: "client_host:client_port -> server_host:server_port".

Owns: that one naming rule, shared by the management API (`/api/connections` names, channel
names "<connection> (<number>)") and the firehose tracer (the `connection` header of trace
copies, broker/trace.py), so both name a connection the same way.
Talked to by: broker/management/shapes.py, broker/trace.py.
Must never: import the reader or the management API (both import this).
"""

from __future__ import annotations

import asyncio
from typing import Protocol


class NamedConnection(Protocol):
    """What naming a connection reads: the client's address and the socket."""

    @property
    def peer(self) -> tuple | None: ...  # (host, port) of the client, None before connect

    @property
    def transport(self) -> asyncio.BaseTransport | None: ...  # the socket's transport


def connection_name(conn: NamedConnection) -> str:
    """"client_host:client_port -> server_host:server_port", RabbitMQ's connection name
    (rabbit_reader's `name`, shown by /api/connections and rabbitmqctl list_connections);
    "?" for an address not known (yet)."""
    peer = conn.peer or ("?", 0)
    sock = conn.transport.get_extra_info("sockname") if conn.transport else None
    local = sock or ("?", 0)
    return f"{peer[0]}:{peer[1]} -> {local[0]}:{local[1]}"
