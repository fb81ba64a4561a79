"""The six RabbitMQ tutorials (hello world, work queues, pub/sub, routing, topics, RPC).

Each runs with pika's BlockingConnection; across the file also pika's SelectConnection
(hello world, RPC), aio-pika (work queues, topics) and kombu (hello world, routing).
Source: https://www.rabbitmq.com/getstarted.html
"""

from __future__ import annotations

import asyncio
import uuid

import aio_pika
import kombu
import pika
from helpers import get_all, pump_until

# --- 1. hello world ------------------------------------------------------------------------


def test_hello_world_blocking(connection, unique):
    ch = connection.channel()
    q = unique("hello")
    ch.queue_declare(q, auto_delete=True)
    ch.basic_publish(exchange="", routing_key=q, body=b"Hello World!")
    received = []

    def on_message(ch_, method, props, body):
        received.append(body)
        ch_.basic_ack(method.delivery_tag)

    ch.basic_consume(q, on_message)
    pump_until(connection, lambda: received)
    assert received == [b"Hello World!"]


def test_hello_world_select_connection(broker, unique):
    q = unique("hello-sel")
    result: dict[str, object] = {}

    def on_open(conn):
        conn.channel(on_open_callback=on_channel)

    def on_channel(ch):
        result["ch"] = ch
        ch.queue_declare(q, auto_delete=True, callback=on_declared)

    def on_declared(_frame):
        ch = result["ch"]
        ch.basic_consume(q, on_message, auto_ack=True, callback=on_consume_ok)

    def on_consume_ok(_frame):
        result["ch"].basic_publish("", q, b"Hello World!")

    def on_message(ch, method, props, body):
        result["body"] = body
        ch.connection.close()

    def on_closed(conn, reason):
        conn.ioloop.stop()

    def on_open_error(conn, err):
        result["error"] = err
        conn.ioloop.stop()

    conn = pika.SelectConnection(
        pika.URLParameters(broker.url),
        on_open_callback=on_open,
        on_open_error_callback=on_open_error,
        on_close_callback=on_closed,
    )
    timer = conn.ioloop.call_later(5, lambda: (result.setdefault("timeout", True), conn.close()))
    conn.ioloop.start()
    conn.ioloop.remove_timeout(timer)
    conn.ioloop.close()
    assert "error" not in result and "timeout" not in result
    assert result["body"] == b"Hello World!"


def test_hello_world_kombu(broker, unique):
    q = unique("hello-kombu")
    with kombu.Connection(broker.url) as conn:
        queue = conn.SimpleQueue(q, queue_opts={"auto_delete": True})
        queue.put("Hello World!")
        msg = queue.get(block=True, timeout=5)
        msg.ack()
        assert msg.payload == "Hello World!"
        queue.close()


# --- 2. work queues (fair dispatch) -------------------------------------------------------


def test_work_queues_fair_dispatch_blocking(connect, unique):
    """prefetch=1: a consumer busy with an unacked task gets nothing more; the fast one does."""
    conn = connect()
    q = unique("tasks")
    setup = conn.channel()
    setup.queue_declare(q, durable=True)
    slow_ch, fast_ch = conn.channel(), conn.channel()
    slow_ch.basic_qos(prefetch_count=1)
    fast_ch.basic_qos(prefetch_count=1)
    slow, fast = [], []

    def on_slow(ch, method, props, body):
        slow.append(method.delivery_tag)  # still "working": acked only at the end

    def on_fast(ch, method, props, body):
        fast.append(body)
        ch.basic_ack(method.delivery_tag)

    slow_ch.basic_consume(q, on_slow)
    fast_ch.basic_consume(q, on_fast)
    n = 10
    for i in range(n):
        setup.basic_publish("", q, f"task {i}".encode(), pika.BasicProperties(delivery_mode=2))
    pump_until(conn, lambda: len(slow) + len(fast) == n)
    assert len(slow) == 1
    assert len(fast) == n - 1
    slow_ch.basic_ack(slow[0])
    setup.queue_delete(q)


def test_work_queues_fair_dispatch_aio_pika(broker, unique):
    q = unique("tasks-aio")

    async def main():
        conn = await aio_pika.connect(broker.url)
        async with conn:
            ch_pub = await conn.channel()
            await ch_pub.declare_queue(q, durable=True)
            slow_ch = await conn.channel()
            fast_ch = await conn.channel()
            await slow_ch.set_qos(prefetch_count=1)
            await fast_ch.set_qos(prefetch_count=1)
            slow_q = await slow_ch.get_queue(q)
            fast_q = await fast_ch.get_queue(q)
            slow, fast = [], []
            done = asyncio.Event()
            n = 10

            async def on_slow(msg):
                slow.append(msg)
                if len(slow) + len(fast) == n:
                    done.set()

            async def on_fast(msg):
                fast.append(msg.body)
                await msg.ack()
                if len(slow) + len(fast) == n:
                    done.set()

            await slow_q.consume(on_slow)
            await fast_q.consume(on_fast)
            for i in range(n):
                await ch_pub.default_exchange.publish(
                    aio_pika.Message(
                        f"task {i}".encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT
                    ),
                    routing_key=q,
                )
            await asyncio.wait_for(done.wait(), 5)
            for m in slow:
                await m.ack()
            await ch_pub.queue_delete(q)
            return len(slow), len(fast)

    n_slow, n_fast = asyncio.run(main())
    assert (n_slow, n_fast) == (1, 9)


