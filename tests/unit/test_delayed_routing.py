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
