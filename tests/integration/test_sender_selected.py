"""Sender-selected distribution (rabbitmq.com/sender-selected.html): the CC and BCC headers
are routing keys too; BCC never reaches a consumer, dead-lettered copies included; a CC that
is not an array is 406. All pass against RabbitMQ 3.10.8 (BROKER_TEST_URI)."""

from __future__ import annotations

import pika
import pytest
from helpers import message_count

from tests.polling import wait_for


def _get(ch, q: str):
    wait_for(lambda: message_count(ch, q) >= 1)
    method, props, body = ch.basic_get(q, auto_ack=True)
    return props, body


def test_cc_and_bcc_add_routing_keys_and_bcc_is_removed(channel, unique):
    main, copy, blind = unique("ss-main"), unique("ss-cc"), unique("ss-bcc")
    for q in (main, copy, blind):
        channel.queue_declare(q, exclusive=True)
    channel.confirm_delivery()
    channel.basic_publish("", main, b"hello", pika.BasicProperties(
        headers={"CC": [copy], "BCC": [blind], "keep": "me"}))
    for q in (main, copy, blind):
        props, body = _get(channel, q)
        assert body == b"hello"
        assert props.headers == {"CC": [copy], "keep": "me"}  # CC stays, BCC is gone


def test_cc_through_a_direct_exchange_reaches_each_key_once(channel, unique):
    x, a, b = unique("ss-x"), unique("ss-a"), unique("ss-b")
    channel.exchange_declare(x, "direct", auto_delete=True)
    for q in (a, b):
        channel.queue_declare(q, exclusive=True)
        channel.queue_bind(q, x, routing_key=q)
    channel.confirm_delivery()
    channel.basic_publish(x, a, b"m", pika.BasicProperties(headers={"CC": [b, a, 7]}))
    assert _get(channel, a)[1] == b"m" and _get(channel, b)[1] == b"m"
    assert message_count(channel, a) == 0 and message_count(channel, b) == 0


def test_a_dead_lettered_copy_has_no_bcc(channel, unique):
    q, dlq, blind = unique("ss-q"), unique("ss-dlq"), unique("ss-blind")
    channel.queue_declare(dlq, exclusive=True)
    channel.queue_declare(blind, exclusive=True)
    channel.queue_declare(q, exclusive=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    channel.confirm_delivery()
    channel.basic_publish("", q, b"dl", pika.BasicProperties(headers={"BCC": [blind]}))
    wait_for(lambda: message_count(channel, q) == 1)
    method, props, _body = channel.basic_get(q)
    assert "BCC" not in (props.headers or {})
    channel.basic_reject(method.delivery_tag, requeue=False)
    props, body = _get(channel, dlq)
    assert body == b"dl" and "BCC" not in props.headers
    assert props.headers["x-death"][0]["reason"] == "rejected"
    assert "BCC" not in (_get(channel, blind)[0].headers or {})


@pytest.mark.parametrize(("name", "value", "kind"), [
    ("CC", "not-an-array", "longstr"),
    ("BCC", 5, "signedint"),
])
def test_a_cc_that_is_not_an_array_is_406(connect, unique, name, value, kind):
    ch = connect().channel()
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_publish("", unique("q"), b"x", pika.BasicProperties(headers={name: value}))
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f'PRECONDITION_FAILED - invalid message: {{unacceptable_type_in_header,"{name}",'
        f"{kind}}}")
