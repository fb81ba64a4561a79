"""Routes are cached per (exchange, routing key) (issue 15); every change of exchanges,
bindings, queues or policies must be seen by the very next publish on an open channel."""

from __future__ import annotations

import pika
import pytest
from helpers import message_count

from tests.polling import wait_for


def publish(ch, exchange: str, key: str, n: int = 1) -> None:
    for _ in range(n):
        ch.basic_publish(exchange, key, b"m")


def test_bind_unbind_and_queue_delete_take_effect_at_once(connect, unique):
    ch = connect().channel()
    ch.confirm_delivery()
    x, q1, q2 = unique("x"), unique("q1"), unique("q2")
    ch.exchange_declare(x, "direct")
    for q in (q1, q2):
        ch.queue_declare(q, exclusive=True)
    ch.queue_bind(q1, x, "k")
    publish(ch, x, "k", 3)  # cached: x/k -> q1
    ch.queue_bind(q2, x, "k")
    publish(ch, x, "k", 2)  # both now
    ch.queue_unbind(q1, x, "k")
    publish(ch, x, "k", 1)  # q2 only
    wait_for(lambda: (message_count(ch, q1), message_count(ch, q2)) == (5, 3))
    ch.queue_delete(q2)
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish(x, "k", b"m", mandatory=True)  # routed nowhere now
    ch.exchange_delete(x)


def test_topic_and_exchange_to_exchange_and_alternate_exchange_changes(connect, unique):
    ch = connect().channel()
    ch.confirm_delivery()
    x, inner, ae = unique("x"), unique("inner"), unique("ae")
    qa, qi = unique("qa"), unique("qi")
    ch.exchange_declare(ae, "fanout")
    ch.exchange_declare(inner, "topic")
    ch.exchange_declare(x, "topic", arguments={"alternate-exchange": ae})
    ch.queue_declare(qa, exclusive=True)
    ch.queue_declare(qi, exclusive=True)
    ch.queue_bind(qa, ae)
    publish(ch, x, "a.b")  # nothing bound to x: the AE gets it
    ch.queue_bind(qi, inner, "a.*")
    ch.exchange_bind(inner, x, "#")
    publish(ch, x, "a.b")  # through inner now, not the AE
    wait_for(lambda: (message_count(ch, qa), message_count(ch, qi)) == (1, 1))
    ch.exchange_unbind(inner, x, "#")
    publish(ch, x, "a.b")  # back to the AE
    wait_for(lambda: (message_count(ch, qa), message_count(ch, qi)) == (2, 1))
    ch.exchange_delete(ae)
    ch.exchange_declare(ae, "fanout")  # a new AE with no queue
    publish(ch, x, "a.b")
    ch.queue_bind(qa, ae)
    publish(ch, x, "a.b")
    wait_for(lambda: message_count(ch, qa) == 3)
    for name in (x, inner, ae):
        ch.exchange_delete(name)
