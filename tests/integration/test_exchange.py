"""Exchange class: declare/delete rules, types, exchange-to-exchange bindings, alternate-exchange.

Reply codes and texts are the ones RabbitMQ 3.10.8 sends.
"""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from helpers import get_all, message_count, soft_error


@pytest.fixture
def conf_channel(connection):
    ch = connection.channel()
    ch.confirm_delivery()
    return ch


# --- declare ----------------------------------------------------------------------------------


def test_passive_declare_of_missing_exchange_is_404(connection, unique):
    ex = unique("ex")
    code, text = soft_error(connection.channel().exchange_declare, ex, passive=True)
    assert code == 404
    assert text == f"NOT_FOUND - no exchange '{ex}' in vhost '/'"


def test_passive_declare_of_existing_exchange(channel, unique):
    ex = unique("ex")
    channel.exchange_declare(ex, "fanout", auto_delete=True)
    assert isinstance(
        channel.exchange_declare(ex, passive=True).method, pika.spec.Exchange.DeclareOk
    )
    channel.exchange_delete(ex)


def test_durable_exchange_redeclare_is_idempotent(channel, unique):
    ex = unique("ex")
    channel.exchange_declare(ex, "direct", durable=True)
    channel.exchange_declare(ex, "direct", durable=True)
    channel.exchange_delete(ex)


@pytest.mark.parametrize(
    ("first", "second", "field"),
    [
        ({"exchange_type": "direct"}, {"exchange_type": "fanout"}, "type"),
        ({"durable": True}, {"durable": False}, "durable"),
        ({"auto_delete": False}, {"auto_delete": True}, "auto_delete"),
        ({"internal": False}, {"internal": True}, "internal"),
    ],
)
def test_redeclare_with_other_type_or_flags_is_406(connection, unique, first, second, field):
    ex = unique("ex")
    ch = connection.channel()
    ch.exchange_declare(ex, **{"exchange_type": "direct", **first})
    code, text = soft_error(ch.exchange_declare, ex, **{"exchange_type": "direct", **second})
    assert code == 406
    assert text.startswith(f"PRECONDITION_FAILED - inequivalent arg '{field}' for exchange '{ex}'")
    connection.channel().exchange_delete(ex)


def test_redeclare_type_mismatch_text(connection, unique):
    ex = unique("ex")
    ch = connection.channel()
    ch.exchange_declare(ex, "direct", auto_delete=True)
    code, text = soft_error(ch.exchange_declare, ex, "fanout", auto_delete=True)
    assert code == 406
    assert text == (
        f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{ex}' in vhost '/': "
        "received 'fanout' but current is 'direct'"
    )
    connection.channel().exchange_delete(ex)


def test_amq_prefix_is_reserved_403(connection, unique):
    ex = "amq." + unique("mine")
    code, text = soft_error(connection.channel().exchange_declare, ex, "direct")
    assert code == 403
    assert text == f"ACCESS_REFUSED - exchange name '{ex}' contains reserved prefix 'amq.*'"


def test_unknown_exchange_type_is_503(connection, unique):
    """RabbitMQ: an unknown type is a connection error 503 COMMAND_INVALID."""
    ex = unique("ex")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        connection.channel().exchange_declare(ex, "no-such-type")
    assert info.value.reply_code == 503
    assert info.value.reply_text == "COMMAND_INVALID - unknown exchange type 'no-such-type'"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("amq.direct", "direct"),
        ("amq.fanout", "fanout"),
        ("amq.topic", "topic"),
        ("amq.headers", "headers"),
        ("amq.match", "headers"),
    ],
)
def test_predeclared_exchanges_exist(channel, name, kind):
    channel.exchange_declare(name, passive=True)
    channel.exchange_declare(name, kind, durable=True)  # equivalent redeclare is allowed


def test_default_exchange_routes_by_queue_name(conf_channel):
    q = conf_channel.queue_declare("", exclusive=True).method.queue
    conf_channel.basic_publish("", q, b"direct to queue")
    assert get_all(conf_channel, q) == [b"direct to queue"]


def test_binding_a_queue_to_the_default_exchange_is_403(connection):
    ch = connection.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    code, text = soft_error(ch.queue_bind, q, "", routing_key="x")
    assert code == 403
    assert text == "ACCESS_REFUSED - operation not permitted on the default exchange"


def test_deleting_the_default_exchange_is_403(connection):
    code, text = soft_error(connection.channel().exchange_delete, "")
    assert code == 403
    assert text == "ACCESS_REFUSED - operation not permitted on the default exchange"