# --- 3. publish/subscribe -----------------------------------------------------------------


def test_publish_subscribe_fanout_blocking(connect, unique):
    ex = unique("logs")
    pub = connect().channel()
    pub.exchange_declare(ex, exchange_type="fanout", auto_delete=True)
    subscribers = []
    for _ in range(2):
        c = connect()
        ch = c.channel()
        res = ch.queue_declare("", exclusive=True)
        qname = res.method.queue
        assert qname.startswith("amq.gen-")
        ch.queue_bind(qname, ex)
        got: list[bytes] = []
        ch.basic_consume(qname, lambda ch_, m, p, b, got=got: got.append(b), auto_ack=True)
        subscribers.append((c, got))
    for i in range(3):
        pub.basic_publish(ex, "ignored", f"log {i}".encode())
    for c, got in subscribers:
        pump_until(c, lambda got=got: len(got) == 3)
        assert got == [b"log 0", b"log 1", b"log 2"]


# --- 4. routing ---------------------------------------------------------------------------


def test_routing_direct_blocking(channel, unique):
    ex = unique("direct_logs")
    channel.exchange_declare(ex, exchange_type="direct", auto_delete=True)
    q_err = channel.queue_declare("", exclusive=True).method.queue
    q_all = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(q_err, ex, routing_key="error")
    for sev in ("info", "warning", "error"):
        channel.queue_bind(q_all, ex, routing_key=sev)
    for sev in ("info", "warning", "error", "debug"):
        channel.basic_publish(ex, sev, sev.encode())
    assert pump_all(channel, q_all, 3) == [b"info", b"warning", b"error"]
    assert get_all(channel, q_err) == [b"error"]


def pump_all(ch, queue, n, timeout=5.0):
    """basic.get until n messages were fetched (the publishes are asynchronous)."""
    bodies: list[bytes] = []

    def fetch():
        bodies.extend(get_all(ch, queue))
        return len(bodies) >= n

    pump_until(ch.connection, fetch, timeout)
    return bodies


def test_routing_direct_kombu(broker, unique):
    ex = kombu.Exchange(unique("direct_logs"), type="direct", auto_delete=True)
    qname = unique("errors")
    with kombu.Connection(broker.url) as conn:
        ch = conn.channel()
        queue = kombu.Queue(qname, ex, routing_key="error", auto_delete=True)(ch)
        queue.declare()
        producer = kombu.Producer(ch, exchange=ex)
        for sev in ("info", "error", "warning", "error"):
            producer.publish({"sev": sev}, routing_key=sev, serializer="json")
        got = []

        def on_message(body, message):
            got.append(body["sev"])
            message.ack()

        with kombu.Consumer(ch, queues=[queue], callbacks=[on_message]):
            while len(got) < 2:
                conn.drain_events(timeout=5)
        assert got == ["error", "error"]
        queue.delete()


# --- 5. topics ----------------------------------------------------------------------------

TOPIC_CASES = {
    "quick.orange.rabbit": {"Q1", "Q2"},
    "lazy.orange.elephant": {"Q1", "Q2"},
    "quick.orange.fox": {"Q1"},
    "lazy.brown.fox": {"Q2"},
    "lazy.pink.rabbit": {"Q2"},
    "quick.brown.fox": set(),
    "orange": set(),
    "quick.orange.male.rabbit": set(),
    "lazy.orange.male.rabbit": {"Q2"},
    "lazy": {"Q2"},
}
TOPIC_BINDINGS = {"Q1": ["*.orange.*"], "Q2": ["*.*.rabbit", "lazy.#"]}


def test_topics_blocking(channel, unique):
    ex = unique("topic_logs")
    channel.exchange_declare(ex, exchange_type="topic", auto_delete=True)
    queues = {}
    for name, keys in TOPIC_BINDINGS.items():
        queues[name] = channel.queue_declare("", exclusive=True).method.queue
        for key in keys:
            channel.queue_bind(queues[name], ex, routing_key=key)
    channel.confirm_delivery()  # so every publish is routed before we look
    for rk in TOPIC_CASES:
        channel.basic_publish(ex, rk, rk.encode())
    got = {name: {b.decode() for b in get_all(channel, q)} for name, q in queues.items()}
    for name in queues:
        assert got[name] == {rk for rk, dest in TOPIC_CASES.items() if name in dest}


