"""connection.update-secret (RabbitMQ 3.8+, issue 8 item 3).

With the internal auth backend RabbitMQ answers update-secret-ok and keeps the user as it is
(rabbit_reader handle_method0 connection.update_secret → rabbit_access_control:update_state,
which leaves backends whose state cannot expire untouched); the connection goes on working.
"""

from __future__ import annotations

from pamqp import commands
from rawamqp import RawClient


def test_pika_update_secret_is_answered(connect, unique):
    conn = connect()
    conn.update_secret("guest", "token refresh")  # hung before: no update-secret-ok
    ch = conn.channel()
    q = ch.queue_declare(unique("after-secret"), exclusive=True).method.queue
    ch.basic_publish("", q, b"still works")
    assert ch.basic_get(q, auto_ack=True)[2] == b"still works"


def test_raw_update_secret_ok_on_channel_zero(broker):
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.send(commands.Connection.UpdateSecret(new_secret="anything", reason="rotate"))
        c.expect(commands.Connection.UpdateSecretOk)
        c.open_channel(1)
        c.close()
