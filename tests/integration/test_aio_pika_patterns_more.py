"""aio-pika and aiormq patterns against this broker and RabbitMQ 3.10, part 2: confirms,
returns, transactions, exclusive queues, passive declare, closing, properties and sizes, and
aiormq directly (part 1 and the method: test_aio_pika_patterns.py)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt

import aio_pika
import aio_pika.exceptions
import aiormq
import aiormq.exceptions
import pytest
from aiohelpers import ignore, ready_count, run
from pamqp import commands as spec

# --- confirms, returns, transactions ----------------------------------------------------------


def test_confirms_with_mandatory_return_callbacks(broker, unique):
    """publisher_confirms=True, on_return_raises=False: an unroutable mandatory publish is
    returned (312 NO_ROUTE, channel.return_callbacks) and publish() gives the returned
    message; a routable one gives Basic.Ack."""

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel(publisher_confirms=True, on_return_raises=False)
            returned = []
            ch.return_callbacks.add(lambda _ch, m: returned.append(m))
            q = await ch.declare_queue(exclusive=True)
            routed = await ch.default_exchange.publish(aio_pika.Message(b"in"), q.name)
            lost_rk = unique("nowhere")
            lost = await ch.default_exchange.publish(
                aio_pika.Message(b"out", message_id="m1"), lost_rk, mandatory=True)
            not_mandatory = await ch.default_exchange.publish(
                aio_pika.Message(b"drop"), lost_rk, mandatory=False)
            return routed, lost, not_mandatory, returned, lost_rk

    routed, lost, not_mandatory, returned, lost_rk = run(main())
    assert isinstance(routed, spec.Basic.Ack)
    assert isinstance(not_mandatory, spec.Basic.Ack)
    assert lost.delivery.reply_code == 312
    assert lost.delivery.reply_text == "NO_ROUTE"
    assert lost.delivery.routing_key == lost_rk
    assert [(m.body, m.message_id) for m in returned] == [(b"out", "m1")]


def test_confirms_on_return_raises_delivery_error(broker, unique):
    """on_return_raises=True: DeliveryError carries the returned message; channel stays open."""

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel(publisher_confirms=True, on_return_raises=True)
            with pytest.raises(aio_pika.exceptions.DeliveryError) as info:
                await ch.default_exchange.publish(aio_pika.Message(b"x"), unique("nowhere"))
            q = await ch.declare_queue(exclusive=True)
            ok = await ch.default_exchange.publish(aio_pika.Message(b"y"), q.name)
            return info.value, ok

    err, ok = run(main())
    assert err.message.body == b"x"
    assert err.frame.reply_code == 312
    assert isinstance(ok, spec.Basic.Ack)


def test_publish_to_missing_exchange_in_confirm_mode(broker, unique):
    """Confirm mode, exchange missing: the channel is closed with 404 and publish() raises."""
    ex = unique("no-ex")

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel(publisher_confirms=True)
            exchange = await ch.get_exchange(ex, ensure=False)
            with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity) as info:
                await exchange.publish(aio_pika.Message(b"x"), "rk")
            return str(info.value)

    assert f"NOT_FOUND - no exchange '{ex}' in vhost '/'" in run(main())


def test_transactions_commit_and_rollback(broker):
    """channel.transaction(): published messages appear on commit, vanish on rollback;
    `async with` commits."""

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            obs = await conn.channel()
            q = await obs.declare_queue(exclusive=True)
            ch = await conn.channel(publisher_confirms=False)
            tx = ch.transaction()
            await tx.select()
            await ch.default_exchange.publish(aio_pika.Message(b"r1"), q.name)
            before_rollback = await ready_count(obs, q.name)
            await tx.rollback()
            after_rollback = await ready_count(obs, q.name)
            await ch.default_exchange.publish(aio_pika.Message(b"c1"), q.name)
            await tx.commit()
            after_commit = await ready_count(obs, q.name)
            async with ch.transaction():
                await ch.default_exchange.publish(aio_pika.Message(b"c2"), q.name)
            after_block = await ready_count(obs, q.name)
            bodies = [(await q.get(no_ack=True)).body for _ in range(after_block)]
            return before_rollback, after_rollback, after_commit, after_block, bodies

    assert run(main()) == (0, 0, 1, 2, [b"c1", b"c2"])


def test_transaction_on_confirm_channel_is_refused(broker):
    """tx.select on a channel in confirm mode: 406 PRECONDITION_FAILED from the broker."""

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel(publisher_confirms=True)
            under = await ch.get_underlay_channel()
            with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as info:
                await under.tx_select()
            return str(info.value)

    assert "PRECONDITION_FAILED" in run(main())


# --- exclusive queues, passive declare, closing -----------------------------------------------


def test_exclusive_queue_is_locked_to_its_connection(broker, unique):
    """Another connection gets 405 RESOURCE_LOCKED (declare, passive declare, consume); the
    queue vanishes when its owner closes."""
    q_name = unique("excl")

    async def main():
        owner = await aio_pika.connect(broker.url)
        other = await aio_pika.connect(broker.url)
        async with other:
            och = await owner.channel()
            await och.declare_queue(q_name, exclusive=True)
            texts = []
            ch = await other.channel()
            for call in (
                lambda: ch.declare_queue(q_name, exclusive=True),
                lambda: ch.declare_queue(q_name, passive=True),
                lambda: ch.get_queue(q_name, ensure=False),
            ):
                try:
                    q = await call()
                    await q.consume(ignore)
                except aiormq.exceptions.ChannelLockedResource as e:
                    texts.append(str(e))
                await ch.reopen()
            await owner.close()
            with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
                await ch.declare_queue(q_name, passive=True)
            return texts

    texts = run(main())
    assert len(texts) == 3
    assert all("RESOURCE_LOCKED" in t for t in texts)
    assert texts[0].startswith(
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{q_name}' in vhost '/'")


def test_passive_declare_missing_queue_then_reopen(broker, unique):
    """Passive declare of a missing queue: 404 with RabbitMQ's text, the channel is closed,
    using it raises; channel.reopen() makes it usable again."""
    missing = unique("missing")

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel()
            with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity) as info:
                await ch.declare_queue(missing, passive=True)
            closed = ch.is_closed
            with pytest.raises(aio_pika.exceptions.ChannelInvalidStateError):
                await ch.declare_queue(exclusive=True)
            await ch.reopen()
            q = await ch.declare_queue(exclusive=True)
            return info.value.args, closed, ch.is_closed, q.name

    args, closed_after_404, closed_after_reopen, name = run(main())
    assert args == (f"NOT_FOUND - no queue '{missing}' in vhost '/'",)
    assert closed_after_404 and not closed_after_reopen and name


def test_closing_channels_and_connections(broker):
    """Closing a channel with a consumer is clean, closing twice is harmless, a closed
    channel refuses work, other channels go on, and the connection closes cleanly."""

    async def main():
        conn = await aio_pika.connect(broker.url)
        ch1 = await conn.channel()
        ch2 = await conn.channel()
        q = await ch1.declare_queue(exclusive=True)
        await q.consume(ignore)
        await ch1.close()
        await ch1.close()
        with pytest.raises(aio_pika.exceptions.ChannelInvalidStateError):
            await ch1.declare_queue(exclusive=True)
        q2 = await ch2.declare_queue(q.name, passive=True)
        consumers = q2.declaration_result.consumer_count
        await conn.close()
        await conn.close()
        return consumers, ch2.is_closed, conn.is_closed

    assert run(main()) == (0, True, True)


def test_channel_close_crossing_a_server_close(broker, unique):
    """Publish to a missing exchange (no confirms) and close the channel at once: the
    client's channel.close crosses the server's channel.close 404. Both sides settle and
    the connection stays usable.

    The server answers the crossing close with close-ok, as RabbitMQ does
    (rabbit_channel: channel.close in state closing -> close-ok). aiormq raises the 404
    before that close-ok has arrived, so a channel opened at once may get the same number
    and receive the old close-ok. A round trip on another channel first makes sure every
    frame for the old channel has been read (the server writes them in order)."""

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            other = await conn.channel()
            ch = await conn.channel(publisher_confirms=False)
            ex = await ch.get_exchange(unique("no-ex"), ensure=False)
            # aiormq re-raises the server's 404 from whichever call sees it first
            with contextlib.suppress(aiormq.exceptions.ChannelNotFoundEntity):
                await ex.publish(aio_pika.Message(b"x"), "rk")
                await ch.close()
            await other.declare_queue(exclusive=True)
            ch = await conn.channel()
            q = await ch.declare_queue(exclusive=True)
            return conn.is_closed, q.name

    closed, name = run(main())
    assert not closed and name


def test_messages_survive_close_right_after_publish(broker, unique):
    """Publish 200 messages without confirms and close the connection at once: RabbitMQ
    has enqueued every one (the frames preceded connection.close on the socket)."""
    q_name = unique("q")

    async def main():
        async with await aio_pika.connect(broker.url) as setup:
            sch = await setup.channel()
            await sch.declare_queue(q_name, auto_delete=False)
            conn = await aio_pika.connect(broker.url)
            ch = await conn.channel()
            for i in range(200):
                await ch.default_exchange.publish(aio_pika.Message(f"{i}".encode()), q_name)
            await conn.close()
            count = await ready_count(sch, q_name)
            await sch.queue_delete(q_name)
            return count

    assert run(main()) == 200


def test_update_secret_is_answered(broker):
    """connection.update-secret with the same password: RabbitMQ answers update-secret-ok."""

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ok = await conn.update_secret("guest", reason="rotation", timeout=2)
            ch = await conn.channel()
            await ch.declare_queue(exclusive=True)
            return ok

    assert isinstance(run(main()), spec.Connection.UpdateSecretOk)


def test_exclusive_consumer_and_inequivalent_redeclare(broker, unique):
    """consume(exclusive=True) then a second consumer: 403 ACCESS_REFUSED; redeclaring a queue
    with another `durable`: 406 PRECONDITION_FAILED with RabbitMQ's inequivalent-arg text."""
    q_name = unique("q")

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel()
            q = await ch.declare_queue(q_name, exclusive=True)
            await q.consume(ignore, exclusive=True)
            other = await conn.channel()
            oq = await other.get_queue(q_name, ensure=False)
            with pytest.raises(aiormq.exceptions.ChannelAccessRefused) as refused:
                await oq.consume(ignore)
            await other.reopen()
            plain = unique("plain")
            await other.declare_queue(plain, auto_delete=True)
            with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as inequivalent:
                await other.declare_queue(plain, auto_delete=True, durable=True)
            return refused.value.args, plain, inequivalent.value.args

    refused, plain, inequivalent = run(main())
    assert refused == (f"ACCESS_REFUSED - queue '{q_name}' in vhost '/' in exclusive use",)
    assert inequivalent == (
        f"PRECONDITION_FAILED - inequivalent arg 'durable' for queue '{plain}' in vhost '/': "
        "received 'true' but current is 'false'",)


