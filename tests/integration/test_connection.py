"""Connection class: protocol header, server properties, SASL, tuning, heartbeats, close.

Every expectation here was observed on RabbitMQ 3.10.8. Notable RabbitMQ behaviours encoded:
errors before connection.open (bad tune values, unknown mechanism) close the socket silently
(after a deliberate ~3 s delay in RabbitMQ, so those tests are not here); channel_max limits the
*number* of open channels, not the channel number; a frame payload may be as large as
frame_max (RabbitMQ allows 8 bytes of fudge), one byte more is a 501.
"""

from __future__ import annotations

import threading
import time

import pika
import pika.exceptions
import pytest
from helpers import start_embedded
from pamqp import commands, heartbeat
from rawamqp import PROTOCOL_HEADER, Closed, RawClient, amqplain_response, plain_response

# --- protocol header ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad_header",
    [b"AMQP\x00\x00\x09\x02", b"AMQP\x00\x00\x0a\x00", b"GET / HTTP/1.1\r\n\r\n", b"XXXXXXXX"],
    ids=["amqp-0-9-2", "amqp-0-10", "http", "garbage"],
)
def test_wrong_protocol_header_gets_server_header_and_close(broker, bad_header):
    with RawClient(broker.host, broker.port) as c:
        c.send_bytes(bad_header)
        assert c.read_raw(8) == PROTOCOL_HEADER
        c.wait_closed(timeout=3)


def test_connection_start_fields(broker):
    with RawClient(broker.host, broker.port) as c:
        c.send_bytes(PROTOCOL_HEADER)
        start = c.expect(commands.Connection.Start)
    assert (start.version_major, start.version_minor) == (0, 9)
    assert set(start.mechanisms.split()) >= {"PLAIN", "AMQPLAIN"}
    assert "en_US" in start.locales.split()
    caps = start.server_properties["capabilities"]
    for cap in (
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "consumer_priorities",
        "authentication_failure_close",
        "per_consumer_qos",
    ):
        assert caps.get(cap) is True, cap


def test_pika_sees_capabilities(connection):
    caps = connection._impl.server_properties["capabilities"]
    assert caps["publisher_confirms"] is True
    assert caps["consumer_cancel_notify"] is True


# --- SASL -------------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
def test_login_mechanisms(broker, mechanism):
    with RawClient(broker.host, broker.port) as c:
        tune = c.handshake(mechanism=mechanism)
        assert tune.frame_max > 0
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        ok = c.expect(commands.Queue.DeclareOk, 1)
        assert ok.queue.startswith("amq.gen-")
        c.close()


def test_kombu_amqplain_login(broker):
    import kombu

    with kombu.Connection(broker.url, login_method="AMQPLAIN") as conn:
        conn.connect()
        assert conn.connected
        # py-amqp offers only the mechanism asked for
        assert [a.mechanism for a in conn.connection.authentication] == [b"AMQPLAIN"]
        ch = conn.channel()
        name, _n, _c = ch.queue_declare(queue="", exclusive=True)
        assert name.startswith("amq.gen-")


def test_kombu_amqplain_bad_password_is_403(broker):
    import amqp.exceptions
    import kombu

    url = broker.url.replace("guest:guest@", "guest:wrong@")
    with kombu.Connection(url, login_method="AMQPLAIN", connect_timeout=5) as conn:
        with pytest.raises(amqp.exceptions.AccessRefused) as info:
            conn.connection.connect()
    assert info.value.reply_code == 403


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [("PLAIN", "guest", "wrong"), ("AMQPLAIN", "guest", "wrong"), ("PLAIN", "nosuchuser", "x")],
)
def test_bad_credentials_raw_403(broker, mechanism, user, password):
    with RawClient(broker.host, broker.port) as c:
        c.send_bytes(PROTOCOL_HEADER)
        c.expect(commands.Connection.Start)
        response = (
            amqplain_response(user, password)
            if mechanism == "AMQPLAIN"
            else plain_response(user, password)
        )
        c.send(
            commands.Connection.StartOk(
                client_properties={"capabilities": {"authentication_failure_close": True}},
                mechanism=mechanism,
                response=response,
            )
        )
        close = c.read_until_connection_close()
    assert close.reply_code == 403
    assert close.reply_text.startswith("ACCESS_REFUSED - Login was refused using authentication")
    assert mechanism in close.reply_text


def test_bad_password_pika(broker):
    url = broker.url.replace("guest:guest@", "guest:wrong@")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        pika.BlockingConnection(pika.URLParameters(url))
    assert "403" in str(info.value)
    assert "ACCESS_REFUSED" in str(info.value)


