"""Direct reply-to (rabbitmq.com/direct-reply-to.html): RPC replies go straight to the
requester's channel through amq.rabbitmq.reply-to, no queue is created; the misuse errors are
RabbitMQ's (rabbit_channel)."""

from __future__ import annotations

import pika
import pytest

from tests.polling import wait_for

REPLY_TO = "amq.rabbitmq.reply-to"


def get_one(ch, queue: str):
    """basic.get (auto-ack) until a message is there (bounded: 5 s)."""
    got = []
    wait_for(lambda: got.append(ch.basic_get(queue, auto_ack=True)) or got[-1][0] is not None,
             timeout=5)
    return got[-1]


def test_request_reply_round_trip(connect, unique):
    service = connect().channel()
    requests = unique("rpc")
    service.queue_declare(requests, exclusive=True)
    client_conn = connect()
    client = client_conn.channel()
    replies = []
    client.basic_consume(REPLY_TO, lambda c, m, p, b: replies.append((m, b)), auto_ack=True)
    client.basic_publish("", requests, b"2+2", pika.BasicProperties(reply_to=REPLY_TO,
                                                                    correlation_id="c1"))
    _method, props, _body = get_one(service, requests)
    assert props.reply_to.startswith(REPLY_TO + ".")  # rewritten for this channel
    service.basic_publish("", props.reply_to, b"4",
                          pika.BasicProperties(correlation_id=props.correlation_id))
    wait_for(lambda: client_conn.process_data_events(0.02) or replies, timeout=5)
    (reply_method, reply_body), = replies
    assert reply_body == b"4"
    assert reply_method.routing_key == props.reply_to
    assert reply_method.exchange == ""
    # no queue was created for the replies
    assert service.queue_declare(REPLY_TO, passive=True).method.message_count == 0


def test_consume_with_acks_is_refused(connect):
    ch = connect().channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_consume(REPLY_TO, lambda *a: None, auto_ack=False)
    assert info.value.reply_code == 406
    assert info.value.reply_text == "PRECONDITION_FAILED - reply consumer cannot acknowledge"


def test_publish_with_reply_to_but_no_reply_consumer_is_refused(connect, unique):
    ch = connect().channel()
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_publish("", unique("q"), b"x", pika.BasicProperties(reply_to=REPLY_TO))
    assert info.value.reply_code == 406
    assert info.value.reply_text == "PRECONDITION_FAILED - fast reply consumer does not exist"


def test_reply_to_a_gone_requester_is_dropped(connect, unique):
    requests = unique("rpc")
    service = connect().channel()
    service.queue_declare(requests, exclusive=True)
    requester = connect()
    ch = requester.channel()
    ch.basic_consume(REPLY_TO, lambda *a: None, auto_ack=True)
    ch.basic_publish("", requests, b"q", pika.BasicProperties(reply_to=REPLY_TO))
    _m, props, _b = get_one(service, requests)
    requester.close()
    service.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):
        service.basic_publish("", props.reply_to, b"late", mandatory=True)
    service.basic_publish("", props.reply_to, b"late")  # not mandatory: dropped silently
    assert service.is_open
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        service.queue_declare(props.reply_to, passive=True)
    assert info.value.reply_code == 404


def test_capability_is_advertised(connection):
    caps = connection._impl.server_properties["capabilities"]
    assert caps.get("direct_reply_to") is True


def test_declaring_the_pseudo_queue_answers_0_messages_1_consumer(connect):
    """rabbit_channel: every declare of amq.rabbitmq.reply-to is passive and "if it exists
    it by definition has one consumer" (RabbitMQ 3.10.8)."""
    ch = connect().channel()
    for passive in (True, False):
        ok = ch.queue_declare(REPLY_TO, passive=passive).method
        assert (ok.queue, ok.message_count, ok.consumer_count) == (REPLY_TO, 0, 1)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(REPLY_TO + "x", passive=True)
    assert info.value.reply_code == 404
