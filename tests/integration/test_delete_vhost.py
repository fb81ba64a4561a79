"""Broker.delete_vhost (rabbitmqctl delete_vhost): its connections are closed with 320, its
queues and messages are gone, other vhosts keep working."""

from __future__ import annotations

import threading

import pika
import pytest
from pika.exceptions import ConnectionClosedByBroker

from tests.polling import wait_for


@pytest.fixture
def vhost(broker, embedded_only, unique):
    name = unique("vh")

    def create():
        broker.broker.add_vhost(name)
        broker.broker.users.set_permissions("guest", name, ".*", ".*", ".*")

    broker.call(create)
    return name


def url_for(broker, vhost: str) -> str:
    return f"amqp://guest:guest@{broker.host}:{broker.port}/{vhost}"


def test_delete_vhost_closes_its_connections_and_drops_its_queues(broker, vhost, connection):
    other = connection.channel()
    other.queue_declare("survivor", exclusive=True)
    conn = pika.BlockingConnection(pika.URLParameters(url_for(broker, vhost)))
    ch = conn.channel()
    ch.queue_declare("q", durable=True)
    ch.confirm_delivery()
    ch.basic_publish("", "q", b"m", pika.BasicProperties(delivery_mode=2))
    # on another thread: delete_vhost waits for the client's close-ok, which pika sends
    # only while this thread runs its I/O loop
    deleting = threading.Thread(target=broker.call,
                                args=(lambda: broker.broker.delete_vhost(vhost),))
    deleting.start()
    with pytest.raises(ConnectionClosedByBroker) as info:
        wait_for(lambda: conn.process_data_events(0.05) or conn.is_closed, timeout=5)
    deleting.join(10)
    assert not deleting.is_alive()
    assert info.value.reply_code == 320
    assert info.value.reply_text == f"CONNECTION_FORCED - vhost '{vhost}' is deleted"
    assert other.queue_declare("survivor", passive=True).method.message_count == 0
    # the name can be used again, and starts empty
    broker.call(lambda: broker.broker.add_vhost(vhost))
    broker.call(lambda: broker.broker.users.set_permissions("guest", vhost, ".*", ".*", ".*"))
    with pika.BlockingConnection(pika.URLParameters(url_for(broker, vhost))) as again:
        ch = again.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as gone:
            ch.queue_declare("q", passive=True)
        assert gone.value.reply_code == 404
    broker.call(lambda: broker.broker.delete_vhost(vhost))


def test_delete_missing_vhost_raises(broker, embedded_only):
    with pytest.raises(KeyError):
        broker.call(lambda: broker.broker.delete_vhost("no-such-vhost"))
