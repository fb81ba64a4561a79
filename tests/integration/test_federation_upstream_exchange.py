"""The x-federation-upstream exchange type (rabbitmq_federation's upstream helper): fanout,
except for messages past `x-max-hops` or already seen by the downstream named in its
arguments. Also passes against RabbitMQ 3.10.8 with rabbitmq_federation enabled."""

from __future__ import annotations

import pika
import pytest
from helpers import get_all, wait_for

HOP = {"uri": "amqp://other", "exchange": "x", "redelivered": False,
       "cluster-name": "other-cluster", "vhost": "/"}


def _setup(channel, unique, max_hops: int):
    x, q = unique("fedup-x"), unique("fedup-q")
    channel.exchange_declare(x, "x-federation-upstream", auto_delete=True, arguments={
        "x-max-hops": max_hops, "x-downstream-name": "down", "x-downstream-vhost": "/"})
    channel.queue_declare(q, exclusive=True)
    channel.queue_bind(q, x, "any")
    channel.confirm_delivery()
    return x, q


def _publish(channel, x: str, body: bytes, hops: list | None) -> None:
    headers = {"x-received-from": hops} if hops is not None else None
    channel.basic_publish(x, "k", body, pika.BasicProperties(headers=headers))


def test_routes_as_fanout_unless_the_downstream_saw_it(channel, unique):
    # pika sends a small int as a signedint, which RabbitMQ refuses for x-max-hops: a long
    x, q = _setup(channel, unique, max_hops=2**32)
    _publish(channel, x, b"fresh", None)
    _publish(channel, x, b"one hop", [HOP])
    _publish(channel, x, b"seen by down", [{**HOP, "cluster-name": "down"}])
    _publish(channel, x, b"other vhost", [{**HOP, "cluster-name": "down", "vhost": "v2"}])
    wait_for(lambda: channel.queue_declare(q, passive=True).method.message_count >= 3)
    assert get_all(channel, q) == [b"fresh", b"one hop", b"other vhost"]


def test_a_message_at_the_hop_limit_goes_nowhere(channel, unique, embedded_only):
    """(Embedded only: pika cannot send a small x-max-hops as the long RabbitMQ wants.)"""
    x, q = _setup(channel, unique, max_hops=2)
    _publish(channel, x, b"one hop", [HOP])
    _publish(channel, x, b"two hops", [HOP, {**HOP, "cluster-name": "third"}])
    wait_for(lambda: channel.queue_declare(q, passive=True).method.message_count >= 1)
    assert get_all(channel, q) == [b"one hop"]


@pytest.mark.parametrize(("arguments", "text"), [
    ({}, "PRECONDITION_FAILED - Argument x-max-hops missing"),
    ({"x-max-hops": "1"}, "PRECONDITION_FAILED - Argument x-max-hops must be of type long"),
])
def test_x_max_hops_is_required_and_a_long(connect, unique, arguments, text):
    ch = connect().channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare(unique("fedup-x"), "x-federation-upstream", auto_delete=True,
                            arguments=arguments)
    assert info.value.reply_code == 406 and info.value.reply_text == text
