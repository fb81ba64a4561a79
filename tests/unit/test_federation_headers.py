"""The headers and binding arguments federation links write (broker/federation/headers.py),
checked against what rabbitmq_federation 3.10.8 writes, and the typed table encoding the
upstream needs (x-max-hops as a long)."""

from __future__ import annotations

from pamqp import decode

from broker.federation import headers as fh
from broker.protocol.encoding import LongLong, encode_table


def test_the_hop_rule():
    hop = {"cluster-name": "a@h", "vhost": "/"}
    assert fh.should_forward(None, 1, "b@h", "/")
    assert fh.should_forward({"x-received-from": "junk"}, 1, "b@h", "/")
    assert not fh.should_forward({"x-received-from": [hop]}, 1, "b@h", "/")  # max-hops
    assert fh.should_forward({"x-received-from": [hop]}, 2, "b@h", "/")
    assert not fh.should_forward({"x-received-from": [hop]}, 5, "a@h", "/")  # seen: a loop
    assert fh.should_forward({"x-received-from": [hop]}, 5, "a@h", "other")


def test_an_exchange_hop_goes_in_front_and_a_bad_value_is_kept_aside():
    first = fh.exchange_hop({"x": 1}, "amqp://up", "X", False, "up@h", "/")
    assert first == {"x": 1, "x-received-from": [
        {"uri": "amqp://up", "exchange": "X", "redelivered": False, "cluster-name": "up@h",
         "vhost": "/"}]}
    second = fh.exchange_hop(first, "amqp://up2", "X", True, None, None)
    assert [h["uri"] for h in second["x-received-from"]] == ["amqp://up2", "amqp://up"]
    assert "cluster-name" not in second["x-received-from"][0]
    odd = fh.exchange_hop({"x-received-from": "junk"}, "amqp://u", "X", False, None, None)
    assert odd["x-invalid-headers"] == {"x-received-from": ["junk"]}
    assert len(odd["x-received-from"]) == 1


def test_a_queue_hop_counts_visits_and_keeps_the_original_route():
    h1 = fh.queue_hop({"CC": ["k2"]}, "amqp://a", "q", False, "ex", "k")
    assert h1["x-original-exchange"] == "ex" and h1["x-original-routing-key"] == "k"
    assert h1["x-original-cc"] == ["k2"] and "CC" not in h1
    assert h1["x-received-from"] == [{"uri": "amqp://a", "queue": "q", "redelivered": False,
                                      "visit-count": 1}]
    h2 = fh.queue_hop(h1, "amqp://b", "q", False, "", "q")
    h3 = fh.queue_hop(h2, "amqp://a", "q", True, "", "q")  # back at a: its entry moves up
    assert [(h["uri"], h["visit-count"]) for h in h3["x-received-from"]] == [
        ("amqp://a", 2), ("amqp://b", 1)]
    assert h3["x-original-exchange"] == "ex"  # only the first hop records the route


def test_binding_arguments_carry_hops_and_stop_loops():
    args = fh.binding_arguments({}, 2, "up@h", "/", "me@h", "/", "X", "A")
    assert args == {"x-bound-from": [{"cluster-name": "me@h", "vhost": "/",
                                      "exchange": "/:X A", "hops": 2}]}
    # propagated once more by a broker further down: one hop less
    again = fh.binding_arguments(args, 5, "other@h", "/", "next@h", "/", "X", "B")
    assert again["x-bound-from"][0]["hops"] == 1 and len(again["x-bound-from"]) == 2
    assert fh.binding_arguments(again, 5, "x@h", "/", "n@h", "/", "X", "A") is None  # 0 left
    # a binding that came from that upstream goes no further back to it
    assert fh.binding_arguments(args, 5, "me@h", "/", "up@h", "/", "X", "A") is None


def test_long_long_is_encoded_as_l():
    raw = encode_table({"x-max-hops": LongLong(1), "s": "v", "n": 3})
    assert b"x-max-hopsl\x00\x00\x00\x00\x00\x00\x00\x01" in raw
    assert decode.field_table(raw)[1] == {"x-max-hops": 1, "s": "v", "n": 3}
