"""Helpers shared by the aio-pika pattern tests (test_aio_pika_patterns*.py): run a
coroutine with a deadline, bounded async polling, and dropping a connection from the server
side (our embedded broker or a real RabbitMQ through rabbitmqctl)."""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import subprocess
from collections.abc import Awaitable, Callable

import aio_pika
import aio_pika.exceptions
import pytest

EXTERNAL = bool(os.environ.get("BROKER_TEST_URI"))


def run(coro: Awaitable[object], timeout: float = 10.0) -> object:
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def until(cond: Callable[[], object], within: float = 5.0) -> object:
    """Poll `cond()` (a value or an awaitable) until truthy, bounded: the async twin of
    helpers.wait_for, yielding to the loop between polls so deliveries can arrive."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        value = cond()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {within}s")
        await asyncio.sleep(0.01)


async def ready_count(ch: aio_pika.abc.AbstractChannel, name: str) -> int:
    q = await ch.declare_queue(name, passive=True)
    return q.declaration_result.message_count


def _drop_on_rabbitmq(name: str) -> int:
    out = subprocess.run(
        ["rabbitmqctl", "-q", "list_connections", "--no-table-headers", "pid",
         "client_properties"],
        check=True, capture_output=True, text=True, timeout=30,
    ).stdout
    pids = [line.split("\t")[0] for line in out.splitlines() if f'"{name}"' in line]
    for pid in pids:
        subprocess.run(["rabbitmqctl", "-q", "close_connection", pid, "test drop"],
                       check=True, capture_output=True, timeout=30)
    return len(pids)


async def ignore(_message: object) -> None:
    """A consumer callback that does nothing (aio-pika wants coroutine callbacks)."""


def _drop_over_api(api: str, name: str) -> int:
    """DELETE /api/connections/{name} for each connection whose connection_name is `name`
    (the broker at BROKER_TEST_URI's management API, BROKER_TEST_API: RabbitMQ's or this
    broker's)."""
    import requests

    auth = ("guest", "guest")
    rows = requests.get(f"{api}/api/connections", auth=auth, timeout=10).json()
    names = [row["name"] for row in rows
             if (row.get("client_properties") or {}).get("connection_name") == name]
    for conn in names:
        reply = requests.delete(f"{api}/api/connections/{requests.utils.quote(conn, safe='')}",
                                auth=auth, timeout=10)
        assert reply.status_code == 204, reply.text
    return len(names)


async def drop_connection(broker, name: str) -> int:
    """Close, from the server side, the connection(s) whose connection_name is `name`."""
    if EXTERNAL:
        api = os.environ.get("BROKER_TEST_API")
        if api:  # the management API (of RabbitMQ or this broker) closes it
            return await asyncio.to_thread(_drop_over_api, api.rstrip("/"), name)
        if shutil.which("rabbitmqctl") is None:  # another broker than a RabbitMQ here
            pytest.skip("closing a connection of the broker at BROKER_TEST_URI needs "
                        "BROKER_TEST_API or rabbitmqctl")
        return await asyncio.to_thread(_drop_on_rabbitmq, name)

    def kill() -> int:
        mine = [r for r in list(broker.broker.connections)
                if getattr(r, "handshake", None) is not None
                and r.handshake.client_properties.get("connection_name") == name]
        for r in mine:
            r.abort()
        return len(mine)

    return await asyncio.to_thread(broker.call, kill)
