# spark_jobs.amqp.connect: opens a pika BlockingConnection to the first reachable URI of the
# failover list. Talked to by the readers (driver-side stream reader, batch reader tasks) and tests.
# Must never log credentials: only redacted URIs appear in messages.

from __future__ import annotations

import logging

import pika
import pika.exceptions

from spark_jobs.amqp.options import AmqpOptions, redact

log = logging.getLogger("spark_jobs.amqp")


class AmqpConnectError(ConnectionError):
    """No URI of the failover list accepted a connection (each tried once, in order)."""


def open_blocking(options: AmqpOptions, name: str = "spark-amqp",
                  timeout_s: float | None = None) -> pika.BlockingConnection:
    """A BlockingConnection to the first URI in `options.uris` that opens; each attempt
    (TCP connect and AMQP handshake) takes at most `timeout_s` seconds when given.

    Errors: AmqpConnectError listing each redacted URI with the reason it failed (refused,
    authentication failure 403, vhost access 530, handshake timeout, ...).
    Source: pika BlockingConnection docs (ConnectionParameters stack_timeout).
    """
    failures = []
    params_list = options.connection_parameters(name, timeout_s)
    for uri, params in zip(options.uris, params_list, strict=True):
        try:
            return pika.BlockingConnection(params)
        except pika.exceptions.AMQPConnectionError as e:
            failures.append(f"{redact(uri)}: {type(e).__name__} {e}")
            log.warning("amqp connect failed: %s", failures[-1])
    raise AmqpConnectError("could not connect to any broker: " + "; ".join(failures))
