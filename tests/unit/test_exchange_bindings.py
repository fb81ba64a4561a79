"""Binding bookkeeping shared by every exchange type (identity, idempotence,
remove_destination), plus direct and fanout routing."""

from __future__ import annotations

import pytest

from broker.exchange import EXCHANGE_TYPES, Routing, new_routing
from broker.exchange.direct import DirectRouting
from broker.exchange.fanout import FanoutRouting

TYPES = sorted(EXCHANGE_TYPES)
# the declare arguments a type requires (x-federation-upstream: x-max-hops; the delayed and
# deduplicating exchanges: their underlying type, their cache size)
REQUIRED_ARGUMENTS = {"x-federation-upstream": {"x-max-hops": 1},
                      "x-delayed-message": {"x-delayed-type": "direct"},
                      "x-message-deduplication": {"x-cache-size": 10}}


def routing(type_name: str) -> Routing:
    return new_routing(type_name, REQUIRED_ARGUMENTS.get(type_name))


@pytest.mark.parametrize("type_name", TYPES)
def test_is_a_routing(type_name: str) -> None:
    assert isinstance(routing(type_name), Routing)


@pytest.mark.parametrize("type_name", TYPES)
def test_add_remove_idempotent(type_name: str) -> None:
    r = routing(type_name)
    assert r.add_binding("q", "k", {})
    assert not r.add_binding("q", "k", {})
    assert not r.add_binding("q", "k", None)  # None arguments are {}
    assert r.add_binding("q", "k", {"x-a": 1})  # arguments are part of the identity
    assert r.add_binding("q", "k", {"x-a": True})  # and bool is not 1
    assert len(r) == 3
    assert r.remove_binding("q", "k", {"x-a": 1})
    assert not r.remove_binding("q", "k", {"x-a": 1})
    assert not r.remove_binding("q", "other", {})
    assert not r.remove_binding("nobody", "k", {})
    assert len(r) == 2
    assert r.bindings() == [("q", "k", {}), ("q", "k", {"x-a": True})]


@pytest.mark.parametrize("type_name", ["direct", "fanout", "topic"])
def test_destination_routed_once_and_kept_until_last_binding(type_name: str) -> None:
    r = new_routing(type_name)
    r.add_binding("q", "k", {})
    r.add_binding("q", "k", {"x-a": 1})
    assert list(r.route("k", None)) == ["q"]
    r.remove_binding("q", "k", {})
    assert list(r.route("k", None)) == ["q"]
    r.remove_binding("q", "k", {"x-a": 1})
    assert list(r.route("k", None)) == []


@pytest.mark.parametrize("type_name", TYPES)
def test_remove_destination(type_name: str) -> None:
    r = routing(type_name)
    for key in ("a", "b", "c"):
        r.add_binding("gone", key, {})
        r.add_binding(("exchange", "x"), key, {})
    r.add_binding("kept", "a", {})
    assert r.has_exchange_destinations()
    r.remove_destination("gone")
    r.remove_destination("never-bound")
    assert {d for d, _, _ in r.bindings()} == {"kept", ("exchange", "x")}
    assert "gone" not in set(r.route("a", {}))
    r.remove_destination(("exchange", "x"))
    assert not r.has_exchange_destinations()
    assert r.bindings() == [("kept", "a", {})]


def test_arguments_copied_not_aliased() -> None:
    r = DirectRouting()
    args = {"x-a": 1}
    r.add_binding("q", "k", args)
    args["x-a"] = 2
    assert r.bindings() == [("q", "k", {"x-a": 1})]
    r.bindings()[0][2]["x-a"] = 3
    assert r.bindings() == [("q", "k", {"x-a": 1})]


# (bindings as (destination, key), routing key, expected destinations)
DIRECT = [
    ([("q1", "a"), ("q2", "a"), ("q3", "b")], "a", {"q1", "q2"}),
    ([("q1", "a")], "b", set()),
    ([("q1", "")], "", {"q1"}),
    ([("q1", "a")], "A", set()),  # case-sensitive
    ([("q1", "a.*")], "a.b", set()),  # no wildcards
    ([("q1", "a"), (("exchange", "x"), "a")], "a", {"q1", ("exchange", "x")}),
]


@pytest.mark.parametrize(("bindings", "routing_key", "expected"), DIRECT)
def test_direct(bindings: list, routing_key: str, expected: set) -> None:
    r = DirectRouting()
    for dest, key in bindings:
        r.add_binding(dest, key, {})
    assert set(r.route(routing_key, None)) == expected


def test_direct_prunes_empty_keys() -> None:
    r = DirectRouting()
    r.add_binding("q", "a", {})
    r.remove_binding("q", "a", {})
    assert r._table == {}


def test_fanout_ignores_key_and_headers() -> None:
    r = FanoutRouting()
    for i in range(10):
        r.add_binding(f"q{i}", f"k{i}", {})
    assert set(r.route("anything", {"h": 1})) == {f"q{i}" for i in range(10)}
    r.remove_destination("q0")
    assert len(list(r.route("", None))) == 9
