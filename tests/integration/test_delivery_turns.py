"""Two queues with backlogs, one channel consuming both without acks: the queues take turns.

A queue process delivers at most `queue_delivery.DELIVERIES_PER_TURN` (256) messages per
event-loop turn, then lets the others run (issue 26 item 4: one no-ack consumer draining a
backlog held the loop for 100+ ms). Both consumes arrive in one TCP write, so both queues
have a consumer before either delivers; the deliveries must then interleave, not come as
all of one queue and then all of the other. RabbitMQ's queue processes run concurrently, so
this holds there as well.
"""

from __future__ import annotations

from pamqp import commands, frame, header
from pamqp.body import ContentBody
from rawamqp import RawClient

N = 1500


def _fill(c: RawClient, queue: str, n: int) -> None:
    body = b"x" * 16
    data = b"".join(
        frame.marshal(commands.Basic.Publish(routing_key=queue), 1)
        + frame.marshal(header.ContentHeader(0, len(body), commands.Basic.Properties()), 1)
        + frame.marshal(ContentBody(body), 1)
        for _ in range(n))
    c.send_bytes(data)


def test_two_backlogs_are_delivered_in_turns(broker, unique):
    with RawClient(broker.host, broker.port, timeout=10.0) as c:
        c.handshake()
        c.open_channel(1)
        c.send(commands.Confirm.Select(), 1)
        c.expect(commands.Confirm.SelectOk, 1)
        names = [unique("turn-a"), unique("turn-b")]
        for name in names:
            c.send(commands.Queue.Declare(queue=name, exclusive=True), 1)
            c.expect(commands.Queue.DeclareOk, 1)
        for name in names:
            _fill(c, name, N)
        confirmed = 0
        while confirmed < 2 * N:
            ack = c.expect(commands.Basic.Ack, 1)
            confirmed = ack.delivery_tag if ack.multiple else confirmed + 1
        c.send_bytes(b"".join(
            frame.marshal(commands.Basic.Consume(queue=name, consumer_tag=name, no_ack=True), 1)
            for name in names))
        order = []
        while len(order) < 2 * N:
            _ch, value = c.read_frame()
            if isinstance(value, commands.Basic.Deliver):
                order.append(value.consumer_tag)
                c.read_content(1)
        assert order.count(names[0]) == order.count(names[1]) == N
        first_of_b = order.index(names[1])
        assert first_of_b <= 600, first_of_b  # not after all 1500 of a
        c.close()