def test_publish_to_missing_exchange_is_404(connection, unique):
    ex = unique("ex")
    ch = connection.channel()
    ch.confirm_delivery()
    code, text = soft_error(ch.basic_publish, ex, "rk", b"x")
    assert code == 404
    assert text == f"NOT_FOUND - no exchange '{ex}' in vhost '/'"


# --- internal / auto_delete / delete ------------------------------------------------------------


def test_publish_to_internal_exchange_is_403(connection, unique):
    ex = unique("internal")
    ch = connection.channel()
    ch.exchange_declare(ex, "fanout", internal=True)
    ch.confirm_delivery()
    code, text = soft_error(ch.basic_publish, ex, "", b"x")
    assert code == 403
    assert text == f"ACCESS_REFUSED - cannot publish to internal exchange '{ex}' in vhost '/'"
    connection.channel().exchange_delete(ex)


def test_internal_exchange_receives_via_exchange_binding(conf_channel, unique):
    src, internal = unique("src"), unique("internal")
    conf_channel.exchange_declare(src, "fanout", auto_delete=True)
    conf_channel.exchange_declare(internal, "fanout", internal=True, auto_delete=True)
    conf_channel.exchange_bind(internal, src)
    q = conf_channel.queue_declare("", exclusive=True).method.queue
    conf_channel.queue_bind(q, internal)
    conf_channel.basic_publish(src, "", b"via internal")
    assert get_all(conf_channel, q) == [b"via internal"]


def test_auto_delete_exchange_goes_when_last_binding_removed(connection, unique):
    ch = connection.channel()
    ex = unique("ad")
    ch.exchange_declare(ex, "direct", auto_delete=True)
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, ex, "a")
    ch.queue_bind(q, ex, "b")
    ch.queue_unbind(q, ex, "a")
    ch.exchange_declare(ex, passive=True)  # still one binding
    ch.queue_unbind(q, ex, "b")
    code, _text = soft_error(ch.exchange_declare, ex, passive=True)
    assert code == 404


def test_auto_delete_exchange_without_bindings_stays(channel, unique):
    ex = unique("ad")
    channel.exchange_declare(ex, "direct", auto_delete=True)
    channel.exchange_declare(ex, passive=True)
    channel.exchange_delete(ex)


def test_delete_exchange(connection, unique):
    ch = connection.channel()
    ex = unique("ex")
    ch.exchange_declare(ex, "topic")
    ch.exchange_delete(ex)
    code, _ = soft_error(ch.exchange_declare, ex, passive=True)
    assert code == 404


def test_delete_missing_exchange_is_ok(channel, unique):
    channel.exchange_delete(unique("never"))
    assert channel.is_open


def test_delete_if_unused_on_bound_exchange_is_406(connection, unique):
    ch = connection.channel()
    ex = unique("ex")
    ch.exchange_declare(ex, "direct")
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, ex, "k")
    code, text = soft_error(ch.exchange_delete, ex, if_unused=True)
    assert code == 406
    assert text == f"PRECONDITION_FAILED - exchange '{ex}' in vhost '/' in use"
    ch2 = connection.channel()
    ch2.queue_unbind(q, ex, "k")
    ch2.exchange_delete(ex, if_unused=True)
    code, _ = soft_error(ch2.exchange_declare, ex, passive=True)
    assert code == 404


def test_delete_exchange_removes_its_bindings(conf_channel, unique):
    ex = unique("ex")
    conf_channel.exchange_declare(ex, "fanout")
    q = conf_channel.queue_declare("", exclusive=True).method.queue
    conf_channel.queue_bind(q, ex)
    conf_channel.exchange_delete(ex)
    conf_channel.exchange_declare(ex, "fanout")  # same name again: the old binding is gone
    conf_channel.basic_publish(ex, "", b"x")
    assert message_count(conf_channel, q) == 0
    conf_channel.exchange_delete(ex)


# --- exchange-to-exchange bindings --------------------------------------------------------------


def test_exchange_bind_and_unbind_route_end_to_end(conf_channel, unique):
    src, dst = unique("src"), unique("dst")
    conf_channel.exchange_declare(src, "topic")  # an auto_delete source would go at unbind
    conf_channel.exchange_declare(dst, "direct")
    q = conf_channel.queue_declare("", exclusive=True).method.queue
    conf_channel.queue_bind(q, dst, "a.b")
    conf_channel.exchange_bind(dst, src, "a.*")
    conf_channel.basic_publish(src, "a.b", b"1")
    conf_channel.basic_publish(src, "a.c", b"2")  # passes src, dropped by dst
    conf_channel.basic_publish(src, "x.b", b"3")  # dropped by src
    assert get_all(conf_channel, q) == [b"1"]
    conf_channel.exchange_unbind(dst, src, "a.*")
    conf_channel.basic_publish(src, "a.b", b"4")
    assert get_all(conf_channel, q) == []
    conf_channel.exchange_delete(src)
    conf_channel.exchange_delete(dst)