def test_unknown_vhost_raw_530(broker, unique):
    vhost = unique("novhost")
    with RawClient(broker.host, broker.port) as c:
        c.handshake(open_connection=False)
        c.send(commands.Connection.Open(virtual_host=vhost))
        close = c.read_until_connection_close()
    assert (close.reply_code, close.class_id, close.method_id) == (530, 10, 40)
    assert close.reply_text == f"NOT_ALLOWED - vhost {vhost} not found"


def test_unknown_vhost_pika(broker, unique):
    params = pika.URLParameters(broker.url)
    params.virtual_host = unique("novhost")
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        pika.BlockingConnection(params)
    assert "530" in str(info.value)


# --- tuning ---------------------------------------------------------------------------------


def test_server_tune_defaults(broker):
    with RawClient(broker.host, broker.port) as c:
        tune = c.handshake()
        c.close()
    assert tune.channel_max == 2047
    assert tune.frame_max == 131072
    assert tune.heartbeat == 60


def test_client_lowers_tune_values_pika(connect):
    conn = connect(channel_max=10, frame_max=8192, heartbeat=30)
    impl = conn._impl
    assert impl.params.channel_max == 10
    assert impl.params.frame_max == 8192
    assert impl.params.heartbeat == 30
    # a body larger than frame_max is split by the client and reassembled by the broker
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    body = bytes(range(256)) * 200  # 51200 bytes > 8192
    ch.confirm_delivery()
    ch.basic_publish("", q, body)
    method, _props, got = ch.basic_get(q, auto_ack=True)
    assert method is not None
    assert got == body


