"""basic.qos as RabbitMQ 3.10.8 implements it: prefetch_count per consumer (global=false),
per channel (global=true), their combination and quirks, prefetch_size unsupported.

"Nothing more arrives" is proven by the queues' ready counts, never by waiting.
"""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from helpers import (
    Recorder,
    fill,
    get_n,
    message_count,
    pump_until,
)

# --- qos --------------------------------------------------------------------------------------


def test_prefetch_count_per_consumer(connection, pub):
    """global=false: each consumer on the channel may hold `prefetch_count` unacked."""
    ch = connection.channel()
    ch.basic_qos(prefetch_count=2, global_qos=False)
    qs = [pub.queue_declare("", exclusive=True).method.queue for _ in range(2)]
    recs = [Recorder(), Recorder()]
    for q, r in zip(qs, recs, strict=True):
        fill(pub, q, 5)
        ch.basic_consume(q, r)
    pump_until(connection, lambda: all(message_count(pub, q) == 3 for q in qs))
    pump_until(connection, lambda: [len(r.got) for r in recs] == [2, 2])
    ch.basic_ack(recs[0].got[0][0])  # room for one more on the first consumer only
    pump_until(connection, lambda: message_count(pub, qs[0]) == 2)
    pump_until(connection, lambda: len(recs[0].got) == 3)
    assert message_count(pub, qs[1]) == 3


def test_prefetch_count_global_is_per_channel(connection, pub):
    """global=true: all consumers of the channel share `prefetch_count`."""
    ch = connection.channel()
    ch.basic_qos(prefetch_count=3, global_qos=True)
    qs = [pub.queue_declare("", exclusive=True).method.queue for _ in range(2)]
    recs = [Recorder(), Recorder()]
    for q, r in zip(qs, recs, strict=True):
        fill(pub, q, 5)
        ch.basic_consume(q, r)
    pump_until(connection, lambda: sum(message_count(pub, q) for q in qs) == 7)
    pump_until(connection, lambda: sum(len(r.got) for r in recs) == 3)
    assert sum(len(r.got) for r in recs) == 3


def _qos_deliveries(connection, pub, qos_calls):
    """Apply basic.qos calls, consume 2 queues of 5 messages; return the settled counts."""
    ch = connection.channel()
    for count, global_qos in qos_calls:
        ch.basic_qos(prefetch_count=count, global_qos=global_qos)
    qs = [pub.queue_declare("", exclusive=True).method.queue for _ in range(2)]
    recs = [Recorder(), Recorder()]
    for q, r in zip(qs, recs, strict=True):
        fill(pub, q, 5)
        ch.basic_consume(q, r)
    return ch, qs, recs


def test_prefetch_per_consumer_then_global_combine(connection, pub):
    """qos(2, global=false) then qos(3, global=true): each consumer <= 2, the channel <= 3."""
    _ch, qs, recs = _qos_deliveries(connection, pub, [(2, False), (3, True)])
    pump_until(connection, lambda: sum(message_count(pub, q) for q in qs) == 7)
    pump_until(connection, lambda: sum(len(r.got) for r in recs) == 3)
    assert sorted(len(r.got) for r in recs) == [1, 2]


def test_prefetch_per_consumer_qos_lifts_the_global_limit(connection, pub):
    """RabbitMQ 3.10 quirk: basic.qos(global=false) removes an earlier channel-wide limit
    (rabbit_channel calls rabbit_limiter:unlimit_prefetch), so qos(3, global=true) then
    qos(2, global=false) leaves only the per-consumer limit: 2 + 2 unacked."""
    _ch, qs, recs = _qos_deliveries(connection, pub, [(3, True), (2, False)])
    pump_until(connection, lambda: all(message_count(pub, q) == 3 for q in qs))
    pump_until(connection, lambda: [len(r.got) for r in recs] == [2, 2])


def test_prefetch_applies_to_consumers_created_after_qos(connection, pub):
    """RabbitMQ: basic.qos(global=false) changes the limit for *new* consumers only."""
    ch = connection.channel()
    q = pub.queue_declare("", exclusive=True).method.queue
    rec = Recorder()
    ch.basic_consume(q, rec)  # unlimited
    ch.basic_qos(prefetch_count=1)
    fill(pub, q, 4)
    pump_until(connection, lambda: len(rec.got) == 4)
    assert message_count(pub, q) == 0


def test_prefetch_zero_is_unlimited(connection, pub):
    ch = connection.channel()
    ch.basic_qos(prefetch_count=0)
    q = pub.queue_declare("", exclusive=True).method.queue
    rec = Recorder()
    ch.basic_consume(q, rec)
    fill(pub, q, 50)
    pump_until(connection, lambda: len(rec.got) == 50)


def test_basic_get_ignores_prefetch(pub):
    pub.basic_qos(prefetch_count=1)
    q = pub.queue_declare("", exclusive=True).method.queue
    fill(pub, q, 3)
    assert [b for _t, b, _r in get_n(pub, q, 3)] == [b"m0", b"m1", b"m2"]


def test_prefetch_size_nonzero_is_540(connection):
    """RabbitMQ does not implement prefetch_size: connection error 540."""
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        connection.channel().basic_qos(prefetch_size=1000)
    assert info.value.reply_code == 540
    assert info.value.reply_text == "NOT_IMPLEMENTED - prefetch_size!=0 (1000)"