def test_auto_delete_source_exchange_goes_when_its_exchange_binding_is_removed(connection, unique):
    ch = connection.channel()
    src, dst = unique("src"), unique("dst")
    ch.exchange_declare(src, "fanout", auto_delete=True)
    ch.exchange_declare(dst, "fanout", auto_delete=True)
    ch.exchange_bind(dst, src)
    ch.exchange_unbind(dst, src)
    code, _ = soft_error(ch.exchange_declare, src, passive=True)
    assert code == 404
    connection.channel().exchange_delete(dst)


def test_exchange_binding_cycle_delivers_once(conf_channel, unique):
    a, b = unique("a"), unique("b")
    conf_channel.exchange_declare(a, "fanout", auto_delete=True)
    conf_channel.exchange_declare(b, "fanout", auto_delete=True)
    conf_channel.exchange_bind(b, a)
    conf_channel.exchange_bind(a, b)
    q = conf_channel.queue_declare("", exclusive=True).method.queue
    conf_channel.queue_bind(q, a)
    conf_channel.queue_bind(q, b)
    conf_channel.basic_publish(a, "", b"once")
    assert get_all(conf_channel, q) == [b"once"]
    conf_channel.exchange_delete(a)
    conf_channel.exchange_delete(b)


def test_exchange_bind_missing_source_is_404(connection, unique):
    ch = connection.channel()
    dst = unique("dst")
    ch.exchange_declare(dst, "fanout", auto_delete=True)
    missing = unique("missing")
    code, text = soft_error(ch.exchange_bind, dst, missing)
    assert code == 404
    assert text == f"NOT_FOUND - no exchange '{missing}' in vhost '/'"


# --- types --------------------------------------------------------------------------------------


def test_direct_exchange_exact_match_and_multiple_queues(conf_channel, unique):
    ex = unique("direct")
    conf_channel.exchange_declare(ex, "direct", auto_delete=True)
    q1 = conf_channel.queue_declare("", exclusive=True).method.queue
    q2 = conf_channel.queue_declare("", exclusive=True).method.queue
    conf_channel.queue_bind(q1, ex, "k")
    conf_channel.queue_bind(q2, ex, "k")
    conf_channel.queue_bind(q2, ex, "other")
    for rk in ("k", "K", "other", "k.x", ""):
        conf_channel.basic_publish(ex, rk, rk.encode())
    assert get_all(conf_channel, q1) == [b"k"]
    assert get_all(conf_channel, q2) == [b"k", b"other"]


def test_fanout_ignores_routing_key(conf_channel, unique):
    ex = unique("fanout")
    conf_channel.exchange_declare(ex, "fanout", auto_delete=True)
    qs = [conf_channel.queue_declare("", exclusive=True).method.queue for _ in range(3)]
    for q in qs:
        conf_channel.queue_bind(q, ex, routing_key="whatever")
    conf_channel.basic_publish(ex, "anything", b"x")
    for q in qs:
        assert get_all(conf_channel, q) == [b"x"]


@pytest.mark.parametrize(
    ("pattern", "matches", "misses"),
    [
        ("a.*.c", ["a.b.c", "a..c"], ["a.c", "a.b.b.c", "a.b.c.d"]),
        ("a.#", ["a", "a.b", "a.b.c"], ["b.a", "ab"]),
        ("#.c", ["c", "a.c", "a.b.c"], ["c.a"]),
        ("#", ["", "a", "a.b.c"], []),
        ("*", ["a"], ["a.b", ""]),  # RabbitMQ: "*" does not match the empty key
        ("a.#.c", ["a.c", "a.b.c", "a.b.b.c"], ["a.b", "b.c"]),
        ("*.#", ["a", "a.b"], [""]),
        ("a.b", ["a.b"], ["a.b.c", "a", "A.B"]),
    ],
)
def test_topic_patterns(conf_channel, unique, pattern, matches, misses):
    ex = unique("topic")
    conf_channel.exchange_declare(ex, "topic", auto_delete=True)
    q = conf_channel.queue_declare("", exclusive=True).method.queue
    conf_channel.queue_bind(q, ex, pattern)
    for rk in matches + misses:
        conf_channel.basic_publish(ex, rk, rk.encode())
    assert sorted(get_all(conf_channel, q)) == sorted(rk.encode() for rk in matches)


