"""Routing through several exchanges: e2e bindings, alternate exchanges, cycles, the default
exchange, exchange types and the Exchange record. Expected results recorded on a live
RabbitMQ 3.10 are marked "live"."""

from __future__ import annotations

import pytest

from broker.errors import AccessRefused, CommandInvalid
from broker.exchange import DefaultRouting, Exchange, new_routing, route


def vhost(*specs: tuple) -> dict[str, Exchange]:
    """specs: (name, type, alternate exchange or None, [(destination, key), ...])."""
    xs = {}
    for name, type_name, ae, bindings in specs:
        x = Exchange(name, type_name, arguments={"alternate-exchange": ae} if ae else {})
        for dest, key in bindings:
            x.routing.add_binding(dest, key, {})
        xs[name] = x
    return xs


def E(name: str) -> tuple[str, str]:
    return ("exchange", name)


def test_direct_fast_path() -> None:
    xs = vhost(("x", "direct", None, [("q1", "k"), ("q2", "k")]))
    assert route(xs, "x", "k", None) == {"q1", "q2"}
    assert route(xs, "x", "nope", None) == set()
    assert route(xs, "missing", "k", None) == set()


def test_e2e_chain() -> None:
    xs = vhost(
        ("x1", "direct", None, [(E("x2"), "k"), ("q1", "k")]),
        ("x2", "topic", None, [("q2", "#"), (E("x3"), "k")]),
        ("x3", "fanout", None, [("q3", "")]),
    )
    assert route(xs, "x1", "k", None) == {"q1", "q2", "q3"}
    assert route(xs, "x2", "zz", None) == {"q2"}


def test_e2e_cycle_and_self_binding() -> None:  # live: one copy per queue
    xs = vhost(
        ("c1", "fanout", None, [(E("c2"), ""), ("qc1", ""), (E("c1"), "")]),
        ("c2", "fanout", None, [(E("c1"), ""), ("qc", "")]),
    )
    assert route(xs, "c1", "k", None) == {"qc", "qc1"}
    assert route(xs, "c2", "k", None) == {"qc", "qc1"}


def test_ae_only_when_own_bindings_match_nothing() -> None:  # live
    xs = vhost(
        ("ae1", "fanout", None, [("q1", "")]),
        ("ae2", "fanout", None, [("q2", "")]),
        ("x2", "direct", "ae2", []),
        ("x1", "direct", "ae1", [(E("x2"), "k")]),
    )
    assert route(xs, "x1", "k", None) == {"q2"}
    assert route(xs, "x1", "z", None) == {"q1"}


def test_ae_chain_and_key_preserved() -> None:  # live
    xs = vhost(
        ("d3", "direct", None, [("q3", "rk")]),
        ("d2", "direct", "d3", []),
        ("d1", "direct", "d2", []),
    )
    assert route(xs, "d1", "rk", None) == {"q3"}
    assert route(xs, "d1", "other", None) == set()


def test_ae_missing_and_ae_cycle() -> None:  # live: no error, nothing routed
    xs = vhost(
        ("m1", "direct", "missing", []),
        ("e1", "direct", "e2", []),
        ("e2", "direct", "e1", []),
        ("self", "direct", "self", []),
    )
    assert route(xs, "m1", "k", None) == set()
    assert route(xs, "e1", "k", None) == set()
    assert route(xs, "self", "k", None) == set()


def test_e2e_to_missing_exchange_is_ignored() -> None:
    xs = vhost(("x", "fanout", "ae", [(E("gone"), "")]), ("ae", "fanout", None, [("qa", "")]))
    # x's own bindings matched something (an exchange), so its AE is not used
    assert route(xs, "x", "", None) == set()


def test_headers_through_e2e() -> None:
    xs = {"h": Exchange("h", "headers"), "f": Exchange("f", "fanout")}
    xs["h"].routing.add_binding(E("f"), "", {"x-match": "any", "a": 1})
    xs["f"].routing.add_binding("q", "", {})
    assert route(xs, "h", "", {"a": 1}) == {"q"}
    assert route(xs, "h", "", {"a": 2}) == set()


def test_queue_reached_by_two_paths_once() -> None:  # live
    xs = vhost(
        ("g1", "fanout", None, [(E("g2"), ""), ("qg", "")]), ("g2", "fanout", None, [("qg", "")])
    )
    assert route(xs, "g1", "", None) == {"qg"}


def test_default_exchange() -> None:
    queues = {"q1"}
    xs = {"": Exchange("", "direct", durable=True, routing=DefaultRouting(queues.__contains__))}
    assert route(xs, "", "q1", None) == {"q1"}
    assert route(xs, "", "q2", None) == set()
    queues.add("q2")
    assert route(xs, "", "q2", None) == {"q2"}
    assert xs[""].routing.bindings() == []
    assert len(xs[""].routing) == 0


@pytest.mark.parametrize("op", ["validate_binding", "add_binding", "remove_binding"])
def test_default_exchange_refuses_bindings(op: str) -> None:  # live: 403 with this text
    routing = DefaultRouting(lambda name: True)
    args = ("k", {}) if op == "validate_binding" else ("q", "k", {})
    with pytest.raises(AccessRefused) as info:
        getattr(routing, op)(*args)
    assert info.value.reply_code == 403
    assert info.value.reply_text == (
        "ACCESS_REFUSED - operation not permitted on the default exchange"
    )


@pytest.mark.parametrize(
    ("type_name", "word"),
    [
        ("bogus-zz-type", "unknown"),
        # a plugin that does not ship with RabbitMQ (x-delayed-message did: built in now)
        ("x-recent-history", "unknown"),
        ("topic ", "unknown"),
        ("Direct", "unknown"),
        ("", "invalid"),
    ],
)
def test_unknown_exchange_type(type_name: str, word: str) -> None:  # live: 503, these texts
    with pytest.raises(CommandInvalid) as info:
        new_routing(type_name)
    assert info.value.reply_code == 503
    assert info.value.reply_text == f"COMMAND_INVALID - {word} exchange type '{type_name}'"


def test_exchange_record() -> None:
    x = Exchange("x", "topic", durable=True, arguments={"alternate-exchange": "ae"})
    assert x.alternate_exchange == "ae"
    assert x.routing is not None and len(x.routing) == 0
    assert Exchange("y", "fanout").alternate_exchange is None
    assert Exchange("z", "fanout", arguments={"alternate-exchange": 5}).alternate_exchange is None
    with pytest.raises(CommandInvalid):
        Exchange("w", "nope")


def test_cc_bcc_extra_keys() -> None:  # live: CC 'a' with key 'z' reached q1, not the AE
    xs = vhost(
        ("x", "direct", "ae", [("q1", "a"), ("q2", "b"), (E("t"), "c")]),
        ("t", "topic", None, [("q3", "#")]),
        ("ae", "fanout", None, [("qa", "")]),
    )
    assert route(xs, "x", "a", None, ["b"]) == {"q1", "q2"}
    assert route(xs, "x", "z", None, ["b", "c"]) == {"q2", "q3"}
    assert route(xs, "x", "z", None, ["y"]) == {"qa"}  # AE only when no key matched
    assert route(xs, "x", "a", None, ["a"]) == {"q1"}
