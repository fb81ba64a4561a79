"""What a queue's worker answers to requests about one of its queues from another worker
process or its own management API (issue 47, docs/multicore.md): consume, get, counts,
purge, the delete checks, and the management API's get, browse, move and figures.

Owns: `answer`, run by the worker runtime on the queue's own worker, through the queue's
façade as a channel's handler would. Talks to: broker/workers/runtime.py. Must never: send
anything (the runtime answers with what this returns or raises: AMQP errors as the queue
raises them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker import errors
from broker.consumers import Consumer
from broker.queue_move import move_ready
from broker.queue_process import ACK, DISCARD, REQUEUE
from broker.workers.refs import ChannelRef
from broker.workers.remote import RemoteChannel, queue_figures

SETTLE = {"ack_requeue_true": REQUEUE, "reject_requeue_true": REQUEUE,
          "ack_requeue_false": ACK, "reject_requeue_false": DISCARD}  # management ack modes


def answer(kind: str, queue: Any, payload: tuple,
           channel_of: Callable[[ChannelRef | None], RemoteChannel | None]) -> Any:
    """The answer to request `kind` about local `queue`; `payload` starts with (vhost,
    queue name); `channel_of(ref)` is the requesting channel's proxy."""
    if kind == "counts":
        return queue.call(queue.message_count), queue.consumer_count()
    if kind == "purge":
        return queue.call(queue.purge)
    if kind == "check_delete":
        _, _, if_unused, if_empty = payload
        queue.call(queue.check_delete, if_unused, if_empty)
        return queue.message_count()
    if kind == "consume":
        _, _, ref, tag, no_ack, exclusive, priority, prefetch, arguments, limited = payload
        channel = channel_of(ref)
        assert channel is not None  # a consumer's channel always has a ref
        if limited and isinstance(channel, RemoteChannel) and channel.global_credit is None:
            channel.set_global_limited(True)  # a channel-wide limit: credit from its worker
        consumer = Consumer(tag, channel, no_ack, exclusive, priority, prefetch, arguments)
        queue.call(queue.add_consumer, consumer)
        if isinstance(channel, RemoteChannel):
            channel.queues.add(queue)
        return None
    if kind == "get":
        _, _, ref, no_ack = payload
        channel = channel_of(ref)
        got = queue.call(queue.basic_get, channel, no_ack)
        if got is None:
            return None
        fetched, left = got
        if isinstance(channel, RemoteChannel) and not no_ack:
            channel.queues.add(queue)
            channel.outstanding.setdefault(queue, set()).add(fetched.ack_tag)
        return fetched.message, fetched.redelivered, fetched.ack_tag, left
    if kind == "get_n":  # the management API's get: fetch, then settle here
        _, _, count, ackmode = payload
        rows, entries = [], []
        for _ in range(count):
            got = queue.call(queue.basic_get, None, False)
            if got is None:
                break
            fetched, left = got
            rows.append((fetched.message, fetched.redelivered, left))
            if fetched.ack_tag is not None:
                entries.append((fetched.ack_tag, None))
        if entries:
            queue.call(queue.handle, (SETTLE[ackmode], None, entries))
        return rows
    if kind == "figures":  # after the management API changed it: what it shows now
        return queue_figures(queue, None)
    if kind == "move":  # the management API's move, from a queue of ours
        _, _, dest_name, limit = payload
        dest = queue.vhost.queues.get(dest_name)
        if dest is None:
            raise errors.amqp_error(errors.NotFound, f"no queue '{dest_name}'")
        return move_ready(queue, dest, limit)
    if kind == "browse":
        _, _, offset, count = payload
        return queue.call(queue.browse, offset, count)
    raise errors.amqp_error(errors.InternalError, f"unknown queue request {kind!r}")