def test_exclusive_queue_redeclared_durable_is_equivalent(broker, unique):
    """RabbitMQ (rabbit_channel: durable andalso not exclusive) never makes an exclusive
    queue durable, so redeclaring it with durable=True matches the existing queue."""
    q_name = unique("q")

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel()
            await ch.declare_queue(q_name, exclusive=True)
            again = await ch.declare_queue(q_name, exclusive=True, durable=True)
            return again.name

    assert run(main()) == q_name


@pytest.mark.parametrize("how", ["expiration", "x-message-ttl"])
def test_ttl_zero_expires_at_once_without_a_consumer(broker, how):
    """Message(expiration=0) (the string "0") or a queue with x-message-ttl=0: with no
    consumer waiting the message expires at once; basic.get sees only the later one."""
    args = {"x-message-ttl": 0} if how == "x-message-ttl" else None
    expiration = 0 if how == "expiration" else None

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel(publisher_confirms=True)
            q = await ch.declare_queue(exclusive=True, arguments=args)
            await ch.default_exchange.publish(
                aio_pika.Message(b"gone", expiration=expiration), q.name)
            if args:  # a queue TTL of 0 drops everything; check the queue is empty instead
                return await q.get(no_ack=True, fail=False)
            await ch.default_exchange.publish(aio_pika.Message(b"kept"), q.name)
            return (await q.get(no_ack=True)).body

    assert run(main()) == (None if how == "x-message-ttl" else b"kept")


