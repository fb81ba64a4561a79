"""Deduplication's parts (issue 50): the cache (size, TTL, persistence on disk), the
x-message-deduplication routing table (the plugin's declare checks, fanout routing, keys by
header or by content) and the queue's backing-queue wrapper (a key lives as long as its
message)."""

from __future__ import annotations

import time

import pytest

from broker import errors
from broker.backing_queue.base import MessageProps
from broker.backing_queue.memory import MemoryBackingQueue
from broker.dedup.cache import DedupCache
from broker.dedup.queue import DedupBackingQueue
from broker.exchange import new_routing
from broker.exchange.dedup import content_key, key_of
from broker.message import Message, Properties


def test_the_oldest_key_makes_room() -> None:
    cache = DedupCache(3)
    for k in (b"a", b"b", b"c"):
        assert cache.insert(k)
    assert not cache.insert(b"a")
    assert cache.insert(b"d")
    assert b"a" not in cache and b"b" in cache and len(cache) == 3
    assert cache.duplicates == 1


def test_a_key_expires_after_its_ttl() -> None:
    cache = DedupCache(10, ttl_ms=50)
    assert cache.insert(b"a")
    assert cache.insert(b"b", ttl_ms=5_000)  # the message's own x-cache-ttl wins
    assert not cache.insert(b"a")
    time.sleep(0.08)
    assert cache.insert(b"a")  # expired: seen as new
    assert not cache.insert(b"b")


def test_a_disk_cache_survives_a_reopen_and_forgets_what_expired(tmp_path) -> None:
    cache = DedupCache(100, directory=str(tmp_path))
    cache.insert(b"kept")
    cache.insert(b"short", ttl_ms=30)
    cache.insert(b"gone")
    cache.delete(b"gone")
    cache.close()
    time.sleep(0.05)
    again = DedupCache(100, directory=str(tmp_path))
    assert b"kept" in again and b"short" not in again and b"gone" not in again
    again.close()


def test_keys_are_typed() -> None:
    assert key_of("1") != key_of(1) != key_of(b"1")
    assert key_of(True) != key_of(1)
    assert key_of([1]) is None and key_of({"a": 1}) is None and key_of(None) is None


@pytest.mark.parametrize(("arguments", "text"), [
    ({}, "Missing or invalid argument, 'x-cache-size' must be an integer greater than 0"),
    ({"x-cache-size": 0}, "'x-cache-size' must be an integer greater than 0"),
    ({"x-cache-size": "ten"}, "'x-cache-size' must be an integer greater than 0"),
    ({"x-cache-size": 5, "x-cache-ttl": -1}, "'x-cache-ttl' must be an integer greater than 0"),
    ({"x-cache-size": 5, "x-cache-persistence": "tape"},
     "'x-cache-persistence' must be either 'disk' or 'memory'"),
    ({"x-cache-size": 5, "x-deduplication-hash": ["nope"]}, "'x-deduplication-hash' must name"),
])
def test_declare_checks(arguments, text) -> None:
    with pytest.raises(errors.AMQPError) as err:
        new_routing("x-message-deduplication", arguments)
    assert err.value.reply_code == 406 and text in str(err.value)


def test_routing_is_a_fanout_that_drops_duplicates() -> None:
    routing = new_routing("x-message-deduplication", {"x-cache-size": "10"})
    routing.add_binding("q1", "a", {})
    routing.add_binding("q2", "b", {})
    routing.cache = DedupCache(10)
    assert set(routing.route("zzz", {"x-deduplication-header": "id-1"})) == {"q1", "q2"}
    assert list(routing.route("a", {"x-deduplication-header": "id-1"})) == []
    assert set(routing.route("a", {"other": 1})) == {"q1", "q2"}  # no header: never a duplicate
    assert set(routing.route("a", None)) == {"q1", "q2"}


