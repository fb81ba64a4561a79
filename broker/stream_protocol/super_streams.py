"""Super streams as RabbitMQ 3.13's rabbit_stream_manager makes them (issue 37 item 6):
the semantics of the stream protocol's create_super_stream, apart from the connection that
receives the command (broker/stream_protocol/reader.py).

Owns: creating a super stream in a vhost and undoing a partial creation. Talks to: the vhost
(exchanges, queues, bindings). Must never: leave an exchange or partition behind when it
answers anything but OK.
"""

from __future__ import annotations

import logging
from typing import Any

from broker import errors
from broker.stream_protocol import core

log = logging.getLogger("broker.stream_protocol")

# stream arguments the create commands take, and the queue arguments they become
# (rabbit_stream_utils:parse_map / rabbit_stream_manager:create)
CREATE_ARGUMENTS = {
    "max-length-bytes": "x-max-length-bytes",
    "max-age": "x-max-age",
    "stream-max-segment-size-bytes": "x-stream-max-segment-size-bytes",
    "initial-cluster-size": "x-initial-cluster-size",
    "queue-leader-locator": "x-queue-leader-locator",
    "stream-filter-size-bytes": "x-stream-filter-size-bytes",
}


def create_super_stream(vhost: Any, name: str, partitions: list[str], binding_keys: list[str],
                        arguments: dict[str, str], may_configure: Any) -> int:
    """Create super stream `name` in `vhost` (the stream protocol's create_super_stream and
    `brokerctl add_super_stream`); returns the response code: ACCESS_REFUSED without
    configure permission on the name and every partition, PRECONDITION_FAILED for no
    partitions, repeated ones, a count other than the binding keys' or a bad argument,
    STREAM_ALREADY_EXISTS when the exchange or a partition exists."""
    if not may_configure(name) or not all(may_configure(p) for p in partitions):
        return core.ACCESS_REFUSED
    if (not name or not partitions or len(partitions) != len(binding_keys)
            or len(set(partitions)) != len(partitions)):
        return core.PRECONDITION_FAILED
    if name in vhost.exchanges or any(p in vhost.queues for p in partitions):
        return core.STREAM_ALREADY_EXISTS
    args: dict[str, Any] = {"x-queue-type": "stream", "x-queue-leader-locator": "balanced"}
    for key, value in arguments.items():
        arg = CREATE_ARGUMENTS.get(key)
        if arg is None:
            return core.PRECONDITION_FAILED
        args[arg] = int(value) if value.isdigit() else value
    made: list[str] = []
    try:
        vhost.declare_exchange(name, "direct", durable=True,
                               arguments={"x-super-stream": True})
        for partition in partitions:
            vhost.declare_queue(partition, durable=True, arguments=dict(args))
            made.append(partition)
        for order, (partition, key) in enumerate(zip(partitions, binding_keys, strict=True)):
            vhost.bind("queue", partition, name, key, {"x-stream-partition-order": order})
    except errors.AMQPError as exc:
        log.warning("cannot create super stream '%s': %s", name, exc)
        for partition in made:
            q = vhost.queues.get(partition)
            if q is not None:
                vhost.delete_queue_now(q)
        if name in vhost.exchanges:
            vhost.delete_exchange(name, False)
        return core.PRECONDITION_FAILED
    return core.OK
