"""The x-delayed-message exchange (issue 50) with pika: rabbitmq-delayed-message-exchange's
wire contract (its README and plugin_SUITE: declare arguments, `x-delay` in ms, due order,
the header negated on delivery, the underlying type's routing at due time) and what this
broker adds (confirms once on disk, mandatory checked against today's bindings, a restart
keeps what waits, the management API's counts)."""

from __future__ import annotations

import time

import pika
import pytest
import requests
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker, UnroutableError

DELAYED = "x-delayed-message"


@pytest.fixture(autouse=True, scope="module")
def _plugin(broker) -> None:
    """Against another broker (BROKER_TEST_URI): only where the plugin is enabled."""
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as conn:
        try:
            ch = conn.channel()
            ch.exchange_declare("delayed-probe", DELAYED, arguments={"x-delayed-type": "direct"})
            ch.exchange_delete("delayed-probe")
        except ConnectionClosedByBroker:
            pytest.skip("the broker has no x-delayed-message exchange type")


def _declare(ch, name: str, kind: str = "direct", **arguments: object) -> None:
    ch.exchange_declare(name, DELAYED, durable=True,
                        arguments={"x-delayed-type": kind, **arguments})


def _publish(ch, exchange: str, key: str, body: bytes, delay: object = None,
             mandatory: bool = False, **props: object) -> None:
    headers = dict(props.pop("headers", None) or {})
    if delay is not None:
        headers["x-delay"] = delay
    ch.basic_publish(exchange, key, body, pika.BasicProperties(headers=headers or None,
                                                               **props), mandatory=mandatory)


def _consume(conn, ch, queue: str, n: int, timeout: float = 10.0) -> list[tuple]:
    """(arrival s since `time.time()` epoch, body, headers) of the first `n` deliveries."""
    got: list[tuple] = []

    def on(chan, method, props, body):
        got.append((time.time(), body, props.headers))
        chan.basic_ack(method.delivery_tag)

    tag = ch.basic_consume(queue, on)
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        conn.process_data_events(0.02)
    ch.basic_cancel(tag)
    return got


@pytest.mark.parametrize(("arguments", "code"), [
    ({}, 406), ({"x-delayed-type": DELAYED}, 406), ({"x-delayed-type": 7}, 406),
])
def test_declare_refuses_what_the_plugin_refuses(connect, unique, arguments, code) -> None:
    ch = connect().channel()
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.exchange_declare(unique("dx"), DELAYED, arguments=arguments)
    assert err.value.reply_code == code
    assert "x-delayed-" in err.value.reply_text


def test_an_unknown_underlying_type_closes_the_connection(connect, unique) -> None:
    conn = connect()
    with pytest.raises(ConnectionClosedByBroker) as err:
        conn.channel().exchange_declare(unique("dx"), DELAYED,
                                        arguments={"x-delayed-type": "no-such-type"})
    assert err.value.reply_code == 503


def test_messages_arrive_in_due_order_with_the_delay_negated(connect, unique) -> None:
    conn = connect()
    ch = conn.channel()
    ch.confirm_delivery()
    x, q = unique("dx"), unique("dq")
    _declare(ch, x)
    ch.queue_declare(q)
    ch.queue_bind(q, x, "k")
    start = time.time()
    for delay in (600, 200, 0, None, "400", -50):
        _publish(ch, x, "k", str(delay).encode(), delay)
    assert time.time() - start < 0.5  # confirmed without waiting for the delays
    got = _consume(conn, ch, q, 6)
    assert [b for _t, b, _h in got] == [b"0", b"None", b"-50", b"200", b"400", b"600"]
    for at, body, headers in got:
        if body in (b"200", b"400", b"600"):
            delay = int(body)
            assert at - start >= delay / 1000 - 0.005  # never early
            assert headers["x-delay"] == -delay  # the plugin's swap_delay_header
    assert [h for _t, b, h in got if b == b"None"] == [None]
    assert got[0][2] == {"x-delay": 0}  # not delayed: untouched


def test_bindings_at_due_time_decide_with_the_underlying_type(connect, unique) -> None:
    """A topic-typed delayed exchange: the queue bound after the publish gets it, the one
    unbound meanwhile does not."""
    conn = connect()
    ch = conn.channel()
    x, early, late = unique("dx"), unique("early"), unique("late")
    _declare(ch, x, "topic")
    ch.queue_declare(early)
    ch.queue_declare(late)
    ch.queue_bind(early, x, "orders.*")
    _publish(ch, x, "orders.eu", b"o1", 300)
    ch.queue_unbind(early, x, "orders.*")
    ch.queue_bind(late, x, "orders.#")
    got = _consume(conn, ch, late, 1)
    assert [b for _t, b, _h in got] == [b"o1"]
    assert ch.queue_declare(early, passive=True).method.message_count == 0


