"""x-consistent-hash and x-modulus-hash routing tables, and jump consistent hashing."""

from __future__ import annotations

from collections import Counter

import pytest

from broker.errors import PreconditionFailed
from broker.exchange import new_routing
from broker.exchange.hashing import hash64, jump_consistent_hash


def test_hash_is_stable_across_processes():
    # fixed expectations: routing must not change when the broker restarts
    assert hash64("abc") == hash64("abc")
    assert hash64("abc") != hash64("abd")
    assert hash64(b"abc") == hash64("abc")
    assert hash64(None) == hash64(b"")


def test_jump_hash_is_in_range_and_moves_only_to_the_new_bucket():
    keys = [hash64(f"k{i}") for i in range(5000)]
    for n in (1, 2, 7, 100):
        before = [jump_consistent_hash(k, n) for k in keys]
        assert all(0 <= b < n for b in before)
        after = [jump_consistent_hash(k, n + 1) for k in keys]
        moved = [a for b, a in zip(before, after, strict=True) if a != b]
        assert set(moved) <= {n}  # keys only move into the new bucket
        assert 0.5 / (n + 1) < len(moved) / len(keys) < 1.5 / (n + 1)


def test_consistent_hash_weights_and_stickiness():
    r = new_routing("x-consistent-hash")
    for q, w in (("q1", "1"), ("q2", "1"), ("q3", "2"), ("q4", "2")):
        r.validate_binding(w, {})
        r.add_binding(q, w, {})
    got = Counter(d for i in range(12000) for d in r.route(f"key-{i}", None))
    assert sum(got.values()) == 12000
    for q in ("q1", "q2"):
        assert 1500 < got[q] < 2500  # weight 1 of 6: about 2000
    for q in ("q3", "q4"):
        assert 3300 < got[q] < 4700  # weight 2 of 6: about 4000
    assert len({tuple(r.route("same", None)) for _ in range(10)}) == 1


def test_consistent_hash_adding_a_destination_moves_only_its_share():
    r = new_routing("x-consistent-hash")
    for i in range(4):
        r.add_binding(f"q{i}", "10", {})
    before = {k: r.route(k, None)[0] for k in (f"k{i}" for i in range(4000))}
    r.add_binding("q4", "10", {})
    after = {k: r.route(k, None)[0] for k in before}
    moved = {k for k in before if before[k] != after[k]}
    assert all(after[k] == "q4" for k in moved)
    assert 500 < len(moved) < 1100  # about a fifth


@pytest.mark.parametrize(("key", "text"), [
    ("abc", 'PRECONDITION_FAILED - The binding key must be an integer: <<"abc">>'),
    ("", 'PRECONDITION_FAILED - The binding key must be an integer: <<"">>'),
    ("1.5", 'PRECONDITION_FAILED - The binding key must be an integer: <<"1.5">>'),
    ("0", "PRECONDITION_FAILED - The binding key must be greater than 0"),
    ("-2", "PRECONDITION_FAILED - The binding key must be greater than 0"),
])
def test_consistent_hash_refuses_bad_weights(key, text):
    with pytest.raises(PreconditionFailed) as info:
        new_routing("x-consistent-hash").validate_binding(key, {})
    assert info.value.reply_code == 406
    assert info.value.reply_text == text


@pytest.mark.parametrize(("args", "text"), [
    ({"hash-header": "h", "hash-property": "message_id"},
     "PRECONDITION_FAILED - hash-header and hash-property are mutually exclusive"),
    ({"hash-property": "app_id"}, "PRECONDITION_FAILED - Unsupported property: app_id"),
])
def test_consistent_hash_refuses_bad_arguments(args, text):
    with pytest.raises(PreconditionFailed) as info:
        new_routing("x-consistent-hash", args)
    assert info.value.reply_text == text


def test_consistent_hash_on_a_header_and_a_property():
    class Props:
        message_id = "m-1"
        correlation_id = None
        timestamp = None

    class Msg:  # what the router passes: the message, whose properties are read
        properties = Props()

    by_header = new_routing("x-consistent-hash", {"hash-header": "user"})
    by_prop = new_routing("x-consistent-hash", {"hash-property": "message_id"})
    for r in (by_header, by_prop):
        for i in range(8):
            r.add_binding(f"q{i}", "5", {})
    dests = {by_header.route(f"rk-{i}", {"user": "alice"})[0] for i in range(50)}
    assert len(dests) == 1  # the routing key does not matter, the header does
    dests = {by_prop.route(f"rk-{i}", None, Msg())[0] for i in range(50)}
    assert len(dests) == 1
    assert len({by_header.route("k", {"user": f"u{i}"})[0] for i in range(200)}) == 8


def test_modulus_hash_spreads_and_sticks():
    r = new_routing("x-modulus-hash")
    for i in range(3):
        r.add_binding(f"q{i}", "ignored", {})
    r.add_binding("q0", "again", {})  # bound twice: two buckets, as the plugin counts
    got = Counter(r.route(f"k{i}", None)[0] for i in range(4000))
    assert set(got) == {"q0", "q1", "q2"}
    assert got["q0"] > 1800 and 800 < got["q1"] < 1200 and 800 < got["q2"] < 1200
    assert len({r.route("same", None) for _ in range(5)}) == 1
    r.remove_destination("q1")
    assert {r.route(f"k{i}", None)[0] for i in range(100)} == {"q0", "q2"}
    assert new_routing("x-modulus-hash").route("k", None) == ()