def test_topics_aio_pika(broker, unique):
    ex_name = unique("topic_logs_aio")

    async def main():
        conn = await aio_pika.connect(broker.url)
        async with conn:
            ch = await conn.channel(publisher_confirms=True)
            ex = await ch.declare_exchange(ex_name, aio_pika.ExchangeType.TOPIC, auto_delete=True)
            queues = {}
            for name, keys in TOPIC_BINDINGS.items():
                queues[name] = await ch.declare_queue(exclusive=True)
                for key in keys:
                    await queues[name].bind(ex, routing_key=key)
            for rk in TOPIC_CASES:
                await ex.publish(aio_pika.Message(rk.encode()), routing_key=rk)
            got = {}
            for name, q in queues.items():
                got[name] = set()
                while (msg := await q.get(no_ack=True, fail=False)) is not None:
                    got[name].add(msg.body.decode())
            return got

    got = asyncio.run(main())
    for name in TOPIC_BINDINGS:
        assert got[name] == {rk for rk, dest in TOPIC_CASES.items() if name in dest}


# --- 6. RPC -------------------------------------------------------------------------------


def fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def test_rpc_blocking(connect, unique):
    rpc_queue = unique("rpc_queue")
    server_conn = connect()
    server = server_conn.channel()
    server.queue_declare(rpc_queue, auto_delete=True)
    server.basic_qos(prefetch_count=1)

    def on_request(ch, method, props, body):
        ch.basic_publish(
            "",
            props.reply_to,
            str(fib(int(body))).encode(),
            pika.BasicProperties(correlation_id=props.correlation_id),
        )
        ch.basic_ack(method.delivery_tag)

    server.basic_consume(rpc_queue, on_request)

    client_conn = connect()
    client = client_conn.channel()
    callback_queue = client.queue_declare("", exclusive=True).method.queue
    responses: dict[str, bytes] = {}
    client.basic_consume(
        callback_queue,
        lambda ch, m, p, b: responses.__setitem__(p.correlation_id, b),
        auto_ack=True,
    )
    corr = {n: str(uuid.uuid4()) for n in (10, 20)}
    for n, cid in corr.items():
        client.basic_publish(
            "",
            rpc_queue,
            str(n).encode(),
            pika.BasicProperties(reply_to=callback_queue, correlation_id=cid),
        )

    def both_done():
        server_conn.process_data_events(time_limit=0)
        return len(responses) == 2

    pump_until(client_conn, both_done)
    assert responses == {corr[10]: b"55", corr[20]: b"6765"}


def test_rpc_select_connection(broker, unique):
    rpc_queue = unique("rpc_sel")
    state: dict[str, object] = {"corr": str(uuid.uuid4())}

    def on_open(conn):
        conn.channel(on_open_callback=on_server_channel)

    def on_server_channel(ch):
        state["server"] = ch
        ch.queue_declare(rpc_queue, auto_delete=True, callback=on_rpc_declared)

    def on_rpc_declared(_f):
        state["server"].basic_consume(rpc_queue, on_request, callback=on_server_ready)

    def on_request(ch, method, props, body):
        ch.basic_publish(
            "",
            props.reply_to,
            str(fib(int(body))).encode(),
            pika.BasicProperties(correlation_id=props.correlation_id),
        )
        ch.basic_ack(method.delivery_tag)

    def on_server_ready(_f):
        state["conn"].channel(on_open_callback=on_client_channel)

    def on_client_channel(ch):
        state["client"] = ch
        ch.queue_declare("", exclusive=True, callback=on_cb_declared)

    def on_cb_declared(frame):
        cbq = frame.method.queue
        state["client"].basic_consume(
            cbq, on_response, auto_ack=True, callback=lambda _f: send_request(cbq)
        )

    def send_request(cbq):
        state["client"].basic_publish(
            "",
            rpc_queue,
            b"30",
            pika.BasicProperties(reply_to=cbq, correlation_id=state["corr"]),
        )

    def on_response(ch, method, props, body):
        state["response"] = (props.correlation_id, body)
        state["conn"].close()

    conn = pika.SelectConnection(
        pika.URLParameters(broker.url),
        on_open_callback=on_open,
        on_open_error_callback=lambda c, e: (state.setdefault("error", e), c.ioloop.stop()),
        on_close_callback=lambda c, r: c.ioloop.stop(),
    )
    state["conn"] = conn
    timer = conn.ioloop.call_later(5, lambda: (state.setdefault("timeout", True), conn.close()))
    conn.ioloop.start()
    conn.ioloop.remove_timeout(timer)
    conn.ioloop.close()
    assert "error" not in state and "timeout" not in state
    assert state["response"] == (state["corr"], b"832040")