def test_priority_queue_delivers_highest_priority_first(broker):
    """On an x-max-priority queue basic.get takes the highest priority first."""

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel(publisher_confirms=True)
            q = await ch.declare_queue(exclusive=True, arguments={"x-max-priority": 10})
            for p in (1, 9, 5):
                await ch.default_exchange.publish(
                    aio_pika.Message(f"p{p}".encode(), priority=p), q.name)
            bodies = []
            while (msg := await q.get(no_ack=True, fail=False)) is not None:
                bodies.append(msg.body)
            return bodies

    assert run(main()) == [b"p9", b"p5", b"p1"]


# --- messages: properties, sizes --------------------------------------------------------------

HEADERS = {
    "str": "value",
    "int": 42,
    "negative": -7,
    "big": 2**40,
    "float": 1.5,
    "true": True,
    "false": False,
    "none": None,
    "bytes": bytearray(b"\x00\x01raw"),
    "list": [1, "two", [3], {"four": 4}],
    "nested": {"level1": {"level2": {"leaf": "deep", "n": 1}}, "empty": {}},
    "ts": dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC),
}


def test_message_properties_round_trip(broker):
    """Every basic property set by aio-pika comes back unchanged, by get and by consume."""
    ts = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)

    def message() -> aio_pika.Message:
        return aio_pika.Message(
            b"body", content_type="application/json", content_encoding="gzip",
            headers=HEADERS, delivery_mode=aio_pika.DeliveryMode.PERSISTENT, priority=7,
            correlation_id="corr-1", reply_to="reply.queue", expiration=60,
            message_id="mid-1", timestamp=ts, type="order.created", user_id="guest",
            app_id="tests",
        )

    def props(m) -> dict:
        return {k: getattr(m, k) for k in (
            "body", "content_type", "content_encoding", "headers", "delivery_mode", "priority",
            "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type",
            "user_id", "app_id")}

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel(publisher_confirms=True)
            q = await ch.declare_queue(exclusive=True)
            await ch.default_exchange.publish(message(), q.name)
            await ch.default_exchange.publish(message(), q.name)
            got = await q.get(no_ack=True)
            async with q.iterator(no_ack=True) as it:
                consumed = await it.__anext__()
            return props(got), props(consumed)

    got, consumed = run(main())
    want = props(message())
    want["expiration"] = 60.0  # sent as the string "60000" (ms), read back as seconds
    assert got == want
    assert consumed == want