def test_topic_duplicate_bindings_deliver_once(conf_channel, unique):
    ex = unique("topic")
    conf_channel.exchange_declare(ex, "topic", auto_delete=True)
    q = conf_channel.queue_declare("", exclusive=True).method.queue
    conf_channel.queue_bind(q, ex, "a.*")
    conf_channel.queue_bind(q, ex, "#")
    conf_channel.queue_bind(q, ex, "a.b")
    conf_channel.basic_publish(ex, "a.b", b"one copy")
    assert get_all(conf_channel, q) == [b"one copy"]


@pytest.mark.parametrize(
    ("binding", "headers", "routed"),
    [
        ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1, "b": "x"}, True),
        ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1, "b": "x", "c": 3}, True),
        ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1}, False),
        ({"x-match": "all", "a": 1, "b": "x"}, {"a": 2, "b": "x"}, False),
        ({"x-match": "any", "a": 1, "b": "x"}, {"a": 1}, True),
        ({"x-match": "any", "a": 1, "b": "x"}, {"b": "x", "z": 0}, True),
        ({"x-match": "any", "a": 1, "b": "x"}, {"a": 2}, False),
        ({"x-match": "any", "a": 1, "b": "x"}, None, False),
        ({"a": 1, "b": "x"}, {"a": 1}, False),  # default x-match is all
        ({"a": 1}, {"a": 1}, True),
        ({}, {"anything": 1}, True),  # all of nothing
        ({"x-match": "any"}, {"a": 1}, False),  # any of nothing
    ],
)
def test_headers_exchange(conf_channel, unique, binding, headers, routed):
    ex = unique("headers")
    conf_channel.exchange_declare(ex, "headers", auto_delete=True)
    q = conf_channel.queue_declare("", exclusive=True).method.queue
    conf_channel.queue_bind(q, ex, arguments=binding)
    conf_channel.basic_publish(ex, "", b"h", pika.BasicProperties(headers=headers))
    assert get_all(conf_channel, q) == ([b"h"] if routed else [])


def test_amq_match_routes_on_headers(conf_channel):
    q = conf_channel.queue_declare("", exclusive=True).method.queue
    conf_channel.queue_bind(q, "amq.match", arguments={"x-match": "all", "q": q})
    conf_channel.basic_publish("amq.match", "", b"m", pika.BasicProperties(headers={"q": q}))
    assert get_all(conf_channel, q) == [b"m"]


# --- alternate exchange -------------------------------------------------------------------------


def test_alternate_exchange_receives_unroutable(conf_channel, unique):
    main, alt = unique("main"), unique("alt")
    conf_channel.exchange_declare(alt, "fanout", auto_delete=True)
    conf_channel.exchange_declare(
        main, "direct", auto_delete=True, arguments={"alternate-exchange": alt}
    )
    q_main = conf_channel.queue_declare("", exclusive=True).method.queue
    q_alt = conf_channel.queue_declare("", exclusive=True).method.queue
    conf_channel.queue_bind(q_main, main, "routed")
    conf_channel.queue_bind(q_alt, alt)
    conf_channel.basic_publish(main, "routed", b"r")
    conf_channel.basic_publish(main, "unroutable", b"u")
    assert get_all(conf_channel, q_main) == [b"r"]
    assert get_all(conf_channel, q_alt) == [b"u"]


def test_alternate_exchange_means_no_basic_return(connection, unique):
    ch = connection.channel()
    ch.confirm_delivery()
    main, alt = unique("main"), unique("alt")
    ch.exchange_declare(alt, "fanout", auto_delete=True)
    ch.exchange_declare(main, "direct", auto_delete=True, arguments={"alternate-exchange": alt})
    q_alt = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q_alt, alt)
    returned = []
    ch.add_on_return_callback(lambda *a: returned.append(a))
    ch.basic_publish(main, "nowhere", b"m", mandatory=True)  # raises UnroutableError if returned
    connection.process_data_events(time_limit=0)
    assert returned == []
    assert get_all(ch, q_alt) == [b"m"]


