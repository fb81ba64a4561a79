"""Headers exchange: x-match validation texts and a matching table, both recorded on a live
RabbitMQ 3.10 with pika (one queue per binding, one publish per header table)."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest

from broker.errors import PreconditionFailed
from broker.exchange.headers import HeadersRouting, norm_value

# index -> binding arguments (one queue each on the live broker)
BINDINGS = [
    {"a": 1},  # 0
    {"x-match": "any", "a": 1, "b": "x"},  # 1
    {"a": None},  # 2
    {"a": "1"},  # 3
    {},  # 4
    {"x-match": "any"},  # 5
    {"x-match": "all", "x-foo": "bar"},  # 6
    {"x-match": "any", "x-foo": "bar"},  # 7
    {"x-match": "all-with-x", "x-foo": "bar"},  # 8
    {"x-match": "any-with-x", "x-foo": "bar"},  # 9
    {"x-match": "all-with-x"},  # 10
    {"x-match": "any-with-x"},  # 11
    {"a": True},  # 12
    {"a": b"1"},  # 13
    {"a": 1, "b": None},  # 14
    {"x-match": "any", "a": None, "b": None},  # 15
    {"a": Decimal("1")},  # 16
    {"x-match": "all-with-x", "x-foo": "bar", "a": 1},  # 17
]
# message headers -> indexes of the bindings whose queue received it on RabbitMQ 3.10
LIVE = [
    (None, [4, 6, 10]),
    ({}, [4, 6, 10]),
    ({"a": 1}, [0, 1, 2, 4, 6, 10, 15]),
    ({"a": "1"}, [2, 3, 4, 6, 10, 13, 15]),
    ({"a": None}, [2, 4, 6, 10, 15]),
    ({"a": True}, [2, 4, 6, 10, 12, 15]),
    ({"a": b"1"}, [2, 3, 4, 6, 10, 13, 15]),
    ({"b": "x"}, [1, 4, 6, 10, 15]),
    ({"a": 1, "b": None}, [0, 1, 2, 4, 6, 10, 14, 15]),
    ({"x-foo": "bar"}, [4, 6, 8, 9, 10]),
    ({"x-foo": "bar", "a": 1}, [0, 1, 2, 4, 6, 8, 9, 10, 15, 17]),
    ({"x-foo": "bar", "x-match": "all-with-x"}, [4, 6, 8, 9, 10]),
    ({"x-match": "any-with-x"}, [4, 6, 10]),
    ({"a": 100000}, [2, 4, 6, 10, 15]),
    ({"a": 2**40}, [2, 4, 6, 10, 15]),
    ({"a": Decimal("1")}, [2, 4, 6, 10, 15, 16]),
    ({"a": "1", "b": "x"}, [1, 2, 3, 4, 6, 10, 13, 15]),
    ({"x-foo": "bar", "a": 1, "x-match": "all-with-x"}, [0, 1, 2, 4, 6, 8, 9, 10, 15, 17]),
]


def table() -> HeadersRouting:
    h = HeadersRouting()
    for i, args in enumerate(BINDINGS):
        h.validate_binding("", args)
        assert h.add_binding(i, "", args)
    return h


@pytest.mark.parametrize(("headers", "expected"), LIVE)
def test_matches_live_rabbitmq(headers: dict | None, expected: list[int]) -> None:
    assert table().route("", headers) == set(expected)


# Not expressible with pika (no float field encoder): numbers compare by value, as Erlang ==.
@pytest.mark.parametrize(
    ("binding", "headers", "matched"),
    [
        ({"a": 1}, {"a": 1.0}, True),
        ({"a": 1}, {"a": False}, False),
        ({"a": False}, {"a": 0}, False),
        ({"a": False}, {"a": False}, True),
        ({"a": Decimal("1.0")}, {"a": Decimal("1")}, False),  # {decimal,1,10} vs {decimal,0,1}
        ({"a": "x"}, {"a": bytearray(b"x")}, True),
        ({"a": {"k": 1}}, {"a": {"k": 1}}, True),
        ({"a": [1, "s"]}, {"a": [1, b"s"]}, True),
        ({"a": [1]}, {"a": [True]}, False),
        ({"x-match": "any", "a": 1, "b": 2}, {"b": 2}, True),
        ({"x-match": "all", "a": 1, "b": 2}, {"b": 2}, False),
        ({"x-match": "any-with-x", "x-a": 1, "b": 2}, {"x-a": 1}, True),
        ({"x-match": "all-with-x", "x-a": None}, {"x-a": None}, True),
        ({"x-match": "all-with-x", "x-a": None}, {"x-b": None}, False),
    ],
)
def test_value_comparison(binding: dict, headers: dict, matched: bool) -> None:
    h = HeadersRouting()
    h.add_binding("q", "", binding)
    assert (h.route("", headers) == {"q"}) is matched


def test_timestamp_equals_integer_seconds() -> None:
    when = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    assert norm_value(when) == int(when.timestamp())


# (x-match value, RabbitMQ 3.10's reply text after "PRECONDITION_FAILED - ")
INVALID = [
    ("foo", 'Invalid x-match field value <<"foo">>; expected all, any, all-with-x, or any-with-x'),
    ("ALL", 'Invalid x-match field value <<"ALL">>; expected all, any, all-with-x, or any-with-x'),
    ("", "Invalid x-match field value <<>>; expected all, any, all-with-x, or any-with-x"),
    (1, "Invalid x-match field type signedint (value 1); expected longstr"),
    (b"any", 'Invalid x-match field type binary (value <<"any">>); expected longstr'),
    (None, "Invalid x-match field type void (value undefined); expected longstr"),
    (True, "Invalid x-match field type bool (value true); expected longstr"),
]


@pytest.mark.parametrize(("value", "text"), INVALID)
def test_invalid_x_match_is_406_with_rabbitmq_text(value: object, text: str) -> None:
    with pytest.raises(PreconditionFailed) as info:
        HeadersRouting().validate_binding("", {"x-match": value})
    assert info.value.reply_code == 406
    assert info.value.reply_text == "PRECONDITION_FAILED - " + text


@pytest.mark.parametrize("mode", ["all", "any", "all-with-x", "any-with-x"])
def test_valid_x_match(mode: str) -> None:
    assert HeadersRouting().validate_binding("", {"x-match": mode, "a": 1}) is None


def test_same_arguments_bound_twice_and_removed() -> None:
    h = HeadersRouting()
    assert h.add_binding("q", "", {"a": 1})
    assert not h.add_binding("q", "", {"a": 1})
    assert h.add_binding("q", "", {"a": True})  # a different table: a different binding
    assert h.add_binding("r", "", {"a": 1})
    assert h.route("", {"a": 1}) == {"q", "r"}
    assert h.remove_binding("q", "", {"a": 1})
    assert not h.remove_binding("q", "", {"a": 1})
    assert h.route("", {"a": 1}) == {"r"}
    assert h.route("", {"a": True}) == {"q"}
    h.remove_destination("q")
    assert h.route("", {"a": True}) == set()
    assert h.bindings() == [("r", "", {"a": 1})]
