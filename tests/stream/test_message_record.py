"""AMQP 1.0 values (broker/amqp10.py) and the 0-9-1 ⇄ 1.0 mapping of stream entries
(broker/stream/message_record.py, after rabbit_msg_record in RabbitMQ 3.10.8), issue 37
item 3."""

from __future__ import annotations

import datetime
import struct
import uuid

import pytest
from pamqp import commands

from broker import amqp10
from broker.protocol.encoding import encode_properties
from broker.stream import message_record as mr

Properties = commands.Basic.Properties


@pytest.mark.parametrize("value,wire", [
    (("null", None), b"\x40"),
    (("boolean", True), b"\x41"),
    (("ubyte", 7), b"\x50\x07"),
    (("uint", 0), b"\x43"),
    (("uint", 9), b"\x52\x09"),
    (("uint", 70000), b"\x70" + struct.pack(">I", 70000)),
    (("ulong", 0), b"\x44"),
    (("ulong", 2**40), b"\x80" + struct.pack(">Q", 2**40)),
    (("int", -2), b"\x54\xfe"),
    (("long", -200), b"\x81" + struct.pack(">q", -200)),
    (("double", 1.5), b"\x82" + struct.pack(">d", 1.5)),
    (("timestamp", 1_700_000_000_000), b"\x83" + struct.pack(">q", 1_700_000_000_000)),
    (("utf8", "hé"), b"\xa1\x03h\xc3\xa9"),
    (("symbol", "x-opt"), b"\xa3\x05x-opt"),
    (("binary", b"\x00" * 300), b"\xb0" + struct.pack(">I", 300) + b"\x00" * 300),
    (("list", []), b"\x45"),
    (("list", [("null", None)]), b"\xc0\x02\x01\x40"),
    (("map", [(("symbol", "k"), ("utf8", "v"))]), b"\xc1\x07\x02\xa3\x01k\xa1\x01v"),
    (("described", (("ulong", 0x75), ("binary", b"ab"))), b"\x00\x53\x75\xa0\x02ab"),
])
def test_values_have_the_specifications_bytes_and_decode_back(value, wire):
    assert amqp10.encode(value) == wire
    assert amqp10.decode(wire) == (value, len(wire))


def test_arrays_and_32_bit_compounds_decode():
    arr = b"\xe0\x0b\x02\xa3" + b"\x03one" + b"\x03two"  # array8 of sym8
    assert amqp10.decode(arr)[0] == ("array", ("symbol", ["one", "two"]))
    big = b"\xd1" + struct.pack(">II", 4 + 6, 2) + b"\xa1\x01k" + b"\xa1\x01v"
    assert amqp10.decode(big)[0] == ("map", [(("utf8", "k"), ("utf8", "v"))])
    with pytest.raises(amqp10.DecodeError):
        amqp10.decode(b"\xa1\x05ab")
    with pytest.raises(amqp10.DecodeError):
        amqp10.decode(b"\x3f")


def test_a_091_message_round_trips_through_its_amqp10_entry():
    ts = datetime.datetime(2026, 11, 27, 8, 0, tzinfo=datetime.UTC)
    props = Properties(content_type="application/json", content_encoding="gzip",
                       headers={"n": 5, "s": "x", "f": True, "skip": {"a": 1}},
                       delivery_mode=2, priority=3, correlation_id="c-1", reply_to="r",
                       expiration="60000", message_id="m-1", timestamp=ts,
                       message_type="t", user_id="guest", app_id="app")
    entry = mr.encode_message("ex", "rk", props, b"body")
    secs = dict(amqp10.sections(entry))
    assert secs[amqp10.DATA] == ("binary", b"body")
    ma = dict((k[1], v) for k, v in secs[amqp10.MESSAGE_ANNOTATIONS][1])
    assert ma["x-exchange"] == ("utf8", "ex") and ma["x-basic-delivery-mode"] == ("ubyte", 2)
    pl = secs[amqp10.PROPERTIES][1]
    assert pl[0] == ("utf8", "m-1") and pl[1] == ("binary", b"guest")
    assert pl[6] == ("symbol", "application/json")
    assert pl[9] == ("timestamp", int(ts.timestamp()) * 1000)
    exchange, rk, back, body = mr.decode_message(entry, "s1")
    assert (exchange, rk, body) == ("ex", "rk", b"body")
    assert back.headers == {"n": 5, "s": "x", "f": True}  # the table is left out
    for name in ("content_type", "content_encoding", "delivery_mode", "priority",
                 "correlation_id", "reply_to", "expiration", "message_id", "timestamp",
                 "message_type", "user_id", "app_id"):
        assert getattr(back, name) == getattr(props, name), name


def test_a_stream_protocol_message_reads_as_sent_to_the_default_exchange():
    msg_id = uuid.UUID("12345678-1234-5678-1234-567812345678")
    entry = (amqp10.section(amqp10.PROPERTIES, ("list", [("uuid", msg_id.bytes),
                                                          ("null", None), ("null", None),
                                                          ("null", None), ("null", None),
                                                          ("ulong", 42)]))
             + amqp10.section(amqp10.APPLICATION_PROPERTIES,
                              ("map", [(("utf8", "region"), ("utf8", "eu"))]))
             + amqp10.section(amqp10.DATA, ("binary", b"hello")))
    exchange, rk, props, body = mr.decode_message(entry, "s1")
    assert (exchange, rk, body) == ("", "s1", b"hello")
    assert props.message_id == str(msg_id) and props.correlation_id == "42"
    assert props.headers == {"region": "eu", "x-message-id-type": "uuid",
                             "x-correlation-id-type": "ulong"}


def test_an_entry_that_is_not_amqp10_is_its_own_body():
    assert mr.decode_message(b"raw bytes", "s1") == ("", "s1", Properties(), b"raw bytes")


@pytest.mark.parametrize("props", [
    Properties(delivery_mode=2),
    Properties(delivery_mode=1, priority=5, expiration="60000"),
    Properties(),
])
def test_the_common_entry_decodes_on_the_fast_path_as_on_the_general_one(props):
    """An entry with only annotations and data (what most 0-9-1 publishes leave) takes the
    short path; it must answer what the general decoder answers."""
    for body in (b"", b"x" * 300):
        entry = mr.encode_message("ex", "rk", props, body)
        fast = mr._fast(entry, "s1")
        assert fast is not None
        secs = dict(amqp10.sections(entry))
        ann = {k[1]: v[1] for k, v in secs[amqp10.MESSAGE_ANNOTATIONS][1]}
        assert fast[:2] == (ann["x-exchange"], ann["x-routing-key"]) == ("ex", "rk")
        assert fast[3] == secs[amqp10.DATA][1] == body
        back = mr.decode_message(entry, "s1")[2]
        for name in ("delivery_mode", "priority", "expiration"):
            assert getattr(back, name) == getattr(props, name)
        wire = mr.fast_wire(entry, "s1")
        assert wire is not None and wire[2] == encode_properties(props)  # the same bytes
    with_headers = mr.encode_message("ex", "rk", Properties(headers={"a": 1}), b"b")
    assert mr._fast(with_headers, "s1") is None  # application properties: the general path