# --- more RabbitMQ specifics --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "binding", "headers", "routed"),
    [
        ("typed: int 1 is not string '1'", {"a": 1}, {"a": "1"}, False),
        ("typed: bool true is not int 1", {"a": True}, {"a": 1}, False),
        ("void matches void", {"a": None}, {"a": None}, True),
        (
            "x- binding args ignored by all",
            {"x-match": "all", "x-foo": "bar", "a": 1},
            {"a": 1},
            True,
        ),
        (
            "x- binding args ignored by any",
            {"x-match": "any", "x-foo": "bar"},
            {"x-foo": "bar"},
            False,
        ),
        (
            "all-with-x compares x- args",
            {"x-match": "all-with-x", "x-foo": "bar"},
            {"x-foo": "bar"},
            True,
        ),
        (
            "any-with-x compares x- args",
            {"x-match": "any-with-x", "x-foo": "bar"},
            {"x-foo": "bar"},
            True,
        ),
    ],
    ids=[
        "typed-int-1-is-not-string-1",
        "typed-bool-true-is-not-int-1",
        "void-matches-void",
        "x-binding-args-ignored-by-all",
        "x-binding-args-ignored-by-any",
        "all-with-x-compares-x-args",
        "any-with-x-compares-x-args",
    ],
)
def test_headers_exchange_rabbitmq_specifics(conf_channel, unique, name, binding, headers, routed):
    ex = unique("headers")
    conf_channel.exchange_declare(ex, "headers", auto_delete=True)
    q = conf_channel.queue_declare("", exclusive=True).method.queue
    conf_channel.queue_bind(q, ex, arguments=binding)
    conf_channel.basic_publish(ex, "", b"h", pika.BasicProperties(headers=headers))
    assert get_all(conf_channel, q) == ([b"h"] if routed else []), name


def test_deleting_a_system_exchange_is_403(connection):
    code, text = soft_error(connection.channel().exchange_delete, "amq.direct")
    assert code == 403
    assert (
        text == "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed"
    )
    connection.channel().exchange_declare("amq.direct", passive=True)


def test_amq_default_is_not_an_alias_for_the_default_exchange(connection):
    """RabbitMQ 3.10 answers a publish to "amq.default" with 404."""
    ch = connection.channel()
    ch.confirm_delivery()
    code, text = soft_error(ch.basic_publish, "amq.default", "nothing", b"x")
    assert code == 404
    assert text == "NOT_FOUND - no exchange 'amq.default' in vhost '/'"


def test_exchange_bind_missing_destination_is_404(connection, unique):
    missing = unique("missing")
    code, text = soft_error(connection.channel().exchange_bind, missing, "amq.fanout")
    assert code == 404
    assert text == f"NOT_FOUND - no exchange '{missing}' in vhost '/'"


def test_alternate_exchange_argument_mismatch_is_406(connection, unique):
    ex = unique("ex")
    ch = connection.channel()
    ch.exchange_declare(ex, "direct", arguments={"alternate-exchange": "a"})
    code, text = soft_error(
        ch.exchange_declare, ex, "direct", arguments={"alternate-exchange": "b"}
    )
    assert code == 406
    assert text == (
        f"PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange '{ex}' in "
        "vhost '/': received 'b' but current is 'a'"
    )
    connection.channel().exchange_delete(ex)


def test_unknown_exchange_arguments_are_not_checked_for_equivalence(channel, unique):
    ex = unique("ex")
    channel.exchange_declare(ex, "direct", arguments={"foo": "a"})
    channel.exchange_declare(ex, "direct", arguments={"foo": "b"})
    channel.exchange_delete(ex)


@pytest.mark.parametrize("passive", [False, True])
def test_declaring_the_default_exchange_is_403(connection, passive):
    ch = connection.channel()
    kwargs = {"passive": True} if passive else {"exchange_type": "direct"}
    code, text = soft_error(ch.exchange_declare, "", **kwargs)
    assert code == 403
    assert text == "ACCESS_REFUSED - operation not permitted on the default exchange"


def test_same_key_with_different_arguments_are_separate_bindings(conf_channel, unique):
    ex = unique("direct")
    conf_channel.exchange_declare(ex, "direct")
    q = conf_channel.queue_declare("", exclusive=True).method.queue
    conf_channel.queue_bind(q, ex, "k", arguments={"a": 1})
    conf_channel.queue_bind(q, ex, "k", arguments={"a": 2})
    conf_channel.basic_publish(ex, "k", b"1")
    assert get_all(conf_channel, q) == [b"1"]  # two bindings, one copy
    conf_channel.queue_unbind(q, ex, "k", arguments={"a": 1})
    conf_channel.basic_publish(ex, "k", b"2")
    assert get_all(conf_channel, q) == [b"2"]  # the other binding still routes
    conf_channel.queue_unbind(q, ex, "k", arguments={"a": 2})
    conf_channel.basic_publish(ex, "k", b"3")
    assert get_all(conf_channel, q) == []
    conf_channel.exchange_delete(ex)