def test_fanout_and_headers_types(connect, unique) -> None:
    conn = connect()
    ch = conn.channel()
    fx, hx, q1, q2 = unique("dfx"), unique("dhx"), unique("q1"), unique("q2")
    _declare(ch, fx, "fanout")
    _declare(ch, hx, "headers")
    for q in (q1, q2):
        ch.queue_declare(q)
        ch.queue_bind(q, fx)
    ch.queue_bind(q2, hx, arguments={"x-match": "all", "kind": "a"})
    _publish(ch, fx, "", b"f", 150)
    _publish(ch, hx, "", b"h", 150, headers={"kind": "a"})
    _publish(ch, hx, "", b"no", 150, headers={"kind": "b"})
    assert [b for _t, b, _h in _consume(conn, ch, q1, 1)] == [b"f"]
    got = sorted(b for _t, b, _h in _consume(conn, ch, q2, 2))
    assert got == [b"f", b"h"]


def test_a_due_message_nobody_routes_goes_to_the_alternate_exchange(connect, unique) -> None:
    conn = connect()
    ch = conn.channel()
    x, ae, q = unique("dx"), unique("ae"), unique("aeq")
    ch.exchange_declare(ae, "fanout")
    ch.queue_declare(q)
    ch.queue_bind(q, ae)
    _declare(ch, x, **{"alternate-exchange": ae})
    _publish(ch, x, "nowhere", b"lost?", 150)
    assert ch.queue_declare(q, passive=True).method.message_count == 0  # held, not the AE's
    got = _consume(conn, ch, q, 1)
    assert [b for _t, b, _h in got] == [b"lost?"]
    assert got[0][2]["x-delay"] == -150


def test_mandatory_is_checked_against_the_bindings_of_now(connect, unique) -> None:
    """Unroutable now: basic.return at once and not held (RabbitMQ's plugin returns every
    delayed mandatory publish); routable now: held, not returned, delivered when due."""
    conn = connect()
    ch = conn.channel()
    ch.confirm_delivery()
    x, q = unique("dx"), unique("dq")
    _declare(ch, x)
    ch.queue_declare(q)
    ch.queue_bind(q, x, "k")
    with pytest.raises(UnroutableError):
        _publish(ch, x, "other", b"r", 100, mandatory=True)
    _publish(ch, x, "k", b"kept", 100, mandatory=True)  # no UnroutableError
    got = _consume(conn, ch, q, 1)
    assert [b for _t, b, _h in got] == [b"kept"]
    conn.process_data_events(0.3)
    assert ch.queue_declare(q, passive=True).method.message_count == 0


def test_deleting_the_exchange_drops_what_it_held(connect, unique) -> None:
    conn = connect()
    ch = conn.channel()
    x, q = unique("dx"), unique("dq")
    _declare(ch, x)
    ch.queue_declare(q)
    ch.queue_bind(q, x, "k")
    _publish(ch, x, "k", b"gone", 200)
    ch.exchange_delete(x)
    _declare(ch, x)
    ch.queue_bind(q, x, "k")
    time.sleep(0.4)
    assert ch.queue_declare(q, passive=True).method.message_count == 0


def test_the_management_api_counts_what_waits(broker, connect, unique, embedded_only) -> None:
    api = broker.api_url
    ch = connect().channel()
    ch.confirm_delivery()
    x = unique("dx")
    _declare(ch, x)
    before = time.time()
    for delay in (60_000, 30_000):
        _publish(ch, x, "k", b"w", delay)
    got = requests.get(f"{api}/api/exchanges/%2F/{x}", auth=("guest", "guest"), timeout=10)
    body = got.json()
    assert body["messages_delayed"] == 2
    assert body["delayed_published"] == 2
    due = body["messages_delayed_next_due"]
    assert due.endswith("Z")
    stamp = time.mktime(time.strptime(due[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    assert before + 29 <= stamp <= before + 32
    ch.exchange_delete(x)


def test_held_messages_survive_a_restart_and_overdue_ones_go_at_once_in_order(
        tmp_path, embedded_only) -> None:
    from broker.embedded import EmbeddedBroker

    b = EmbeddedBroker(data_dir=str(tmp_path)).start()
    try:
        with pika.BlockingConnection(pika.URLParameters(b.url)) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            _declare(ch, "dx")
            ch.queue_declare("dq", durable=True)
            ch.queue_bind("dq", "dx", "k")
            for i in range(50):
                # due times 30 ms apart, the last published first (a publish takes ~2 ms)
                _publish(ch, "dx", "k", b"%d" % i, 300 + (49 - i) * 30, delivery_mode=2)
    finally:
        b.stop()
    time.sleep(1.9)  # every one is overdue by the time the broker is back
    b = EmbeddedBroker(data_dir=str(tmp_path)).start()
    try:
        with pika.BlockingConnection(pika.URLParameters(b.url)) as conn:
            ch = conn.channel()
            got = _consume(conn, ch, "dq", 50)
            assert [int(body) for _t, body, _h in got] == list(range(49, -1, -1))
    finally:
        b.stop()
