"""Moving ready messages from one queue to another: POST /api/queues/{vhost}/{name}/move
(beyond RabbitMQ: a shovel's commonest use, done inside the broker).

Owns: `move_ready`, run where the source queue's process lives (the management API's
process, or the source's worker process in a multi-worker broker, asked by
broker/workers/queue_requests.py). Talks to: the two queues' façades. Must never: ack a
message at the source before it was handed to the destination.
"""

from __future__ import annotations

from typing import Any

from broker.queue_process import ACK, PUBLISH


def move_ready(source: Any, dest: Any, limit: int | None) -> int:
    """Move up to `limit` (None: every ready) messages from the head of `source` to `dest`,
    in order; returns how many moved. Each is enqueued at `dest` before it is acked at
    `source`, so a failure leaves a copy, never a loss; a `dest` owned by another worker
    process (a RemoteQueue) gets it through that worker's ordered link, ahead of anything
    sent there later."""
    left = source.bq.len() if limit is None else max(0, limit)
    moved = 0
    while moved < left:
        got = source.call(source.basic_get, None, False)
        if got is None:
            break
        fetched = got[0]
        if getattr(dest, "worker", None) is not None:  # another worker's queue
            dest.cast((PUBLISH, None, fetched.message, None))
        else:
            dest.call(dest.handle, (PUBLISH, None, fetched.message, None))
        source.call(source.handle, (ACK, None, [(fetched.ack_tag, None)]))
        moved += 1
    return moved
