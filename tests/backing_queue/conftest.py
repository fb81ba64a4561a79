"""One backing-queue suite over every implementation (RabbitMQ's backing_queue_SUITE runs its
cases with queue_index_embed_msgs_below at 0 and at the default): the in-memory reference and
the variable queue with every message in the store (0) or embedded in the index (4096)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from broker.backing_queue.base import MessageProps
from broker.backing_queue.memory import MemoryBackingQueue
from broker.backing_queue.variable_queue import VariableQueue
from broker.message import Message, Properties
from broker.msg_store.vhost import VhostStores

IMPLS = ["memory", "vq-embed-0", "vq-embed-4096"]


def make_message(i: int, size: int = 100, persistent: bool = True, **props: object) -> Message:
    """Message number i: body starts with the number, padded to `size` bytes."""
    body = (b"%d:" % i).ljust(size, b".")
    properties = Properties(delivery_mode=2 if persistent else 1, message_id=str(i), **props)
    return Message("amq.direct", f"rk-{i}", properties, body)


class Harness:
    """Builds backing queues of one kind over one data dir and restarts them."""

    def __init__(self, kind: str, data_dir: str) -> None:
        self.kind = kind
        self.data_dir = data_dir
        self.stores: VhostStores | None = None
        self.open: list[object] = []

    @property
    def is_vq(self) -> bool:
        return self.kind != "memory"

    def new(self, name: str = "q", durable: bool = True, **options: object):
        if not self.is_vq:
            bq = MemoryBackingQueue(("/", name), durable)
        else:
            if self.stores is None:
                self.stores = VhostStores(self.data_dir, "/", fsync=False, file_size_limit=64 * 1024)
                self.stores.recover()
            options.setdefault("fsync", False)
            options.setdefault("queue_index_embed_msgs_below", int(self.kind.rsplit("-", 1)[1]))
            bq = VariableQueue(("/", name), durable, stores=self.stores, **options)
        self.open.append(bq)
        return bq

    def restart(self, bq, clean: bool = True, before_recover=None, **options: object):
        """Stop `bq` (cleanly, or as a crash would) and all stores, then recover."""
        assert self.is_vq
        self.open.remove(bq)
        if clean:
            bq.terminate()
            assert self.stores is not None
            self.stores.close()
        else:
            bq._qi.flush()
            bq._qi.close_abruptly()
            assert self.stores is not None
            self.stores.persistent.flush()
            self.stores.persistent.abandon()
            self.stores.transient.abandon()
        self.stores = None
        if before_recover is not None:
            before_recover()
        return self.new(bq.name[1], bq.durable, **options)

    def close(self) -> None:
        for bq in self.open:
            bq.terminate()
        if self.stores is not None:
            self.stores.close()


@pytest.fixture(params=IMPLS)
def harness(request, tmp_path) -> Iterator[Harness]:
    h = Harness(request.param, str(tmp_path))
    yield h
    h.close()


@pytest.fixture
def vq_harness(request, tmp_path) -> Iterator[Callable[[str], Harness]]:
    made: list[Harness] = []

    def make(kind: str) -> Harness:
        h = Harness(kind, str(tmp_path / kind))
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


PROPS = MessageProps()