def test_user_id_must_match_the_connection_user(broker):
    """user_id other than the authenticated user: 406 PRECONDITION_FAILED (RabbitMQ)."""

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel(publisher_confirms=True)
            q = await ch.declare_queue(exclusive=True)
            with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed) as info:
                await ch.default_exchange.publish(aio_pika.Message(b"x", user_id="mallory"),
                                                  q.name)
            return str(info.value)

    assert "user_id property set to 'mallory' but authenticated user was 'guest'" in run(main())


@pytest.mark.parametrize("size", [0, 1, 131_072, 1_000_001])
def test_body_sizes_round_trip(broker, size):
    """Empty bodies and bodies bigger than frame_max (split into body frames) arrive whole,
    by get and by consume."""
    body = bytes(i % 251 for i in range(size))

    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel(publisher_confirms=True)
            q = await ch.declare_queue(exclusive=True)
            await ch.default_exchange.publish(aio_pika.Message(body), q.name)
            await ch.default_exchange.publish(aio_pika.Message(body), q.name)
            got = await q.get(no_ack=True)
            async with q.iterator(no_ack=True) as it:
                consumed = await it.__anext__()
            return got.body, got.body_size, consumed.body

    got, got_size, consumed = run(main())
    assert got == body
    assert got_size == size
    assert consumed == body


# --- aiormq directly --------------------------------------------------------------------------


def test_aiormq_publish_get_consume_and_get_empty(broker):
    """aiormq's README flow: confirm publish, basic.get (and GetEmpty), basic.consume."""

    async def main():
        conn = await aiormq.connect(broker.url)
        try:
            ch = await conn.channel()
            declare = await ch.queue_declare(exclusive=True)
            q = declare.queue
            confirm = await ch.basic_publish(b"one", routing_key=q)
            get = await ch.basic_get(q, no_ack=True)
            empty = await ch.basic_get(q, no_ack=True)
            got: asyncio.Future = asyncio.get_running_loop().create_future()

            async def on_message(m):
                got.set_result(m)

            ok = await ch.basic_consume(q, on_message, no_ack=True)
            await ch.basic_publish(b"two", routing_key=q,
                                   properties=spec.Basic.Properties(message_id="m2"))
            msg = await got
            return (confirm, get.body, get.delivery.message_count, empty, ok, msg.body,
                    msg.header.properties.message_id)
        finally:
            await conn.close()

    confirm, body1, remaining, empty, ok, body2, mid = run(main())
    assert isinstance(confirm, spec.Basic.Ack)
    assert (body1, remaining) == (b"one", 0)
    assert isinstance(empty.delivery, spec.Basic.GetEmpty)
    assert (body2, mid) == (b"two", "m2")
