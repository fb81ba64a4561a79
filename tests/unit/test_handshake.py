"""ConnectionHandshake and SASL parsing; codes/texts as RabbitMQ 3.10 sent them."""

from __future__ import annotations

import pytest
from pamqp import commands as C
from pamqp import encode

from broker.errors import AMQPError, close_args
from broker.protocol.handshake import ConnectionHandshake, State
from broker.protocol.sasl import parse_response

USERS = {"guest": "guest", "alice": "s3cret"}
VHOSTS = {"/": {"guest", "alice"}, "private": {"alice"}}
AMQPLAIN = encode.field_table({"LOGIN": "alice", "PASSWORD": "s3cret"})[4:]


def make(**kw: object) -> ConnectionHandshake:
    return ConnectionHandshake(
        server_properties={"product": "RabbitMQ", "capabilities": {"basic.nack": True}},
        authenticate=lambda mech, user, pw: USERS.get(user) == pw,
        vhost_allowed=lambda user, vhost: user in VHOSTS.get(vhost, ()),
        vhost_exists=lambda vhost: vhost in VHOSTS,
        **kw,
    )


def start_ok(mech: str = "PLAIN", response: str | bytes = "\0guest\0guest", caps: bool = True) -> C.Connection.StartOk:
    m = C.Connection.StartOk(
        client_properties={"product": "pika", "capabilities": {"authentication_failure_close": caps, "connection.blocked": True}},
        mechanism="PLAIN",
        response="",
        locale="en_US",
    )
    m.mechanism = mech
    m.response = response
    return m


def tune_ok(channel_max: int = 2047, frame_max: int = 131072, heartbeat: int = 60) -> C.Connection.TuneOk:
    return C.Connection.TuneOk(channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat)


def error_of(hs: ConnectionHandshake, *methods: object) -> AMQPError:
    with pytest.raises(AMQPError) as info:
        for m in methods:
            hs.receive(m)
    return info.value


def test_start() -> None:
    hs = make()
    (start,) = hs.start()
    assert isinstance(start, C.Connection.Start)
    assert (start.version_major, start.version_minor) == (0, 9)
    assert start.mechanisms == "AMQPLAIN PLAIN"  # as RabbitMQ 3.10 sends it
    assert start.locales == "en_US"
    assert start.server_properties["product"] == "RabbitMQ"
    assert hs.state is State.STARTING


@pytest.mark.parametrize(
    ("mech", "response", "user"),
    [("PLAIN", "\0guest\0guest", "guest"), ("PLAIN", b"alice\0alice\0s3cret", "alice"), ("AMQPLAIN", AMQPLAIN, "alice")],
)
def test_happy_path(mech: str, response: str | bytes, user: str) -> None:
    hs = make()
    hs.start()
    (tune,) = hs.receive(start_ok(mech, response))
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)
    assert hs.state is State.TUNING
    assert hs.receive(tune_ok(100, 4096, 10)) == []
    assert hs.state is State.OPENING
    (open_ok,) = hs.receive(C.Connection.Open(virtual_host="/"))
    assert isinstance(open_ok, C.Connection.OpenOk)
    assert hs.is_open and hs.state is State.OPEN
    assert (hs.username, hs.vhost, hs.channel_max, hs.frame_max, hs.heartbeat) == (user, "/", 100, 4096, 10)
    assert hs.mechanism == mech
    assert hs.capability("connection.blocked") and not hs.capability("consumer_cancel_notify")
    assert hs.client_properties["product"] == "pika"


@pytest.mark.parametrize("caps", [True, False])
def test_bad_password(caps: bool) -> None:
    hs = make()
    hs.start()
    exc = error_of(hs, start_ok(response="\0guest\0wrong", caps=caps))
    assert close_args(exc) == (
        403,
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile.",
        0,
        0,
    )
    assert exc.silent_close is (not caps)  # RabbitMQ sends close only with the capability


def test_malformed_responses_are_refused() -> None:
    for mech, response in [("PLAIN", "guestguest"), ("AMQPLAIN", b"zzzz"), ("PLAIN", b"\0\xff\0x")]:
        hs = make()
        hs.start()
        exc = error_of(hs, start_ok(mech, response))
        assert close_args(exc)[0] == 403


def test_unknown_mechanism() -> None:
    hs = make()
    hs.start()
    exc = error_of(hs, start_ok("EXTERNAL", ""))
    assert close_args(exc)[:2] == (503, "COMMAND_INVALID - unknown authentication mechanism 'EXTERNAL'")
    assert exc.silent_close


def test_restricted_mechanisms() -> None:
    hs = make(mechanisms=("PLAIN",))
    assert hs.start()[0].mechanisms == "PLAIN"
    exc = error_of(hs, start_ok("AMQPLAIN", AMQPLAIN))
    assert close_args(exc)[0] == 503


def opening(**kw: object) -> ConnectionHandshake:
    hs = make(**kw)
    hs.start()
    hs.receive(start_ok())
    return hs


@pytest.mark.parametrize(
    ("tune", "text"),
    [
        (tune_ok(frame_max=200000), "negotiated frame_max = 200000 is higher than the maximum allowed value (131072)"),
        (tune_ok(frame_max=4095), "negotiated frame_max = 4095 is lower than the minimum allowed value (4096)"),
        (tune_ok(frame_max=0), "negotiated frame_max = 0 is higher than the maximum allowed value (131072)"),
        (tune_ok(channel_max=5000), "negotiated channel_max = 5000 is higher than the maximum allowed value (2047)"),
        (tune_ok(channel_max=0), "negotiated channel_max = 0 (no limit) is higher than the maximum allowed value (2047)"),
    ],
)
def test_tune_out_of_range_is_530_silent(tune: C.Connection.TuneOk, text: str) -> None:
    exc = error_of(opening(), tune)
    code, got_text, class_id, method_id = close_args(exc)
    assert (code, got_text, class_id, method_id) == (530, f"NOT_ALLOWED - {text}", 10, 31)
    assert exc.silent_close  # RabbitMQ 3.10 closes the socket after 3 s, no close method


