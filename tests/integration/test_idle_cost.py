"""Nothing per queue costs CPU while idle (issue 15 item 3): a queue's RAM-duration report
(every RAM_DURATION_INTERVAL while busy, rabbit_amqqueue_process's rate timer) stops after
an interval without activity and starts again with the next message, as RabbitMQ's queue
stops its timer when it hibernates."""

from __future__ import annotations

import time

import pika
import pytest
from helpers import start_embedded

from tests.polling import wait_for

pytestmark = pytest.mark.usefixtures("embedded_only")


def test_idle_queues_stop_ticking_and_busy_ones_tick_again(monkeypatch):
    from broker import queue_memory

    monkeypatch.setattr(queue_memory, "RAM_DURATION_INTERVAL", 0.05)
    b = start_embedded()
    try:
        with pika.BlockingConnection(pika.URLParameters(b.url)) as c:
            ch = c.channel()
            names = [f"idle-{i}" for i in range(50)]
            for q in names:
                ch.queue_declare(q)
            ch.basic_publish("", names[0], b"m")

            def ticking() -> list[str]:
                queues = b.broker.vhosts["/"].queues
                return b.call(lambda: [q for q in names if queues[q].ram.ticking])

            wait_for(lambda: ticking() == [], timeout=5)  # all went quiet
            time.sleep(0.3)
            assert ticking() == []  # and stay quiet
            ch.basic_publish("", names[7], b"m")
            wait_for(lambda: ticking() == [names[7]], timeout=5)  # busy again: ticks
            wait_for(lambda: ticking() == [], timeout=5)
            assert ch.basic_get(names[7], auto_ack=True)[2] == b"m"
    finally:
        b.stop()
