"""Vhost limits (max-connections, max-queues), user limits (max-connections, max-channels)
and the broker-wide `connection_max`, with RabbitMQ's codes and texts (rabbit_reader.erl,
rabbit_channel.erl), set through the `broker.users` façade and checked with pika and
aio-pika. Own brokers, so skipped under BROKER_TEST_URI."""

from __future__ import annotations

import asyncio
import uuid

import aio_pika
import aiormq.exceptions
import pika
import pika.exceptions
import pytest
from helpers import soft_error, start_embedded

pytestmark = pytest.mark.usefixtures("embedded_only")



@pytest.fixture(scope="module")
def lim(embedded_only_module):
    b = start_embedded()
    yield b
    b.stop()


@pytest.fixture
def vhost(lim):
    """A fresh vhost guest may use; its limits start empty."""
    name = f"lim-{uuid.uuid4().hex[:6]}"
    lim.call(lambda: lim.broker.add_vhost(name))
    lim.call(lambda: lim.broker.users.set_permissions("guest", name, ".*", ".*", ".*"))
    return name


def connect(b, vhost: str = "/", user: str = "guest", password: str = "guest"):
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", b.port, vhost, pika.PlainCredentials(user, password)))


def refused_text(fn) -> str:
    """The reply text of a connection refused at connection.open (530)."""
    with pytest.raises(pika.exceptions.AMQPConnectionError) as info:
        fn()
    text = str(info.value)
    assert "(530)" in text
    return text


def test_vhost_max_connections(lim, vhost):
    lim.call(lambda: lim.broker.users.set_vhost_limits(vhost, {"max-connections": 1}))
    first = connect(lim, vhost)
    text = refused_text(lambda: connect(lim, vhost))
    assert (f"NOT_ALLOWED - access to vhost '{vhost}' refused for user 'guest': "
            "connection limit (1) is reached") in text
    connect(lim, "/").close()  # other vhosts are not limited
    first.close()
    connect(lim, vhost).close()  # room again once the first one is gone
    lim.call(lambda: lim.broker.users.set_vhost_limits(vhost, {"max-connections": 0}))
    assert "connection limit (0) is reached" in refused_text(lambda: connect(lim, vhost))
    lim.call(lambda: lim.broker.users.clear_vhost_limit(vhost, "max-connections"))
    connect(lim, vhost).close()


def test_vhost_max_queues(lim, vhost):
    lim.call(lambda: lim.broker.users.set_vhost_limits(vhost, {"max-queues": 2}))
    conn = connect(lim, vhost)
    ch = conn.channel()
    ch.queue_declare("a")
    ch.queue_declare("b")
    ch.queue_declare("a")  # redeclaring an existing queue is fine
    assert soft_error(ch.queue_declare, "c") == (
        406, f"PRECONDITION_FAILED - cannot declare queue 'c': queue limit in vhost "
             f"'{vhost}' (2) is reached")
    ch = conn.channel()
    ch.queue_delete("b")
    ch.queue_declare("c")
    lim.call(lambda: lim.broker.users.set_vhost_limits(vhost, {"max-queues": -1}))
    ch.queue_declare("d")
    conn.close()


def test_user_max_connections_and_channels(lim):
    users = lim.broker.users
    lim.call(lambda: users.add_user("capped", "pw"))
    lim.call(lambda: users.set_permissions("capped", "/", ".*", ".*", ".*"))
    lim.call(lambda: users.set_user_limits("capped", {"max-connections": 2, "max-channels": 3}))
    c1 = connect(lim, user="capped", password="pw")
    c2 = connect(lim, user="capped", password="pw")
    text = refused_text(lambda: connect(lim, user="capped", password="pw"))
    assert ("NOT_ALLOWED - connection refused for user 'capped': user connection "
            "limit (2) is reached") in text
    # channels count across the user's connections
    c1.channel()
    c1.channel()
    c2.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        c2.channel()
    assert (info.value.reply_code, info.value.reply_text) == (
        530, "NOT_ALLOWED - number of channels opened for user 'capped' has reached the "
             "maximum allowed user limit of (3)")
    c1.close()
    guest = connect(lim)  # guest is not limited
    guest.channel()
    guest.close()
    lim.call(lambda: users.delete_user("capped"))


def test_broker_wide_connection_max():
    b = start_embedded(connection_max=2)
    try:
        c1, c2 = connect(b), connect(b)
        text = refused_text(lambda: connect(b))
        assert "NOT_ALLOWED - connection refused: node connection limit (2) is reached" in text
        c1.close()
        c3 = connect(b)

        async def aio() -> None:
            # aiormq 7 reports a connection.close in answer to connection.open as an
            # unexpected frame (also against RabbitMQ); the refusal still reaches it
            with pytest.raises(aiormq.exceptions.InvalidFrameError) as info:
                await aio_pika.connect(host="127.0.0.1", port=b.port, login="guest",
                                       password="guest")
            assert "Connection.Close" in str(info.value)

        asyncio.run(asyncio.wait_for(aio(), 10))
        c2.close()
        c3.close()
    finally:
        b.stop()


def test_aio_pika_vhost_queue_limit(lim, vhost):
    lim.call(lambda: lim.broker.users.set_vhost_limits(vhost, {"max-queues": 1}))

    async def main() -> None:
        conn = await aio_pika.connect(host="127.0.0.1", port=lim.port, login="guest",
                                      password="guest", virtualhost=vhost)
        async with conn:
            ch = await conn.channel()
            await ch.declare_queue("only")
            with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as info:
                await ch.declare_queue("second")
            assert "queue limit in vhost" in str(info.value)

    asyncio.run(asyncio.wait_for(main(), 10))
