"""Deduplicating exchanges across worker processes (issue 50, docs/deduplication.md).

Every worker routes with its own copy of each `x-message-deduplication` exchange and so
with its own cache. A key one worker's cache takes from a publish is sent to every other
worker (one `dedup_keys` record per exchange per peer per loop turn,
`Mesh.send_grouped`), whose cache adds it with the same expiry
(`DedupCache.add`): a publisher that retries through another connection, which the node
may hand to another worker, is still deduplicated. The plugin keeps its cache in a Mnesia
table replicated to every node (rabbit_message_deduplication_cache.ex); it too checks the
local copy, so two publishes of one key on two nodes at the same moment can both pass. Here
the window is the time a record takes between two workers (well under a millisecond on an
idle machine).

Owns: the `dedup_keys` records. Talks to: broker/exchange/dedup.py (`peer_sink`), the
worker's mesh and broker. Must never: route a message, or count a key it receives as a
duplicate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.exchange import dedup
from broker.workers.mesh import Mesh

if TYPE_CHECKING:
    from broker.vhost import VHost

KIND = "dedup_keys"


def install(mesh: Mesh, index: int, count: int, vhost: Callable[[str], VHost | None]) -> None:
    """Send the keys this worker's caches take to the `count - 1` other workers, and add
    theirs to this worker's caches (`vhost(name)`: this worker's vhost of that name, or
    None)."""
    peers = [peer for peer in range(count) if peer != index]

    def share(vhost: str, exchange: str, key: bytes, expiry: int) -> None:
        head = (KIND, vhost, exchange)
        for peer in peers:
            mesh.send_grouped(peer, head, (key, expiry))

    def received(peer: int, record: tuple) -> None:
        _kind, vhost_name, exchange_name, items = record
        found = vhost(vhost_name)
        exchange = found.exchanges.get(exchange_name) if found is not None else None
        cache = getattr(getattr(exchange, "routing", None), "cache", None)
        if cache is None:  # deleted meanwhile, or not yet declared here
            return
        for key, expiry in items:
            cache.add(key, expiry)

    mesh.on(KIND, received)
    dedup.peer_sink = share if peers else None
