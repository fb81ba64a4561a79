"""The x-delayed-message routing table (broker/exchange/delayed.py): the plugin's declare
checks and its reading of `x-delay` (rabbit_delayed_message_utils:get_delay)."""

from __future__ import annotations

import decimal

import pytest

from broker import errors
from broker.exchange import new_routing
from broker.exchange.delayed import MAX_DELAY_MS, delay_of


@pytest.mark.parametrize(("value", "expected"), [
    (5000, 5000), (1, 1), (0, None), (-5, None), (MAX_DELAY_MS, MAX_DELAY_MS),
    (MAX_DELAY_MS + 1, None),  # past the plugin's largest timer: routed at once, as there
    ("250", 250), (b"250", 250), ("abc", None), (12.9, 12), (True, None),
    (decimal.Decimal("5"), None), ({"a": 1}, None), (None, None),
])
def test_delay_of(value, expected) -> None:
    assert delay_of({"x-delay": value}) == expected


def test_no_header_no_delay() -> None:
    assert delay_of(None) is None
    assert delay_of({}) is None
    assert delay_of({"other": 5}) is None


@pytest.mark.parametrize(("arguments", "code", "text"), [
    ({}, 406, "Invalid argument, 'x-delayed-type' must be an existing exchange type"),
    ({"x-delayed-type": 5}, 406,
     "Invalid argument, 'x-delayed-type' must be an existing exchange type"),
    ({"x-delayed-type": "x-delayed-message"}, 406,
     "Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'"),
    ({"x-delayed-type": "nope"}, 503, "unknown exchange type 'nope'"),
])
def test_declare_checks(arguments, code, text) -> None:
    with pytest.raises(errors.AMQPError) as err:
        new_routing("x-delayed-message", arguments)
    assert err.value.reply_code == code
    assert text in str(err.value)


def test_a_message_to_delay_goes_to_the_holder_others_by_the_underlying_type() -> None:
    routing = new_routing("x-delayed-message", {"x-delayed-type": "topic"})
    routing.add_binding("q", "a.*", {})
    assert list(routing.route("a.b", {"x-delay": 100})) == ["q"]  # no holder yet: at once
    holder = object()
    routing.holder = holder
    assert list(routing.route("a.b", {"x-delay": 100})) == [holder]
    assert list(routing.route("a.b", {"x-delay": -100})) == ["q"]
    assert list(routing.route("a.b", None)) == ["q"]
    assert list(routing.route("z", {"x-delay": -1})) == []
    assert routing.reads_headers and len(routing) == 1


def test_the_delay_is_delivered_negated_as_a_signed_32_bit_int() -> None:
    """rabbitmq-delayed-message-exchange (3.10's) sets x-delay to -Delay as a `signedint`
    (type I); a delay past 2^31 ms goes as a long (l). The other headers stay."""
    from broker.delayed.holder import swapped
    from broker.message import Message, Properties

    m = Message("dx", "k", Properties(headers={"x-delay": 5000, "a": "b"}), b"x")
    out = swapped(m, m.headers, 5000)
    assert b"\x07x-delayI" + (-5000).to_bytes(4, "big", signed=True) in out.raw_properties
    assert out.headers == {"x-delay": -5000, "a": "b"} and out.msg_id == m.msg_id
    far = swapped(m, m.headers, 3_000_000_000)
    assert b"\x07x-delayl" in far.raw_properties and far.headers["x-delay"] == -3_000_000_000


@pytest.mark.parametrize("value", [5000, "5000", 5000.7])
def test_a_held_message_gets_its_delay_negated_in_place(value) -> None:
    """The encoded properties are edited without a decode: the other headers and
    properties come out as sent, x-delay as a signedint; CC is flagged for routing."""
    from broker.delayed.holder import CC, _to_hold
    from broker.message import Message, Properties

    props = Properties(content_type="text/plain", headers={"a": [1, "b"], "x-delay": value,
                                                           "z": {"n": 1}},
                       delivery_mode=2, priority=4, expiration="60000", message_id="m1")
    m = Message("dx", "k", props, b"body")
    held, delay, flags = _to_hold(Message.from_wire("dx", "k", m.wire_properties(),
                                                    (2, 4, "60000", None, None), b"body"))
    assert delay == 5000 and flags == 0
    assert b"\x07x-delayI" + (-5000).to_bytes(4, "big", signed=True) in held.raw_properties
    out = held.properties
    assert out.headers == {"a": [1, "b"], "x-delay": -5000, "z": {"n": 1}}
    assert (out.content_type, out.delivery_mode, out.priority, out.expiration,
            out.message_id) == ("text/plain", 2, 4, "60000", "m1")
    assert held.persistent and held.priority == 4 and held.body == b"body"
    cc = Message("dx", "k", Properties(headers={"x-delay": 10, "CC": ["other"]}), b"")
    assert _to_hold(cc)[2] == CC
