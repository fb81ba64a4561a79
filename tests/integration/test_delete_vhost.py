"""Broker.delete_vhost (rabbitmqctl delete_vhost): its connections are closed with 320, its
queues and messages are gone, other vhosts keep working."""

from __future__ import annotations

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
    # returns at once: pika answers close-ok only once this thread runs its I/O loop again
    broker.call(lambda: broker.broker.delete_vhost(vhost), timeout=2)
    with pytest.raises(ConnectionClosedByBroker) as info:
        wait_for(lambda: conn.process_data_events(0.05) or conn.is_closed, timeout=5)
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


def test_deleted_vhost_files_are_removed_off_the_loop(broker, vhost):
    """The vhost's directory is moved aside at once (so the name can be created again) and
    removed by a worker thread; <data_dir>/deleted/ ends empty."""
    import os

    from broker.msg_store.vhost import DISCARDED, vhost_dir_name

    data_dir = broker.broker.config.data_dir
    root = os.path.join(data_dir, "vhosts", vhost_dir_name(vhost))
    with pika.BlockingConnection(pika.URLParameters(url_for(broker, vhost))) as conn:
        ch = conn.channel()
        ch.queue_declare("q", durable=True)
        for _ in range(50):
            ch.basic_publish("", "q", b"x" * 5000, pika.BasicProperties(delivery_mode=2))
        ch.queue_declare("q", passive=True)
    assert os.path.isdir(root)
    broker.call(lambda: broker.broker.delete_vhost(vhost), timeout=2)
    assert not os.path.exists(root)  # moved aside before delete_vhost returned
    wait_for(lambda: not os.listdir(os.path.join(data_dir, DISCARDED)), timeout=10)


def test_a_crash_leaves_deleted_files_for_the_next_start(tmp_path):
    """Files moved aside by a delete that a crash interrupted go at the next start."""
    from broker.embedded import EmbeddedBroker
    from broker.msg_store.vhost import DISCARDED

    left = tmp_path / DISCARDED / "0123abcd" / "msg_store_persistent"
    left.mkdir(parents=True)
    (left / "0.rdq").write_bytes(b"\0" * 4096)
    b = EmbeddedBroker(data_dir=str(tmp_path)).start()
    try:
        wait_for(lambda: not (tmp_path / DISCARDED).exists(), timeout=10)
    finally:
        b.stop()
