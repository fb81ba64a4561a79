"""Topic exchange: RabbitMQ's documented examples, edge cases recorded on a live RabbitMQ 3.10,
cache invalidation, trie pruning, and a Hypothesis comparison with a reference matcher."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.exchange.topic import TopicRouting

# Binding keys bound to one queue each on RabbitMQ 3.10, then one message per routing key:
# the binding keys whose queue got it (recorded with pika, see the module docstring).
LIVE_BINDINGS = [
    "#",
    "#.#",
    "*",
    "*.#",
    "#.*",
    "a.#.b",
    "a.*.b",
    "a.#",
    "#.b",
    "",
    "a..b",
    "a.",
    ".a",
    "*.*",
    "a.#.#.b",
    "#.a.#",
    "a.*.#",
    "*.*.#",
    "a",
]
ALWAYS = ["#", "#.#", "*.#", "#.*"]  # every non-empty routing key
LIVE_RESULTS = {
    "": ["#", "#.#", ""],
    "a": ["#", "#.#", "*", "*.#", "#.*", "a.#", "#.a.#", "a"],
    "b": ["#", "#.#", "*", "*.#", "#.*", "#.b"],
    "a.b": ALWAYS + ["a.#.b", "a.#", "#.b", "*.*", "a.#.#.b", "#.a.#", "a.*.#", "*.*.#"],
    "a.x.b": ALWAYS + ["a.#.b", "a.*.b", "a.#", "#.b", "a.#.#.b", "#.a.#", "a.*.#", "*.*.#"],
    "a.x.y.b": ALWAYS + ["a.#.b", "a.#", "#.b", "a.#.#.b", "#.a.#", "a.*.#", "*.*.#"],
    "a..b": ALWAYS + ["a.#.b", "a.*.b", "a.#", "#.b", "a..b", "a.#.#.b", "#.a.#", "a.*.#", "*.*.#"],
    "a.": ALWAYS + ["a.#", "a.", "*.*", "#.a.#", "a.*.#", "*.*.#"],
    ".a": ALWAYS + [".a", "*.*", "#.a.#", "*.*.#"],
    ".": ALWAYS + ["*.*", "*.*.#"],
    "..": ALWAYS + ["*.*.#"],
    "a.b.b": ALWAYS + ["a.#.b", "a.*.b", "a.#", "#.b", "a.#.#.b", "#.a.#", "a.*.#", "*.*.#"],
    "b.a": ALWAYS + ["*.*", "#.a.#", "*.*.#"],
    "x.a.y": ALWAYS + ["#.a.#", "*.*.#"],
    "a.a.b": ALWAYS + ["a.#.b", "a.*.b", "a.#", "#.b", "a.#.#.b", "#.a.#", "a.*.#", "*.*.#"],
    "aa.b": ALWAYS + ["#.b", "*.*", "*.*.#"],
    "a.b.c": ALWAYS + ["a.#", "#.a.#", "a.*.#", "*.*.#"],
}

# https://www.rabbitmq.com/tutorials/tutorial-five-python.html: Q1 "*.orange.*",
# Q2 "*.*.rabbit" and "lazy.#".
TUTORIAL = [
    ("quick.orange.rabbit", {"Q1", "Q2"}),
    ("lazy.orange.elephant", {"Q1", "Q2"}),
    ("quick.orange.fox", {"Q1"}),
    ("lazy.brown.fox", {"Q2"}),
    ("lazy.pink.rabbit", {"Q2"}),
    ("quick.brown.fox", set()),
    ("orange", set()),
    ("quick.orange.new.rabbit", set()),
    ("lazy.orange.new.rabbit", {"Q2"}),
    ("lazy", {"Q2"}),
]


def live_table() -> TopicRouting:
    t = TopicRouting()
    for key in LIVE_BINDINGS:
        t.add_binding(key, key, {})  # destination named after its binding key
    return t


@pytest.mark.parametrize("routing_key", sorted(LIVE_RESULTS))
def test_matches_live_rabbitmq(routing_key: str) -> None:
    assert set(live_table().route(routing_key, None)) == set(LIVE_RESULTS[routing_key])


@pytest.mark.parametrize(("routing_key", "expected"), TUTORIAL)
def test_tutorial_five(routing_key: str, expected: set[str]) -> None:
    t = TopicRouting()
    t.add_binding("Q1", "*.orange.*", {})
    t.add_binding("Q2", "*.*.rabbit", {})
    t.add_binding("Q2", "lazy.#", {})
    assert set(t.route(routing_key, None)) == expected


def test_destination_once_when_several_bindings_match() -> None:
    t = TopicRouting()
    for key in ("#", "a.*", "a.b", "*.b"):
        t.add_binding("q", key, {})
    assert list(t.route("a.b", None)) == ["q"]


def test_literal_star_and_hash_words_in_routing_key() -> None:
    t = TopicRouting()
    t.add_binding("star", "a.*", {})
    t.add_binding("lit", "a.b", {})
    assert set(t.route("a.*", None)) == {"star"}
    assert set(t.route("a.#", None)) == {"star"}


def test_cache_invalidated_on_add_remove_and_destination_removal() -> None:
    t = TopicRouting()
    t.add_binding("q1", "a.*", {})
    assert set(t.route("a.b", None)) == {"q1"}
    t.add_binding("q2", "#", {})
    assert set(t.route("a.b", None)) == {"q1", "q2"}
    t.remove_binding("q1", "a.*", {})
    assert set(t.route("a.b", None)) == {"q2"}
    t.remove_destination("q2")
    assert set(t.route("a.b", None)) == set()


def test_cache_is_bounded() -> None:
    t = TopicRouting(cache_size=8)
    t.add_binding("q", "#", {})
    for i in range(100):
        assert set(t.route(f"k.{i}", None)) == {"q"}
    assert len(t._cache) <= 8


def test_trie_pruned_after_removal() -> None:
    t = TopicRouting()
    t.add_binding("q", "a.b.c", {})
    t.add_binding("q", "a.#", {})
    t.remove_binding("q", "a.b.c", {})
    assert t.node_count() == 2
    t.remove_binding("q", "a.#", {})
    assert t.node_count() == 0
    assert len(t) == 0


def test_many_hashes_do_not_blow_up() -> None:
    t = TopicRouting(cache_size=0)
    t.add_binding("q", ".".join(["#"] * 12) + ".z", {})
    assert set(t.route(".".join(["a"] * 40) + ".z", None)) == {"q"}
    assert set(t.route(".".join(["a"] * 40), None)) == set()


def ref_words(key: str) -> list[str]:
    return key.split(".") if key else []


def ref_match(pattern: list[str], words: list[str]) -> bool:
    """Reference: `*` is one word, `#` zero or more, anything else itself."""
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(ref_match(rest, words[i:]) for i in range(len(words) + 1))
    if not words:
        return False
    return (head == "*" or head == words[0]) and ref_match(rest, words[1:])


WORD = st.sampled_from(["a", "b", "", "*", "#"])
KEY = st.lists(WORD, max_size=5).map(".".join)
RKEY = st.lists(st.sampled_from(["a", "b", "", "c"]), max_size=6).map(".".join)


@settings(max_examples=300, deadline=None)
@given(bindings=st.lists(KEY, max_size=8), routing_keys=st.lists(RKEY, min_size=1, max_size=5))
def test_trie_matches_reference(bindings: list[str], routing_keys: list[str]) -> None:
    t = TopicRouting()
    for i, key in enumerate(bindings):
        t.add_binding(i, key, {})
    for rk in routing_keys:
        expected = {i for i, key in enumerate(bindings) if ref_match(ref_words(key), ref_words(rk))}
        assert set(t.route(rk, None)) == expected
    for i, key in enumerate(bindings[::2]):
        t.remove_binding(2 * i, key, {})
    for rk in routing_keys:
        expected = {
            i
            for i, key in enumerate(bindings)
            if i % 2 and ref_match(ref_words(key), ref_words(rk))
        }
        assert set(t.route(rk, None)) == expected