def test_a_content_key_hashes_the_named_parts() -> None:
    a = Message("x", "k", Properties(message_id="m1", headers={"a": 1, "b": 2}), b"body")
    b = Message("x", "k", Properties(message_id="m1", headers={"b": 2, "a": 1}), b"body")
    c = Message("x", "k", Properties(message_id="m2"), b"body")
    assert content_key(("body",), a) == content_key(("body",), c)
    assert content_key(("body", "message_id"), a) != content_key(("body", "message_id"), c)
    assert content_key(("headers",), a) == content_key(("headers",), b)
    routing = new_routing("x-message-deduplication",
                          {"x-cache-size": 10, "x-deduplication-hash": "body,message_id"})
    routing.add_binding("q", "", {})
    routing.cache = DedupCache(10)
    assert not routing.key_only  # reads the message: no route cache
    assert list(routing.route("", None, a)) == ["q"]
    assert list(routing.route("", None, b)) == []
    assert list(routing.route("", None, c)) == ["q"]


def _dm(key: str | None, expiration: str | None = None) -> Message:
    headers = {"x-deduplication-header": key} if key is not None else None
    return Message("", "q", Properties(headers=headers, expiration=expiration), b"x")


def test_a_queue_key_lives_as_long_as_its_message() -> None:
    bq = DedupBackingQueue(MemoryBackingQueue(("/", "q"), False, None), None)
    props = MessageProps()
    bq.publish(_dm("a"), props)
    bq.publish(_dm("b"), props)
    assert bq.is_duplicate(_dm("a")) and not bq.is_duplicate(_dm("c"))
    assert not bq.is_duplicate(_dm(None))
    fetched = bq.fetch(True)  # "a" delivered, not acked: still a duplicate
    assert bq.is_duplicate(_dm("a"))
    bq.requeue([fetched.ack_tag])
    assert bq.is_duplicate(_dm("a"))
    fetched = bq.fetch(True)
    bq.ack([fetched.ack_tag])  # acked: gone
    assert not bq.is_duplicate(_dm("a"))
    bq.fetch(False)  # "b" taken without ack: gone at once
    assert not bq.is_duplicate(_dm("b"))
    tag = bq.publish_delivered(_dm("c"), props)
    assert bq.is_duplicate(_dm("c"))
    bq.discard_pending([tag])  # rejected without requeue: gone
    assert not bq.is_duplicate(_dm("c"))
    bq.publish(_dm("d"), props)
    bq.purge()
    assert not bq.is_duplicate(_dm("d"))
    assert bq.duplicates == 4


def test_a_queue_key_expires_with_the_message() -> None:
    bq = DedupBackingQueue(MemoryBackingQueue(("/", "q"), False, None), ttl_ms=None)
    bq.publish(_dm("e", expiration="30"), MessageProps())
    assert bq.is_duplicate(_dm("e"))
    time.sleep(0.05)
    assert not bq.is_duplicate(_dm("e"))


def test_recovered_messages_keep_their_keys() -> None:
    inner = MemoryBackingQueue(("/", "q"), False, None)
    inner.publish(_dm("r"), MessageProps())
    assert DedupBackingQueue(inner, None).is_duplicate(_dm("r"))


@pytest.mark.parametrize("value", ["order-1", 7, -3, 2.5, True, [1], None])
def test_the_key_read_from_encoded_properties_is_the_decoded_ones(value) -> None:
    """dedup_key reads the header without decoding where it can; the key is the one
    key_of makes of the decoded value, whatever the type."""
    from broker.dedup.queue import dedup_key

    props = Properties(headers={"a": 1, "x-deduplication-header": value}, message_id="m")
    wire = Message("", "q", props, b"x").wire_properties()
    from_wire = Message.from_wire("", "q", wire, (None, None, None, None, None), b"x")
    assert dedup_key(from_wire) == key_of(value)
    if isinstance(value, str | int) and not isinstance(value, bool):
        assert from_wire.decoded_headers is None  # read without decoding