def test_tune_edges_accepted() -> None:
    hs = opening()
    hs.receive(tune_ok(channel_max=1, frame_max=4096, heartbeat=600))  # RabbitMQ keeps 600
    assert (hs.channel_max, hs.frame_max, hs.heartbeat) == (1, 4096, 600)
    hs = opening(channel_max=0, frame_max=0)  # server without limits takes the client's values
    hs.receive(tune_ok(channel_max=0, frame_max=0, heartbeat=0))
    assert (hs.channel_max, hs.frame_max, hs.heartbeat) == (0, 0, 0)


def test_unknown_vhost() -> None:
    hs = opening()
    hs.receive(tune_ok())
    exc = error_of(hs, C.Connection.Open(virtual_host="nope"))
    assert close_args(exc) == (530, "NOT_ALLOWED - vhost nope not found", 10, 40)
    assert not exc.silent_close


def test_forbidden_vhost() -> None:
    hs = opening()
    hs.receive(tune_ok())
    exc = error_of(hs, C.Connection.Open(virtual_host="private"))
    assert close_args(exc) == (530, "NOT_ALLOWED - access to vhost 'private' refused for user 'guest'", 10, 40)


@pytest.mark.parametrize(
    ("steps", "state", "ids", "silent"),
    [
        ([tune_ok()], "starting", (10, 31), True),
        ([start_ok(), C.Connection.Open(virtual_host="/")], "tuning", (10, 40), True),
        ([start_ok(), start_ok()], "tuning", (10, 11), True),
        ([start_ok(), tune_ok(), tune_ok()], "opening", (10, 31), False),
        ([start_ok(), tune_ok(), C.Channel.Open()], "opening", (20, 10), False),
        ([start_ok(), tune_ok(), C.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0)], "opening", (10, 50), False),
        ([start_ok(), tune_ok(), C.Connection.Open(virtual_host="/"), C.Connection.Open(virtual_host="/")], "running", (10, 40), False),
    ],
)
def test_out_of_order_is_504(steps: list, state: str, ids: tuple[int, int], silent: bool) -> None:
    hs = make()
    hs.start()
    exc = error_of(hs, *steps)
    assert close_args(exc) == (504, f"CHANNEL_ERROR - unexpected method in connection state {state}", *ids)
    assert exc.silent_close is silent


def test_start_twice() -> None:
    hs = make()
    hs.start()
    with pytest.raises(AMQPError) as info:
        hs.start()
    assert close_args(info.value)[0] == 504


def test_closing_states() -> None:
    hs = make()
    hs.closing()
    assert hs.state is State.CLOSING and not hs.is_open
    hs.closed()
    assert hs.state is State.CLOSED


def test_sasl_parse() -> None:
    assert parse_response("PLAIN", "\0guest\0guest") == ("guest", "guest")
    assert parse_response("PLAIN", b"authz\0user\0p") == ("user", "p")
    assert parse_response("PLAIN", "\0us\u00e9r\0p\u00e4ss") == ("us\u00e9r", "p\u00e4ss")
    assert parse_response("AMQPLAIN", AMQPLAIN) == ("alice", "s3cret")


@pytest.mark.parametrize(
    ("mech", "response", "code"),
    [("PLAIN", b"nozeros", 403), ("PLAIN", b"\0a\0b\0c", 403), ("AMQPLAIN", b"", 403), ("AMQPLAIN", b"\x05LOGINS\x00\x00\x00\x01a", 403), ("X", b"", 503)],
)
def test_sasl_errors(mech: str, response: bytes, code: int) -> None:
    with pytest.raises(AMQPError) as info:
        parse_response(mech, response)
    assert close_args(info.value)[0] == code


def test_external_takes_the_certificate_name() -> None:
    seen = []

    def auth(mech: str, user: str, pw: str) -> bool:
        seen.append((mech, user, pw))
        return user == "alice"

    hs = ConnectionHandshake({}, auth, lambda u, v: True,
                             mechanisms=("AMQPLAIN", "EXTERNAL", "PLAIN"),
                             external_identity="alice")
    (start,) = hs.start()
    assert start.mechanisms == "AMQPLAIN EXTERNAL PLAIN"
    hs.receive(start_ok("EXTERNAL", "ignored"))
    assert hs.username == "alice" and seen == [("EXTERNAL", "alice", "")]
    for identity in (None, "mallory"):  # no certificate, or a name that is not a user
        hs = ConnectionHandshake({}, auth, lambda u, v: True,
                                 mechanisms=("EXTERNAL",), external_identity=identity)
        hs.start()
        exc = error_of(hs, start_ok("EXTERNAL", ""))
        assert close_args(exc)[:2] == (403, "ACCESS_REFUSED - Login was refused using "
                                       "authentication mechanism EXTERNAL. For details see "
                                       "the broker logfile.")


def test_a_limit_raised_by_vhost_allowed_keeps_its_text() -> None:
    from broker import errors

    def limited(user: str, vhost: str) -> bool:
        raise errors.amqp_error(errors.NotAllowed, "connection refused: node connection "
                                "limit (1) is reached")

    hs = ConnectionHandshake({}, lambda m, u, p: True, limited)
    hs.start()
    exc = error_of(hs, start_ok(), tune_ok(), C.Connection.Open(virtual_host="/"))
    assert close_args(exc) == (530, "NOT_ALLOWED - connection refused: node connection limit "
                               "(1) is reached", 10, 40)
    assert not getattr(exc, "silent_close", True)
