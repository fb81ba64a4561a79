# spark_jobs.amqp.queue_type: tells whether the queue a reader is given is a classic, quorum
# or stream queue, so the data source picks the reader that fits (a stream read as a classic
# queue never sees what was published before it started, and never progresses).
# Talked to by the data source on the driver (reader() / streamReader()) and by tests.
# Must never create a queue, need configure permission, or take a message off a queue.
"""Which type is a queue, without touching it.

A passive queue.declare does not say (AMQP 0-9-1 has no field for it), and the obvious other
probes change something: basic.get on a classic queue takes a message (RabbitMQ refuses it on
a stream with 540, closing the connection); a consumer on a classic queue gets messages, and
those come back `redelivered` (a quorum queue also counts the delivery towards its
delivery-limit); a non-passive declare with x-queue-type=stream creates a missing queue and
needs configure permission. Two probes change nothing, so those are used:

1. The management HTTP API, when `managementUri` (or $AMQP_MANAGEMENT_URI) names it:
   GET /api/queues/{vhost}/{name} answers {"type": "classic" | "quorum" | "stream", ...}.
   Needs a user with a management tag. Works with any broker that serves the API (this
   project's broker and RabbitMQ). Source: RabbitMQ management HTTP API reference.
2. Otherwise, over AMQP, on a server that refuses consumer arguments of other queue types:
   on a throwaway channel, basic.qos(prefetch_count=1) then basic.consume with
   x-stream-offset=next. RabbitMQ >= 3.10 checks a consumer's arguments against the queue's
   type before any consumer exists (rabbit_amqqueue:check_consume_arguments/3, rabbitmq-server
   v3.10.0 .. v4.3: x-stream-offset is in rabbit_stream_queue's consumer_arguments only): a
   classic or quorum queue refuses with 406 "invalid arg 'x-stream-offset' for queue 'q' in
   vhost '/' of queue type rabbit_classic_queue" (nothing delivered, nothing marked); a stream
   accepts (needs the prefetch: rabbit_stream_queue:consume refuses prefetch 0) and sends only
   what is published from now on, which the probe leaves unacked and its channel close
   forgets: a stream loses nothing to a consumer. Needs read permission only, as any read.
   Checked against RabbitMQ 3.10.8: classic and quorum queues keep their first message
   un-redelivered after the probe. This project's broker does the same from its 0.2.0 on
   (broker/declare_checks.py check_consume_arguments; 0.1.0 accepted x-stream-offset on a
   classic queue and delivered to it). Servers are recognised by connection.start's
   server-properties: RabbitMQ by product RabbitMQ, platform Erlang/OTP and version >= 3.10;
   this broker by its copyright "pybroker-amqp authors" and version >= 0.2 (its product is
   "pybroker-amqp", or "RabbitMQ" when configured so for kombu).

Any other server without a management API named is not probed: the `queueType` option is
then taken as given, and without it the read fails with AmqpOptionError saying what to set.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping

import pika
import pika.exceptions

from spark_jobs.amqp.connect import open_blocking
from spark_jobs.amqp.deadline import Watch, run_with_deadline
from spark_jobs.amqp.options import AmqpOptionError, AmqpOptions

log = logging.getLogger("spark_jobs.amqp")

_FOREIGN_ARG = re.compile(r"of queue type (\S+)")  # rabbit_amqqueue:check_arguments_key text
MIN_RABBITMQ = (3, 10)  # first release whose check_consume_arguments knows the queue type
MIN_PYBROKER = (0, 2)  # this project's first release that refuses them the same way


def refuses_foreign_consumer_arguments(server_properties: Mapping) -> bool:
    """Does this server refuse x-stream-offset on a classic or quorum queue (so probe 2 is
    safe)? True for RabbitMQ >= 3.10 and this project's broker >= 0.2, by connection.start
    server-properties (product, platform, version; values as pika decodes them, str or
    bytes)."""
    def text(key: str) -> str:
        value = server_properties.get(key, "")
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    numbers = re.findall(r"\d+", text("version"))[:2]
    if len(numbers) != 2:
        return False
    version = (int(numbers[0]), int(numbers[1]))
    if text("copyright") == "pybroker-amqp authors":
        return version >= MIN_PYBROKER
    if text("product") == "RabbitMQ" and text("platform").startswith("Erlang/OTP"):
        return version >= MIN_RABBITMQ
    return False


def type_from_module(module: str) -> str:
    """RabbitMQ's queue type module as an x-queue-type value: rabbit_classic_queue ->
    classic, rabbit_quorum_queue -> quorum."""
    return module.removeprefix("rabbit_").removesuffix("_queue")


def from_management_api(options: AmqpOptions, queue: str) -> str:
    """The queue's type from GET {managementUri}/api/queues/{vhost}/{queue}, the vhost being
    the first URI's. Credentials: those in managementUri, else the AMQP ones.

    Errors: AmqpOptionError for 404 (no such queue in that vhost), 401 (bad credentials or no
    management tag), another status, or an API that cannot be reached within batchTimeoutMs.
    """
    assert options.management_uri is not None
    parts = urllib.parse.urlsplit(options.management_uri)
    params = options.connection_parameters("spark-amqp-probe")[0]
    user, password = parts.username, parts.password
    if user is None:
        user, password = params.credentials.username, params.credentials.password
    vhost = params.virtual_host
    host = parts.hostname or "localhost"
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    path = (f"{parts.path.rstrip('/')}/api/queues/{urllib.parse.quote(vhost, safe='')}/"
            f"{urllib.parse.quote(queue, safe='')}")
    url = urllib.parse.urlunsplit((parts.scheme, netloc, path, "", ""))
    token = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(request, timeout=options.batch_timeout_s) as response:
            data = json.loads(response.read())
    except urllib.error.HTTPError as e:
        e.close()  # the error is also the response: its socket
        if e.code == 404:
            raise AmqpOptionError(f"option queue: no queue '{queue}' in vhost '{vhost}' "
                                  f"(management API {url})") from None
        raise AmqpOptionError(f"option managementUri: {url} answered {e.code} {e.reason}"
                              + (" (the user needs a management tag)" if e.code == 401 else "")
                              ) from None
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        raise AmqpOptionError(f"option managementUri: cannot read {url}: "
                              f"{getattr(e, 'reason', e)}") from None
    # The API of RabbitMQ < 3.8 has no "type": those brokers only have classic queues.
    return str(data.get("type") or "classic")


def _consume_probe(watch: Watch, options: AmqpOptions, queue: str) -> str | None:
    """Probe 2 (module docstring): the type, or None when the server is not known to refuse
    foreign consumer arguments (nothing was sent about the queue then)."""
    watch.step(f"a connection to {options.describe()}")
    conn = open_blocking(options, "spark-amqp-probe", options.batch_timeout_s)
    try:
        # pika's BlockingConnection has no public accessor for connection.start's properties
        if not refuses_foreign_consumer_arguments(conn._impl.server_properties):
            return None
        watch.step("channel.open-ok")
        channel = conn.channel()
        watch.step("basic.qos-ok")
        channel.basic_qos(prefetch_count=1)
        watch.step(f"the answer to basic.consume on queue '{queue}' with x-stream-offset")
        try:
            tag = channel.basic_consume(queue, lambda *_: None,
                                        arguments={"x-stream-offset": "next"})
        except pika.exceptions.ChannelClosedByBroker as e:
            found = _FOREIGN_ARG.search(e.reply_text) if e.reply_code == 406 else None
            if found:
                return type_from_module(found.group(1))
            raise AmqpOptionError(f"option queue: {e.reply_code} {e.reply_text}") from None
        watch.step("basic.cancel-ok")
        channel.basic_cancel(tag)
        return "stream"
    finally:
        if conn.is_open:
            try:
                conn.close()
            except pika.exceptions.AMQPError as e:
                log.info("amqp probe: close failed (%s)", type(e).__name__)


def detect(options: AmqpOptions) -> str | None:
    """The type of `options.queue` (classic | quorum | stream) by the first probe that
    applies (module docstring), or None when no probe applies.

    Errors: AmqpOptionError (no queue option, no such queue, no read permission, the API
    refused or cannot be reached); AmqpConnectError; deadline.BatchTimeout when the broker
    does not answer within batchTimeoutMs.
    """
    queue = options.require_queue()
    if options.management_uri:
        return from_management_api(options, queue)
    return run_with_deadline(lambda watch: _consume_probe(watch, options, queue),
                        options.batch_timeout_s, f"probing the type of queue '{queue}'")


def resolve(options: AmqpOptions, streaming: bool) -> str:
    """The queue type a reader must treat `options.queue` as: the detected one, after
    checking the options against it (AmqpOptions.check_reader_options); the queueType
    option, unverified, when no probe applies.

    Errors: as `detect` and `check_reader_options`; AmqpOptionError when no probe applies
    and queueType is not given.
    """
    queue_type = detect(options)
    if queue_type is None:
        if options.queue_type is None:
            raise AmqpOptionError(
                f"option queueType: cannot tell the type of queue '{options.queue}' without "
                f"side effects on {options.describe()}: it is neither RabbitMQ >= 3.10 nor "
                "pybroker-amqp >= 0.2, whose basic.consume refuses x-stream-offset on a "
                "classic queue; set managementUri "
                "(or $AMQP_MANAGEMENT_URI) to its management API, or queueType (classic | "
                "quorum | stream)")
        log.info("amqp source: queue '%s' read as %s (queueType; no probe applies to %s)",
                 options.queue, options.queue_type, options.describe())
        queue_type = options.queue_type
    options.check_reader_options(queue_type, streaming)
    return queue_type


__all__ = ["detect", "from_management_api", "refuses_foreign_consumer_arguments", "resolve"]
