"""A federated queue that lives in another worker than the federation link (issue 47:
shovels and federation links run in worker 0 only, docs/multicore.md "Links run once").

Owns: the two ends of "does this queue want messages": in the queue's worker, `watch`
answers a "fedwatch" record by telling worker 0 ("wants" records) now and each time
`QueueProcess.wants_messages` changes; in worker 0, `wanted` hands a "wants" record to the
queue's proxy (RemoteQueue.wants_changed), whose link consumes upstream only then. Talks to:
the worker's mesh, broker/workers/runtime.py (which registers both). Must never: start or
stop a link itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.workers.mesh import Mesh
from broker.workers.remote import RemoteQueue


def watch(mesh: Mesh, queue_of: Callable[[str, str], Any], peer: int, record: tuple) -> None:
    """("fedwatch", vhost, name, on) from worker `peer`: watch local queue `name` for it (or
    stop); `queue_of(vhost, name)` is this worker's queue (a proxy or None: ignored)."""
    _, vhost, name, on = record
    queue = queue_of(vhost, name)
    if queue is None or isinstance(queue, RemoteQueue):
        return
    if not on:
        queue.federation_watch = None
        return
    told = [queue.wants_messages()]

    def changed(q: Any) -> None:
        wanted = q.wants_messages()
        if wanted != told[0]:
            told[0] = wanted
            mesh.send(peer, ("wants", vhost, name, wanted))
    queue.federation_watch = changed
    mesh.send(peer, ("wants", vhost, name, told[0]))


def wanted(proxies: dict[tuple[str, str], RemoteQueue], peer: int, record: tuple) -> None:
    """("wants", vhost, name, flag) from the queue's worker `peer`, in worker 0."""
    proxy = proxies.get((record[1], record[2]))
    if proxy is not None and proxy.worker == peer:
        proxy.wants_changed(record[3])