def test_frame_payload_of_exactly_frame_max_is_accepted(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake(frame_max=4096)
        c.open_channel(1)
        c.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        q = c.expect(commands.Queue.DeclareOk, 1).queue
        c.publish(1, b"x" * 4096, routing_key=q)  # body frame payload == frame_max
        ok, _hdr, body, frames = c.get(1, q)
        assert ok.routing_key == q
        assert body == b"x" * 4096
        assert frames == 2  # the broker's own body frames respect frame_max (4096 - 8 per frame)
        c.close()


def test_frame_larger_than_frame_max_is_501(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake(frame_max=4096)
        c.open_channel(1)
        c.publish(1, b"x" * 5000, routing_key="nowhere")
        close = c.read_until_connection_close()
    assert close.reply_code == 501
    assert close.reply_text.startswith("FRAME_ERROR")
    assert "frame_too_large" in close.reply_text


def test_channel_max_limits_open_channel_count_530(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake(channel_max=2)
        c.open_channel(1)
        c.open_channel(2)
        c.send(commands.Channel.Open(), 3)
        close = c.read_until_connection_close()
    assert close.reply_code == 530
    assert close.reply_text == (
        "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)"
    )


@pytest.mark.parametrize(("channel_max", "number"), [(10, 11), (None, 2048), (None, 65535)])
def test_channel_number_above_channel_max_is_accepted_like_rabbitmq(broker, channel_max, number):
    """RabbitMQ 3.10 checks the count of open channels, not the channel number."""
    with RawClient(broker.host, broker.port) as c:
        c.handshake(channel_max=channel_max)
        c.open_channel(number)
        c.send(commands.Queue.Declare(queue="", exclusive=True), number)
        c.expect(commands.Queue.DeclareOk, number)
        c.close()


def test_pika_channel_max_enforced_client_side(connect):
    conn = connect(channel_max=2)
    conn.channel()
    conn.channel()
    with pytest.raises(pika.exceptions.NoFreeChannels):
        conn.channel()
    assert conn.is_open


# --- heartbeats -----------------------------------------------------------------------------


def test_idle_raw_client_is_disconnected_after_missed_heartbeats(broker):
    """heartbeat=1 and the client sends nothing: RabbitMQ sends heartbeats, then drops us.

    RabbitMQ 3.10 closed the socket (no connection.close frame) about 3 s after tune-ok.
    """
    with RawClient(broker.host, broker.port) as c:
        c.handshake(heartbeat_s=1)
        t0 = time.monotonic()
        received = []
        with pytest.raises(Closed):
            while True:
                received.append(c.read_frame(timeout=8)[1])
        elapsed = time.monotonic() - t0
    assert 1.5 <= elapsed <= 5.0
    assert any(isinstance(f, heartbeat.Heartbeat) for f in received)
    assert all(isinstance(f, heartbeat.Heartbeat | commands.Connection.Close) for f in received)


def test_raw_client_sending_heartbeats_stays_connected(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake(heartbeat_s=1)
        deadline = time.monotonic() + 3.0
        got_heartbeat = False
        while time.monotonic() < deadline:
            c.send(heartbeat.Heartbeat())
            try:
                _ch, f = c.read_frame(timeout=0.5)
            except TimeoutError:
                continue
            got_heartbeat |= isinstance(f, heartbeat.Heartbeat)
        assert got_heartbeat
        c.open_channel(1)
        c.close()


def test_pika_heartbeat_1s_idle_3s_stays_connected(connect):
    conn = connect(heartbeat=1)
    assert conn._impl.params.heartbeat == 1
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.2)
    assert conn.is_open
    ch.confirm_delivery()
    ch.basic_publish("", q, b"still here")
    assert ch.basic_get(q, auto_ack=True)[2] == b"still here"


# --- close ----------------------------------------------------------------------------------


def test_client_initiated_close_gets_close_ok(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
        c.expect(commands.Connection.CloseOk, 0)


def test_methods_after_client_connection_close_are_ignored(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
        c.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        c.expect(commands.Connection.CloseOk, 0)  # no declare-ok first


def test_pika_close_then_reconnect(connect):
    conn = connect()
    conn.channel()
    conn.close()
    assert conn.is_closed
    conn2 = connect()
    assert conn2.is_open


# --- EmbeddedBroker-only: settings RabbitMQ here cannot be given ---------------------------


@pytest.mark.usefixtures("embedded_only")
def test_embedded_small_server_heartbeat_is_negotiated_and_enforced():
    """EmbeddedBroker(heartbeat=1): tune offers 1 s; a client accepting it and then sending
    nothing is disconnected after missing heartbeats, having received the broker's own."""
    b = start_embedded(heartbeat=1)
    try:
        with RawClient(b.host, b.port) as c:
            tune = c.handshake(heartbeat_s=None)
            assert tune.heartbeat == 1
            t0 = time.monotonic()
            received = []
            with pytest.raises(Closed):
                while True:
                    received.append(c.read_frame(timeout=8)[1])
            assert 1.5 <= time.monotonic() - t0 <= 5.0
            assert any(isinstance(f, heartbeat.Heartbeat) for f in received)
    finally:
        b.stop()


@pytest.mark.usefixtures("embedded_only")
def test_embedded_graceful_stop_sends_320():
    b = start_embedded()
    try:
        with RawClient(b.host, b.port) as c:
            c.handshake()
            c.open_channel(1)
            stopper = threading.Thread(target=b.stop)
            stopper.start()
            close = c.read_until_connection_close(timeout=10)
            stopper.join(30)
        assert close.reply_code == 320
        assert close.reply_text.startswith("CONNECTION_FORCED")
    finally:
        b.stop()


@pytest.mark.usefixtures("embedded_only")
def test_embedded_non_default_frame_max_and_channel_max():
    b = start_embedded(frame_max=8192, channel_max=16)
    try:
        with RawClient(b.host, b.port) as c:
            tune = c.handshake()
            assert (tune.frame_max, tune.channel_max) == (8192, 16)
            c.open_channel(1)
            c.publish(1, b"x" * 9000, routing_key="nowhere")
            close = c.read_until_connection_close()
        assert close.reply_code == 501
    finally:
        b.stop()


def test_frames_behind_connection_close_do_not_reset_the_connection(broker):
    """A client may have frames of other channels queued behind its connection.close
    (amqplib's round-robin writer does: its callback_api tests hung on this). The broker
    answers close-ok, discards what follows and leaves closing the socket to the client,
    as RabbitMQ's reader does; closing with that data unread would send a TCP reset and the
    client would see ECONNRESET instead of close-ok."""
    from pamqp import frame
    from pamqp import header as pheader
    from pamqp.body import ContentBody

    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel(1)
        burst = frame.marshal(commands.Connection.Close(
            reply_code=200, reply_text="bye", class_id=0, method_id=0), 0)
        one = (frame.marshal(commands.Basic.Publish(exchange="", routing_key="nowhere"), 1)
               + frame.marshal(pheader.ContentHeader(0, 100, commands.Basic.Properties()), 1)
               + frame.marshal(ContentBody(b"x" * 100), 1))
        c.send_bytes(burst + one * 2000)  # ~400 KB after the close
        c.expect(commands.Connection.CloseOk, timeout=10)
        time.sleep(0.2)
        c.send_bytes(one * 100)  # the broker still reads: no reset, no broken pipe
        time.sleep(0.1)
        c.send_bytes(one)
