"""broker.access (pure permission checks), broker.limits and broker.passwords without a
broker: RabbitMQ's regex semantics, the amq.default alias, topic variables, the per-channel
cache following permission changes, and RabbitMQ-compatible password hashes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import errors, limits
from broker.access import AccessControl, ChannelAccess, Permission, TopicPermission, User
from broker.passwords import MD5, SHA256, SHA512, check_password, encode_hash, hash_password


def control() -> AccessControl:
    c = AccessControl()
    c.users["u"] = User("u", None, SHA256, ("impersonator",))
    c.permissions[("u", "/")] = Permission("^conf", "", "read")
    return c


def test_regex_is_a_search_and_empty_matches_nothing():
    c = control()
    assert c.resource_allowed("u", "/", "conf-x", "configure")
    assert not c.resource_allowed("u", "/", "x-conf", "configure")
    assert c.resource_allowed("u", "/", "x-read-y", "read")  # unanchored, as re:run
    assert not c.resource_allowed("u", "/", "anything", "write")
    assert not c.resource_allowed("u", "other", "conf", "configure")
    assert c.vhost_allowed("u", "/") and not c.vhost_allowed("u", "other")


def test_default_exchange_is_checked_as_amq_default():
    c = control()
    c.permissions[("u", "/")] = Permission("", "^amq\\.default$", "")
    ChannelAccess(c, "u", "/").check("exchange", "", "write")
    with pytest.raises(errors.AccessRefused) as info:
        ChannelAccess(c, "u", "/").check("exchange", "x", "write")
    assert info.value.reply_text == (
        "ACCESS_REFUSED - access to exchange 'x' in vhost '/' refused for user 'u'")


def test_channel_cache_is_dropped_when_permissions_change():
    c = control()
    access = ChannelAccess(c, "u", "/")
    access.check("queue", "read-q", "read")
    c.permissions[("u", "/")] = Permission("", "", "")
    access.check("queue", "read-q", "read")  # no change recorded: still cached
    c.changed()
    with pytest.raises(errors.AccessRefused):
        access.check("queue", "read-q", "read")


def test_topic_permissions_expand_username_and_vhost():
    c = control()
    c.topic_permissions[("u", "/")] = {"t": TopicPermission("^{username}\\.{vhost}", "^r")}
    access = ChannelAccess(c, "u", "/")
    access.check_topic("t", "topic", "u./x", "write")
    access.check_topic("other", "topic", "anything", "write")  # no topic permission: free
    access.check_topic("t", "direct", "anything", "write")  # only topic exchanges
    with pytest.raises(errors.AccessRefused) as info:
        access.check_topic("t", "topic", "v.x", "write")
    assert info.value.reply_text == ("ACCESS_REFUSED - access to topic 'v.x' in exchange 't' "
                                     "in vhost '/' refused for user 'u'")
    assert access.has_tag("impersonator")


def test_limits_validate_and_over():
    assert limits.validate("user", {"max-channels": "5"}) == {"max-channels": 5}
    with pytest.raises(ValueError):
        limits.validate("user", {"max-queues": 1})
    with pytest.raises(ValueError):
        limits.validate("vhost", {"max-queues": "many"})
    assert limits.over(0, 0) and limits.over(2, 2) and not limits.over(2, 1)
    assert not limits.over(-1, 10**6) and not limits.over(None, 10**6)


@pytest.mark.parametrize("algorithm,size", [(SHA256, 36), (SHA512, 68), (MD5, 20)])
def test_password_hash_layout(algorithm, size):
    h = hash_password("s3cret", algorithm)
    assert len(h) == size  # 4 salt bytes + digest
    assert check_password("s3cret", h, algorithm)
    assert not check_password("s3cret!", h, algorithm)
    assert not check_password("s3cret", h, "rabbit_password_hashing_nope")
    assert not check_password("s3cret", None, algorithm)
    assert encode_hash(h)


NAMES = ("q1", "q2", "amq.gen-x", "x1")
PATTERNS = ("", ".*", "^q", "1$", "^amq\\.gen")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("set"), st.sampled_from(PATTERNS), st.sampled_from(PATTERNS),
              st.sampled_from(PATTERNS)),
    st.tuples(st.just("clear")),
    st.tuples(st.just("check"), st.sampled_from(("queue", "exchange")),
              st.sampled_from(NAMES), st.sampled_from(("configure", "write", "read")))),
    max_size=30))
def test_channel_cache_never_outlives_a_change(steps):
    """Whatever permissions are set or cleared between checks, a channel's cached answer is
    always the one the tables give now (changes take effect on open channels)."""
    c = AccessControl()
    c.users["u"] = User("u", None, SHA256)
    access = ChannelAccess(c, "u", "/")
    for step in steps:
        if step[0] == "set":
            c.permissions[("u", "/")] = Permission(*step[1:])
            c.changed()
        elif step[0] == "clear":
            c.permissions.pop(("u", "/"), None)
            c.changed()
        else:
            _, kind, name, perm = step
            expected = c.resource_allowed("u", "/", name, perm)
            try:
                access.check(kind, name, perm)
                allowed = True
            except errors.AccessRefused:
                allowed = False
            assert allowed == expected
